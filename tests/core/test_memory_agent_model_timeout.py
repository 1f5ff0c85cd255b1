"""An ``Agent``'s model call runs under a model deadline, not a store deadline.

Before, it ran under the agent's own ``op_timeout_s`` (60 s by default),
outside the runtime's limits: a runtime whose ``model_timeout_s`` let a slow
model take a minute still had it cut off by an agent on ``runtime.memory``
with a shorter ``op_timeout_s``, and a runtime with a short model deadline
still let the agent wait 60 s on a hung model. Now the deadline is the
manager's ``MemoryLimits.model_timeout_s``, else the runtime's
``model_timeout_s`` (the manager belongs to it), else the agent's
``op_timeout_s`` — and a model blocked in a worker thread is walked away
from at it.

Only the call a test wants to time out gets a short deadline; what must
succeed gets 30 s.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _slow_provider import SlowProvider

from agentium_harness import (
    Agent,
    ConfigError,
    InvalidArgumentError,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperationTimeoutError,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness._config.runtime import load_runtime
from agentium_harness._history import Message, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import ModelProvider, ModelRequest, ModelResponse, ProviderCapabilities
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")
#: The deadline of everything a test expects to succeed.
ROOMY_S = 30.0
#: Scheduling slack on a loaded two-core machine: far under what a bound left unenforced would take.
SLACK_S = 10.0
#: How long a blocked worker thread blocks at most (the test releases it earlier); past SLACK_S.
BLOCK_S = 20.0


class BlockingClientModel(ModelProvider):
    """A model over a blocking client: its call blocks a worker thread, which cancellation cannot stop."""

    capabilities = ProviderCapabilities()

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        await anyio.to_thread.run_sync(self.gate.wait, BLOCK_S)
        return ModelResponse(Message(Role.ASSISTANT, "late answer"))


@pytest.fixture
def thread_gate() -> Iterator[threading.Event]:
    """Released at the end of the test so the blocked thread returns (late) instead of waiting BLOCK_S."""
    event = threading.Event()
    yield event
    event.set()


def manager(model_timeout_s: float | None = None) -> MemoryManager:
    limits = MemoryLimits(op_timeout_s=ROOMY_S, drain_timeout_s=ROOMY_S, model_timeout_s=model_timeout_s)
    return MemoryManager(InMemoryMemoryStore(), limits=limits)


def runtime(limits: RuntimeLimits, memory: MemoryManager | None = None) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory if memory is not None else manager(),
        limits=limits,
    )


async def times_out(agent: Agent, deadline: float) -> OperationTimeoutError:
    """Run ``agent`` on a model that does not answer: the call must end at ``deadline``, nothing kept."""
    started = time.monotonic()
    with anyio.fail_after(SLACK_S), pytest.raises(OperationTimeoutError) as caught:
        await agent.run("when do I deploy?")
    assert time.monotonic() - started < SLACK_S
    error = caught.value
    assert error.operation == "provider complete" and error.timeout_s == deadline
    assert agent.history == () and agent.state.value == "open"  # nothing of the run was kept
    return error


# -- a slow model is not cut off by a short deadline meant for something else -------------------


async def test_a_slow_model_completes_under_the_memory_model_deadline() -> None:
    agent = Agent(SlowProvider(delay=0.5), manager(model_timeout_s=ROOMY_S), ALICE, op_timeout_s=0.2)
    reply = await agent.run("when do I deploy?")
    assert reply.text == "answer" and len(agent.history) == 2
    assert agent.model_timeout_s == ROOMY_S
    await agent.close()


async def test_a_slow_model_completes_under_the_runtimes_model_deadline() -> None:
    rt = runtime(RuntimeLimits(op_timeout_s=ROOMY_S, model_timeout_s=ROOMY_S))
    agent = Agent(SlowProvider(delay=0.5), rt.memory, ALICE, op_timeout_s=0.2)
    reply = await agent.run("when do I deploy?")
    assert reply.text == "answer"
    assert agent.model_timeout_s == ROOMY_S
    await agent.close()
    await rt.aclose()


# -- a hung model is still bounded, by the model deadline -----------------------------------------


async def test_a_hung_model_times_out_at_the_runtimes_model_deadline() -> None:
    gate = anyio.Event()
    rt = runtime(RuntimeLimits(op_timeout_s=ROOMY_S, model_timeout_s=0.3))
    model = SlowProvider(gate=gate)
    agent = Agent(model, rt.memory, ALICE)  # op_timeout_s 60 s: not what bounds the model now
    try:
        await times_out(agent, 0.3)
    finally:
        gate.set()
    assert model.contexts[0].signal.cancelled
    await agent.close()
    await rt.aclose()


async def test_the_memory_model_deadline_comes_before_the_runtimes() -> None:
    gate = anyio.Event()
    rt = runtime(RuntimeLimits(op_timeout_s=ROOMY_S, model_timeout_s=ROOMY_S), manager(model_timeout_s=0.3))
    agent = Agent(SlowProvider(gate=gate), rt.memory, ALICE, op_timeout_s=ROOMY_S)
    try:
        await times_out(agent, 0.3)
    finally:
        gate.set()
    await agent.close()
    await rt.aclose()


async def test_a_model_blocked_in_a_worker_thread_is_walked_away_from(thread_gate: threading.Event) -> None:
    rt = runtime(RuntimeLimits(op_timeout_s=ROOMY_S, model_timeout_s=0.3))
    agent = Agent(BlockingClientModel(thread_gate), rt.memory, ALICE, op_timeout_s=ROOMY_S)
    error = await times_out(agent, 0.3)
    assert error.abandoned  # the thread did not stop when cancelled: the engine walked away from it
    thread_gate.set()
    await agent.close()
    await rt.aclose()


# -- which deadline applies -------------------------------------------------------------------------


async def test_the_deadline_is_memorys_then_the_runtimes_then_the_agents_own() -> None:
    alone = manager()
    assert Agent(SlowProvider(), alone, ALICE).model_timeout_s == 60.0  # the agent's op_timeout_s default
    assert Agent(SlowProvider(), alone, ALICE, op_timeout_s=45).model_timeout_s == 45
    # Given to a runtime later: read at each call, so the agent built before sees it.
    early = Agent(SlowProvider(), alone, ALICE, session="early", extraction=False)
    unset = runtime(RuntimeLimits(op_timeout_s=5), alone)  # no model deadline of its own: the agent's
    assert early.model_timeout_s == 60.0
    shared = manager()
    rt = runtime(RuntimeLimits(model_timeout_s=90), shared)
    assert Agent(SlowProvider(), shared, ALICE, op_timeout_s=45).model_timeout_s == 90
    # A second runtime of another deadline: outside either's operation, neither's is picked (not the
    # first's, as it was): the agent's own (test_shared_manager_model_timeout.py: inside, the operation's).
    other = runtime(RuntimeLimits(model_timeout_s=7), shared)
    assert Agent(SlowProvider(), shared, ALICE, session="s2").model_timeout_s == 60.0
    own = manager(model_timeout_s=120)
    rt_own = runtime(RuntimeLimits(model_timeout_s=90), own)
    assert Agent(SlowProvider(), own, ALICE).model_timeout_s == 120
    for each in (unset, rt, other, rt_own):
        await each.aclose()


def test_memory_model_timeout_defaults_to_none() -> None:
    assert MemoryLimits().model_timeout_s is None
    assert MemoryLimits(model_timeout_s=90).model_timeout_s == 90
    # Positional construction of the older fields keeps its meaning.
    assert MemoryLimits(100, 4, 256, 5.0, 6.0, 3).op_timeout_s == 5.0


@pytest.mark.parametrize("bad", [True, False, math.nan, math.inf, -1.0, 0, 0.0, 1e308, 3601, "30"])
def test_a_bad_memory_model_timeout_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="model_timeout_s"):
        MemoryLimits(model_timeout_s=bad)  # type: ignore[arg-type]


# -- from a config file -----------------------------------------------------------------------------

CONFIG = """
[provider]
plugin = "scripted"

[archive]
plugin = "memory"

[session_store]
plugin = "memory"

[memory]
plugin = "memory"

[runtime]
op_timeout_s = 30
"""


async def test_the_configs_model_timeout_bounds_an_agent_on_runtime_memory(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG + "model_timeout_s = 0.3\n", "utf-8")
    rt = load_runtime(path, environ={})
    gate = anyio.Event()
    agent = Agent(SlowProvider(gate=gate), rt.memory, ALICE)
    try:
        await times_out(agent, 0.3)
    finally:
        gate.set()
    await agent.close()
    await rt.aclose()


@pytest.mark.parametrize("value", ["0", "-1", "1e308", "nan", "true", '"soon"'])
def test_a_bad_model_timeout_in_a_memory_config_points_at_its_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG + f"model_timeout_s = {value}\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_runtime(path, environ={})
    assert [issue.path for issue in info.value.issues] == ["$.runtime.model_timeout_s"]
