"""``runtime.forget(erase_sources=True)``: a typed error after a source's erasure says it may have erased.

A typed error (a store's) went out of ``forget`` as the store raised it:
raised by the erasure of a second session's sources, once the first
session's were erased, it said nothing of that erasure (``commit_state``
``None``, or ``not_committed`` as the failing erasure's own), though its
tombstone stands. As ``apply_retention`` does, the call's state now
replaces it: ``unknown``, the erasures that completed standing.
"""

from __future__ import annotations

from typing import Any

import pytest
from _forget_support import OPERATOR, SCOPE, fact_from, forget_runtime

from agentium_harness import (
    CommitState,
    FactStatus,
    MemoryFactNotFoundError,
    SessionKey,
    SessionStoreError,
)
from agentium_harness._engine import erasure_api
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("inner", [None, CommitState.NOT_COMMITTED])
async def test_a_typed_error_after_a_sources_erasure_says_it_may_have_erased(
    inner: CommitState | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = InMemoryArchive()
    real = erasure_api.run_erasure
    erased: list[str] = []

    async def run_erasure(runtime: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if erased:  # the second session's erasure: refused typed before it wrote anything
            error = SessionStoreError("records backend down; nothing was committed")
            error.commit_state = inner
            raise error
        result = await real(runtime, target, *args, **kwargs)
        erased.append(str(target.session_id))
        return result

    monkeypatch.setattr(erasure_api, "run_erasure", run_erasure)
    rt = forget_runtime(archive)
    try:
        fact_id = await fact_from(rt, archive, "s1", "s2")
        with pytest.raises(SessionStoreError, match="records backend down") as caught:
            await rt.forget(SCOPE, fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        said = str(caught.value)
        assert len(erased) == 1  # one session's sources were erased (its tombstone stands)
        first = SessionKey("acme", "ana", erased[0])
        assert await archive.read_groups(first, 0, 1, OpContext()) == []
        assert caught.value.commit_state is CommitState.UNKNOWN, said
        assert "the erasures of its sources that completed stand" in said
        assert "nothing was committed" not in said and "not_committed" not in said
        (revision,) = await rt.memory.history(SCOPE, fact_id)
        assert revision.status is FactStatus.CURRENT
    finally:
        await rt.aclose()


class _ForgetRefused(InMemoryMemoryStore):
    """The store refuses the forget itself, typed, as it would a fact erased meanwhile."""

    async def forget(self, scope: Any, fact_id: Any, ctx: Any) -> Any:
        raise MemoryFactNotFoundError(
            "no fact with this id in this tenant and user; nothing was changed", fact_id
        )


@pytest.mark.parametrize("erase_sources", [True, False])
async def test_the_stores_refusal_of_the_forget_says_the_sources_erased_before_it(
    erase_sources: bool,
) -> None:
    archive = InMemoryArchive()
    rt = forget_runtime(archive, _ForgetRefused())
    try:
        key = SessionKey("acme", "ana", "s1")
        fact_id = await fact_from(rt, archive, "s1")
        kw: dict[str, Any] = {"reason": "user asked", "attestation": OPERATOR} if erase_sources else {}
        with pytest.raises(MemoryFactNotFoundError) as caught:
            await rt.forget(SCOPE, fact_id, erase_sources=erase_sources, **kw)
        said = str(caught.value)
        if erase_sources:
            assert await archive.read_groups(key, 0, 1, OpContext()) == []  # its source was erased
            assert caught.value.commit_state is CommitState.UNKNOWN, said
            assert "the erasures of its sources that completed stand" in said
            assert "nothing was changed" not in said
        else:  # nothing erased: the store's refusal is the call's, as the store raised it
            assert caught.value.commit_state is None
            assert said == "no fact with this id in this tenant and user; nothing was changed"
    finally:
        await rt.aclose()
