"""BlockingRuntime, the synchronous facade (issue 22, item 3).

A synchronous host calls the runtime from request threads; the runtime lives
on one event loop in a portal thread for its whole life, so background
summary updates finish instead of being cut with a per-request loop, and the
close is bounded.
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    AgentiumError,
    BlockingCallInLoopError,
    BlockingMemory,
    BlockingRuntime,
    CommitState,
    EffectLevel,
    EraseTarget,
    ErasureResult,
    HarnessRuntime,
    InvalidArgumentError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RunStatus,
    RuntimeClosedError,
    RuntimeCloseError,
    RuntimeLimits,
    SessionBusyError,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

ANA = VerifiedIdentity("acme", "ana", "test-auth")
ROOT = Path(__file__).resolve().parents[2]


def summarizing_runtime(tmp_path: Path, **limits: float) -> object:
    db = str(tmp_path / "blocking.db")
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=db)),
        session_store=SQLiteSessionStore(SQLiteConfig(path=db)),
        summarizer=ExtractiveSummarizer(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1), **limits),
    )


def in_threads(request: Callable[[int], None], count: int) -> None:
    """Run ``request(i)`` for i in 0..count-1, each on a thread of its own, at once; re-raise what failed."""
    errors: list[BaseException] = []

    def recorded(i: int) -> None:
        try:
            request(i)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=recorded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a request thread did not finish within 60 s"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_request_threads_share_one_blocking_runtime_and_summaries_finish(
    tmp_path: Path, backend: str
) -> None:
    """4 request threads, 3 turns each; every background summary update completes; the close is clean."""
    runtime = summarizing_runtime(tmp_path)
    outcomes: list[tuple[RunStatus, CommitState]] = []
    with BlockingRuntime(runtime, backend=backend) as blocking:  # type: ignore[arg-type]

        def requests(i: int) -> None:
            for n in range(3):
                result = blocking.run(ANA, f"s{i}", f"turn {n} of thread {i}: apples and pears")
                outcomes.append((result.status, result.commit_state))

        in_threads(requests, 4)
        assert outcomes == [(RunStatus.COMPLETED, CommitState.COMMITTED)] * 12
        # The loop outlived every request: the updates ran to the end instead of being cut.
        for i in range(4):
            report = blocking.settle_summary(ANA, f"s{i}")
            assert report is not None and report.status.value == "completed"
            view = blocking.inspect_session(ANA, f"s{i}")
            assert view.next_seq == 3 and view.summary is not None
        assert blocking.drain(30.0).ok
        assert blocking.close_session(ANA, "s0").status.value == "clean"
    assert blocking.state.value == "closed"
    with pytest.raises(RuntimeClosedError):
        blocking.run(ANA, "s0", "after close")
    blocking.close()  # idempotent


class GateProvider(ScriptedProvider):
    """Answers once ``release`` is set; ``entered`` says a call is waiting (cancellable meanwhile)."""

    def __init__(self) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.entered = threading.Event()
        self.release = threading.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.entered.set()
        await anyio.to_thread.run_sync(self.release.wait, abandon_on_cancel=True)
        return await super().complete(request, ctx)


def test_errors_reach_the_calling_thread_and_close_cancels_a_run_in_flight() -> None:
    """SessionBusyError for a second call on a busy session; ``close()`` cancels the first, bounded."""
    provider = GateProvider()
    # Only the settle is meant to run out (the run waits on its gate); the cancelled run stopping is not.
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=30.0)
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=limits,
    )
    blocking = BlockingRuntime(runtime).start()
    caught: list[BaseException] = []

    def hold() -> None:
        try:
            blocking.run(ANA, "busy", "first")
        except BaseException as exc:
            caught.append(exc)

    holder = threading.Thread(target=hold)
    holder.start()
    assert provider.entered.wait(30)
    with pytest.raises(SessionBusyError):
        blocking.run(ANA, "busy", "second")
    started = time.monotonic()
    blocking.close()
    assert time.monotonic() - started < limits.settle_timeout_s + 5.0  # the run never answers by itself
    holder.join(30)
    [error] = caught
    assert isinstance(error, RuntimeClosedError) and error.commit_state is CommitState.NOT_COMMITTED
    provider.release.set()


class LoopBlockingArchive(InMemoryArchive):
    """An owned adapter whose close blocks the event loop itself: nothing can interrupt it."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def aclose(self) -> None:
        time.sleep(self.seconds)  # noqa: ASYNC251 - blocks the loop thread: the worst an adapter can do


def test_close_is_bounded_even_when_an_adapter_blocks_the_loop() -> None:
    """``close()`` returns by its bound and says it gave up; the process is not held."""
    archive = LoopBlockingArchive(20.0)  # far past the bound asserted below
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=archive,
        session_store=InMemorySessionStore(),
        owned=[archive],
        limits=RuntimeLimits(settle_timeout_s=0.1, close_timeout_s=0.2),
    )
    blocking = BlockingRuntime(runtime)
    assert blocking.run(ANA, "s", "hello").commit_state is CommitState.COMMITTED
    bound = blocking.close_bound_s()
    started = time.monotonic()
    with pytest.raises(RuntimeCloseError) as caught:
        blocking.close()
    took = time.monotonic() - started
    assert took < 2 * bound + 5.0  # the runtime's bound, then the loop's stop bound, plus slack
    assert "did not close within" in str(caught.value)


def test_a_borrowed_runtime_is_left_open_for_its_owner() -> None:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    with BlockingRuntime(runtime, owned=False) as blocking:
        blocking.run(ANA, "s", "hello")
    assert runtime.state.value == "open"
    # The owner uses and closes it from its own loop afterwards.
    assert anyio.run(runtime.inspect_session, ANA, "s").next_seq == 1
    anyio.run(runtime.aclose)
    assert runtime.state.value == "closed"


def test_from_config_owns_the_runtime_it_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTIUM_DB", str(tmp_path / "config.db"))
    with BlockingRuntime.from_config(ROOT / "examples" / "agentium.toml") as blocking:
        assert blocking.run(ANA, "s", "hello").output == "Noted."
        assert "sqlite" in dict(blocking.probe())["archive"]
    assert blocking.state.value == "closed"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="HarnessRuntime"):
        BlockingRuntime("agentium.toml")  # type: ignore[arg-type]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    with pytest.raises(InvalidArgumentError, match="backend"):
        BlockingRuntime(runtime, backend="curio")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("backend_options", 1),
        ("backend_options", "debug"),
        ("backend_options", [("debug", True)]),
        ("backend_options", {1: True}),
        ("owned", None),
        ("owned", 1),
        ("owned", "no"),
    ],
)
def test_bad_owned_or_backend_options_are_refused_typed(option: str, value: object) -> None:
    # backend_options that are no mapping escaped as a bare TypeError/ValueError from dict(); an
    # owned that is no bool was taken for its truth ("no" owned the runtime and closed it).
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    with pytest.raises(InvalidArgumentError, match=option):
        BlockingRuntime(runtime, **{option: value})  # type: ignore[arg-type]
    assert runtime.state.value == "open"


def test_from_config_checks_its_backend_before_it_builds_anything(tmp_path: Path) -> None:
    config = tmp_path / "agentium.toml"
    config.write_text(
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "sqlite"\n[archive.options]\n'
        'path = "db.sqlite"\n[session_store]\nplugin = "sqlite"\n'
        '[session_store.options]\npath = "db.sqlite"\n',
        encoding="utf-8",
    )
    with pytest.raises(InvalidArgumentError, match="backend"):
        BlockingRuntime.from_config(config, backend="curio")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="backend"):  # not the ConfigError of a missing file
        BlockingRuntime.from_config(tmp_path / "missing.toml", backend="curio")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


class ClosingArchive(InMemoryArchive):
    """Counts its closes (the runtime owns it)."""

    closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        await super().aclose()


def test_close_from_async_code_closes_a_never_started_runtime() -> None:
    """Async code (a thread already running a loop) may close it: the owned runtime is closed, once."""
    archive = ClosingArchive()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=archive,
        session_store=InMemorySessionStore(),
        owned=[archive],
    )
    blocking = BlockingRuntime(runtime)

    async def from_async() -> None:
        blocking.close()  # used to raise a bare RuntimeError and leave the runtime open for good
        blocking.close()

    anyio.run(from_async)
    assert runtime.state.value == "closed"
    assert archive.closes == 1
    with pytest.raises(RuntimeClosedError):
        blocking.run(ANA, "s", "again")


def test_calls_from_the_runtime_loop_are_refused_and_change_nothing() -> None:
    """call() and close() from a tool handler: typed refusal; the runtime stays open and closes later."""
    seen: list[BaseException] = []
    holder: dict[str, BlockingRuntime] = {}
    loop_threads: list[threading.Thread] = []

    async def handler(args: object) -> str:
        loop_threads.append(threading.current_thread())
        for attempt in (holder["b"].close, lambda: holder["b"].inspect_session(ANA, "s")):
            try:
                attempt()
            except BaseException as exc:  # recorded and asserted below
                seen.append(exc)
        return "done"

    script = [{"content": "", "tool_calls": [{"id": "c1", "name": "stop"}]}, "fin"]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=script),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("stop", handler, EffectLevel.WRITE)]),
    )
    blocking = holder["b"] = BlockingRuntime(runtime)
    result = blocking.run(ANA, "s", "go", grants=["stop"])
    assert result.commit_state is CommitState.COMMITTED
    assert len(seen) == 2
    assert all(isinstance(e, BlockingCallInLoopError) and isinstance(e, RuntimeError) for e in seen)
    assert "nothing was done" in str(seen[0])
    # Nothing changed: still open and usable, and a close from outside the loop closes it.
    assert runtime.state.value == "open"
    assert blocking.inspect_session(ANA, "s").next_seq == 1
    blocking.close()
    assert runtime.state.value == "closed"
    assert not loop_threads[0].is_alive()


def test_a_call_that_meets_close_stopping_the_loop_gets_runtime_closed_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread that took the loop just before ``close()`` stopped it gets the typed error, not anyio's."""
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    blocking = BlockingRuntime(runtime).start()
    took, closed = threading.Event(), threading.Event()
    take = blocking._portal_or_start

    def take_then_wait_for_close() -> anyio.from_thread.BlockingPortal:
        portal = take()
        took.set()
        assert closed.wait(30)  # the race, made certain: close() runs before the call is handed over
        return portal

    monkeypatch.setattr(blocking, "_portal_or_start", take_then_wait_for_close)
    caught: list[BaseException] = []

    def read() -> None:
        try:
            blocking.call(runtime.read_history, ANA, "s1", max_groups=1)
        except BaseException as exc:
            caught.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert took.wait(30)
    blocking.close()
    closed.set()
    reader.join(30)
    [error] = caught
    assert isinstance(error, RuntimeClosedError), repr(error)
    assert error.commit_state is CommitState.NOT_COMMITTED  # it did not run


def test_after_close_a_thread_reusing_the_loop_threads_ident_is_not_taken_for_the_loop() -> None:
    """close() stays idempotent and later calls say closed, whichever ident the calling thread got."""
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    blocking = BlockingRuntime(runtime).start()

    async def loop_ident() -> int:
        return threading.get_ident()

    ident = blocking.call(loop_ident)
    blocking.close()  # the loop thread has ended: its ident is free for the next thread
    outcomes: list[tuple[bool, str, str]] = []
    together = threading.Barrier(8)

    def after_close() -> None:
        together.wait(30)  # all alive at once: one of them gets the freed loop thread's stack
        try:
            blocking.close()
            closed = "returned"
        except BaseException as exc:
            closed = type(exc).__name__
        try:
            blocking.call(runtime.read_history, ANA, "s1", max_groups=1)
            called = "ran"
        except BaseException as exc:
            called = type(exc).__name__
        outcomes.append((threading.get_ident() == ident, closed, called))

    threads = [threading.Thread(target=after_close) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if not any(reused for reused, _, _ in outcomes):  # pragma: no cover - the platform never reused it
        pytest.skip("no thread got the ended loop thread's ident here")
    assert {(closed, called) for _, closed, called in outcomes} == {("returned", "RuntimeClosedError")}


class SlowClosingArchive(InMemoryArchive):
    """An owned adapter whose close takes a while (awaiting, not blocking the loop)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.closing = threading.Event()

    async def aclose(self) -> None:
        self.closing.set()
        await anyio.sleep(0.5)


def test_a_close_while_another_threads_close_is_under_way_returns_once_it_has_finished() -> None:
    """The second close() does nothing more, but does not say 'closed' before the runtime is."""
    archive = SlowClosingArchive()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        owned=[archive],
    )
    blocking = BlockingRuntime(runtime).start()
    first = threading.Thread(target=blocking.close)
    first.start()
    assert archive.closing.wait(30)  # the first close is draining the runtime
    blocking.close()
    assert runtime.state.value == "closed"
    first.join(30)


# -- the history, erasure and memory APIs, blocking ----------------------------------------------

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
HISTORY_TWINS = (
    "append", "read_history", "list_sessions", "retract", "reset_view",
    "erase", "resume_erasures", "erasure_status", "apply_retention", "forget",
)  # fmt: skip
MEMORY_TWINS = ("remember_with_result", "remember", "correct", "forget", "list", "history", "select")


def history_runtime() -> HarnessRuntime:
    stores = {"archive": InMemoryArchive(), "session_store": InMemorySessionStore()}
    memory = InMemoryMemoryStore()
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        memory=memory,
        owned=[*stores.values(), memory],
        **stores,  # type: ignore[arg-type]
    )


def exchange(n: int) -> list[Message]:
    return [Message(Role.USER, f"question {n}"), Message(Role.ASSISTANT, f"answer {n}")]


def test_every_twin_has_the_signature_of_its_coroutine() -> None:
    """Same parameters (names, kinds, defaults, annotations) and result as the async method."""
    pairs = [(getattr(BlockingRuntime, n), getattr(HarnessRuntime, n)) for n in HISTORY_TWINS]
    pairs += [(getattr(BlockingMemory, n), getattr(MemoryManager, n)) for n in MEMORY_TWINS]
    for twin, coroutine in pairs:
        assert inspect.signature(twin) == inspect.signature(coroutine), twin.__name__
        assert not inspect.iscoroutinefunction(twin)
        assert (inspect.getdoc(coroutine) or "") in (inspect.getdoc(twin) or ""), twin.__name__


def test_request_threads_write_and_read_history_through_one_blocking_runtime() -> None:
    """8 threads at once, each on its own session: append, read, retract, reset; all commit."""
    with BlockingRuntime(history_runtime()) as blocking:

        def requests(i: int) -> None:
            sid = f"chat-{i}"
            for n in range(3):
                assert blocking.append(ANA, sid, exchange(n)).commit_state is CommitState.COMMITTED
            page = blocking.read_history(ANA, sid, max_groups=10)
            assert [m.content for m in page.messages][-1] == "answer 2"
            taken = blocking.retract(ANA, sid, reason="undo", expected_revision=page.snapshot_revision)
            assert [m.content for m in taken.messages] == ["answer 2"]
            assert blocking.reset_view(ANA, sid, reason="clear").commit_state is CommitState.COMMITTED
            assert blocking.read_history(ANA, sid, max_groups=10).messages == ()
            assert len(blocking.read_history(ANA, sid, max_groups=10, view=False).groups) == 5

        in_threads(requests, 8)
        assert blocking.list_sessions(ANA, limit=100).sessions == tuple(sorted(f"chat-{i}" for i in range(8)))


def bad_calls(sid: str, fact_id: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """Refused calls: (method, or ``memory.`` method; its arguments), on session ``sid``."""
    ana, bob = MemoryScope("acme", "ana"), MemoryScope("acme", "bob")
    foreign = OperatorAttestation(VerifiedIdentity("globex", "ops", "sso"))
    target = EraseTarget.session("acme", "ana", sid)
    orphan = [Message(Role.TOOL, "orphan", tool_call_id="x")]
    return [
        ("append", (ANA, sid, "not messages"), {}),
        ("append", (ANA, sid, exchange(1)), {"expected_revision": 99}),
        ("append", (ANA, sid, orphan), {}),
        ("read_history", (ANA, sid), {"max_groups": 0}),
        ("list_sessions", (ANA,), {"limit": 0}),
        ("retract", (ANA, sid), {"count": 0, "reason": "x"}),
        ("retract", (ANA, sid), {"count": 9, "reason": "x"}),
        ("reset_view", (ANA, sid), {"reason": 5}),
        ("reset_view", (ANA, sid), {"reason": "x", "expected_revision": 99}),
        ("reset_view", (ANA, sid), {"reason": "x", "expected_revision": True}),
        ("erase", (target,), {"reason": "gdpr", "attestation": foreign}),
        ("erase", (target,), {"reason": "gdpr", "attestation": OPERATOR, "dry_run": 1}),
        ("erasure_status", ("ops",), {}),
        ("resume_erasures", (None,), {}),
        ("apply_retention", (OPERATOR,), {}),
        ("forget", (ana, "nope"), {}),
        ("memory.remember", ("ana likes tea",), {}),
        ("memory.remember", (MemoryFact(ana, " "),), {}),
        ("memory.correct", (ana, "nope", MemoryFact(ana, "x")), {}),
        ("memory.forget", (bob, fact_id), {}),
        ("memory.list", (ana, 0), {}),
        ("memory.select", (ana, 7), {}),
    ]


def test_bad_input_raises_the_async_apis_typed_error_and_changes_nothing() -> None:
    """From 4 threads at once, each twin refuses as its coroutine does (type and message); nothing changed."""
    with BlockingRuntime(history_runtime()) as blocking:
        assert blocking.memory is not None
        sync_memory, async_memory = blocking.memory, blocking.memory.manager
        fact = sync_memory.remember(MemoryFact(MemoryScope("acme", "ana"), "ana likes tea"))
        assert fact.fact_id is not None
        for i in range(4):
            blocking.append(ANA, f"s{i}", exchange(0))

        def state(sid: str) -> tuple[object, ...]:
            page = blocking.read_history(ANA, sid, max_groups=10, view=False)
            return blocking.inspect_session(ANA, sid), page, sync_memory.list(MemoryScope("acme", "ana"))

        before = {i: state(f"s{i}") for i in range(4)}

        def requests(i: int) -> None:
            for name, args, kwargs in bad_calls(f"s{i}", str(fact.fact_id)):
                method = name.removeprefix("memory.")
                twin = getattr(sync_memory if "." in name else blocking, method)
                coroutine = getattr(async_memory if "." in name else blocking.runtime, method)
                with pytest.raises(AgentiumError) as sync_error:
                    twin(*args, **kwargs)
                with pytest.raises(AgentiumError) as async_error:
                    blocking.call(coroutine, *args, **kwargs)  # the coroutine itself, on the loop
                assert type(sync_error.value) is type(async_error.value), (name, args, kwargs)
                assert str(sync_error.value) == str(async_error.value)

        in_threads(requests, 4)
        assert {i: state(f"s{i}") for i in range(4)} == before
        assert blocking.erasure_status(OPERATOR) == ()


def test_threads_share_the_blocking_memory_and_an_operator_erases_from_a_thread() -> None:
    """Memory written from 6 threads at once is all there; an erasure from a thread takes one user only."""
    with BlockingRuntime(history_runtime()) as blocking:
        memory = blocking.memory
        assert isinstance(memory, BlockingMemory)

        def requests(i: int) -> None:
            user = VerifiedIdentity("acme", f"user-{i % 2}", "sso")
            blocking.append(user, f"s{i}", exchange(i))
            ack = memory.remember(MemoryFact(MemoryScope("acme", f"user-{i % 2}"), f"fact {i}"))
            assert ack.fact_id is not None
            assert [f.text for f in memory.history(MemoryScope.of(user), ack.fact_id)] == [f"fact {i}"]

        in_threads(requests, 6)
        assert sorted(f.text for f in memory.list(MemoryScope("acme", "user-0"))) == [
            "fact 0",
            "fact 2",
            "fact 4",
        ]
        done: list[ErasureResult] = []
        eraser = threading.Thread(
            target=lambda: done.append(
                blocking.erase(
                    EraseTarget.user("acme", "user-0"), reason="account closed", attestation=OPERATOR
                )
            )
        )
        eraser.start()
        eraser.join(60)
        [result] = done
        assert result.tombstone is not None
        assert memory.list(MemoryScope("acme", "user-0")) == ()
        assert len(memory.list(MemoryScope("acme", "user-1"))) == 3
        assert [r.erasure_id for r in blocking.erasure_status(OPERATOR)] == [result.record.erasure_id]
        assert blocking.list_sessions(VerifiedIdentity("acme", "user-1", "sso"), limit=10).sessions == (
            "s1", "s3", "s5",
        )  # fmt: skip
    without = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    with BlockingRuntime(without) as blocking:
        assert blocking.memory is None  # as HarnessRuntime.memory: memory is not configured


def test_the_history_memory_and_erasure_twins_are_refused_on_the_runtime_loop() -> None:
    """From a tool handler each twin raises BlockingCallInLoopError naming itself; nothing was written."""
    seen: list[BaseException] = []
    holder: dict[str, BlockingRuntime] = {}

    async def handler(args: object) -> str:
        b = holder["b"]
        assert b.memory is not None
        attempts = {
            "append": lambda: b.append(ANA, "other", exchange(0)),
            "read_history": lambda: b.read_history(ANA, "s", max_groups=1),
            "list_sessions": lambda: b.list_sessions(ANA, limit=1),
            "reset_view": lambda: b.reset_view(ANA, "other", reason="x"),
            "erase": lambda: b.erase(
                EraseTarget.session("acme", "ana", "other"), reason="x", attestation=OPERATOR
            ),
            "memory.remember": lambda: b.memory.remember(MemoryFact(MemoryScope("acme", "ana"), "loop")),  # type: ignore[union-attr]
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except BlockingCallInLoopError as exc:
                assert f"BlockingRuntime.{name}()" in str(exc) and "nothing was done" in str(exc)
                seen.append(exc)
        return "done"

    script = [{"content": "", "tool_calls": [{"id": "c1", "name": "stop"}]}, "fin"]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=script),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        tools=ToolRegistry([Tool("stop", handler, EffectLevel.WRITE)]),
    )
    with BlockingRuntime(runtime) as blocking:
        holder["b"] = blocking
        assert blocking.run(ANA, "s", "go", grants=["stop"]).commit_state is CommitState.COMMITTED
        assert len(seen) == 6
        assert not blocking.inspect_session(ANA, "other").exists
        assert blocking.memory is not None and blocking.memory.list(MemoryScope("acme", "ana")) == ()
        assert blocking.erasure_status(OPERATOR) == ()


def quick_closing_runtime() -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(settle_timeout_s=0.01, close_timeout_s=0.01),
    )


def call_in_thread(blocking: BlockingRuntime, func: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    caught: list[BaseException] = []

    def calling() -> None:
        try:
            blocking.call(func)
        except BaseException as exc:  # checked by the test, in its thread
            caught.append(exc)

    caller = threading.Thread(target=calling, daemon=True)
    caller.start()
    return caller, caught


@pytest.mark.parametrize("owned", [True, False])
def test_close_ends_a_host_coroutine_still_running_and_its_caller_gets_runtime_closed_error(
    owned: bool,
) -> None:
    """A ``call()`` of the host's own that would never end is cut by ``close()``: the loop stops, clean.

    Before, the loop's stop waited for it: ``close()`` gave up after its bound with
    RuntimeCloseError and the calling thread stayed blocked for ever.
    """
    runtime = quick_closing_runtime()
    blocking = BlockingRuntime(runtime, owned=owned).start()
    entered = threading.Event()

    async def forever() -> None:
        entered.set()
        await anyio.sleep_forever()

    caller, caught = call_in_thread(blocking, forever)
    assert entered.wait(30)
    blocking.close()  # no RuntimeCloseError: the runtime closed and the loop stopped
    caller.join(30)
    assert not caller.is_alive()
    [error] = caught
    assert isinstance(error, RuntimeClosedError), repr(error)
    assert error.commit_state is CommitState.UNKNOWN  # it was part way through
    if not owned:
        anyio.run(runtime.aclose)


def test_a_call_blocked_in_a_worker_thread_past_close_releases_its_caller() -> None:
    """A call waiting on a worker thread that ignores cancellation: ``close()`` gives up, bounded.

    It says so, and the calling thread gets RuntimeClosedError (``unknown``) instead of waiting for ever.
    """
    blocking = BlockingRuntime(quick_closing_runtime()).start()
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(30)

    async def in_worker() -> None:
        await anyio.to_thread.run_sync(stuck)  # not abandoned on cancel: the loop cannot stop meanwhile

    caller, caught = call_in_thread(blocking, in_worker)
    try:
        assert entered.wait(30)
        with pytest.raises(RuntimeCloseError, match="did not stop"):
            blocking.close()
        caller.join(5)
        assert not caller.is_alive(), "the caller was left blocked after close() gave up"
        [error] = caught
        assert isinstance(error, RuntimeClosedError), repr(error)
        assert error.commit_state is CommitState.UNKNOWN
    finally:
        release.set()


def test_close_of_a_borrowed_runtime_lets_a_run_in_flight_end_with_its_own_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``aclose()`` settles a borrowed runtime's runs: ``close()`` gives them its bound before it cancels.

    The run's model answers as ``close()`` begins; the run commits and says so (cancelled at
    once, it would say ``unknown``).
    """
    provider = GateProvider()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(settle_timeout_s=5.0, close_timeout_s=5.0),
    )
    blocking = BlockingRuntime(runtime, owned=False).start()
    bound = blocking.close_bound_s

    def releasing_bound() -> float:
        provider.release.set()  # the model answers as close() begins
        return bound()

    monkeypatch.setattr(blocking, "close_bound_s", releasing_bound)
    outcomes: list[Any] = []

    def request() -> None:
        try:
            outcomes.append(blocking.run(ANA, "s", "hello").commit_state)
        except BaseException as exc:  # checked below, in the test's thread
            outcomes.append(exc)

    caller = threading.Thread(target=request)
    caller.start()
    assert provider.entered.wait(30)
    blocking.close()
    caller.join(30)
    assert outcomes == [CommitState.COMMITTED]
    assert anyio.run(runtime.inspect_session, ANA, "s").next_seq == 1
    anyio.run(runtime.aclose)


class CheckingCondition(threading.Condition):
    """The facade's in-flight Condition, saying when a close() begins to look at the calls in flight."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.looking = threading.Event()

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        self.looking.set()  # close() holds the lock here: an admitted call is counted by now, or never
        return super().wait_for(predicate, timeout)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_call_admitted_just_before_a_borrowed_close_is_waited_for(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """A call that passed the closed check before ``close()`` began is in flight: it runs and commits.

    Before, it was counted only after its admission, in a lock of its own: a borrowed close()
    between the two saw no call in flight and stopped the loop, and the run was refused or cut.
    """
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    blocking = BlockingRuntime(runtime, owned=False, backend=backend).start()
    idle = CheckingCondition(blocking._lock)
    monkeypatch.setattr(blocking, "_idle", idle)
    take = blocking._portal_or_start
    closer = threading.Thread(target=blocking.close)

    def admitted_then_close_looks() -> anyio.from_thread.BlockingPortal:
        portal = take()
        closer.start()
        assert idle.looking.wait(30)  # the race, made certain: close() looks before the call goes on
        return portal

    monkeypatch.setattr(blocking, "_portal_or_start", admitted_then_close_looks)
    result = blocking.run(ANA, "s", "hello")
    closer.join(30)
    assert not closer.is_alive()
    assert result.commit_state is CommitState.COMMITTED
    assert anyio.run(runtime.inspect_session, ANA, "s", backend=backend).next_seq == 1
    assert blocking._in_flight == 0
    anyio.run(runtime.aclose, backend=backend)


class RecordingCondition(CheckingCondition):
    """:class:`CheckingCondition` keeping what each wait for the calls in flight returned."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.ended: list[bool] = []

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        ended = super().wait_for(predicate, timeout)
        self.ended.append(bool(ended))
        return ended


def test_a_borrowed_close_from_a_signal_handler_waits_for_the_run_not_for_its_own_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGTERM-style handler closes while its own thread's call is in flight: the wait ends with the run.

    Before, close() waited for the callers to return, and the interrupted caller can only return
    after its handler: the wait always ran to its bound (41 s by default) before the loop stopped.
    Now it waits for the calls on the loop: the run commits, close() returns, then the caller has it.
    """
    provider = GateProvider()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        # A bound of 5 s (settle + 2 * close + 1): the run, released as the handler closes, commits well
        # within it on a loaded machine; 1.03 s did not always (the wait ended unfinished, the loop
        # stopped, and the run was cut: RuntimeClosedError). Waiting it out still fails the test.
        limits=RuntimeLimits(settle_timeout_s=0.01, close_timeout_s=2.0),
    )
    blocking = BlockingRuntime(runtime, owned=False).start()
    idle = RecordingCondition(blocking._lock)
    monkeypatch.setattr(blocking, "_idle", idle)
    closed: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        provider.release.set()  # the model answers as the host shuts down
        blocking.close()
        closed.append("closed")

    previous = signal.signal(signal.SIGUSR1, on_signal)  # pytest runs tests in the main thread
    main = threading.main_thread().ident
    assert main is not None

    def interrupt() -> None:
        if provider.entered.wait(30):
            signal.pthread_kill(main, signal.SIGUSR1)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    try:
        result = blocking.run(ANA, "s", "hello")  # the handler runs in this thread, while it waits
    finally:
        signal.signal(signal.SIGUSR1, previous)
        interrupter.join(30)
    assert closed == ["closed"]
    assert idle.ended == [True]  # the run ended: close() did not wait out its bound
    assert result.commit_state is CommitState.COMMITTED
    assert blocking._in_flight == 0
    anyio.run(runtime.aclose)


def test_a_close_from_a_signal_handler_landing_while_the_loop_starts_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler's ``close()`` run by the thread starting the loop (its first call): it closes, bounded.

    Before, the loop was started under the facade's lock and close() takes that lock: the thread
    waited for itself for ever. The handler is called where a signal would land, in a thread of the
    test's own so that a hang fails the test instead of holding it.
    """
    runtime = quick_closing_runtime()
    blocking = BlockingRuntime(runtime)
    start = anyio.from_thread.start_blocking_portal
    outcomes: list[Any] = []

    def starting_then_signalled(*args: Any, **kwargs: Any) -> Any:
        blocking.close()  # what a SIGTERM handler does, in the thread that holds the start
        outcomes.append("closed")
        return start(*args, **kwargs)

    monkeypatch.setattr(anyio.from_thread, "start_blocking_portal", starting_then_signalled)

    def first_call() -> None:
        try:
            blocking.run(ANA, "s", "hello")
        except BaseException as exc:  # checked below, in the test's thread
            outcomes.append(exc)

    caller = threading.Thread(target=first_call, daemon=True)
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "close() waited for the thread that called it"
    closed, error = outcomes
    assert closed == "closed" and runtime.state.value == "closed"
    assert isinstance(error, RuntimeClosedError) and error.commit_state is CommitState.NOT_COMMITTED
    assert blocking._portal is None  # the loop started meanwhile was stopped, not left behind


@pytest.mark.parametrize("owned", [True, False])
def test_a_close_from_a_signal_handler_landing_while_a_call_holds_the_facades_lock_returns(
    monkeypatch: pytest.MonkeyPatch, owned: bool
) -> None:
    """A handler's ``close()`` where a signal may land, inside the lock a call takes to be admitted.

    Before, that lock was not re-entrant: the thread waited for itself for ever. Now the close runs
    and the call is refused typed. (Called where the signal would land, in a thread of the test's own.)
    """
    runtime = quick_closing_runtime()
    blocking = BlockingRuntime(runtime, owned=owned).start()
    refuse = blocking._refuse_closed
    outcomes: list[Any] = []

    def signalled_then_refuse() -> None:
        if not outcomes:
            blocking.close()  # what a SIGTERM handler does, in the thread holding the lock
            outcomes.append("closed")
        refuse()

    monkeypatch.setattr(blocking, "_refuse_closed", signalled_then_refuse)

    def a_call() -> None:
        try:
            blocking.run(ANA, "s", "hello")
        except BaseException as exc:  # checked below, in the test's thread
            outcomes.append(exc)

    caller = threading.Thread(target=a_call, daemon=True)
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "close() waited for the thread that called it"
    closed, error = outcomes
    assert closed == "closed"
    assert isinstance(error, RuntimeClosedError) and error.commit_state is CommitState.NOT_COMMITTED
    assert runtime.state.value == ("closed" if owned else "open")
    if not owned:
        anyio.run(runtime.aclose)
