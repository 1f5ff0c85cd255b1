"""``forget``: a fact corrected at every look at its sources is refused with the call's commit state.

Its ``MemoryRejectedError`` said the erasures of its sources stand, and
had no ``commit_state``: a host reading the state had nothing, and one
reading ``None`` as "nothing happened" would be wrong once a source was
erased. It now says ``unknown`` once one was (as any error of the call
after a source's erasure began writing), ``not_committed`` when none was,
and its text says the same (the fact, known not forgotten, is said so; and
"nothing was written", the error's own ending, goes once a source was erased).
"""

from __future__ import annotations

import anyio
import attrs
import pytest
from _forget_support import OPERATOR, SCOPE, fact_from, forget_runtime

from agentium_harness import (
    CommitState,
    FactStatus,
    MemoryRejectedError,
    MemoryScope,
    SessionKey,
)
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio


class _AlwaysCorrected(InMemoryMemoryStore):
    """Each history read first corrects the fact (a correction racing every look at its sources)."""

    armed = False

    async def history(self, scope: MemoryScope, fact_id: str, ctx: object) -> object:
        if self.armed:
            latest = self._revisions[fact_id][-1]
            replacement = attrs.evolve(latest.fact, text=f"pin v{latest.revision + 1}")
            await self.correct(scope, fact_id, replacement, ctx)  # type: ignore[arg-type]
        return await super().history(scope, fact_id, ctx)  # type: ignore[arg-type]


@pytest.mark.parametrize("erase_sources", [True, False])
async def test_a_fact_corrected_throughout_says_what_the_call_changed(erase_sources: bool) -> None:
    archive, memory = InMemoryArchive(), _AlwaysCorrected()
    rt = forget_runtime(archive, memory)
    try:
        key = SessionKey("acme", "ana", "s1")
        fact_id = await fact_from(rt, archive, "s1", text="pin v1")
        memory.armed = True
        with anyio.fail_after(30), pytest.raises(MemoryRejectedError, match="corrected 3 times") as refused:
            await rt.forget(SCOPE, fact_id, erase_sources=erase_sources, reason="dsr", attestation=OPERATOR)
        said = str(refused.value)
        assert memory._revisions[fact_id][-1].status is FactStatus.CURRENT
        assert "it was not forgotten" in said and "may be forgotten" not in said
        if erase_sources:
            assert await archive.read_groups(key, 0, 1, OpContext()) == []  # its source's erasure stands
            assert refused.value.commit_state is CommitState.UNKNOWN, said
            assert "erasures of its sources that completed stand" in said and "(commit_state unknown)" in said
            assert "nothing was written" not in said, said
        else:
            assert len(await archive.read_groups(key, 0, 1, OpContext())) == 1
            assert refused.value.commit_state is CommitState.NOT_COMMITTED, said
            assert "nothing was erased (commit_state not_committed)" in said
    finally:
        await rt.aclose()
