"""The write fence's walk past erasures that do not take a fact (review of 9dfe8947).

A fact's write counts a groups erasure of a group it cites only when it is
a ``forget``'s (``_FactWrite.covers_record``). During the write, a forget of
the cited group runs, then a retention (or an operator's groups erasure) of
the same session joins after it: the chain walk, newest first, meets the
erasure that does not count first and must walk on to the forget behind it
(the fact is taken back). An operator's erasure of the whole user or session
(kind ``erasure``) still takes a fact citing groups back (``covers_fact``).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from test_memory_groups_erased_during_write import GENEROUS, OPERATOR, _events, _world

from agentium_harness import (
    ErasureInProgressError,
    ErasureKind,
    GroupRef,
    MemoryFact,
    MemoryScope,
    SeqRange,
    SessionKey,
)
from agentium_harness._engine.erasure_api import run_erasure
from agentium_harness.plugin_api import EraseTarget
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
KEY = SessionKey("acme", "ana", "s1")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("operation", ["remember", "correct"])
@pytest.mark.parametrize("after", [ErasureKind.RETENTION, ErasureKind.ERASURE])
async def test_a_forget_behind_a_newer_groups_erasure_that_does_not_count_is_still_found(
    kind: str, operation: str, after: ErasureKind, tmp_path: Path
) -> None:
    """Forget of the cited group, then retention (or an operator's groups erasure) of ``s1``: taken back."""
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _gate):
        with anyio.fail_after(GENEROUS):
            older = await manager.remember(
                MemoryFact(ANA, "ana drinks coffee", provenance=[GroupRef("s1", 0, groups[0].digest)])
            )
            ran: list[ErasureKind] = []

            async def erasures() -> None:
                cited = EraseTarget.groups_of(KEY, [SeqRange(1, 2)])
                await run_erasure(operator, cited, "forget", OPERATOR, ErasureKind.FORGET)
                ran.append(ErasureKind.FORGET)
                newer = EraseTarget.groups_of(KEY, [SeqRange(0, 3)])
                await run_erasure(operator, newer, str(after), OPERATOR, after)
                ran.append(after)

            store.before_write = erasures
            fact = MemoryFact(ANA, "ana likes tea", provenance=[GroupRef("s1", 1, groups[1].digest)])
            with pytest.raises(ErasureInProgressError, match="was not kept"):
                if operation == "remember":
                    await manager.remember(fact)
                else:
                    await manager.correct(ANA, older.fact_id or "", fact)
            assert ran == [ErasureKind.FORGET, after], "the erasures did not run during the write"
            assert "ana likes tea" not in [f.text for f in await manager.list(ANA)]
            span = "create_memory" if operation == "remember" else "update_memory"
            assert "agentium.memory.taken_back" in _events(recorder, span)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("whole", ["user", "session"])
async def test_an_operators_whole_scope_erasure_during_the_write_takes_back_a_fact_citing_groups(
    kind: str, whole: str, tmp_path: Path
) -> None:
    """Kind ``erasure`` of ana (or of the session the fact cites), run during the write: taken back."""
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _gate):
        with anyio.fail_after(GENEROUS):
            target = (
                EraseTarget.user("acme", "ana")
                if whole == "user"
                else EraseTarget.session("acme", "ana", "s1")
            )
            ran: list[object] = []

            async def erasure() -> None:
                ran.append(await run_erasure(operator, target, "DSR", OPERATOR, ErasureKind.ERASURE))

            store.before_write = erasure
            fact = MemoryFact(ANA, "ana likes tea", provenance=[GroupRef("s1", 1, groups[1].digest)])
            with pytest.raises(ErasureInProgressError, match="was not kept"):
                await manager.remember(fact)
            assert ran, "the erasure did not run during the write"
            assert await manager.list(ANA) == ()
            assert "agentium.memory.taken_back" in _events(recorder, "create_memory")
