"""A shared memory manager's fences follow the runtimes open on it, not every store it was ever given.

A host building a runtime per request (a new session-store object each time)
around one ``MemoryManager`` used to add each runtime's store to the manager's
fences for good: one more store read around every write per runtime ever
built, every store object held forever, and, once a runtime had closed its
own store (``owned=``), every later write through the manager refused (a
closed store cannot be read: fail closed). Now a runtime's fence is withdrawn
when it closes if another fence remains, and the built-in SQLite session
stores over one database file are one fence (docs/erasure.md, "One manager,
several runtimes"). A manager used by one runtime still fails closed after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _memory_support import GatedMemoryStore

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_fence import ErasureFence
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
RUNS = 6


def _runtime(
    db: Path, manager: MemoryManager, store: type[SQLiteSessionStore] = SQLiteSessionStore
) -> HarnessRuntime:
    """A runtime on ``db``, owning (and closing) its own new session-store object."""
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), store(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=manager,
        owned=(archive, sessions),
    )


def _shared(tmp_path: Path) -> tuple[MemoryManager, GatedMemoryStore]:
    store = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    return MemoryManager(store, owns_store=True), store


async def _reads_of_one_write(manager: MemoryManager, text: str) -> int:
    """How many fences one write read, before it and after it (each store's answer, cached or not)."""
    before = _FENCE_READS[0]
    ack = await manager.remember(MemoryFact(ANA, text))
    assert ack.status == "stored"
    return _FENCE_READS[0] - before


_FENCE_READS = [0]


@pytest.fixture(autouse=True)
def _count_fence_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count each fence's reads: a SQLite store answers a ledger it knows unchanged without a load."""
    check, since = ErasureFence.check, ErasureFence.covering_since

    async def counted_check(self: ErasureFence, write: Any) -> Any:
        _FENCE_READS[0] += 1
        return await check(self, write)

    async def counted_since(self: ErasureFence, seen: Any) -> Any:
        _FENCE_READS[0] += 1
        return await since(self, seen)

    monkeypatch.setattr(ErasureFence, "check", counted_check)
    monkeypatch.setattr(ErasureFence, "covering_since", counted_since)


async def test_runtimes_built_and_closed_in_turn_leave_at_most_two_fences_and_writes_go_on(
    tmp_path: Path,
) -> None:
    """Runtime per request, one after another, then beside a long-lived runtime: bounded, never refused."""
    shared, _ = _shared(tmp_path)
    reads: list[int] = []
    with anyio.fail_after(30):
        for n in range(RUNS):  # one after another: none open between two
            async with _runtime(tmp_path / f"r{n}.db", shared):
                reads.append(await _reads_of_one_write(shared, f"request {n}"))
        async with _runtime(tmp_path / "long.db", shared):
            for n in range(RUNS):  # beside a long-lived runtime
                async with _runtime(tmp_path / f"q{n}.db", shared):
                    reads.append(await _reads_of_one_write(shared, f"beside {n}"))
                reads.append(await _reads_of_one_write(shared, f"after {n}"))
            fences = len(shared._erasure_fences)
        await shared.aclose()
    # Two reads (before and after the write) per fence: one fence, or two beside the long-lived runtime.
    assert reads == [2] * RUNS + [4, 2] * RUNS
    assert fences == 1


async def test_a_live_runtimes_erasure_still_refuses_the_write_after_others_closed(tmp_path: Path) -> None:
    """Withdrawn are the closed runtimes' fences only; the live one's file stays fenced by its own store.

    ``first`` and ``live`` are two store objects on one file: one fence, read
    through ``first``'s store until ``first`` closes it, then through ``live``'s.
    """
    shared, store = _shared(tmp_path)
    outcomes: list[str] = []
    with anyio.fail_after(30):
        first = _runtime(tmp_path / "b.db", shared, SQLiteSessionStore)
        async with (
            _runtime(tmp_path / "a.db", shared, SQLiteSessionStore),
            _runtime(tmp_path / "b.db", shared, SQLiteSessionStore) as live,
        ):
            joined = len(shared._erasure_fences)  # a.db, and b.db once for its two store objects
            await first.aclose()  # closes its own store object on b.db
            for n in range(RUNS):  # per request, on their own files and on the live runtime's
                db = tmp_path / ("b.db" if n % 2 else f"r{n}.db")
                async with _runtime(db, shared, SQLiteSessionStore):
                    assert (await shared.remember(MemoryFact(ANA, f"request {n}"))).status == "stored"
            fences = len(shared._erasure_fences)

            async def erase() -> None:
                await live.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

            store.hold_erase = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await store.entered.wait()  # pending in the live runtime's store
                try:
                    await shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))
                    outcomes.append("stored")
                except ErasureInProgressError:
                    outcomes.append("refused")
                store.gate.set()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert (outcomes, left, joined, fences) == (["refused"], [], 2, 2)


async def test_a_manager_used_by_one_runtime_still_fails_closed_after_it_closes(tmp_path: Path) -> None:
    """The last fence stays: its store closed, the manager cannot tell what it records, so it refuses."""
    shared, _ = _shared(tmp_path)
    with anyio.fail_after(30):
        async with _runtime(tmp_path / "a.db", shared):
            assert (await shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))).status == "stored"
        with pytest.raises(SessionStoreError, match="closed"):
            await shared.remember(MemoryFact(ANA, "Ana's desk is 4C"))
        left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert left == ["Ana's desk is 4B"]


async def test_a_write_under_way_when_a_runtime_closes_its_store_is_not_left_unchecked_for_it(
    tmp_path: Path,
) -> None:
    """Its first reads saw the closing runtime's fence; its file is read again through the live one's store.

    ``leaving`` is given first, so its store object is the file's one fence
    when the write begins; the live runtime's store on the same file reads it after.
    """
    shared, store = _shared(tmp_path)
    acks: list[Any] = []
    with anyio.fail_after(30):
        leaving = _runtime(tmp_path / "a.db", shared)
        async with _runtime(tmp_path / "a.db", shared):

            async def write() -> None:
                acks.append(await shared.remember(MemoryFact(ANA, "Ana's desk is 4B")))

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()  # past the first reads: of the file, through leaving's store
                await leaving.aclose()  # closes its own store
                store.gate.set()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    [ack] = acks
    assert (ack.status, ack.notes, left) == ("stored", (), ["Ana's desk is 4B"])


async def test_a_write_under_way_is_said_unconfirmed_for_an_erasure_the_closing_runtime_made(
    tmp_path: Path,
) -> None:
    """The closing runtime erased the writer's user while the write was under way, then closed its store.

    The write's first reads saw no erasure; the erasure scrubbed memory before
    the write landed and is recorded only in the closing runtime's file, which
    no fence reads anymore. The write was not checked again against it: its
    ack says so (it used to say nothing, as if confirmed).
    """
    shared, store = _shared(tmp_path)
    acks: list[Any] = []
    with anyio.fail_after(30):
        async with _runtime(tmp_path / "a.db", shared):
            leaving = _runtime(tmp_path / "b.db", shared)

            async def write() -> None:
                acks.append(await shared.remember(MemoryFact(ANA, "Ana's desk is 4B")))

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()  # past the first reads, of both stores: no erasure then
                await leaving.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
                await leaving.aclose()  # its erasure is over; closes its own store
                store.gate.set()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    [ack] = acks
    # The fact stands (the erasure's scrub ran before it landed); at the least the ack must say
    # it was not checked again against the store that recorded the erasure.
    assert (ack.status, bool(ack.notes), left) == ("stored", True, ["Ana's desk is 4B"])


class _HeldLoad(SQLiteSessionStore):
    """A session store whose next load, once armed, waits for the test (every fence read is a load)."""

    _agentium_load_known = None

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.armed = False
        self.entered, self.gate = anyio.Event(), anyio.Event()

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.gate.wait()
        return await super().load(key, ctx)


async def test_a_fence_gained_while_the_second_reads_wait_is_read_too(tmp_path: Path) -> None:
    """A runtime built around the manager while the write's second reads wait: its file is read as well.

    Another "process" (a runtime on ``n.db`` with its own manager over the
    same memory file) erased the user while the write was under way, before
    it landed. The runtime on ``n.db`` given the shared manager is built while
    the write's second read of ``a.db`` waits: its erasure takes the write back.
    """
    shared, store = _shared(tmp_path)
    held = _HeldLoad(SQLiteConfig(path=str(tmp_path / "a.db")))
    first = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=str(tmp_path / "a.db"))),
        session_store=held,
        memory=shared,
        owned=(held,),
    )
    outcomes: list[str] = []
    with anyio.fail_after(30):
        async with first:

            async def write() -> None:
                try:
                    ack = await shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))
                    outcomes.append(f"{ack.status.value} {len(ack.notes)} notes")
                except ErasureInProgressError:
                    outcomes.append("taken back")

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()  # past the first reads (a.db only)
                elsewhere = MemoryManager(SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db"))))
                async with _runtime(tmp_path / "n.db", elsewhere) as other_process:
                    await other_process.erase(
                        EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR
                    )
                await elsewhere.aclose()
                held.armed = True
                store.gate.set()
                await held.entered.wait()  # the write landed; its second read of a.db waits
                late = _runtime(tmp_path / "n.db", shared)
                held.gate.set()
            left = [f.text for f in await shared.list(ANA)]
            await late.aclose()
        await shared.aclose()
    assert (outcomes, left) == (["taken back"], [])
