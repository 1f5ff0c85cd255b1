"""The Agent's lifecycle: admission, close that cancels, drains and tears down, retries, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest
from _memory_support import FailingClose, HangingProvider, RecordingProvider, sqlite_store, texts

from agentium_harness import (
    Agent,
    AgentCloseError,
    AgentLifecycleError,
    AgentState,
    ExtractionConflictError,
    GroupRef,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    SourceKind,
)
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import Message, OpContext, Role, SessionKey

pytestmark = pytest.mark.anyio

#: The group an extraction reads (its facts cite it): any one will do here.
SOURCES = (GroupRef("agent", 0, "sha256:" + "0" * 64),)

ALICE = MemoryScope("tenant-a", "alice")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    s = sqlite_store(tmp_path)
    yield s
    await s.aclose()


class Extractor:
    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return [MemoryFact(scope, f"said: {m.content}") for m in messages if m.role is Role.USER]


class HangingExtractor:
    def __init__(self) -> None:
        self.stopped = anyio.Event()

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped.set()
        raise AssertionError("unreachable")


async def test_a_run_carries_memory_as_labeled_source_data_and_keeps_its_own_history(
    store: SQLiteMemoryStore,
) -> None:
    provider = RecordingProvider()
    manager = MemoryManager(store)
    agent = Agent(provider, manager, ALICE)
    await agent.remember(MemoryFact(ALICE, "Alice's cat is called Miso"))
    reply = await agent.run("what is my cat called?")
    assert reply.text == "ok 1" and agent.state is AgentState.OPEN
    request = provider.requests[0]
    assert [b.kind for b in request.sources] == [SourceKind.MEMORY]
    assert request.sources[0].content == "Alice's cat is called Miso"
    assert '<source-data kind="memory"' in request.sources[0].render()
    await agent.run("and my dog?")
    assert [m.content for m in provider.requests[1].history] == ["what is my cat called?", "ok 1"]
    assert [m.role for m in agent.history] == [Role.USER, Role.ASSISTANT] * 2
    await agent.close()
    assert agent.state is AgentState.CLOSED
    assert provider.closed == 0 and not store.closed  # borrowed: never closed


async def test_memory_over_the_budget_is_omitted_whole_and_reported(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store, limits=MemoryLimits(injection_tokens=60))
    agent = Agent(RecordingProvider(), manager, ALICE)
    await agent.remember(MemoryFact(ALICE, "short tea fact"))
    await agent.remember(MemoryFact(ALICE, "long tea fact " + "word " * 80))
    reply = await agent.run("tea?")
    assert [b.content for b in reply.memory] == ["short tea fact"]
    assert len(reply.omitted.over_budget) == 1
    assert sum(b.estimated_tokens for b in reply.memory) <= 60
    await agent.close()


async def test_admission_while_busy_closing_or_closed_is_refused(store: SQLiteMemoryStore) -> None:
    provider = HangingProvider()
    agent = Agent(provider, MemoryManager(store), ALICE, close_timeout_s=30.0)
    outcome: list[BaseException] = []

    async def first_run() -> None:
        try:
            await agent.run("hello")
        except AgentLifecycleError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_run)
        await provider.started.wait()
        assert agent.state is AgentState.BUSY
        with pytest.raises(AgentLifecycleError, match="busy"):
            await agent.run("second")
        await agent.close()
    # close() cancelled the active run and awaited it; its caller was told.
    assert len(outcome) == 1 and "closed while this run was active" in str(outcome[0])
    assert agent.history == ()
    with pytest.raises(AgentLifecycleError, match="closed"):
        await agent.run("after close")
    with pytest.raises(AgentLifecycleError, match="closed"):
        await agent.remember(MemoryFact(ALICE, "after close"))
    with pytest.raises(AgentLifecycleError, match="closed"):
        await agent.remember_with_result(MemoryFact(ALICE, "after close"))
    assert texts(await store.list_facts(ALICE, 10, OpContext.with_timeout(30.0))) == []


async def test_a_failed_teardown_leaves_the_agent_closing_and_close_can_be_retried(
    store: SQLiteMemoryStore,
) -> None:
    flaky = FailingClose(failures=2)
    borrowed = FailingClose(failures=0)
    agent = Agent(RecordingProvider(), MemoryManager(store), ALICE, owned=[flaky])
    assert borrowed.calls == 0
    for attempt in (1, 2):
        with pytest.raises(AgentCloseError, match=f"teardown attempt {attempt} failed") as info:
            await agent.close()
        assert info.value.drain is not None and info.value.drain.ok
        assert agent.state is AgentState.CLOSING
        with pytest.raises(AgentLifecycleError, match="closing"):
            await agent.run("no new runs while closing")
    await agent.close()
    assert agent.state is AgentState.CLOSED and flaky.calls == 3 and borrowed.calls == 0
    await agent.close()  # closed: a no-op
    assert flaky.calls == 3


async def test_an_owned_memory_manager_and_its_owned_store_are_closed(tmp_path: Path) -> None:
    owned_store = sqlite_store(tmp_path, "owned.db")
    agent = Agent(RecordingProvider(), MemoryManager(owned_store, owns_store=True), ALICE, owns_memory=True)
    await agent.run("hi")
    await agent.close()
    assert owned_store.closed and agent.memory.closed


async def test_two_concurrent_closes_share_one_attempt(store: SQLiteMemoryStore) -> None:
    flaky = FailingClose(failures=1)
    agent = Agent(RecordingProvider(), MemoryManager(store), ALICE, owned=[flaky])
    errors: list[BaseException] = []

    async def close() -> None:
        try:
            await agent.close()
        except AgentCloseError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(close)
        tg.start_soon(close)
    # One teardown attempt; both callers see its failure.
    assert flaky.calls == 1 and len(errors) == 2 and errors[0] is errors[1]
    async with anyio.create_task_group() as tg:
        tg.start_soon(close)
        tg.start_soon(close)
    assert flaky.calls == 2 and agent.state is AgentState.CLOSED and len(errors) == 2


async def test_close_drains_and_a_hanging_extraction_is_named_in_the_drain_error(
    store: SQLiteMemoryStore,
) -> None:
    extractor = HangingExtractor()
    manager = MemoryManager(store, extractor=extractor)
    agent = Agent(RecordingProvider(), manager, ALICE, drain_timeout_s=0.2)
    reply = await agent.run("remember this please")
    assert reply.extraction is not None and reply.extraction in manager.running()
    with pytest.raises(MemoryDrainError, match="extraction") as info:
        await agent.close()
    assert info.value.result.cancelled == (reply.extraction,)
    assert extractor.stopped.is_set() and manager.running() == ()
    # The work stopped and teardown succeeded: the agent is closed, and says so once.
    assert agent.state is AgentState.CLOSED
    await agent.close()


async def test_extraction_writes_after_each_run_and_close_drains_it(store: SQLiteMemoryStore) -> None:
    agent = Agent(RecordingProvider(), MemoryManager(store, extractor=Extractor()), ALICE)
    await agent.run("I live in Leeds")
    await agent.close()
    assert agent.last_drain is not None and len(agent.last_drain.completed) == 1
    assert texts(await store.list_facts(ALICE, 10, OpContext.with_timeout(30.0))) == ["said: I live in Leeds"]


async def test_cancelling_the_task_calling_close_leaves_no_task_running(store: SQLiteMemoryStore) -> None:
    provider = HangingProvider()
    extractor = HangingExtractor()
    manager = MemoryManager(store, extractor=extractor)
    agent = Agent(provider, manager, ALICE, drain_timeout_s=0.3, extraction=True)
    manager.extract_in_background(
        ALICE, [Message(Role.USER, "x")], "extraction started by hand", sources=SOURCES
    )
    run_errors: list[BaseException] = []

    async def run() -> None:
        try:
            await agent.run("hang")
        except AgentLifecycleError as exc:
            run_errors.append(exc)

    before = _tasks()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.started.wait()
        outcome: list[str] = []
        with anyio.CancelScope() as closer:
            # Cancel the closing task while close() is mid-drain.
            tg.start_soon(_cancel_soon, closer, 0.05)
            try:
                await agent.close()
                outcome.append("returned")
            except MemoryDrainError:
                outcome.append("drain error")
        # The caller saw its cancellation (not a result), after close() finished its bounded work.
        assert closer.cancelled_caught and outcome == []
    assert agent.last_drain is not None
    assert "extraction started by hand" in agent.last_drain.cancelled
    assert run_errors and extractor.stopped.is_set()
    assert manager.running() == ()
    assert agent.state is AgentState.CLOSED
    # Checked, not assumed: every task this test made has finished.
    assert _tasks() <= before


async def _cancel_soon(scope: anyio.CancelScope, delay: float) -> None:
    await anyio.sleep(delay)
    scope.cancel()


def _tasks() -> set[object]:
    """The event loop's live tasks other than the current one (asyncio), or the trio task tree."""
    try:
        loop_tasks = asyncio.all_tasks()
    except RuntimeError:  # not asyncio: count trio's live tasks under the root and system nursery
        import trio

        root = trio.lowlevel.current_root_task()
        found: set[object] = set()
        stack = [root]
        while stack:
            task = stack.pop()
            for nursery in task.child_nurseries:
                for child in nursery.child_tasks:
                    found.add(child)
                    stack.append(child)
        found.discard(trio.lowlevel.current_task())
        return found
    return {t for t in loop_tasks if t is not asyncio.current_task() and not t.done()}


def test_agent_extraction_and_harness_owned_history_cannot_both_be_on(tmp_path: Path) -> None:
    manager = MemoryManager(sqlite_store(tmp_path), extractor=Extractor())
    with pytest.raises(ExtractionConflictError, match="extracted twice"):
        Agent(RecordingProvider(), manager, ALICE, harness_owns_history=True)
    # Turning the agent's extraction off is the way to let the harness own the history.
    Agent(RecordingProvider(), manager, ALICE, harness_owns_history=True, extraction=False, session="s1")
    # A session the harness claimed cannot take an extracting agent, and vice versa.
    manager.claim_history(SessionKey("tenant-a", "alice", "s2"), "harness")
    with pytest.raises(ExtractionConflictError, match="s2"):
        Agent(RecordingProvider(), manager, ALICE, session="s2")
    Agent(RecordingProvider(), manager, ALICE, session="s3")
    with pytest.raises(ExtractionConflictError):
        manager.claim_history(SessionKey("tenant-a", "alice", "s3"), "harness")


def test_bad_construction_is_refused(tmp_path: Path) -> None:
    manager = MemoryManager(sqlite_store(tmp_path))
    with pytest.raises(InvalidArgumentError, match="MemoryManager"):
        Agent(RecordingProvider(), object(), ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="MemoryScope"):
        Agent(RecordingProvider(), manager, ("tenant-a", "alice"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="extractor"):
        Agent(RecordingProvider(), manager, ALICE, extraction=True)
    # As create_harness_runtime refuses it: taken, it reached the provider, which cannot encode it.
    for bad in ("be brief\ud800", "\udcff"):
        with pytest.raises(InvalidArgumentError, match="lone surrogate"):
            Agent(RecordingProvider(), manager, ALICE, instructions=bad)
    Agent(RecordingProvider(), manager, ALICE, instructions="be brief\ttab and\nnewline ✓")


async def test_an_empty_input_is_refused_and_the_agent_stays_open(store: SQLiteMemoryStore) -> None:
    agent = Agent(RecordingProvider(), MemoryManager(store), ALICE)
    with pytest.raises(InvalidArgumentError):
        await agent.run("   ")
    assert agent.state is AgentState.OPEN and agent.history == ()
    await agent.close()


class _LyingInt(int):
    """An int whose own comparisons say it is within any bound."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize(
    "bad",
    [
        {"extraction": "no"},  # truthy: it turned extraction on against the host's word
        {"extraction": 0},
        {"owns_memory": "yes"},
        {"harness_owns_history": 1},
        {"instructions": 5},
        {"owned": 5},  # a bare TypeError, raised after the session was claimed (the claim leaked)
        {"owned": "store"},
        {"owned": [5]},  # kept, and closed nothing: the host's resource was never closed
        {"owned": [object()]},
        {"max_history_messages": _LyingInt(-5)},  # its own comparisons said it was in bounds
    ],
)
async def test_a_bad_agent_argument_is_typed_and_claims_nothing(
    store: SQLiteMemoryStore, bad: dict[str, object]
) -> None:
    manager = MemoryManager(store, extractor=Extractor())
    with pytest.raises(InvalidArgumentError):
        Agent(RecordingProvider(), manager, ALICE, **bad)  # type: ignore[arg-type]
    # The session is free: the harness may claim it (no agent holds a claim it never released).
    manager.claim_history(SessionKey("tenant-a", "alice", "agent"), "harness")


@pytest.mark.parametrize("keep", [0, 3])
async def test_the_agent_keeps_only_the_history_it_sends(store: SQLiteMemoryStore, keep: int) -> None:
    # An agent serving a tenant for weeks must not keep every message: only the last
    # max_history_messages are ever sent again, and only those are kept.
    provider = RecordingProvider()
    agent = Agent(provider, MemoryManager(store), ALICE, max_history_messages=keep)
    for i in range(300):
        await agent.run(f"question {i}")
        assert len(agent.history) <= keep
    expected = ["ok 299", "question 299", "ok 300"][3 - keep :] if keep else []
    assert [m.content for m in agent.history] == expected
    await agent.run("one more")
    assert [m.content for m in provider.requests[-1].history] == expected
    await agent.close()


def test_a_token_count_is_read_as_a_plain_int_within_bounds() -> None:
    from agentium_harness._engine.memory.agent import _count
    from agentium_harness._validators import MAX_COUNT

    assert _count(_LyingInt(-5)) is None and _count(_LyingInt(MAX_COUNT + 1)) is None
    assert _count(-1) is None and _count(True) is None and _count(1.0) is None
    counted = _count(_LyingInt(7))
    assert counted == 7 and type(counted) is int
