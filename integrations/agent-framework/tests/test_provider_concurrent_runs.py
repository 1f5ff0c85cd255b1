"""AgentiumHistoryProvider with several agent runs of one session id at once, and an erasure among them.

Each run's save must follow its own run's load: the framework hands the
provider the run's ``SessionContext`` in ``before_run`` and ``after_run``.
A save matched to loads by arrival order alone can be matched to another
run's load: with runs A and B loading before an erasure, A's save refused,
and run C loading and saving after it, B's save then followed C's load
(made after the erasure) and wrote B's answer, made from the erased
history, into the freshly erased id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import pytest
from agent_framework import Agent, BaseChatClient, ChatResponse
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider
from agentium_harness import (
    ErasedSinceReadError,
    EraseTarget,
    HarnessRuntime,
    OperatorAttestation,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the framework's Agent runs on asyncio


@pytest.fixture
async def runtimes() -> AsyncIterator[tuple[HarnessRuntime, HarnessRuntime]]:
    """The host's runtime and the operator's, over the same in-memory stores."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    host, other = (
        create_harness_runtime(
            provider=ScriptedProvider(replies=["(not called)"]), archive=archive, session_store=store
        )
        for _ in range(2)
    )
    try:
        yield host, other
    finally:
        await host.aclose()
        await other.aclose()


class GatedChatClient(BaseChatClient):  # type: ignore[type-arg]
    """Answers ``answer to <input>``; a run whose input has a gate says it started, then waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, anyio.Event] = {}
        self.gates: dict[str, anyio.Event] = {}

    def gate(self, text: str) -> None:
        self.started[text], self.gates[text] = anyio.Event(), anyio.Event()

    async def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[AFMessage], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> ChatResponse:
        text = messages[-1].text
        if text in self.gates:
            self.started[text].set()
            await self.gates[text].wait()
        return ChatResponse(messages=[AFMessage("assistant", [f"answer to {text}"])], response_id="r")


async def test_a_run_loaded_before_an_erasure_is_refused_whatever_ran_in_between(
    runtimes: tuple[HarnessRuntime, HarnessRuntime],
) -> None:
    host, other = runtimes
    client = GatedChatClient()
    provider = AgentiumHistoryProvider(host, ANA)
    agent = Agent(client, context_providers=[provider])
    await agent.run("my secret is qzfirstq", session=agent.create_session(session_id="chat-1"))
    outcomes: dict[str, BaseException | None] = {}
    ended: dict[str, anyio.Event] = {}

    async def run(text: str) -> None:
        ended[text] = anyio.Event()
        try:
            await agent.run(text, session=agent.create_session(session_id="chat-1"))
        except ErasedSinceReadError as exc:
            outcomes[text] = exc
        else:
            outcomes[text] = None
        finally:
            ended[text].set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for text in ("run A", "run B"):  # both load the secret, then wait in the model
                client.gate(text)
                tg.start_soon(run, text)
                await client.started[text].wait()
            await other.erase(
                EraseTarget.session("acme", "ana", "chat-1"), reason="dsr", attestation=OPERATOR
            )
            client.gates["run A"].set()  # A saves: refused (its load was before the erasure)
            await ended["run A"].wait()
            await run("run C")  # loads the erased (empty) session, answers, saves
            client.gates["run B"].set()  # B's answer was made from the erased history
    assert isinstance(outcomes["run A"], ErasedSinceReadError)
    assert isinstance(outcomes["run B"], ErasedSinceReadError)
    assert outcomes["run C"] is None  # its own load was after the erasure
    texts = [m.text for m in await provider.get_messages("chat-1")]
    assert texts == ["run C", "answer to run C"]
    assert not [t for t in texts if "qz" in t or "run B" in t]
