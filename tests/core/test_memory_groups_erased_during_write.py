"""An on-time fact write is judged by the groups its provenance cites, as a late one is.

A groups erasure (``forget(..., erase_sources=True)``, retention) takes no
stored fact. A ``remember`` or ``correct`` whose fact cites a group such an
erasure erased *during* the call (between the write fence's first read and
its second) used to stand: only the fact rule (``EraseTarget.covers_fact``)
was read, while the same write landing past its deadline was taken back
(``late_take_back``). Now the on-time write is taken back too: the fact is
forgotten and the call refused with ``ErasureInProgressError`` (the span
event ``agentium.memory.taken_back``), as the fact rule does. A fact citing
another group stays; a groups erasure of a cited group still under way at
the first read refuses the write before anything is written.

The operator's forget is another runtime on the same stores (in memory, or
one SQLite file), run from inside the memory store's call: between the
write's two reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    ErasureInProgressError,
    ErasureState,
    GroupRef,
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import EraseReport, EraseTarget, MemoryAck, OpContext
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
IDENTITY = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
KEY = SessionKey("acme", "ana", "s1")
GENEROUS = 30.0
Step = Callable[[], Awaitable[object]]


class _SteppedIn:
    """A memory store the test steps into: ``before_write`` runs inside the next remember/correct."""

    before_write: Step | None = None
    writes = 0

    async def _step_in(self) -> None:
        self.writes += 1
        step, self.before_write = self.before_write, None
        if step is not None:
            await step()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        await self._step_in()
        return await super().remember(fact, ctx)  # type: ignore[misc]

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        await self._step_in()
        return await super().correct(scope, fact_id, replacement, ctx)  # type: ignore[misc]


class _MemoryFacts(_SteppedIn, InMemoryMemoryStore):
    pass


class _SQLiteFacts(_SteppedIn, SQLiteMemoryStore):
    pass


class _Gate:
    """Holds an archive's erase (the erasure stays pending) while ``held``."""

    def __init__(self) -> None:
        self.held = False
        self.erasing, self.open = anyio.Event(), anyio.Event()

    async def wait(self) -> None:
        if self.held:
            self.erasing.set()
            await self.open.wait()


class _HeldMemoryArchive(InMemoryArchive):
    gate = _Gate()

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


class _HeldSQLiteArchive(SQLiteArchive):
    gate = _Gate()

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


@asynccontextmanager
async def _world(kind: str, tmp_path: Path, recorder: SpanRecorder) -> AsyncIterator[Any]:
    """The writer's manager and runtime, the operator's runtime, the shared stores and three groups of s1."""
    gate = _Gate()
    if kind == "memory":
        archive: Any = _HeldMemoryArchive()
        sessions: Any = InMemorySessionStore()
        store: Any = _MemoryFacts()
        fresh = (lambda: archive, lambda: sessions)
    else:
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        archive, sessions, store = (
            _HeldSQLiteArchive(config),
            SQLiteSessionStore(config),
            _SQLiteFacts(config),
        )
        fresh = (lambda: _HeldSQLiteArchive(config), lambda: SQLiteSessionStore(config))
    generous = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    manager = MemoryManager(
        store, limits=generous, owns_store=True, telemetry=Telemetry(tracer_provider=recorder.provider)
    )

    def runtime(memory: Any, archive: Any, sessions: Any) -> HarnessRuntime:
        archive.gate = gate
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            memory=memory,
            limits=RuntimeLimits(op_timeout_s=GENEROUS, resident=ResidentLimits(max_groups=1)),
        )

    writer = runtime(manager, archive, sessions)
    operator = runtime(store, fresh[0](), fresh[1]())
    try:
        with anyio.fail_after(GENEROUS):
            for text in (
                "My vault code is 4471.",
                "The weather is fine today.",
                "Tell me about the weather.",
            ):
                await writer.run(IDENTITY, "s1", text)
            groups = list(await archive.read_groups(KEY, 0, 2, OpContext()))
            assert [g.seq for g in groups] == [0, 1]
            yield manager, writer, operator, store, groups, gate
    finally:
        gate.open.set()
        await operator.aclose()
        await writer.aclose()
        await manager.aclose()
        if kind == "sqlite":
            for owned in (archive, sessions):
                await owned.aclose()


def _ref(groups: list[Any], seq: int) -> GroupRef:
    return GroupRef("s1", seq, groups[seq].digest)


def _events(recorder: SpanRecorder, name: str) -> list[str]:
    return [e.name for s in recorder.finished if s.name == name for e in s.events]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("operation", ["remember", "correct"])
@pytest.mark.parametrize("cites", [0, 1])
async def test_an_on_time_write_citing_a_group_erased_during_it_is_taken_back(
    kind: str, operation: str, cites: int, tmp_path: Path
) -> None:
    """The operator forgets a fact citing group 0 with its sources between the write's two reads.

    ``cites=0``: the written fact cites the erased group: forgotten, the call
    refused (not kept). ``cites=1``: it cites a group left in place: it stays.
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, _):
        with anyio.fail_after(GENEROUS):
            first = await manager.remember(
                MemoryFact(ANA, "ana's vault code is 4471", provenance=[_ref(groups, 0)])
            )
            other = await manager.remember(MemoryFact(ANA, "ana likes tea", provenance=[_ref(groups, 1)]))
            assert first.fact_id is not None and other.fact_id is not None
            erasures: list[Any] = []

            async def forget_with_sources() -> None:
                result = await operator.forget(
                    ANA, first.fact_id or "", erase_sources=True, reason="dsr", attestation=OPERATOR
                )
                erasures.extend(e.record for e in result.erasures)

            store.before_write = forget_with_sources
            derived = MemoryFact(ANA, "ana keeps her vault code 4471", provenance=[_ref(groups, cites)])

            async def write() -> MemoryAck:
                if operation == "remember":
                    return await manager.remember(derived)
                return await manager.correct(ANA, other.fact_id or "", derived)

            span = "create_memory" if operation == "remember" else "update_memory"
            if cites == 0:
                with pytest.raises(ErasureInProgressError, match="was forgotten: it was not kept") as refused:
                    await write()
                [erased] = erasures
                assert erased.state is ErasureState.COMPLETE
                assert refused.value.erasure_id == erased.erasure_id
                assert "a group the fact cites was erased while the fact was written" in str(refused.value)
                listed = await manager.list(ANA)
                cited = [(ref.session, ref.seq) for f in listed for ref in f.fact.provenance]
                assert [f.text for f in listed] == (["ana likes tea"] if operation == "remember" else []), (
                    f"the fact written during the erasure stands, citing {cited}"
                )
                assert "agentium.memory.taken_back" in _events(recorder, span)
            else:
                ack = await write()
                assert ack.fact_id is not None
                assert [e.state for e in erasures] == [ErasureState.COMPLETE]
                texts = sorted(f.text for f in await manager.list(ANA))
                kept = ["ana keeps her vault code 4471"]
                assert texts == (sorted([*kept, "ana likes tea"]) if operation == "remember" else kept)
                assert "agentium.memory.taken_back" not in _events(recorder, span)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_write_citing_a_group_whose_erasure_is_under_way_is_refused_before_it_writes(
    kind: str, tmp_path: Path
) -> None:
    """The operator's forget of group 0's fact is held pending: a fact citing group 0 is refused, unwritten.

    Had it been written, that erasure might finish before the second read
    and be judged as joined before the first (the ledger's revision): it is
    read at the first read instead. A fact citing group 1 is written.
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, store, groups, gate):
        with anyio.fail_after(GENEROUS):
            first = await manager.remember(
                MemoryFact(ANA, "ana's vault code is 4471", provenance=[_ref(groups, 0)])
            )
            async with anyio.create_task_group() as tg:
                gate.held = True

                async def forget_with_sources() -> None:
                    await operator.forget(
                        ANA, first.fact_id or "", erase_sources=True, reason="dsr", attestation=OPERATOR
                    )

                tg.start_soon(forget_with_sources)
                await gate.erasing.wait()
                writes = store.writes
                with pytest.raises(ErasureInProgressError, match="nothing was written") as refused:
                    await manager.remember(MemoryFact(ANA, "ana keeps 4471", provenance=[_ref(groups, 0)]))
                assert "a group the fact cites is being erased" in str(refused.value)
                assert store.writes == writes, "the store was asked to write the refused fact"
                kept = await manager.remember(MemoryFact(ANA, "ana likes tea", provenance=[_ref(groups, 1)]))
                assert kept.fact_id is not None
                gate.open.set()
            assert sorted(f.text for f in await manager.list(ANA)) == ["ana likes tea"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_groups_erasure_that_finished_before_the_write_began_does_not_take_it_back(
    kind: str, tmp_path: Path
) -> None:
    """Group 0 erased to completion, then a fact citing it is written: it stands (the erasure joined before).

    The fence judges a finished erasure by its join record against the
    ledger revision of the write's first read, as for the fact rule.
    """
    recorder = SpanRecorder()
    async with _world(kind, tmp_path, recorder) as (manager, _writer, operator, _store, groups, _):
        with anyio.fail_after(GENEROUS):
            first = await manager.remember(
                MemoryFact(ANA, "ana's vault code is 4471", provenance=[_ref(groups, 0)])
            )
            result = await operator.forget(
                ANA, first.fact_id or "", erase_sources=True, reason="dsr", attestation=OPERATOR
            )
            assert [e.record.state for e in result.erasures] == [ErasureState.COMPLETE]
            ack = await manager.remember(MemoryFact(ANA, "ana keeps 4471", provenance=[_ref(groups, 0)]))
            assert ack.fact_id is not None
            assert [f.text for f in await manager.list(ANA)] == ["ana keeps 4471"]
            assert "agentium.memory.taken_back" not in _events(recorder, "create_memory")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("write", ["fact", "sources"])
async def test_a_cited_groups_erasure_moved_to_the_pages_since_the_first_read_is_still_found(
    monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """The second read walks a session's chain past its head when the write may be taken by a groups erasure.

    Four headers a page. Three groups erasures of group 5 before the
    write's first read; during it, one of group 0 (the group the fact
    cites: the head is full) and one of group 7 (the head moves to a page
    and starts again with it). The pages' mark names only erasures of the
    whole session (none here): read as the answer, it said nothing on them
    joined since, and the erasure of group 0 was missed.
    """
    from agentium_harness import ErasureKind, SeqRange
    from agentium_harness._engine import erasure_index
    from agentium_harness._engine.erasure_api import run_erasure
    from agentium_harness._engine.erasure_fence import ErasureFence
    from agentium_harness._engine.memory.sources_write import SourcesWrite
    from agentium_harness._engine.memory_fence import _FactWrite

    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    sessions = InMemorySessionStore()
    eraser = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
    )

    async def retention(seq: int) -> None:
        # A forget's groups erasure: the kind both writes count (a fact's counts no retention).
        target = EraseTarget.groups_of(KEY, [SeqRange(seq, seq + 1)])
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
            await retention(7)
            found = await fence.covering_since(seen)
    assert found is not None, "the erasure of the cited group, joined since the first read, was missed"
    assert found.target.groups and found.target.covers_group(KEY, 0)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("erased", "taken"), [(("s2", 0), True), (("s2", 3), False), (("s3", 0), False)])
async def test_a_fact_citing_groups_of_several_sessions_is_taken_by_an_erasure_of_one_it_cites(
    erased: tuple[str, int], taken: bool
) -> None:
    """A fact citing group 1 of s1 and group 0 of s2: a groups erasure takes it only for a group it cites."""
    from agentium_harness import SeqRange
    from agentium_harness._engine.memory_fence import _FactWrite

    digest = "sha256:" + "d" * 64
    fact = _FactWrite(ANA, (GroupRef("s1", 1, digest), GroupRef("s2", 0, digest)))
    session, seq = erased
    target = EraseTarget.groups_of(SessionKey("acme", "ana", session), [SeqRange(seq, seq + 1)])
    assert fact.covers(target) is taken
    assert fact.scopes == ("acme", "ana", ("s1", "s2"))
    # Another user's erasure of the same session id and group takes nothing of ana's.
    bob = EraseTarget.groups_of(SessionKey("acme", "bob", "s2"), [SeqRange(0, 1)])
    assert not fact.covers(bob)
