"""Writes a deadline walked away from cannot land after an erasure that says ``complete``.

A blocking client call past its deadline keeps running in its worker thread
(docs/runtime.md): the engine abandons it, but the write in it may still land.
Each test strands one such write of the built-in stores — the in-memory ones
blocked in a worker thread that ignores cancellation (a stuck client call),
the SQLite ones blocked inside their own worker thread while holding their
connection — on a ``threading.Event``, erases the scope, lets the write go,
and checks that nothing of the erased scope is left once the erasure says it
completed: either the erasure waited for the write and erased it, or it
stayed pending (``ErasureIncompleteError``) and a resume after the write
ended completes with nothing left.

Only the stranded call has a short deadline; everything meant to succeed
gets 30 s, and every blocked thread is released at teardown.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import attrs
import pytest

from agentium_harness import (
    AgentiumError,
    EraseTarget,
    ErasureIncompleteError,
    MemoryFact,
    MemoryScope,
    OperationTimeoutError,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

T = TypeVar("T")

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
KEY = SessionKey("acme", "alice", "s1")
SCOPE = MemoryScope("acme", "alice")
USER = EraseTarget.user("acme", "alice")
#: Every call meant to succeed; only the stranded one gets :data:`SHORT`.
GENEROUS = 30.0
SHORT = 0.3


class Gate:
    """Holds one write in a worker thread until released; says when it entered and when it ended."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        #: Set when the blocked call reached another call waiting behind it (SQLite: its erase).
        self.queued = threading.Event()
        #: What the held write returned when it landed (``None`` until then).
        self.value: Any = None

    def take(self) -> bool:
        """True once, for the call to hold (the next one after :meth:`arm`)."""
        armed, self.armed = self.armed, False
        return armed

    async def hold_in_thread(self, land: Callable[[], Awaitable[T]]) -> T:
        """A stuck client call: blocks in a thread that ignores cancellation, then writes all the same."""

        def blocked() -> T:
            self.entered.set()
            try:
                self.release.wait(60.0)
                # What the store does when the client call finally goes through (the store's own
                # write, with its own checks), not what the deadline said.
                value = anyio.from_thread.run(land)
                self.value = value
                return value
            finally:
                self.ended.set()

        return await anyio.to_thread.run_sync(blocked)  # not abandonable: the engine walks away

    def hold_work(self, work: Callable[[Any], T]) -> Callable[[Any], T]:
        """``work`` of a :class:`ThreadBoundAdapter` call, blocked first (holding the connection)."""

        def blocked(conn: Any) -> T:
            self.entered.set()
            try:
                self.release.wait(60.0)
                return work(conn)
            finally:
                self.ended.set()

        return blocked


def fresh() -> OpContext:
    return OpContext.with_timeout(GENEROUS)


class StuckMemory(InMemoryMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()
        self.inventoried = anyio.Event()
        self.forgot = anyio.Event()

    async def erase(self, target: EraseTarget, ctx: OpContext, **kw: Any) -> Any:
        self.inventoried.set()
        return await super().erase(target, ctx, **kw)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Any:
        try:
            return await super().forget(scope, fact_id, ctx)
        finally:
            self.forgot.set()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
        if self.gate.take():
            return await self.gate.hold_in_thread(lambda: InMemoryMemoryStore.remember(self, fact, fresh()))
        return await super().remember(fact, ctx)


class StuckSessions(InMemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    async def save(self, key: SessionKey, snapshot: Any, expected: int | None, ctx: OpContext) -> int:
        if key == KEY and self.gate.take():
            return await self.gate.hold_in_thread(
                lambda: InMemorySessionStore.save(self, key, snapshot, expected, fresh())
            )
        return await super().save(key, snapshot, expected, ctx)


class StuckRecall(InMemoryRecallStore):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    async def index_groups(self, key: SessionKey, groups: Any, receipts: Any, ctx: OpContext) -> int:
        if self.gate.take():
            return await self.gate.hold_in_thread(
                lambda: InMemoryRecallStore.index_groups(self, key, groups, receipts, fresh())
            )
        return await super().index_groups(key, groups, receipts, ctx)


class _SQLiteGate:
    """Mixed into a SQLite store: its next ``operation`` call blocks in its worker thread."""

    gate: Gate
    held_operation: str

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        if operation == self.held_operation and self.gate.take():
            work = self.gate.hold_work(work)
        elif self.gate.entered.is_set() and not self.gate.ended.is_set() and "erase" in operation:
            self.gate.queued.set()  # the erasure reached this store: it waits for the connection
        return await super().run(ctx, operation, work)  # type: ignore[misc]


class StuckSQLiteMemory(_SQLiteGate, SQLiteMemoryStore):
    held_operation = "memory remember"

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.gate = Gate()


class StuckSQLiteArchive(_SQLiteGate, SQLiteArchive):
    held_operation = "archive append"

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.gate = Gate()


def _runtime(settle_s: float, **stores: Any) -> Any:
    stores.setdefault("archive", InMemoryArchive())
    stores.setdefault("session_store", InMemorySessionStore())
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        limits=RuntimeLimits(
            resident=ResidentLimits(max_groups=1), op_timeout_s=GENEROUS, settle_timeout_s=settle_s
        ),
        **stores,
    )


def _call_deadline(rt: Any, seconds: float) -> None:
    """Each adapter call of ``rt``'s next operations gets ``seconds`` (read once by admission)."""
    admission = rt.parts.admission
    assert isinstance(admission._op_timeout_s, float), "the admission's call deadline moved"
    admission._op_timeout_s = seconds


@pytest.fixture
async def gates() -> AsyncIterator[list[Gate]]:
    """Every gate a test makes, released at teardown (no thread outlives the test blocked)."""
    made: list[Gate] = []
    try:
        yield made
    finally:
        for gate in made:
            gate.release.set()
        for gate in made:
            if gate.entered.is_set():
                await anyio.to_thread.run_sync(gate.ended.wait, GENEROUS)


async def _strand_a_memory_write(rt: Any, gate: Gate) -> None:
    """``runtime.memory.remember`` under a short deadline, abandoned with its write still in its thread."""
    manager = rt.memory
    generous = manager.limits
    manager.limits = attrs.evolve(generous, op_timeout_s=SHORT)
    gate.armed = True
    with pytest.raises(OperationTimeoutError) as raised:
        await manager.remember(MemoryFact(SCOPE, "my pin is 4321"))
    manager.limits = generous
    assert raised.value.abandoned, "the write should still be running in its thread"
    assert gate.entered.is_set() and not gate.ended.is_set()


async def _facts(rt: Any) -> list[Any]:
    return list(await rt.memory.store.list_facts(SCOPE, 100, fresh()))


async def _ended(gate: Gate) -> None:
    assert await anyio.to_thread.run_sync(gate.ended.wait, GENEROUS)


# -- the memory store: the manager's abandoned writes --------------------------------------------


async def test_a_memory_write_abandoned_past_its_deadline_keeps_the_erasure_pending_until_it_ends(
    gates: list[Gate],
) -> None:
    store = StuckMemory()
    gates.append(store.gate)
    rt = _runtime(SHORT, memory=store)
    with anyio.fail_after(90):
        await _strand_a_memory_write(rt, store.gate)
        with pytest.raises(ErasureIncompleteError, match="still running"):
            await rt.erase(USER, reason="why", attestation=OPERATOR)
        store.gate.release.set()
        await _ended(store.gate)
        # It landed (and, the erasure being pending, the manager's late check may take it back).
        assert store.gate.value is not None and store.gate.value.fact_id is not None
        (resumed,) = await rt.resume_erasures(OPERATOR)
        assert resumed.tombstone is not None
        assert await _facts(rt) == [], "a fact of the erased user survived the completed erasure"
        await rt.aclose()


async def test_an_erasure_waits_for_an_abandoned_memory_write_and_erases_what_it_wrote(
    gates: list[Gate],
) -> None:
    store = StuckMemory()
    gates.append(store.gate)
    rt = _runtime(GENEROUS, memory=store)
    with anyio.fail_after(90):
        await _strand_a_memory_write(rt, store.gate)
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def erase() -> None:
                result.append(await rt.erase(USER, reason="why", attestation=OPERATOR))

            tg.start_soon(erase)
            # The erasure is under way (its record fences the scope, its inventory asked the memory
            # store) before the write is let go: it lands while the erasure runs.
            await store.inventoried.wait()
            store.gate.release.set()
        assert store.gate.ended.is_set(), "the erasure completed while the write was still running"
        assert result[0].tombstone is not None
        assert await _facts(rt) == [], "a fact of the erased user survived the completed erasure"
        await rt.aclose()


async def test_a_memory_write_abandoned_during_another_runtimes_erasure_is_taken_back_when_it_lands(
    gates: list[Gate],
) -> None:
    """Another runtime's erasure cannot wait for this manager's call: the landing runs the fence's check."""
    store = StuckMemory()
    gates.append(store.gate)
    sessions = InMemorySessionStore()
    writer = _runtime(GENEROUS, memory=store, session_store=sessions)
    operator = _runtime(GENEROUS, memory=store, session_store=sessions)
    with anyio.fail_after(90):
        await _strand_a_memory_write(writer, store.gate)
        result = await operator.erase(USER, reason="why", attestation=OPERATOR)
        assert result.tombstone is not None  # it knew nothing of the other runtime's call
        store.gate.release.set()
        await _ended(store.gate)
        assert store.gate.value is not None and store.gate.value.fact_id is not None, "it landed"
        with anyio.move_on_after(GENEROUS):  # taken back by the late call's own check
            await store.forgot.wait()
        facts = await store.history(SCOPE, store.gate.value.fact_id, fresh())
        assert all("4321" not in f.fact.text for f in facts), "the erased user's fact is still there"
        await writer.aclose()
        await operator.aclose()


async def test_a_sqlite_memory_write_abandoned_in_its_thread_is_erased_by_the_erasure(
    tmp_path: Path, gates: list[Gate]
) -> None:
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    store = StuckSQLiteMemory(config)
    gates.append(store.gate)
    rt = _runtime(SHORT, memory=store, session_store=SQLiteSessionStore(config), owned=[store])
    with anyio.fail_after(90):
        await _strand_a_memory_write(rt, store.gate)
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def erase() -> None:
                try:
                    result.append(await rt.erase(USER, reason="why", attestation=OPERATOR))
                except ErasureIncompleteError as exc:
                    result.append(exc)

            tg.start_soon(erase)
            await anyio.to_thread.run_sync(store.gate.queued.wait, GENEROUS)
            store.gate.release.set()
        await _ended(store.gate)
        if isinstance(result[0], ErasureIncompleteError):
            (done,) = await rt.resume_erasures(OPERATOR)
        else:
            done = result[0]
        assert done.tombstone is not None
        assert await _facts(rt) == [], "a fact of the erased user survived the completed erasure"
        await rt.aclose()


# -- the session's own writes: archive append, snapshot save, recall index ---------------------
#
# A turn's calls are admitted under its session's ticket, so an abandoned one is noted with the
# session it writes into and an erasure of that session waits for it (docs/erasure.md, step 3).


S1 = EraseTarget.session("acme", "alice", "s1")


async def _strand_a_turn_write(rt: Any, gate: Gate) -> None:
    """Seed turn one, then run turn two with a short call deadline; ``gate``'s write is abandoned."""
    await rt.run(ALICE, "s1", "first")
    gate.armed = True
    _call_deadline(rt, SHORT)
    try:
        await rt.run(ALICE, "s1", "second")
    except AgentiumError:
        pass  # a save abandoned: the turn's outcome is unknown; an index abandoned: only a diagnostic
    _call_deadline(rt, GENEROUS)
    assert gate.entered.is_set() and not gate.ended.is_set(), "the write should still be running"


async def _erase_pending_then_resume(
    rt: Any, target: EraseTarget, gate: Gate, landed: Callable[[], Awaitable[bool]]
) -> Any:
    """The erasure stays pending while the write runs; once it landed, a resume completes it."""
    with pytest.raises(ErasureIncompleteError, match="still running"):
        await rt.erase(target, reason="why", attestation=OPERATOR)
    gate.release.set()
    await _ended(gate)
    assert await landed(), "the late write did not land: the test shows nothing"
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.tombstone is not None
    return resumed


async def test_a_snapshot_save_abandoned_past_its_deadline_keeps_the_erasure_pending(
    gates: list[Gate],
) -> None:
    sessions = StuckSessions()
    gates.append(sessions.gate)
    archive = InMemoryArchive()
    rt = _runtime(SHORT, session_store=sessions, archive=archive)
    with anyio.fail_after(90):
        await _strand_a_turn_write(rt, sessions.gate)

        async def landed() -> bool:
            stored = await sessions.load(KEY, fresh())
            return stored is not None and stored.revision == sessions.gate.value

        await _erase_pending_then_resume(rt, S1, sessions.gate, landed)
        assert await sessions.load(KEY, fresh()) is None, "the erased session's snapshot came back"
        assert not (await archive.erase(S1, fresh(), dry_run=True)).counts
        await rt.aclose()


async def test_a_recall_index_abandoned_past_its_deadline_keeps_the_erasure_pending(
    gates: list[Gate],
) -> None:
    recall = StuckRecall()
    gates.append(recall.gate)
    rt = _runtime(SHORT, recall=recall)
    with anyio.fail_after(90):
        await _strand_a_turn_write(rt, recall.gate)

        async def landed() -> bool:
            return bool((await recall.erase(S1, fresh(), dry_run=True)).counts)

        await _erase_pending_then_resume(rt, S1, recall.gate, landed)
        left = await recall.erase(S1, fresh(), dry_run=True)
        assert not left.counts, "an index entry of the erased session survived the completed erasure"
        await rt.aclose()


async def test_a_sqlite_archive_append_abandoned_in_its_thread_lands_before_the_archive_erases(
    tmp_path: Path, gates: list[Gate]
) -> None:
    """The thread holds the adapter's connection: the erasure's own archive calls queue behind it."""
    archive = StuckSQLiteArchive(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    gates.append(archive.gate)
    rt = _runtime(GENEROUS, archive=archive, owned=[archive])
    with anyio.fail_after(90):
        await _strand_a_turn_write(rt, archive.gate)
        result: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def erase() -> None:
                try:
                    result.append(await rt.erase(S1, reason="why", attestation=OPERATOR))
                except ErasureIncompleteError as exc:
                    result.append(exc)

            tg.start_soon(erase)
            await anyio.to_thread.run_sync(archive.gate.queued.wait, GENEROUS)
            archive.gate.release.set()
        await _ended(archive.gate)
        done = result[0]
        if isinstance(done, ErasureIncompleteError):
            (done,) = await rt.resume_erasures(OPERATOR)
        assert done.tombstone is not None
        assert not (await archive.erase(S1, fresh(), dry_run=True)).counts, "an erased group came back"
        await rt.aclose()
