"""A groups erasure of a group a fact does *not* cite neither refuses nor takes back the fact.

Review of the write fence counting groups erasures (d7283b99): a fact of
ana citing group ``s1``/1 is written while an erasure runs of group 0 of
``s2`` (ana's other session), of group 0 of bob's ``s1`` (same session id,
another user), of group 0 of ana's ``s1`` (a retention whose cutoff lies
below the cited group), or of group 0 of ``s1`` in another tenant — held
pending at the write's first read, or run to completion between the
write's two reads. The fact is written and kept every time; the control
(the erasure of the cited group itself) refuses or takes it back. And a
cited group's erasure past the chain read cap is found (fails closed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

#: (tenant, user, session, seq) erased; the fact cites ana's s1 group ``CITED``.
CITED = 1
OTHERS = [
    ("acme", "ana", "s2", CITED),  # another session of the same user, same seq
    ("acme", "bob", "s1", CITED),  # another user's session of the same id
    ("acme", "ana", "s1", 0),  # a retention whose cutoff is below the cited group
    ("other", "ana", "s1", CITED),  # another tenant
]


def _target(erased: tuple[str, str, str, int]) -> EraseTarget:
    tenant, user, session, seq = erased
    return EraseTarget.groups_of(SessionKey(tenant, user, session), [SeqRange(seq, seq + 1)])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("erased", [*OTHERS, ("acme", "ana", "s1", CITED)])
async def test_a_groups_erasure_under_way_refuses_only_a_fact_citing_its_group(
    kind: str, erased: tuple[str, str, str, int], tmp_path: Path
) -> None:
    """Held pending at the first read: only the erasure of the cited group refuses the write."""
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, gate):
        with anyio.fail_after(GENEROUS):
            fact = MemoryFact(ANA, "ana likes tea", provenance=[GroupRef("s1", CITED, groups[CITED].digest)])
            async with anyio.create_task_group() as tg:
                gate.held = True

                async def retention() -> None:
                    await run_erasure(operator, _target(erased), "forget", OPERATOR, ErasureKind.FORGET)

                tg.start_soon(retention)
                await gate.erasing.wait()
                writes = store.writes
                if erased == ("acme", "ana", "s1", CITED):
                    with pytest.raises(ErasureInProgressError, match="nothing was written"):
                        await manager.remember(fact)
                    assert store.writes == writes
                else:
                    ack = await manager.remember(fact)
                    assert ack.fact_id is not None, f"refused by an erasure of {erased}"
                gate.open.set()
            texts = [f.text for f in await manager.list(ANA)]
            assert texts == ([] if erased == ("acme", "ana", "s1", CITED) else ["ana likes tea"])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("operation", ["remember", "correct"])
@pytest.mark.parametrize("erased", [*OTHERS, ("acme", "ana", "s1", CITED)])
async def test_a_groups_erasure_during_the_write_takes_back_only_a_fact_citing_its_group(
    kind: str, operation: str, erased: tuple[str, str, str, int], tmp_path: Path
) -> None:
    """Run to completion between the two reads: only the erasure of the cited group takes the fact back.

    A correction taken back is the whole fact forgotten, the revision it
    corrected too: the refusal says so.
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _gate):
        with anyio.fail_after(GENEROUS):
            older = await manager.remember(
                MemoryFact(ANA, "ana drinks coffee", provenance=[GroupRef("s1", 0, groups[0].digest)])
            )
            fact = MemoryFact(ANA, "ana likes tea", provenance=[GroupRef("s1", CITED, groups[CITED].digest)])

            async def retention() -> None:
                await run_erasure(operator, _target(erased), "forget", OPERATOR, ErasureKind.FORGET)

            store.before_write = retention

            async def write() -> Any:
                if operation == "remember":
                    return await manager.remember(fact)
                return await manager.correct(ANA, older.fact_id or "", fact)

            span = "create_memory" if operation == "remember" else "update_memory"
            kept_before = ["ana drinks coffee"] if operation == "remember" else []
            if erased == ("acme", "ana", "s1", CITED):
                with pytest.raises(ErasureInProgressError, match="was forgotten: it was not kept") as refused:
                    await write()
                # A correction taken back forgets the fact it corrected, every revision (forget takes
                # them all), though the groups erasure took none of the older ones: the caller is told.
                assert sorted(f.text for f in await manager.list(ANA)) == kept_before
                said = str(refused.value)
                if operation == "correct":
                    assert "nor were its 1 earlier revision" in said, said
                else:
                    assert "earlier revision" not in said, said
                assert "agentium.memory.taken_back" in _events(recorder, span)
            else:
                ack = await write()
                assert ack.fact_id is not None
                assert sorted(f.text for f in await manager.list(ANA)) == sorted(
                    [*kept_before, "ana likes tea"]
                )
                assert "agentium.memory.taken_back" not in _events(recorder, span)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("write", ["fact", "sources"])
async def test_a_cited_groups_erasure_past_the_chain_read_cap_is_still_found(
    monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """More pages joined since the first read than the cap above the cited group's erasure: found, not missed.

    One header a page, a cap of two pages. During the write, retention of
    group 0 (cited), then four of group 7 above it: the walk newest first
    stops at the cap before reaching it, and the fence falls back to every
    covering erasure of the chains (closed), not to "none found" (open).
    """
    from agentium_harness import ErasureKind, create_harness_runtime
    from agentium_harness._engine import erasure_index
    from agentium_harness._engine.erasure_fence import ErasureFence
    from agentium_harness._engine.memory.sources_write import SourcesWrite
    from agentium_harness._engine.memory_fence import _FactWrite
    from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
    from agentium_harness.adapters.providers import ScriptedProvider

    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 1)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 2)
    key = SessionKey("acme", "ana", "s1")
    sessions = InMemorySessionStore()
    eraser = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
    )
    capped: list[str] = []
    walk = erasure_index.newest_first

    async def counted(*args: Any, **kwargs: Any) -> None:
        try:
            await walk(*args, **kwargs)
        except Exception as exc:
            capped.append(type(exc).__name__)
            raise

    monkeypatch.setattr(erasure_index, "newest_first", counted)

    async def retention(seq: int) -> None:
        target = EraseTarget.groups_of(key, [SeqRange(seq, seq + 1)])
        await run_erasure(eraser, target, "forget", OPERATOR, ErasureKind.FORGET)

    async with eraser:
        with anyio.fail_after(GENEROUS):
            for _ in range(3):
                await retention(5)
            cited = (GroupRef("s1", 0, "sha256:" + "d" * 64),)
            fenced: Any = _FactWrite(ANA, cited) if write == "fact" else SourcesWrite(ANA, cited)
            fence = ErasureFence(sessions, GENEROUS)
            seen = await fence.check(fenced)
            await retention(0)
            for _ in range(4):
                await retention(7)
            found = await fence.covering_since(seen)
    assert "SessionStoreError" in capped, "the walk did not reach the cap: the test proves nothing"
    assert found is not None, "past the chain read cap, the erasure of the cited group was missed"
    assert found.target.covers_group(key, 0)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("operation", ["remember", "correct"])
async def test_a_later_retention_whose_range_reaches_back_over_a_group_erased_long_ago_does_not_count(
    kind: str, operation: str, tmp_path: Path
) -> None:
    """Retention names ``SeqRange(0, cutoff)``: each run's range holds the groups earlier runs erased.

    Group 0 of ana's ``s1`` was erased by retention long before the write (it
    does not count, as a finished erasure does not). During the write, the
    next retention run of ``s1`` (cutoff 2: it removes group 1 only) completes.
    A fact citing group 0 alone was not derived from anything that erasure
    removed: it must stand (a correction taken back would lose the whole fact).
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _gate):
        with anyio.fail_after(GENEROUS):
            older = await manager.remember(
                MemoryFact(ANA, "ana drinks coffee", provenance=[GroupRef("s1", 0, groups[0].digest)])
            )
            key = SessionKey("acme", "ana", "s1")

            async def retention(cutoff: int) -> None:
                target = EraseTarget.groups_of(key, [SeqRange(0, cutoff)])
                await run_erasure(operator, target, "retention", OPERATOR, ErasureKind.RETENTION)

            await retention(1)  # long before the write: group 0 goes
            store.before_write = lambda: retention(2)  # during it: group 1 goes (group 0 is gone already)
            fact = MemoryFact(
                ANA, "ana drinks black coffee", provenance=[GroupRef("s1", 0, groups[0].digest)]
            )
            if operation == "remember":
                ack = await manager.remember(fact)
            else:
                ack = await manager.correct(ANA, older.fact_id or "", fact)
            assert ack.fact_id is not None
            span = "create_memory" if operation == "remember" else "update_memory"
            assert "agentium.memory.taken_back" not in _events(recorder, span)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("operation", ["remember", "correct"])
async def test_retention_of_the_cited_group_during_the_write_keeps_the_fact(
    kind: str, operation: str, tmp_path: Path
) -> None:
    """Retention keeps the facts derived from what it erases: one written while it runs is kept as well.

    A fact citing group 0 written a moment before retention stays (retention
    scrubs no fact); one written while that retention runs is not taken back
    either. Only a ``forget``'s groups erasure takes such a write back.
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _gate):
        with anyio.fail_after(GENEROUS):
            older = await manager.remember(
                MemoryFact(ANA, "ana drinks coffee", provenance=[GroupRef("s1", 0, groups[0].digest)])
            )
            key = SessionKey("acme", "ana", "s1")
            erased: list[Any] = []

            async def retention() -> None:
                target = EraseTarget.groups_of(key, [SeqRange(0, 1)])
                erased.append(
                    await run_erasure(operator, target, "retention", OPERATOR, ErasureKind.RETENTION)
                )

            store.before_write = retention
            fact = MemoryFact(
                ANA, "ana drinks black coffee", provenance=[GroupRef("s1", 0, groups[0].digest)]
            )
            if operation == "remember":
                ack = await manager.remember(fact)
            else:
                ack = await manager.correct(ANA, older.fact_id or "", fact)
            assert erased, "the retention did not run during the write: the test proves nothing"
            assert ack.fact_id is not None
            span = "create_memory" if operation == "remember" else "update_memory"
            assert "agentium.memory.taken_back" not in _events(recorder, span)
            assert "ana drinks black coffee" in [f.text for f in await manager.list(ANA)]
