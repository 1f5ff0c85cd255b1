"""AgentiumSession across an SDK turn whose session is erased while the model runs.

Per SDK turn the session is read (``get_items``: the model's input), the
model runs, and the turn's items are written (``add_items``). An erasure of
the session, its user or its tenant that begins and finishes while the
model runs must not leave the turn's items (the user's message, and the
answer made from the erased history) in the freshly erased id: the
``add_items`` follows the ``get_items`` and is refused. Two runtimes over
the same stores (one SQLite file, or the same in-memory stores) stand for
the agent host and the operator's process.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from sdk_sessions import ANA, build_runtime

from agentium_harness import (
    CommitState,
    ErasedSinceReadError,
    EraseTarget,
    HarnessRuntime,
    OperatorAttestation,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_openai_agents import AgentiumSession

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")
ZED = VerifiedIdentity("globex", "zed", "sso")
GLOBEX_OPERATOR = OperatorAttestation(VerifiedIdentity("globex", "ops-1", "sso"), statement="DSR-2")
set_tracing_disabled(True)


@pytest.fixture(params=["asyncio", "trio"])  # a session's own calls run on either
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sqlite", "memory"])
async def runtimes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Any, Any]]:
    """The host's runtime, the operator's over the same stores, and the host's session store."""
    if request.param == "sqlite":
        host, other = build_runtime(tmp_path / "agentium.db"), build_runtime(tmp_path / "agentium.db")
        store = host.session_store
    else:
        archive, store = InMemoryArchive(), InMemorySessionStore()
        host, other = (
            create_harness_runtime(
                provider=ScriptedProvider(replies=["(not called)"]), archive=archive, session_store=store
            )
            for _ in range(2)
        )
    try:
        yield host, other, store
    finally:
        await host.aclose()
        await other.aclose()


def _target(level: str) -> EraseTarget:
    if level == "session":
        return EraseTarget.session("acme", "ana", "chat-1")
    return EraseTarget.user("acme", "ana") if level == "user" else EraseTarget.tenant("acme")


class ErasingModel(ScriptedModel):
    """A scripted model whose next call first runs ``meanwhile`` (the operator's erasure, say)."""

    meanwhile: Callable[[], Awaitable[None]] | None = None

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await super().get_response(*args, **kwargs)


async def _stored(store: Any) -> object:
    return await store.load(SessionKey.of(ANA, "chat-1"), OpContext())


@pytest.mark.parametrize("level", ["session", "user", "tenant"])
async def test_add_items_after_an_erasure_since_get_items_is_refused(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any], level: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, other, store = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": "my secret is qzfirstq"}])
    assert [i["content"] for i in await session.get_items()] == ["my secret is qzfirstq"]
    await other.erase(_target(level), reason="dsr", attestation=OPERATOR)  # while the model runs
    caplog.set_level(logging.WARNING)
    turn = [
        {"role": "user", "content": "what is my secret?"},
        {"role": "assistant", "content": "it is qzfirstq"},
    ]
    with pytest.raises(ErasedSinceReadError) as caught:
        await session.add_items(turn)  # type: ignore[arg-type]
    assert isinstance(caught.value, SessionConflictError)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert "call get_items again" in str(caught.value)
    assert await _stored(store) is None  # nothing written into the erased id
    assert await session.get_items() == []
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "not committed" in r.getMessage()]
    assert warned
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log
    # The read was forgotten when refused; read again, the session writes as a new one.
    await session.add_items([{"role": "user", "content": "a new start"}])
    assert [i["content"] for i in await session.get_items()] == ["a new start"]


async def test_a_refused_add_items_forgets_the_read_without_reading_again(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    """No retry forever: the stale read is dropped, so the next add_items (no read since) writes."""
    host, other, store = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": "qzfirstq"}])
    await session.get_items()
    await other.erase(_target("session"), reason="dsr", attestation=OPERATOR)
    with pytest.raises(ErasedSinceReadError):
        await session.add_items([{"role": "user", "content": "made from the read"}])
    assert await _stored(store) is None
    await session.add_items([{"role": "user", "content": "not made from any read"}])
    assert [i["content"] for i in await session.get_items()] == ["not made from any read"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner runs on asyncio only
@pytest.mark.parametrize("level", ["session", "user", "tenant"])
async def test_a_runner_turn_erased_while_the_model_ran_writes_nothing(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any], level: str
) -> None:
    host, other, store = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    model = ErasingModel([[assistant_message("Noted.")], [assistant_message("Your secret is qzfirstq.")]])
    agent = Agent(name="assistant", model=model)
    await Runner.run(agent, "my secret is qzfirstq", session=session)

    async def erase() -> None:
        await other.erase(_target(level), reason="dsr", attestation=OPERATOR)

    model.meanwhile = erase
    with pytest.raises(ErasedSinceReadError):
        await Runner.run(agent, "what is my secret?", session=session)
    assert await _stored(store) is None
    assert await session.get_items() == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner runs on asyncio only
async def test_add_items_after_get_items_commits_when_nothing_was_erased(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    host, other, _ = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    model = ScriptedModel([[assistant_message("Noted.")], [assistant_message("It was qzfirstq.")]])
    agent = Agent(name="assistant", model=model)
    await Runner.run(agent, "my secret is qzfirstq", session=session)
    # A concurrent write by the other process (not an erasure) between the read and the write.
    await AgentiumSession(other, ANA, "chat-1").add_items([{"role": "user", "content": "meanwhile"}])
    await Runner.run(agent, "what was it?", session=session)
    contents = [i.get("content") for i in await session.get_items()]
    assert contents[0] == "my secret is qzfirstq" and "what was it?" in contents and len(contents) == 5


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner runs on asyncio only
async def test_an_erasure_of_another_users_session_in_another_tenant_does_not_refuse(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    host, other, _ = runtimes
    await AgentiumSession(host, ZED, "chat-9").add_items([{"role": "user", "content": "zed's"}])
    session = AgentiumSession(host, ANA, "chat-1")
    model = ErasingModel([[assistant_message("Noted.")], [assistant_message("Still here.")]])
    agent = Agent(name="assistant", model=model)
    await Runner.run(agent, "first", session=session)

    async def erase() -> None:
        target = EraseTarget.session("globex", "zed", "chat-9")
        await other.erase(target, reason="dsr", attestation=GLOBEX_OPERATOR)

    model.meanwhile = erase
    await Runner.run(agent, "second", session=session)
    assert len(await session.get_items()) == 4
    assert await AgentiumSession(host, ZED, "chat-9").get_items() == []


async def test_a_later_get_items_does_not_move_the_read_past_an_erasure(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    """The SDK reads the tail again before some writes (``get_items(limit)``): that read is no new input.

    The turn's items were made from the first read; an erasure between it and the SDK's own tail
    read must still refuse them (the tail read sees the session already erased).
    """
    host, other, store = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": "my secret is qzfirstq"}])
    await session.get_items()  # the model's input
    await other.erase(_target("session"), reason="dsr", attestation=OPERATOR)
    assert await session.get_items(2) == []  # the SDK's check of the tail before it writes
    with pytest.raises(ErasedSinceReadError):
        await session.add_items([{"role": "assistant", "content": "it is qzfirstq"}])  # type: ignore[list-item]
    assert await _stored(store) is None


@function_tool(needs_approval=True)
def reveal(topic: str) -> str:
    """A tool the host approves by hand before it runs."""
    return f"revealed {topic}"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner runs on asyncio only
async def test_a_run_resumed_after_approval_writes_nothing_into_a_session_erased_meanwhile(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    """A tool call waits for approval (minutes, hours); the session is erased meanwhile.

    The resumed run reads only the tail (``get_items(2)``) before it writes the tool's output, and
    its model is given the interrupted run's state (the erased history): neither may be written.
    """
    host, other, store = runtimes
    session = AgentiumSession(host, ANA, "chat-1")
    model = ScriptedModel()
    agent = Agent(name="assistant", model=model, tools=[reveal])
    model.enqueue([function_call("reveal", {"topic": "qzfirstq"}, call_id="call_1")])
    model.enqueue([assistant_message("The secret is qzfirstq.")])
    first = await Runner.run(agent, "my secret is qzfirstq; reveal it", session=session)
    assert first.interruptions
    state = first.to_state()
    for pending in first.interruptions:
        state.approve(pending)
    await other.erase(_target("session"), reason="dsr", attestation=OPERATOR)  # while it waited
    with pytest.raises(ErasedSinceReadError):
        await Runner.run(agent, state, session=session)
    assert await _stored(store) is None
    assert await session.get_items() == []
