"""What a shared memory manager keeps of the Agents and runtimes given it: only while they or their work live.

A host building an ``Agent`` per request, each with a new session-store
object, used to add each one's erasure fence to the shared manager for the
manager's whole life: one more store read around every write per Agent ever
built (only the built-in SQLite store, that exact class, was told apart by
its file; any other store by object). A runtime whose close left work
running (a drain past its bound) kept its fence for good, and with its own
store closed every later write through the manager was refused; and every
closed runtime's summary-update source stayed tracked by the manager. Now an
Agent's fence is withdrawn at its close, a runtime's and an Agent's fence
stays while work of theirs still runs and goes when it ends, and a closed
runtime's summary source leaves the manager's tracked list
(docs/erasure.md, "One manager, several runtimes").
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from pathlib import Path
from typing import Any

import anyio
import pytest
from _memory_support import GatedMemoryStore, HookedLock, sqlite_store

from agentium_harness import (
    Agent,
    AgentCloseError,
    AgentLifecycleError,
    EraseTarget,
    ErasureInProgressError,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeCloseError,
    RuntimeLimits,
    SessionStoreError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.memory.manager import work_tracker
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import runtime_span

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
REQUESTS = 6


class OtherStore(SQLiteSessionStore):
    """A store whose storage the engine cannot tell (not the built-in class): told apart by object only."""


def _shared(tmp_path: Path) -> tuple[MemoryManager, GatedMemoryStore]:
    store = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    return MemoryManager(store, owns_store=True), store


def _agent(manager: MemoryManager, sessions: SQLiteSessionStore) -> Agent:
    return Agent(
        ScriptedProvider(replies=["noted"], cycle=True),
        manager,
        ANA,
        session="chat",
        extraction=False,
        session_store=sessions,
    )


def _runtime(
    db: Path, manager: MemoryManager, *, owns_store: bool = True, limits: RuntimeLimits | None = None
) -> HarnessRuntime:
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=manager,
        owned=(archive, sessions) if owns_store else (archive,),
        limits=limits or RuntimeLimits(),
    )


def _eraser(db: Path, memory: GatedMemoryStore) -> HarnessRuntime:
    """Another process erasing through ``db``: its own manager, whose memory scrub ``memory`` holds."""
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=MemoryManager(memory),
    )


async def test_agents_built_per_request_leave_no_fence_behind(tmp_path: Path) -> None:
    """An Agent per request, each on a new store object of a class told apart by object: one fence at most."""
    shared, _ = _shared(tmp_path)
    counts: list[int] = []
    with anyio.fail_after(30):
        for n in range(REQUESTS):
            sessions = OtherStore(SQLiteConfig(path=str(tmp_path / "agentium.db")))
            async with _agent(shared, sessions) as agent:
                assert (await agent.remember(MemoryFact(ANA, f"request {n}"))).status == "stored"
                counts.append(len(shared._erasure_fences))
            await sessions.aclose()
        # The last fence stays (fail closed): its store closed, the manager cannot tell its erasures.
        with pytest.raises(SessionStoreError, match="closed"):
            await shared.remember(MemoryFact(ANA, "after the last agent"))
        await shared.aclose()
    assert counts == [1] * REQUESTS


async def test_an_agents_close_withdraws_only_its_own_fence(tmp_path: Path) -> None:
    """Two Agents and a runtime on one store object: one closing leaves the store fencing the manager."""
    shared, _ = _shared(tmp_path)
    db = tmp_path / "agentium.db"
    sessions = OtherStore(SQLiteConfig(path=str(db)))
    held = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "other-memory.db")))
    outcomes: list[str] = []
    with anyio.fail_after(30):
        first, second = _agent(shared, sessions), _agent(shared, sessions)
        elsewhere = OtherStore(SQLiteConfig(path=str(tmp_path / "elsewhere.db")))
        bystander = _agent(shared, elsewhere)  # another storage: the agents' fence is not the last
        await first.close()
        async with _eraser(db, held) as eraser:

            async def erase() -> None:
                await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

            held.hold_erase = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await held.entered.wait()  # pending in agentium.db's ledger
                for writer in (second, shared):
                    try:
                        await writer.remember(MemoryFact(ANA, "Ana's desk is 4B"))
                        outcomes.append("stored")
                    except ErasureInProgressError:
                        outcomes.append("refused")
                await second.close()  # the last on agentium.db: its fence goes, the bystander's stays
                fences = [f.store for f in shared._erasure_fences]
                held.gate.set()
        await bystander.close()
        await shared.aclose()
    assert outcomes == ["refused", "refused"]
    assert fences == [elsewhere]


async def test_a_runtime_closed_with_work_left_keeps_its_fence_until_the_work_ends(tmp_path: Path) -> None:
    """Its close left work running: that work's writes stay fenced; once it ends, the fence goes.

    The runtime owned its store, closed at its close: while its work runs the
    fence fails closed (the work's write is refused), and once the work ended
    the shared manager's writes go on through the open runtime's fence (they
    used to be refused for good).
    """
    shared, _ = _shared(tmp_path)
    gate, outcomes = anyio.Event(), list[str]()
    quick = RuntimeLimits(settle_timeout_s=0.1, close_timeout_s=0.1)

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):  # ignores the drain's cancellation, its write included
            await gate.wait()
            try:
                await shared.remember(MemoryFact(ANA, "written by the left-over work"))
                outcomes.append("stored")
            except SessionStoreError:
                outcomes.append("refused")

    with anyio.fail_after(30):
        async with _runtime(tmp_path / "keeper.db", shared):
            leaving = _runtime(tmp_path / "leaving.db", shared, limits=quick)
            with runtime_span(leaving, "host.turn"):
                shared.start_work("stubborn write", "final-write", stubborn)
            with pytest.raises(RuntimeCloseError, match="did not stop"):
                await leaving.aclose()
            gate.set()
            try:
                await shared.drain(20)
            except MemoryDrainError:
                pass
            ack = await shared.remember(MemoryFact(ANA, "after the work ended"))
            fences = len(shared._erasure_fences)
        await shared.aclose()
    assert (outcomes, ack.status, fences) == (["refused"], "stored", 1)


async def test_a_runtime_closed_with_work_left_still_fences_that_works_write_against_its_erasures(
    tmp_path: Path,
) -> None:
    """Its store borrowed (still open): an erasure pending in it refuses the left-over work's write."""
    shared, _ = _shared(tmp_path)
    held = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "other-memory.db")))
    gate, outcomes = anyio.Event(), list[str]()
    quick = RuntimeLimits(settle_timeout_s=0.1, close_timeout_s=0.1)

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):  # ignores the drain's cancellation, its write included
            await gate.wait()
            try:
                await shared.remember(MemoryFact(ANA, "written by the left-over work"))
                outcomes.append("stored")
            except ErasureInProgressError:
                outcomes.append("refused")

    with anyio.fail_after(30):
        async with _runtime(tmp_path / "keeper.db", shared):
            leaving = _runtime(tmp_path / "leaving.db", shared, owns_store=False, limits=quick)
            with runtime_span(leaving, "host.turn"):
                shared.start_work("stubborn write", "final-write", stubborn)
            with pytest.raises(RuntimeCloseError, match="did not stop"):
                await leaving.aclose()
            async with _eraser(tmp_path / "leaving.db", held) as eraser:

                async def erase() -> None:
                    await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

                held.hold_erase = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(erase)
                    await held.entered.wait()  # pending in leaving.db's ledger only
                    gate.set()
                    try:
                        await shared.drain(20)
                    except MemoryDrainError:
                        pass
                    held.gate.set()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert (outcomes, left) == (["refused"], [])


async def test_closed_runtimes_summary_sources_leave_the_managers_tracked_list(tmp_path: Path) -> None:
    shared, _ = _shared(tmp_path)
    tracked: list[int] = []
    with anyio.fail_after(30):
        async with _runtime(tmp_path / "keeper.db", shared):
            for n in range(REQUESTS):
                async with _runtime(tmp_path / f"r{n}.db", shared):
                    pass
                tracked.append(len(work_tracker(shared)._sources))
        tracked.append(len(work_tracker(shared)._sources))
        await shared.aclose()
    assert tracked == [1] * REQUESTS + [0]


class HeldSummarizer(ExtractiveSummarizer):
    """A summarizer whose next call waits for ``gate``, then fails (a report a drain owes the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.gate = anyio.Event(), anyio.Event()

    async def summarize(self, previous: Any, groups: Any, ctx: Any) -> Any:
        self.started.set()
        await self.gate.wait()
        raise RuntimeError("summarizer down")


async def test_a_retired_summary_source_stays_until_a_drain_took_its_report(tmp_path: Path) -> None:
    """Retired while its update runs (a close that left it running): kept until a drain reported it."""
    shared, _ = _shared(tmp_path)
    summarizer = HeldSummarizer()
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=shared,
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    who = VerifiedIdentity("acme", "ana", "sso")
    tracker = work_tracker(shared)
    with anyio.fail_after(30):
        for text in ("one", "two"):  # the second evicts a group: a background summary update
            await runtime.run(who, "s1", text)
        await summarizer.started.wait()
        tracker.retire(runtime)  # as its close does when the update outlived the close's drain
        kept = len(tracker._sources)
        summarizer.gate.set()
        [key] = runtime.parts.work.running()
        ended = await runtime.parts.work.settle(key, 20)  # waits for it; takes no report
        assert ended == "failed"
        tracker.retire(runtime)  # looked at again (another retirement): its report is still owed
        owed = len(tracker._sources)
        with pytest.raises(MemoryDrainError) as raised:
            await shared.drain(20)
        left = len(tracker._sources)
        await runtime.aclose()
        await shared.aclose()
    assert (kept, owed, left) == (1, 1, 0)
    assert [i.status.value for i in raised.value.result.items] == ["failed"]


class GatedExtractor:
    """An extractor whose call waits for ``gate`` (an erasure may begin meanwhile), then proposes one fact."""

    def __init__(self) -> None:
        self.entered, self.gate = anyio.Event(), anyio.Event()

    async def extract(self, scope: MemoryScope, messages: Any, ctx: Any) -> list[MemoryFact]:
        self.entered.set()
        await self.gate.wait()
        return [MemoryFact(scope, "badge on file")]


async def test_an_agent_dropped_unclosed_keeps_its_fence_while_its_extraction_runs(tmp_path: Path) -> None:
    """A host drops its Agent without closing it while the turn's extraction still runs.

    The extraction's write must still be fenced by the agent's store: an
    erasure of its user recorded there (only) and under way when the write
    comes refuses it. The agent's fence used to go with the agent (held
    weakly) at the next change of the manager's fences (another Agent
    built), so the fact was written during the erasure.
    """
    extractor = GatedExtractor()
    memory = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    shared = MemoryManager(memory, owns_store=True, extractor=extractor)
    db = tmp_path / "agentium.db"
    held = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "other-memory.db")))
    with anyio.fail_after(30):
        bystander = _agent(shared, OtherStore(SQLiteConfig(path=str(tmp_path / "elsewhere.db"))))
        agent = Agent(
            ScriptedProvider(replies=["noted"], cycle=True),
            shared,
            ANA,
            session="chat",
            session_store=OtherStore(SQLiteConfig(path=str(db))),
        )
        await agent.run("my badge number is qz7731")
        await extractor.entered.wait()  # past the turn's erasure check, in the extractor's call
        gone = weakref.ref(agent)
        del agent  # dropped unclosed, its extraction still running
        gc.collect()
        # The next request's Agent: the manager's fences change.
        later = _agent(shared, OtherStore(SQLiteConfig(path=str(tmp_path / "later.db"))))
        async with _eraser(db, held) as eraser:

            async def erase() -> None:
                await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

            held.hold_erase = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await held.entered.wait()  # pending in agentium.db's ledger only
                extractor.gate.set()
                try:
                    await shared.drain(20)
                    drained = "completed"
                except MemoryDrainError as exc:
                    drained = exc.result.items[0].status.value
                held.gate.set()
        left = [f.text for f in await shared.list(ANA)]
        await later.close()
        await bystander.close()
        await shared.aclose()
    assert gone() is None
    assert (drained, left) == ("failed", [])


class Proposing:
    """An extractor proposing one fact of the scope it is given."""

    async def extract(self, scope: MemoryScope, messages: Any, ctx: Any) -> list[MemoryFact]:
        return [MemoryFact(scope, "badge on file")]


async def test_a_close_from_another_thread_as_a_run_is_admitted_cancels_that_run(tmp_path: Path) -> None:
    """A close on another thread, right after a run was admitted (state ``busy``), still sees that run.

    The run set its cancel scope, loop and end event after it released the
    state lock: a close in between saw no active run, so it neither
    cancelled nor awaited it, withdrew the agent's erasure fence at once and
    said ``closed``; the run then went on and its extraction wrote a fact
    through the manager with the agent's store no longer fencing it. Now the
    run is known to the close (cancelled: nothing of it kept, nothing
    extracted), and the fence stays while it has not ended.
    """
    shared = MemoryManager(sqlite_store(tmp_path), owns_store=True, extractor=Proposing())
    sessions = OtherStore(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    elsewhere = OtherStore(SQLiteConfig(path=str(tmp_path / "elsewhere.db")))
    outcomes: list[str] = []
    fenced: list[bool] = []
    with anyio.fail_after(30):
        bystander = _agent(shared, elsewhere)  # the agent's fence is not the last one
        agent = Agent(
            ScriptedProvider(replies=["noted"], cycle=True),
            shared,
            ANA,
            session="chat",
            session_store=sessions,
            close_timeout_s=0.5,
        )
        lock = agent._state_lock = HookedLock()  # type: ignore[assignment]

        async def close() -> None:
            try:
                await agent.close()
                outcomes.append("closed")
            except AgentCloseError:
                outcomes.append("close failed")
            fenced.append(any(f.store is sessions for f in shared._erasure_fences))

        def close_on_another_thread() -> None:  # the run's loop is held meanwhile
            thread = threading.Thread(target=anyio.run, args=(close,))
            thread.start()
            thread.join(20)

        lock.hook = close_on_another_thread
        try:
            await agent.run("my badge number is qz7731")
            outcomes.append("ran")
        except AgentLifecycleError:
            outcomes.append("run cancelled")
        try:
            await shared.drain(20)
        except MemoryDrainError:
            pass
        left = [f.text for f in await shared.list(ANA)]
        with contextlib.suppress(AgentCloseError):
            await agent.close()
        await bystander.close()
        await shared.aclose()
    assert (outcomes, fenced, left) == (["close failed", "run cancelled"], [True], [])
