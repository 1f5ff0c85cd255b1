"""``runtime.forget(erase_sources=True)``: an error says ``unknown`` only once a source's erasure began.

The call was marked ``unknown`` ("the erasures of its sources that completed
stand ... the fact may be forgotten") before it looked its sources up: a
failure in those lookups, before any erasure began, said so too, though
nothing was erased or forgotten. It is now ``not_committed`` until an
erasure begins writing, and ``unknown`` from then on.
"""

from __future__ import annotations

from typing import Any

import pytest
from _forget_support import OPERATOR, SCOPE, fact_from, forget_runtime

from agentium_harness import (
    AgentiumError,
    CommitState,
    FactStatus,
    SessionKey,
)
from agentium_harness._engine import forget as forget_module
from agentium_harness.adapters.memory import InMemoryArchive

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


class _Archive(InMemoryArchive):
    """Reads fail (a bare RuntimeError: unexpected, as an engine bug) once ``reads_fail``; erases are seen."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.reads_fail = False
        self.erased = False

    async def read_groups(self, *args: Any, **kwargs: Any) -> Any:
        if self.reads_fail:
            raise RuntimeError("archive backend down")
        return await super().read_groups(*args, **kwargs)

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        self.erased = self.erased or not dry_run
        return report


@pytest.mark.parametrize("fails", ["looking_up", "after_an_erasure"])
async def test_forget_says_unknown_only_once_an_erasure_of_its_sources_began(
    fails: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _Archive()
    looked_up = forget_module._provenance

    async def provenance(*args: Any) -> Any:
        # The look at the fact again once its sources were erased fails unexpectedly (an engine bug):
        # a typed error is the store's, and leaves forget as the store raised it.
        if archive.erased:
            raise RuntimeError("provenance backend down")
        return await looked_up(*args)

    monkeypatch.setattr(forget_module, "_provenance", provenance)
    rt = forget_runtime(archive)
    fact_id = await fact_from(rt, archive, "s1")
    archive.reads_fail = fails == "looking_up"
    with pytest.raises(AgentiumError, match="backend down") as caught:
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
    said = str(caught.value)
    if fails == "looking_up":
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "before changing anything" in said
        assert "unknown" not in said and "may be forgotten" not in said
        assert not archive.erased
    else:
        assert caught.value.commit_state is CommitState.UNKNOWN
        # It failed before forgetting the fact (its sources first): known not forgotten, not "may be".
        assert "before forgetting it: the fact was not forgotten" in said, said
        assert "may be forgotten" not in said and "not_committed" not in said
        assert archive.erased
    (revision,) = await rt.memory.history(SCOPE, fact_id)
    assert revision.status is FactStatus.CURRENT  # forgotten only after its sources' erasures
    await rt.aclose()
