"""A memory manager shared by two runtimes: closing (or draining) one leaves the other's work alone.

A host-built ``MemoryManager`` given to two tenants' runtimes tracks both
runtimes' background summary updates and the extractions started through
it. ``runtime.aclose()`` and ``runtime.drain()`` drained the manager's whole
work tracker: closing tenant A's runtime waited ``settle_timeout_s`` for
tenant B's in-flight work, then *cancelled* it, and took B's reports with it
(B's own drain then saw nothing). Now, while another runtime given the
manager is open, a runtime's close or drain covers only its own work: its
summary updates and the work started through the manager inside its own
operations. The last one open (or the host's ``manager.drain()``) covers the
rest, as a single runtime's close always did.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _slow_provider import SlowProvider

from agentium_harness import (
    Agent,
    GroupRef,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    ResidentLimits,
    RuntimeLimits,
    SummaryLimits,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.lifecycle import LifecycleState
from agentium_harness._history import Message, Role
from agentium_harness._ports._base import OpContext
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import runtime_span

pytestmark = pytest.mark.anyio

DEADLINE_S = 30.0
ANA, BO = VerifiedIdentity("acme", "ana", "sso"), VerifiedIdentity("globex", "bo", "sso")
BO_SCOPE = MemoryScope("globex", "bo")
SAID = (Message(Role.USER, "please remember the boiler is red"), Message(Role.ASSISTANT, "Noted."))
SOURCES = (GroupRef("s1", 0, "sha256:" + "0" * 64),)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Gate:
    """Work that waits for ``release``; says whether it started, was cancelled, finished."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = False
        self.finished = False

    async def hold(self) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except BaseException:
            self.cancelled = True
            raise
        self.finished = True


class GatedSummarizer(ExtractiveSummarizer):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        await self.gate.hold()
        return await super().summarize(previous, groups, ctx)


class GatedExtractor:
    def __init__(self) -> None:
        self.gate = Gate()

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        await self.gate.hold()
        return [MemoryFact(scope, "the boiler is red")]


def _manager(extractor: Any = None) -> MemoryManager:
    return MemoryManager(InMemoryMemoryStore(), extractor=extractor)


def _runtime(manager: MemoryManager, summarizer: Any = None) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=manager,
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=True) if summarizer is not None else None,
        # A short settle: a runtime's close cancels what it drains past it (its own work only).
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1), settle_timeout_s=0.2),
    )


def _patient_runtime(manager: MemoryManager) -> HarnessRuntime:
    """Runtime A: a long settle, so its close waits for its own extraction rather than cancel it."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=manager,
        limits=RuntimeLimits(settle_timeout_s=25.0),
    )


async def _extraction_of_a_started(
    a: HarnessRuntime, manager: MemoryManager, extractor: GatedExtractor
) -> None:
    """An extraction started in A's operation (A's work), held by ``extractor``'s gate once started."""
    with runtime_span(a, "host.a.turn"):
        manager.extract_in_background(BO_SCOPE, SAID, "acme extraction", sources=SOURCES)
    await extractor.gate.started.wait()


async def _update_in_flight(rt: HarnessRuntime, who: VerifiedIdentity, summarizer: GatedSummarizer) -> None:
    """Two turns on one session: the second evicts a group and starts a background summary update."""
    for text in ("one", "two"):
        await rt.run(who, "s1", text)
    await summarizer.gate.started.wait()


async def test_closing_one_runtime_leaves_the_other_runtimes_summary_update_running() -> None:
    manager = _manager()
    sa, sb = GatedSummarizer(), GatedSummarizer()
    a, b = _runtime(manager, sa), _runtime(manager, sb)
    with anyio.fail_after(DEADLINE_S):
        await _update_in_flight(a, ANA, sa)
        await _update_in_flight(b, BO, sb)
        await a.aclose()  # its own update outlasts its settle: cancelled (its own work)
        assert sa.gate.cancelled
        assert not sb.gate.cancelled, "A's close cancelled B's summary update"
        assert any(n.startswith("summary update globex/") for n in manager.running())
        sb.gate.release.set()
        result = await b.drain(DEADLINE_S)  # B's own drain sees its update, completed
    assert [i.name.split("/")[0] for i in result.items] == ["summary update globex"]
    assert result.ok and sb.gate.finished
    await b.aclose()


async def test_draining_one_runtime_leaves_the_other_runtimes_work_and_reports() -> None:
    manager = _manager()
    sa, sb = GatedSummarizer(), GatedSummarizer()
    a, b = _runtime(manager, sa), _runtime(manager, sb)
    with anyio.fail_after(DEADLINE_S):
        await _update_in_flight(a, ANA, sa)
        await _update_in_flight(b, BO, sb)
        sa.gate.release.set()
        result = await a.drain(0.2)  # B's update outlasts it: not A's to wait for or cancel
        assert [i.name.split("/")[0] for i in result.items] == ["summary update acme"]
        assert not sb.gate.cancelled, "A's drain cancelled B's summary update"
        sb.gate.release.set()
        again = await b.drain(DEADLINE_S)
    assert [i.name.split("/")[0] for i in again.items] == ["summary update globex"] and again.ok
    await a.aclose()
    await b.aclose()


async def test_extraction_started_in_a_runtimes_operation_is_that_runtimes_work() -> None:
    extractor = GatedExtractor()
    manager = _manager(extractor)
    a, b = _runtime(manager), _runtime(manager)
    with anyio.fail_after(DEADLINE_S):
        with runtime_span(b, "host.b.turn"):  # B's operation (a tool or hook of B's would be the same)
            manager.extract_in_background(BO_SCOPE, SAID, "bo extraction", sources=SOURCES)
        await extractor.gate.started.wait()
        await a.aclose()
        assert not extractor.gate.cancelled, "A's close cancelled B's extraction"
        assert manager.running() == ("bo extraction",)
        extractor.gate.release.set()
        result = await b.drain(DEADLINE_S)
    assert result.completed == ("bo extraction",)
    assert [f.fact.text for f in await manager.list(BO_SCOPE)] == ["the boiler is red"]
    await b.aclose()


async def test_the_last_runtime_open_drains_the_managers_other_work() -> None:
    # The host's own extraction belongs to no runtime: A's close (B still open) leaves it; the last
    # runtime's close drains it (waits its settle, then cancels it), as one runtime's close always did.
    extractor = GatedExtractor()
    manager = _manager(extractor)
    a, b = _runtime(manager), _runtime(manager)
    with anyio.fail_after(DEADLINE_S):
        manager.extract_in_background(BO_SCOPE, SAID, "host extraction", sources=SOURCES)
        await extractor.gate.started.wait()
        await a.aclose()
        assert not extractor.gate.cancelled and manager.running() == ("host extraction",)
        await b.aclose()
    assert extractor.gate.cancelled and manager.running() == ()
    assert await manager.list(BO_SCOPE) == ()


async def test_closing_an_agent_leaves_the_runtimes_work_on_its_manager() -> None:
    # An Agent on a manager a runtime holds (runtime.memory) drains its own extractions on close(),
    # not the runtime's summary updates: it used to drain (and cancel) the whole manager's work.
    extractor = GatedExtractor()
    manager = _manager(extractor)
    sb = GatedSummarizer()
    b = _runtime(manager, sb)
    agent = Agent(SlowProvider(), manager, BO_SCOPE, session="agent-s", drain_timeout_s=0.2)
    with anyio.fail_after(DEADLINE_S):
        await _update_in_flight(b, BO, sb)
        await agent.run("the boiler is red")
        await extractor.gate.started.wait()
        with pytest.raises(MemoryDrainError) as caught:
            await agent.close()  # its own extraction outlasts its drain: cancelled, and said so
        assert [i.name.split(" ")[0] for i in caught.value.result.items] == ["extraction"]
        assert extractor.gate.cancelled
        assert not sb.gate.cancelled, "the agent's close cancelled the runtime's summary update"
        sb.gate.release.set()
        result = await b.drain(DEADLINE_S)
    assert [i.name.split("/")[0] for i in result.items] == ["summary update globex"] and result.ok
    await b.aclose()


async def test_two_runtimes_closing_at_once_never_cancel_each_others_work() -> None:
    # A's close is under way (its long settle waits for its extraction) when B, the last runtime
    # open, closes with a short settle: B's close covers the manager's unowned work, never the
    # work A's own close is draining (it used to cancel A's extraction at B's 0.2 s).
    extractor = GatedExtractor()
    manager = _manager(extractor)
    a = _patient_runtime(manager)
    b = _runtime(manager)
    closed_a = anyio.Event()

    async def close_a() -> None:
        await a.aclose()
        closed_a.set()

    with anyio.fail_after(DEADLINE_S):
        await _extraction_of_a_started(a, manager, extractor)
        async with anyio.create_task_group() as tg:
            tg.start_soon(close_a)
            while a.state is not LifecycleState.CLOSING:
                await anyio.lowlevel.checkpoint()
            await b.aclose()  # the last runtime open: past its settle, it cancels what it covers
            assert not extractor.gate.cancelled, "B's close cancelled the extraction A's close drains"
            assert not closed_a.is_set()
            extractor.gate.release.set()
    assert extractor.gate.finished and a.state is LifecycleState.CLOSED
    assert [f.fact.text for f in await manager.list(BO_SCOPE)] == ["the boiler is red"]


async def test_an_agents_close_never_cancels_the_work_of_a_runtime_closing_now() -> None:
    # No runtime open, but A's close is under way: an Agent's close drains the rest of the manager,
    # not A's extraction (it used to cancel it at the agent's 0.2 s drain timeout).
    extractor = GatedExtractor()
    manager = _manager(extractor)
    a = _patient_runtime(manager)
    agent = Agent(SlowProvider(), manager, BO_SCOPE, session="agent-s", drain_timeout_s=0.2)
    with anyio.fail_after(DEADLINE_S):
        await _extraction_of_a_started(a, manager, extractor)
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.aclose)
            while a.state is not LifecycleState.CLOSING:
                await anyio.lowlevel.checkpoint()
            await agent.close()
            assert agent.last_drain is not None and agent.last_drain.items == ()
            assert not extractor.gate.cancelled, "the agent's close cancelled A's extraction"
            extractor.gate.release.set()
    assert extractor.gate.finished and a.state is LifecycleState.CLOSED


class _PausedTelemetry(Telemetry):
    """Telemetry whose resolve() (called once by the runtime's constructor) waits for ``go``."""

    entered = threading.Event()
    go = threading.Event()

    def resolve(self) -> Any:
        type(self).entered.set()
        type(self).go.wait(DEADLINE_S)
        return super().resolve()


async def test_a_runtime_being_built_on_another_thread_does_not_break_the_others_drain() -> None:
    # A host builds tenant C's runtime on a worker thread while tenant B's runtime drains and an
    # Agent reads its deadline: C was remembered as given the manager before it had limits or
    # state, so B's drain and the agent failed with AttributeError.
    manager = _manager()
    b = _runtime(manager)
    agent = Agent(SlowProvider(), manager, BO_SCOPE, session="agent-s")
    _PausedTelemetry.entered.clear()
    _PausedTelemetry.go.clear()
    built: list[HarnessRuntime] = []

    def build() -> None:
        built.append(
            create_harness_runtime(
                provider=ScriptedProvider(replies=["ok"], cycle=True),
                archive=InMemoryArchive(),
                session_store=InMemorySessionStore(),
                memory=manager,
                telemetry=_PausedTelemetry(),
            )
        )

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, build)
            assert await anyio.to_thread.run_sync(_PausedTelemetry.entered.wait, DEADLINE_S)
            try:
                assert agent.model_timeout_s > 0  # read over the runtimes given the manager
                assert (await b.drain(DEADLINE_S)).ok
            finally:
                _PausedTelemetry.go.set()
        [c] = built
        await c.aclose()
        await b.aclose()
    await agent.close()
