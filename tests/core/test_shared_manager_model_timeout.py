"""A memory manager shared by two runtimes: a model call in one's operation has that one's deadline.

The manager kept the model deadline of the *first* runtime it was given
(``adopt_runtime_limits``): tenant B's runtime, built second with a shorter
(or longer) ``model_timeout_s``, had its operations' agent and extractor
calls run under tenant A's. Now a call made inside a runtime's operation
(its turn, a ``runtime_span`` block of its, a tool or hook of its; the
extraction such an operation starts) runs under that runtime's
``model_timeout_s``; a host's own call, outside any operation, under the
manager's ``MemoryLimits.model_timeout_s``, else the runtimes' when they all
agree, else the caller's ``op_timeout_s``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _slow_provider import SlowProvider

from agentium_harness import (
    Agent,
    GroupRef,
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperationTimeoutError,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness._history import Message, Role
from agentium_harness._ports._base import OpContext
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import runtime_span

pytestmark = pytest.mark.anyio

DEADLINE_S = 30.0
BO = MemoryScope("globex", "bo")
SAID = (Message(Role.USER, "please remember the boiler is red"), Message(Role.ASSISTANT, "Noted."))
SOURCES = (GroupRef("s1", 0, "sha256:" + "0" * 64),)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class DeadlineExtractor:
    """Proposes nothing; notes how far off its call's deadline was when it was called."""

    def __init__(self) -> None:
        self.left: list[float] = []

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        assert ctx.deadline is not None
        self.left.append(ctx.deadline - time.monotonic())
        return []


def _manager(
    extractor: Any = None, op_timeout_s: float = 5.0, model_timeout_s: float | None = None
) -> MemoryManager:
    limits = MemoryLimits(
        op_timeout_s=op_timeout_s, drain_timeout_s=DEADLINE_S, model_timeout_s=model_timeout_s
    )
    return MemoryManager(InMemoryMemoryStore(), extractor=extractor, limits=limits)


def _runtime(manager: MemoryManager, model_timeout_s: float | None) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=manager,
        limits=RuntimeLimits(op_timeout_s=DEADLINE_S, model_timeout_s=model_timeout_s),
    )


async def test_an_agent_in_a_runtimes_operation_gets_that_runtimes_model_deadline() -> None:
    shared = _manager()
    a, b = _runtime(shared, 7), _runtime(shared, 90)
    agent = Agent(SlowProvider(), shared, BO, op_timeout_s=45, extraction=False)
    with runtime_span(b, "host.b.turn"):
        assert agent.model_timeout_s == 90, "B's operation ran under the first runtime's model deadline"
    with runtime_span(a, "host.a.turn"):
        assert agent.model_timeout_s == 7
    # Outside either's operation, runtimes of different deadlines: none of theirs, the agent's own.
    assert agent.model_timeout_s == 45
    await a.aclose()
    await b.aclose()


async def test_a_hung_model_in_the_second_runtimes_operation_times_out_at_its_deadline() -> None:
    shared = _manager()
    a, b = _runtime(shared, DEADLINE_S), _runtime(shared, 0.3)
    agent = Agent(SlowProvider(gate=anyio.Event()), shared, BO, extraction=False)
    # fail_after well under A's 30 s: the first runtime's deadline applying would fail the test here.
    with anyio.fail_after(10), runtime_span(b, "host.b.turn"), pytest.raises(OperationTimeoutError) as caught:
        await agent.run("when do I deploy?")
    assert caught.value.operation == "provider complete" and caught.value.timeout_s == 0.3
    assert agent.history == ()
    await a.aclose()
    await b.aclose()


async def test_extraction_started_in_a_runtimes_operation_keeps_that_runtimes_deadline() -> None:
    extractor = DeadlineExtractor()
    shared = _manager(extractor, op_timeout_s=5.0)
    a, b = _runtime(shared, 0.5), _runtime(shared, DEADLINE_S)
    with anyio.fail_after(DEADLINE_S):
        with runtime_span(b, "host.b.turn"):
            shared.extract_in_background(BO, SAID, "in b", sources=SOURCES)
        assert (await shared.drain(DEADLINE_S)).completed == ("in b",)
        with runtime_span(a, "host.a.turn"):
            shared.extract_in_background(BO, SAID, "in a", sources=SOURCES)
        assert (await shared.drain(DEADLINE_S)).completed == ("in a",)
        shared.extract_in_background(BO, SAID, "host's", sources=SOURCES)  # in no runtime's operation
        assert (await shared.drain(DEADLINE_S)).completed == ("host's",)
    in_b, in_a, hosts = extractor.left
    assert in_b > 5.0, "B's extraction ran under the first runtime's 0.5 s deadline"
    assert in_a <= 0.5
    assert 0.5 < hosts <= 5.0  # the runtimes disagree: the manager's op_timeout_s
    await a.aclose()
    await b.aclose()


async def test_outside_any_operation_the_managers_own_then_the_runtimes_agreed_deadline() -> None:
    agreed = _manager()
    a, b = _runtime(agreed, 90), _runtime(agreed, 90)
    assert Agent(SlowProvider(), agreed, BO, extraction=False).model_timeout_s == 90  # one deadline: theirs
    own = _manager(model_timeout_s=120)
    c = _runtime(own, 90)
    agent = Agent(SlowProvider(), own, BO, extraction=False)
    with runtime_span(c, "host.c.turn"):
        assert agent.model_timeout_s == 120  # memory's own word first, in an operation too
    assert agent.model_timeout_s == 120
    for rt in (a, b, c):
        await rt.aclose()
