"""Any loop, any thread (issue 22, item 3): one adapter or one runtime used from several event loops.

The pattern is the OpenAI Agents SDK's concurrent-access test: one shared
object, several threads each running an event loop of its own (asyncio and
trio mixed), plus the synchronous host that calls ``anyio.run`` per request.
Before the change one SQLite adapter instance hung (or timed out) as soon as
a second loop used it while the first held its limiter, and a runtime shared
by such threads timed out its runs and failed its close (R10, R12).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from agentium_harness import (
    CommitState,
    HarnessRuntime,
    MemoryDrainError,
    MemoryManager,
    ResidentLimits,
    RunStatus,
    RuntimeClosedError,
    RuntimeLimits,
    SessionBusyError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    ModelRequest,
    ModelResponse,
    OpContext,
    PerLoop,
    SessionConflictError,
    SessionKey,
)
from agentium_harness.testing import plain_group, run_in_threads, run_in_turn, scoped_snapshot

ANA = VerifiedIdentity("acme", "ana", "test-auth")
MIXED = ("asyncio-loop", "trio", "asyncio", "asyncio-loop")


def ctx() -> OpContext:
    return OpContext.with_timeout(20)


# -- one adapter, many loops -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_one_archive_and_store_serve_threads_each_with_its_own_loop(tmp_path: Path, kind: str) -> None:
    """Every write from every loop lands: 4 threads, 3 loop styles, one archive and one store object."""
    config = SQLiteConfig(path=str(tmp_path / "any.db"))
    archive = SQLiteArchive(config) if kind == "sqlite" else InMemoryArchive()
    store = SQLiteSessionStore(config) if kind == "sqlite" else InMemorySessionStore()
    shared = SessionKey("acme", "ana", "shared")

    async def work(i: int) -> list[str]:
        key = SessionKey("acme", "ana", f"thread-{i}")
        outcomes = []
        for seq in range(3):
            await archive.append(key, [plain_group(seq, f"thread {i} group {seq}")], ctx())
        revision = await store.save(key, scoped_snapshot(key, f" t{i}"), None, ctx())
        await store.save(key, scoped_snapshot(key, f" t{i} again"), revision, ctx())
        try:
            await store.save(shared, scoped_snapshot(shared, f" by {i}"), None, ctx())
            outcomes.append("won")
        except SessionConflictError:
            outcomes.append("conflict")
        return outcomes

    async def check() -> None:
        for i in range(4):
            key = SessionKey("acme", "ana", f"thread-{i}")
            groups = await archive.read_groups(key, 0, 10, ctx())
            assert [g.seq for g in groups] == [0, 1, 2]
            assert groups[2] == plain_group(2, f"thread {i} group 2")
            loaded = await store.load(key, ctx())
            assert loaded is not None and loaded.revision == 2
            assert loaded.snapshot == scoped_snapshot(key, f" t{i} again")

    async def close() -> None:
        for adapter in (archive, store):
            closer = getattr(adapter, "aclose", None)
            if closer is not None:
                await closer()

    # First used on a loop that then ends, as a host's startup check would.
    anyio.run(archive.health, ctx())
    outcomes = run_in_threads(work, threads=4, styles=MIXED, timeout_s=60)
    assert sorted(o for per in outcomes for o in per) == ["conflict", "conflict", "conflict", "won"]
    run_in_turn(lambda _i: check(), calls=2, styles=("trio", "asyncio-loop"))
    anyio.run(close)


def test_a_sqlite_adapter_waiting_on_another_loops_call_is_woken(tmp_path: Path) -> None:
    """Calls from two live loops at once: the second waits for the first, then runs (no lost wake-up)."""
    archive = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "wake.db")))

    async def work(i: int) -> int:
        key = SessionKey("acme", "ana", f"wake-{i}")
        for seq in range(20):
            await archive.append(key, [plain_group(seq, f"{i}/{seq}")], ctx())
        return len(await archive.read_groups(key, 0, 100, ctx()))

    try:
        assert run_in_threads(work, threads=4, styles=("asyncio", "trio"), timeout_s=60) == [20] * 4
    finally:
        anyio.run(archive.aclose)


# -- one runtime, many loops -----------------------------------------------------------------------


def sqlite_runtime(tmp_path: Path, **limits: float) -> HarnessRuntime:
    db = str(tmp_path / "runtime.db")
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=db)),
        session_store=SQLiteSessionStore(SQLiteConfig(path=db)),
        recall=SQLiteRecallStore(SQLiteRecallConfig(path=db)),
        summarizer=ExtractiveSummarizer(),
        limits=RuntimeLimits(
            resident=ResidentLimits(max_groups=2),
            **{"op_timeout_s": 30.0, "settle_timeout_s": 30.0, "close_timeout_s": 30.0, **limits},
        ),
    )


def test_one_runtime_serves_threads_each_with_its_own_loop(tmp_path: Path) -> None:
    """4 threads (asyncio and trio), 3 runs each on their own session: every run commits, close is clean."""
    runtime = sqlite_runtime(tmp_path)

    async def work(i: int) -> list[tuple[RunStatus, CommitState]]:
        done = []
        for n in range(3):
            result = await runtime.run(ANA, f"session-{i}", f"thread {i} says apples {n}")
            done.append((result.status, result.commit_state))
        return done

    results = run_in_threads(work, threads=4, styles=MIXED, timeout_s=120)
    assert results == [[(RunStatus.COMPLETED, CommitState.COMMITTED)] * 3] * 4

    async def inspect_and_close() -> list[int]:
        views = [await runtime.inspect_session(ANA, f"session-{i}") for i in range(4)]
        await runtime.aclose()
        return [v.next_seq for v in views]

    assert anyio.run(inspect_and_close) == [3] * 4
    assert runtime.state.value == "closed"


def test_a_sync_host_calling_anyio_run_per_request_from_threads(tmp_path: Path) -> None:
    """The issue's web app: request threads each call ``anyio.run`` per request; then a clean close."""
    runtime = sqlite_runtime(tmp_path)
    outcomes: list[tuple[RunStatus, CommitState]] = []
    errors: list[BaseException] = []

    def request_thread(i: int) -> None:
        try:
            for n in range(3):
                result = anyio.run(runtime.run, ANA, f"web-{i}", f"request {n} from {i}")
                outcomes.append((result.status, result.commit_state))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=request_thread, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert outcomes == [(RunStatus.COMPLETED, CommitState.COMMITTED)] * 12
    anyio.run(runtime.aclose)
    assert runtime.state.value == "closed"


class GateProvider(ScriptedProvider):
    """Answers once ``release`` is set (waiting in a worker thread); ``entered`` says a call is waiting."""

    def __init__(self) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.entered = threading.Event()
        self.release = threading.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.entered.set()
        # Cancellable while it waits, as a real HTTP call is; the abandoned wait ends within 30 s
        # (a worker thread left waiting forever would keep the test process from exiting).
        await anyio.to_thread.run_sync(self.release.wait, 30, abandon_on_cancel=True)
        return await super().complete(request, ctx)


def gated_runtime(provider: GateProvider, **limits: float) -> HarnessRuntime:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(**{"op_timeout_s": 30.0, "settle_timeout_s": 30.0, **limits}),
    )


def test_runs_on_one_session_from_two_loops_admit_one() -> None:
    """Admission is one operation per session across loops: the second loop gets SessionBusyError."""
    provider = GateProvider()
    runtime = gated_runtime(provider)
    first: list[object] = []

    def hold() -> None:
        first.append(anyio.run(runtime.run, ANA, "one", "first"))

    holder = threading.Thread(target=hold)
    holder.start()
    assert provider.entered.wait(30)
    with pytest.raises(SessionBusyError):
        anyio.run(runtime.run, ANA, "one", "second", backend="trio")
    # Another session is free meanwhile, from yet another loop.
    provider.release.set()
    other = anyio.run(runtime.run, ANA, "two", "elsewhere")
    holder.join(30)
    assert not holder.is_alive()
    assert [r.commit_state for r in (*first, other)] == [CommitState.COMMITTED] * 2  # type: ignore[attr-defined]
    anyio.run(runtime.aclose)


@pytest.mark.parametrize("closer_backend", ["asyncio", "trio"])
def test_aclose_from_another_loop_cancels_a_run_on_a_live_loop(closer_backend: str) -> None:
    """A run blocked on loop A is cancelled by ``aclose()`` on loop B, within its bound, and says so."""
    provider = GateProvider()
    runtime = gated_runtime(provider, settle_timeout_s=0.3, close_timeout_s=5.0)
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            anyio.run(runtime.run, ANA, "held", "wait")
        except BaseException as exc:
            errors.append(exc)

    holder = threading.Thread(target=hold)
    holder.start()
    assert provider.entered.wait(30)
    started = time.monotonic()
    anyio.run(runtime.aclose, backend=closer_backend)
    took = time.monotonic() - started
    provider.release.set()  # let the abandoned provider call's worker thread end
    holder.join(30)
    assert not holder.is_alive()
    assert runtime.state.value == "closed"
    assert took < 0.3 + 5.0 + 5.0  # settle + cancel grace + generous slack
    [error] = errors
    assert isinstance(error, RuntimeClosedError)
    assert error.commit_state is CommitState.NOT_COMMITTED


def test_memory_work_started_on_one_loop_is_drained_from_another() -> None:
    """A drain on loop B waits for (and reports) work running on live loop A."""
    manager = MemoryManager(InMemoryMemoryStore())
    release = threading.Event()
    started = threading.Event()

    async def slow_work() -> None:
        started.set()
        await anyio.to_thread.run_sync(release.wait, 30)

    async def owner() -> None:
        manager.start_work("slow write", "final-write", slow_work)
        await anyio.to_thread.run_sync(release.wait, 30)
        await anyio.sleep(0.2)  # the loop stays alive until the work is done

    holder = threading.Thread(target=anyio.run, args=(owner,))
    holder.start()
    assert started.wait(30)
    threading.Timer(0.2, release.set).start()
    result = anyio.run(manager.drain, 30.0, backend="trio")
    holder.join(30)
    assert result.completed == ("slow write",)


class SlowSummarizer(ExtractiveSummarizer):
    """Takes ``delay`` seconds per update (cancellable), so the request's loop ends first."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def summarize(self, previous, groups, ctx):  # type: ignore[no-untyped-def]
        await anyio.sleep(self.delay)
        return await super().summarize(previous, groups, ctx)


def test_a_summary_update_cut_by_its_loops_end_is_reported_cancelled() -> None:
    """``anyio.run`` per request ends the loop a background update runs on: reported, never hidden."""
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=SlowSummarizer(5.0),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    results = [anyio.run(runtime.run, ANA, "cut", f"message {n}") for n in range(3)]
    assert all(r.commit_state is CommitState.COMMITTED for r in results)
    # The update the second run started was cut when that run's loop ended; the third run says so.
    notes = [d for d in results[2].diagnostics if d.code == "summary_cancelled"]
    assert notes and "event loop it ran on ended" in notes[0].message
    # A drain from yet another loop reports the last cut update as cancelled and stopped, not stuck.
    with pytest.raises(MemoryDrainError) as caught:
        anyio.run(runtime.drain, 30.0, backend="trio")  # the cut update is reported at once
    drained = caught.value.result
    assert drained.cancelled and drained.still_running == ()
    anyio.run(runtime.aclose)
    assert runtime.state.value == "closed"


# -- PerLoop, the plugins' tool for loop-bound clients ---------------------------------------------


class LoopClient:
    """Stands in for a client whose connections belong to the loop that made it."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.closed_in: int | None = None
        self.discarded = False

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closed_in = threading.get_ident()


def test_per_loop_values_are_made_per_loop_dropped_with_their_loop_and_closed_on_it() -> None:
    """One value per loop; a finished loop's value is discarded; ``aclose`` closes each on its own loop."""
    per_loop: PerLoop[LoopClient] = PerLoop(LoopClient, discard=lambda c: setattr(c, "discarded", True))

    async def take(_i: int) -> LoopClient:
        first = per_loop.get()
        await anyio.lowlevel.checkpoint()
        assert per_loop.get() is first and per_loop.peek() is first
        return first

    made = run_in_threads(take, threads=3, styles=("asyncio", "trio", "asyncio-loop"))
    assert len({id(c) for c in made}) == 3
    assert per_loop.peek() is None  # no loop here

    # A loop that stays alive in its own thread, holding a value, until told to finish.
    finish = threading.Event()
    live: list[LoopClient] = []

    async def keep_alive() -> None:
        live.append(per_loop.get())
        await anyio.to_thread.run_sync(finish.wait, 30)
        await anyio.sleep(0.5)  # the close scheduled on this loop runs meanwhile

    holder = threading.Thread(target=anyio.run, args=(keep_alive,), kwargs={"backend": "trio"})
    holder.start()
    while not live:
        time.sleep(0.01)
    # Making a value on a new loop drops the finished loops' values.
    assert all(c.discarded for c in made)

    async def close_all() -> tuple[LoopClient, list[str]]:
        mine = per_loop.get()
        threading.Timer(0.2, finish.set).start()
        return mine, await per_loop.aclose(lambda c: c.aclose(), 30.0)

    mine, problems = anyio.run(close_all)
    holder.join(30)
    assert problems == []
    assert mine.closed_in == threading.get_ident()
    assert live[0].closed_in == live[0].thread != threading.get_ident()
    assert per_loop.items() == []


class PausingStore(SQLiteSessionStore):
    """Holds a load between reading its row and returning, so another loop's save can land meanwhile."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.pause_loads = False
        self.read = threading.Event()
        self.resume = threading.Event()

    async def run(self, ctx, operation, work):  # type: ignore[no-untyped-def]
        result = await super().run(ctx, operation, work)
        if operation == "session load" and self.pause_loads:
            self.read.set()
            await anyio.to_thread.run_sync(self.resume.wait, 30)
        return result


def test_a_load_overtaken_by_another_loops_save_never_serves_the_older_row(tmp_path: Path) -> None:
    """The SQLite store's remembered rows stay true when a load and a save of one key run on two loops."""
    config = SQLiteConfig(path=str(tmp_path / "race.db"))
    store = PausingStore(config)
    key = SessionKey("acme", "ana", "raced")

    async def seed() -> None:
        await store.save(key, scoped_snapshot(key, " one"), None, ctx())
        # Another connection commits, so the next load must read the row again.
        other = SQLiteSessionStore(config)
        elsewhere = SessionKey("acme", "ana", "elsewhere")
        await other.save(elsewhere, scoped_snapshot(elsewhere, ""), None, ctx())
        await other.aclose()

    anyio.run(seed)
    store.pause_loads = True
    loaded: list[object] = []
    reader = threading.Thread(target=lambda: loaded.append(anyio.run(store.load, key, ctx())))
    reader.start()
    assert store.read.wait(30)
    store.pause_loads = False
    # Another loop saves revision 2 while the load that read revision 1 has not returned yet.
    assert anyio.run(store.save, key, scoped_snapshot(key, " two"), 1, ctx(), backend="trio") == 2
    store.resume.set()
    reader.join(30)

    async def reload() -> object:
        try:
            return await store.load(key, ctx())
        finally:
            await store.aclose()

    again = anyio.run(reload)
    assert again is not None and again.revision == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_one_memory_store_serves_threads_each_with_its_own_loop(tmp_path: Path, kind: str) -> None:
    """Remember (shared facts and own), correct and forget from 4 loops on one memory store: all land once.

    The in-memory store iterated its facts while another thread added one: a remember failed
    with "dictionary changed size during iteration" (and a shared fact could be stored twice).
    """
    import sys

    from agentium_harness import AckStatus, MemoryFact, MemoryScope
    from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore

    store = (
        SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "m.db")))
        if kind == "sqlite"
        else InMemoryMemoryStore()
    )
    shared = MemoryScope("acme", "ana")
    rounds = 40 if kind == "sqlite" else 150

    async def work(i: int) -> list[str]:
        stored = []
        for n in range(rounds):
            await store.remember(MemoryFact(shared, f"shared fact {n}"), ctx())
            scope = MemoryScope("acme", f"user-{i}")
            ack = await store.remember(MemoryFact(scope, f"thread {i} fact {n}"), ctx())
            assert ack.status is AckStatus.STORED and ack.fact_id is not None
            if n % 3 == 0:
                await store.correct(scope, ack.fact_id, MemoryFact(scope, f"thread {i} fact {n} v2"), ctx())
            elif n % 3 == 1:
                await store.forget(scope, ack.fact_id, ctx())
            stored.append(ack.fact_id)
        return stored

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a race shows every run
    try:
        run_in_threads(work, threads=4, styles=MIXED, timeout_s=120)
    finally:
        sys.setswitchinterval(old)

    async def check() -> None:
        listed = [f.text for f in await store.list_facts(shared, 200, ctx())]
        assert sorted(listed) == sorted(f"shared fact {n}" for n in range(rounds))
        own = sorted(f.text for f in await store.list_facts(MemoryScope("acme", "user-0"), 200, ctx()))
        assert own == sorted(
            f"thread 0 fact {n}" + (" v2" if n % 3 == 0 else "") for n in range(rounds) if n % 3 != 1
        )
        await store.aclose()

    anyio.run(check)


def test_one_in_memory_recall_store_serves_threads_each_with_its_own_loop() -> None:
    """Index, discover, seek and erase from 4 loops on one in-memory recall store: none fails.

    discover, seek_groups and erase iterated the sources while another thread indexed a group:
    "dictionary changed size during iteration".
    """
    import sys

    from agentium_harness import EraseTarget
    from agentium_harness.adapters.memory_recall import InMemoryRecallStore
    from agentium_harness.plugin_api import ArchiveReceipt, RecallLimits, Scope

    store = InMemoryRecallStore()

    async def work(i: int) -> int:
        key = SessionKey("acme", "ana", f"s{i}")
        session = await store.open(Scope("acme", "ana", f"s{i}"), RecallLimits(), ctx())
        for seq in range(120):
            group = plain_group(seq, f"thread {i} apple {seq}")
            receipt = ArchiveReceipt(seq=seq, digest=group.digest, location="memory://x")
            await store.index_groups(key, [group], [receipt], ctx())
            await session.discover("apple", 5, ctx())
            await store.seek_groups(key, 0, 3, ctx())
            if seq % 10 == 9:
                await store.erase(EraseTarget.session("acme", "ana", f"gone-{i}"), ctx())
        return len(await store.seek_groups(key, 0, 200, ctx()))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a race shows every run
    try:
        assert run_in_threads(work, threads=4, styles=MIXED, timeout_s=120) == [120] * 4
    finally:
        sys.setswitchinterval(old)
