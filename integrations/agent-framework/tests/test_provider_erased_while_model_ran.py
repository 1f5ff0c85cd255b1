"""AgentiumHistoryProvider across a run whose session is erased while the model runs.

Before a run the framework loads the session (``get_messages``: the model's
input); after it, it saves the run's input and response (``save_messages``).
An erasure of the session, its user or its tenant that begins and finishes
while the model runs must not leave the run's messages (the user's message,
and the answer made from the erased history) in the freshly erased id: the
save reads the (now empty) view's tail itself, so only the load's fence can
tell. Two runtimes over the same stores (one SQLite file, or the same
in-memory stores) stand for the agent host and the operator's process.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, BaseChatClient, ChatResponse
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider
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
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SessionKey

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
ZED = VerifiedIdentity("globex", "zed", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")
GLOBEX_OPERATOR = OperatorAttestation(VerifiedIdentity("globex", "ops-1", "sso"), statement="DSR-2")


@pytest.fixture(params=["asyncio", "trio"])  # the provider's own calls run on either
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sqlite", "memory"])
async def runtimes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Any, Any]]:
    """The host's runtime, the operator's over the same stores, and the host's session store."""

    def runtime(archive: Any, store: Any) -> HarnessRuntime:
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["(not called)"]), archive=archive, session_store=store
        )

    if request.param == "sqlite":
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        store: Any = SQLiteSessionStore(config)
        host = runtime(SQLiteArchive(config), store)
        other = runtime(SQLiteArchive(config), SQLiteSessionStore(config))
    else:
        archive, store = InMemoryArchive(), InMemorySessionStore()
        host, other = runtime(archive, store), runtime(archive, store)
    try:
        yield host, other, store
    finally:
        await host.aclose()
        await other.aclose()


class ErasingChatClient(BaseChatClient):  # type: ignore[type-arg]
    """Answers with queued texts; the next request first runs ``meanwhile`` (the operator's erasure)."""

    def __init__(self, *replies: str) -> None:
        super().__init__()
        self.replies = list(replies)
        self.meanwhile: Callable[[], Awaitable[None]] | None = None

    async def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[AFMessage], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> ChatResponse:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return ChatResponse(messages=[AFMessage("assistant", [self.replies.pop(0)])], response_id="r")


def _target(level: str) -> EraseTarget:
    if level == "session":
        return EraseTarget.session("acme", "ana", "chat-1")
    return EraseTarget.user("acme", "ana") if level == "user" else EraseTarget.tenant("acme")


async def _stored(store: Any, who: VerifiedIdentity = ANA, session: str = "chat-1") -> object:
    return await store.load(SessionKey.of(who, session), OpContext())


def _texts(messages: Sequence[AFMessage]) -> list[str]:
    return [m.text for m in messages]


@pytest.mark.parametrize("level", ["session", "user", "tenant"])
async def test_a_save_after_an_erasure_since_the_load_is_refused(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any], level: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, other, store = runtimes
    provider = AgentiumHistoryProvider(host, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["my secret is qzfirstq"])])
    assert _texts(await provider.get_messages("chat-1")) == ["my secret is qzfirstq"]
    await other.erase(_target(level), reason="dsr", attestation=OPERATOR)  # while the model runs
    caplog.set_level(logging.WARNING)
    run = [AFMessage("user", ["what is my secret?"]), AFMessage("assistant", ["it is qzfirstq"])]
    with pytest.raises(ErasedSinceReadError) as caught:
        await provider.save_messages("chat-1", run)
    assert isinstance(caught.value, SessionConflictError)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert "load the session again" in str(caught.value)
    assert await _stored(store) is None  # nothing written into the erased id
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "not committed" in r.getMessage()]
    assert warned
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log
    # Not retried forever: the load was forgotten, and a save with no load since writes.
    await provider.save_messages("chat-1", [AFMessage("user", ["a new start"])])
    assert _texts(await provider.get_messages("chat-1")) == ["a new start"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the framework's Agent runs on asyncio
@pytest.mark.parametrize("level", ["session", "user", "tenant"])
async def test_an_agent_run_erased_while_the_model_ran_writes_nothing(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any], level: str
) -> None:
    host, other, store = runtimes
    client = ErasingChatClient("Noted.", "Your secret is qzfirstq.")
    agent = Agent(client, context_providers=[AgentiumHistoryProvider(host, ANA)])
    session = agent.create_session(session_id="chat-1")
    await agent.run("my secret is qzfirstq", session=session)
    assert await _stored(store) is not None

    async def erase() -> None:
        await other.erase(_target(level), reason="dsr", attestation=OPERATOR)

    client.meanwhile = erase
    with pytest.raises(ErasedSinceReadError):
        await agent.run("what is my secret?", session=session)
    assert await _stored(store) is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the framework's Agent runs on asyncio
async def test_a_run_with_no_erasure_between_load_and_save_commits(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    host, other, _ = runtimes
    client = ErasingChatClient("Noted.", "It was qzfirstq.")
    provider = AgentiumHistoryProvider(host, ANA)
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session(session_id="chat-1")
    await agent.run("my secret is qzfirstq", session=session)

    async def write() -> None:  # another process writes (not an erasure) while the model runs
        await AgentiumHistoryProvider(other, ANA).save_messages("chat-1", [AFMessage("user", ["meanwhile"])])

    client.meanwhile = write
    await agent.run("what was it?", session=session)
    assert _texts(await provider.get_messages("chat-1")) == [
        "my secret is qzfirstq",
        "Noted.",
        "meanwhile",
        "what was it?",
        "It was qzfirstq.",
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the framework's Agent runs on asyncio
async def test_an_erasure_of_another_users_session_in_another_tenant_does_not_refuse(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    host, other, store = runtimes
    await AgentiumHistoryProvider(host, ZED).save_messages("chat-9", [AFMessage("user", ["zed's"])])
    client = ErasingChatClient("Noted.", "Still here.")
    provider = AgentiumHistoryProvider(host, ANA)
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session(session_id="chat-1")
    await agent.run("first", session=session)

    async def erase() -> None:
        target = EraseTarget.session("globex", "zed", "chat-9")
        await other.erase(target, reason="dsr", attestation=GLOBEX_OPERATOR)

    client.meanwhile = erase
    await agent.run("second", session=session)
    assert _texts(await provider.get_messages("chat-1")) == ["first", "Noted.", "second", "Still here."]
    assert await _stored(store, ZED, "chat-9") is None


async def test_two_runs_of_one_session_id_the_first_save_sees_an_erasure_between_the_loads(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    """Run A loads, the session is erased, run B loads (empty), then A saves: A's load decides."""
    host, other, store = runtimes
    provider = AgentiumHistoryProvider(host, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["my secret is qzfirstq"])])
    assert _texts(await provider.get_messages("chat-1")) == ["my secret is qzfirstq"]  # run A
    await other.erase(_target("session"), reason="dsr", attestation=OPERATOR)
    assert await provider.get_messages("chat-1") == []  # run B, at once on the same provider
    with pytest.raises(ErasedSinceReadError):
        await provider.save_messages("chat-1", [AFMessage("assistant", ["it is qzfirstq"])])  # run A
    assert await _stored(store) is None
    # Run B's save is refused as well (conservatively: it cannot be told from A's); then none is
    # left waiting, so the next run loads afresh and saves.
    with pytest.raises(ErasedSinceReadError):
        await provider.save_messages("chat-1", [AFMessage("assistant", ["nothing to recall"])])
    assert await _stored(store) is None
    assert await provider.get_messages("chat-1") == []
    await provider.save_messages("chat-1", [AFMessage("user", ["a new start"])])
    assert _texts(await provider.get_messages("chat-1")) == ["a new start"]


async def test_two_runs_of_one_session_id_with_no_erasure_both_save(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    host, other, _ = runtimes
    provider = AgentiumHistoryProvider(host, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["first"])])
    await provider.get_messages("chat-1")  # run A
    await other.erase(EraseTarget.session("acme", "bob", "chat-2"), reason="dsr", attestation=OPERATOR)
    await provider.get_messages("chat-1")  # run B
    await provider.save_messages("chat-1", [AFMessage("assistant", ["from A"])])
    await provider.save_messages("chat-1", [AFMessage("assistant", ["from B"])])
    await provider.get_messages("chat-1")  # the next run
    await provider.save_messages("chat-1", [AFMessage("assistant", ["next"])])
    assert _texts(await provider.get_messages("chat-1")) == ["first", "from A", "from B", "next"]


async def test_a_run_that_never_saved_does_not_keep_the_session_refused(
    runtimes: tuple[HarnessRuntime, HarnessRuntime, Any],
) -> None:
    """A load whose run failed before its save stays counted: refusals it costs after an erasure end."""
    host, other, store = runtimes
    provider = AgentiumHistoryProvider(host, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["my secret is qzfirstq"])])
    await provider.get_messages("chat-1")  # a run that fails before it saves
    await other.erase(_target("session"), reason="dsr", attestation=OPERATOR)
    refused = 0
    for attempt in range(4):  # runs one after another, each loading and saving
        await provider.get_messages("chat-1")
        try:
            await provider.save_messages("chat-1", [AFMessage("user", [f"run {attempt}"])])
        except ErasedSinceReadError:
            refused += 1
            assert await _stored(store) is None
        else:
            break
    assert refused <= 2
    assert _texts(await provider.get_messages("chat-1")) == [f"run {refused}"]
