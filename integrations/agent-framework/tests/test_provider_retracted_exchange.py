"""What a retraction leaves: a load never hands the framework half a tool exchange.

``runtime.retract(count=n)`` takes the view's last ``n`` messages: it can
take a tool result and leave the assistant message that made the call, and
a load's bound can begin after a call whose result (saved in a later
group) it keeps. Agent Framework 1.23 hands such a ``function_call`` or
``function_result`` to the chat client as it is (the first test shows it,
with the framework's own request building), and the chat APIs refuse a
tool result without its call, or a call without its result. The provider
leaves out only those contents: the message's text stays, and a message
goes only when nothing else is left of it (a WARNING says how many).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from af_runtimes import build_runtime
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    HistoryProvider,
)
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider
from agentium_harness import (
    EffectLevel,
    HarnessRuntime,
    Message,
    Role,
    Tool,
    ToolCall,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
TWO_CALLS = {
    "content": "Let me look at both pages.",
    "tool_calls": [
        {"id": "c1", "name": "fetch", "arguments": {"url": "https://a.example"}},
        {"id": "c2", "name": "fetch", "arguments": {"url": "https://b.example"}},
    ],
}


async def fetch(args: Any) -> str:
    return f"page {args['url']}"


class LayeredClient(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):  # type: ignore[misc,type-arg]
    """A chat client composed as the framework's own are; records the messages each request is built of."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[AFMessage]] = []

    async def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[AFMessage], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> ChatResponse:
        self.requests.append(list(messages))
        return ChatResponse(messages=[AFMessage("assistant", ["ok"])], response_id="r")


class FixedHistory(HistoryProvider):
    """Loads the given messages as they are: what the framework does with them, without Agentium."""

    def __init__(self, messages: list[AFMessage]) -> None:
        super().__init__("fixed")
        self.messages = messages

    async def get_messages(self, session_id: str | None, **kwargs: Any) -> list[AFMessage]:
        return list(self.messages)

    async def save_messages(
        self, session_id: str | None, messages: Sequence[AFMessage], **kwargs: Any
    ) -> None:
        return None


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[HarnessRuntime]:
    built = build_runtime(
        tmp_path / "agentium.db",
        replies=[TWO_CALLS, "Both pages are about cats."],
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )
    async with built:
        yield built


def halves(messages: Sequence[AFMessage]) -> list[tuple[str, str]]:
    """Every call the framework would run with no result after it, and every result with no call before it."""
    out: list[tuple[str, str]] = []
    called: set[str] = set()
    results = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    for message in messages:
        for content in message.contents:
            if content.type == "function_call" and content.call_id is not None:
                called.add(content.call_id)
                if content.call_id not in results and not content.informational_only and not content.hosted:
                    out.append(("call without result", content.call_id))
            elif content.type == "function_result" and content.call_id not in called:
                out.append(("result without call", str(content.call_id)))
    return out


def kinds(messages: Sequence[AFMessage]) -> list[tuple[str, list[str]]]:
    """Each message's role and its contents: text as itself, a call or result as its type and call id."""
    return [
        (
            str(m.role),
            [c.text or "" if c.type == "text" else f"{c.type} {c.call_id}" for c in m.contents],
        )
        for m in messages
    ]


def read_only(runtime: HarnessRuntime) -> AgentiumHistoryProvider:
    """A provider that loads but stores nothing: the session stays as the test left it."""
    return AgentiumHistoryProvider(runtime, ANA, store_inputs=False, store_outputs=False)


async def run_agent(history: HistoryProvider) -> list[AFMessage]:
    """The messages of the request the framework builds for a run over ``history`` (the input last)."""
    client = LayeredClient()
    agent = Agent(client, context_providers=[history])
    await agent.run("And now?", session=agent.create_session(session_id="chat-1"))
    (sent,) = client.requests
    assert sent[-1].text == "And now?"
    return sent[:-1]


async def test_the_framework_itself_sends_a_half_exchange_as_it_is() -> None:
    # Why the provider must: given a call without its result and a result without its call,
    # the framework's own request building hands both to the chat client unchanged.
    orphans = [
        AFMessage("user", ["q"]),
        AFMessage("assistant", [Content.from_function_call(call_id="c1", name="fetch", arguments={})]),
        AFMessage("tool", [Content.from_function_result(call_id="c9", result="r")]),
    ]
    sent = await run_agent(FixedHistory(orphans))
    assert halves(sent) == [("call without result", "c1"), ("result without call", "c9")]


async def test_a_retracted_result_leaves_its_call_out_and_the_text_in(
    runtime: HarnessRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    assert (await runtime.run(ANA, "chat-1", "What do the pages say?", grants=["fetch"])).committed
    # The answer and c2's result out: the assistant message keeps its text and c1's call.
    await runtime.retract(ANA, "chat-1", count=2, reason="undo")
    provider = AgentiumHistoryProvider(runtime, ANA)
    with caplog.at_level(logging.WARNING, logger="agentium.agent_framework"):
        loaded = await provider.get_messages("chat-1")
    assert kinds(loaded) == [
        ("user", ["What do the pages say?"]),
        ("assistant", ["Let me look at both pages.", "function_call c1"]),
        ("tool", ["function_result c1"]),
    ]
    (warning,) = [r for r in caplog.records if r.name == "agentium.agent_framework"]
    assert warning.levelno == logging.WARNING
    assert "page" not in warning.getMessage() and "c2" not in warning.getMessage()  # counts only
    sent = await run_agent(read_only(runtime))
    assert halves(sent) == []
    assert kinds(sent) == kinds(loaded)

    # Both results out too: only the text of the assistant message is left of it.
    await runtime.retract(ANA, "chat-1", count=1, reason="undo")
    loaded = await provider.get_messages("chat-1")
    assert kinds(loaded) == [
        ("user", ["What do the pages say?"]),
        ("assistant", ["Let me look at both pages."]),
    ]


async def test_a_message_that_was_only_a_half_exchange_is_left_out_and_said_so(
    runtime: HarnessRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA)
    call = AFMessage("assistant", [Content.from_function_call(call_id="w1", name="weather", arguments={})])
    result = AFMessage("tool", [Content.from_function_result(call_id="w1", result="sunny")])
    await provider.save_messages(
        "chat-1", [AFMessage("user", ["Weather?"]), call, result, AFMessage("assistant", ["Sunny."])]
    )
    await runtime.retract(ANA, "chat-1", count=2, reason="undo")
    with caplog.at_level(logging.WARNING, logger="agentium.agent_framework"):
        loaded = await provider.get_messages("chat-1")
    assert kinds(loaded) == [("user", ["Weather?"])]
    (warning,) = [r for r in caplog.records if r.name == "agentium.agent_framework"]
    assert "1 messages" in warning.getMessage()
    assert halves(await run_agent(read_only(runtime))) == []


async def test_a_load_bound_after_a_call_leaves_its_result_out(runtime: HarnessRuntime) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA)
    call = AFMessage(
        "assistant", ["Checking.", Content.from_function_call(call_id="w1", name="weather", arguments={})]
    )
    result = AFMessage("tool", [Content.from_function_result(call_id="w1", result="sunny")])
    # The call and its result in two saves (two groups): a bound of 2 messages keeps the later only.
    await provider.save_messages("chat-1", [AFMessage("user", ["Weather?"]), call])
    await provider.save_messages("chat-1", [result, AFMessage("assistant", ["Sunny."])])
    two = await AgentiumHistoryProvider(runtime, ANA, max_messages=2).get_messages("chat-1")
    assert kinds(two) == [("assistant", ["Sunny."])]
    whole = await provider.get_messages("chat-1")
    assert kinds(whole) == [
        ("user", ["Weather?"]),
        ("assistant", ["Checking.", "function_call w1"]),
        ("tool", ["function_result w1"]),
        ("assistant", ["Sunny."]),
    ]


async def test_guard_a_call_the_framework_never_runs_is_kept_without_a_result(
    runtime: HarnessRuntime,
) -> None:
    # A guard (passes on the source before the fix too): an informational-only or hosted call gets
    # no local result, so it is no half exchange and is loaded as it was saved.
    provider = AgentiumHistoryProvider(runtime, ANA)
    saved = [
        AFMessage("user", ["Search."]),
        AFMessage(
            "assistant",
            [
                Content.from_function_call(call_id="i1", name="log", arguments={}, informational_only=True),
                Content.from_function_call(call_id="h1", name="search", arguments={}, hosted=True),
                Content.from_mcp_server_tool_call(call_id="m1", tool_name="lookup"),
                Content.from_text("Found it."),
            ],
        ),
    ]
    await provider.save_messages("chat-1", saved)
    assert [m.to_dict() for m in await provider.get_messages("chat-1")] == [m.to_dict() for m in saved]


async def test_a_call_id_used_again_is_paired_in_order_not_by_id_alone(tmp_path: Path) -> None:
    # Models reuse call ids across turns (local models number them per response), and a group
    # may name an id an earlier group did: a result answers an unanswered call of its id, not any
    # call of it. A run made calls c1 and c2, and so does the next group (appended as a host
    # writes it: run() itself gives a call naming an id of the history it sends one of its own);
    # its answer and its c2 result retracted leave its c2 call unanswered: the first group's c2
    # result answers the first group's call, not this one, which must be left out.
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    second = [
        Message(Role.USER, "Second?"),
        Message(
            Role.ASSISTANT,
            TWO_CALLS["content"],
            tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in TWO_CALLS["tool_calls"]),
        ),
        *(
            Message(Role.TOOL, f"page {c['arguments']['url']}", tool_call_id=c["id"])
            for c in TWO_CALLS["tool_calls"]
        ),
        Message(Role.ASSISTANT, "Dogs."),
    ]
    built = create_harness_runtime(
        provider=ScriptedProvider(replies=[TWO_CALLS, "Cats."]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )
    async with built:
        assert (await built.run(ANA, "chat-1", "First?", grants=["fetch"])).committed
        await built.append(ANA, "chat-1", second)
        await built.retract(ANA, "chat-1", count=2, reason="undo")
        loaded = await AgentiumHistoryProvider(built, ANA).get_messages("chat-1")
        assert kinds(loaded)[5:] == [
            ("user", ["Second?"]),
            ("assistant", ["Let me look at both pages.", "function_call c1"]),
            ("tool", ["function_result c1"]),
        ]
        assert halves_in_order(await run_agent(read_only(built))) == []


async def test_a_result_of_a_call_already_answered_is_left_out(runtime: HarnessRuntime) -> None:
    # A second result for one call (saved twice by a host) answers nothing: sent, the chat APIs
    # refuse a tool message that follows no unanswered call. The first result is kept.
    provider = AgentiumHistoryProvider(runtime, ANA)
    call = AFMessage("assistant", [Content.from_function_call(call_id="w1", name="weather", arguments={})])
    result = AFMessage("tool", [Content.from_function_result(call_id="w1", result="sunny")])
    await provider.save_messages("chat-1", [AFMessage("user", ["Weather?"]), call, result])
    await provider.save_messages("chat-1", [AFMessage("user", ["Again?"]), result])
    loaded = await provider.get_messages("chat-1")
    assert kinds(loaded) == [
        ("user", ["Weather?"]),
        ("assistant", ["function_call w1"]),
        ("tool", ["function_result w1"]),
        ("user", ["Again?"]),
    ]
    assert halves_in_order(await run_agent(read_only(runtime))) == []


def halves_in_order(messages: Sequence[AFMessage]) -> list[tuple[str, str]]:
    """As :func:`halves`, counting: each result must follow an unanswered call of its id."""
    out: list[tuple[str, str]] = []
    pending: dict[str, int] = {}
    for message in messages:
        for content in message.contents:
            if content.type == "function_call" and content.call_id is not None:
                if not content.informational_only and not content.hosted:
                    pending[content.call_id] = pending.get(content.call_id, 0) + 1
            elif content.type == "function_result":
                if pending.get(str(content.call_id), 0) == 0:
                    out.append(("result without call", str(content.call_id)))
                else:
                    pending[str(content.call_id)] -= 1
    out.extend(("call without result", c) for c, n in pending.items() for _ in range(n))
    return out


async def test_a_host_replaying_a_load_that_left_a_call_out_stores_only_its_new_message(
    runtime: HarnessRuntime,
) -> None:
    # A host replaying the transcript as input (a chat UI) replays what the load gave it: the
    # assistant message without the call no result answers. It must be found as the message
    # stored (with the call), or the whole transcript would be stored again, a copy of itself.
    assert (await runtime.run(ANA, "chat-1", "What do the pages say?", grants=["fetch"])).committed
    await runtime.retract(ANA, "chat-1", count=2, reason="undo")
    provider = AgentiumHistoryProvider(runtime, ANA)
    loaded = await provider.get_messages("chat-1")
    await provider.save_messages("chat-1", [*loaded, AFMessage("user", ["And now?"])])
    newest = (await runtime.read_history(ANA, "chat-1", max_groups=1)).groups[-1]
    assert [m.content for m in newest.messages] == ["And now?"]
    assert kinds(await provider.get_messages("chat-1")) == [*kinds(loaded), ("user", ["And now?"])]


async def test_a_result_answers_the_latest_unanswered_call_of_its_id_not_an_older_one(
    runtime: HarnessRuntime,
) -> None:
    # A call saved without its result (a run that stopped before the tool ran), then a run()
    # whose model used the same call id again: the run's result answers the run's own call. Paired
    # with the older call instead, the load kept that call (followed by the user's next words: the
    # chat APIs refuse it) and left the run's call out while keeping its result.
    provider = AgentiumHistoryProvider(runtime, ANA)
    stopped = AFMessage(
        "assistant", ["Checking.", Content.from_function_call(call_id="c2", name="fetch", arguments={})]
    )
    await provider.save_messages("chat-1", [AFMessage("user", ["Weather?"]), stopped])
    assert (await runtime.run(ANA, "chat-1", "What do the pages say?", grants=["fetch"])).committed
    loaded = await provider.get_messages("chat-1")
    assert kinds(loaded) == [
        ("user", ["Weather?"]),
        ("assistant", ["Checking."]),
        ("user", ["What do the pages say?"]),
        ("assistant", ["Let me look at both pages.", "function_call c1", "function_call c2"]),
        ("tool", ["function_result c1"]),
        ("tool", ["function_result c2"]),
        ("assistant", ["Both pages are about cats."]),
    ]
    assert halves_in_order(await run_agent(read_only(runtime))) == []


def two_calls_answered_later(together: bool) -> list[list[AFMessage]]:
    """Three saves: the question and a call; a second call; then the results and the answer.

    The results are one message each, or (``together``) one message holding both.
    """
    a = AFMessage(
        "assistant", ["First.", Content.from_function_call(call_id="w1", name="weather", arguments={})]
    )
    b = AFMessage(
        "assistant", ["Second.", Content.from_function_call(call_id="w2", name="weather", arguments={})]
    )
    r1 = Content.from_function_result(call_id="w1", result="sunny")
    r2 = Content.from_function_result(call_id="w2", result="rainy")
    results = (
        [AFMessage("tool", [r1, r2])] if together else [AFMessage("tool", [r1]), AFMessage("tool", [r2])]
    )
    return [
        [AFMessage("user", ["Weather?"]), a],
        [b],
        [*results, AFMessage("assistant", ["Sunny, then rain."])],
    ]


@pytest.mark.parametrize("together", [False, True])
@pytest.mark.parametrize("bound", [2, 3, 4, 5])
async def test_a_host_replaying_a_load_whose_bound_cut_off_a_call_stores_only_its_new_message(
    runtime: HarnessRuntime, bound: int, together: bool
) -> None:
    # A load bounded to its newest groups can begin after w1's call (at 4: w2's call, both results
    # and the answer) and keep w1's result, which it then leaves out (kept, the chat APIs would
    # refuse it): the replay lacks a message in the middle of what is stored (or, results saved
    # together, has that message without w1's result). It must still be found as the stored
    # messages, or the replayed transcript (calls, results, answer) is stored a second time.
    provider = AgentiumHistoryProvider(runtime, ANA)
    for saved in two_calls_answered_later(together):
        await provider.save_messages("chat-1", saved)
    before = await provider.get_messages("chat-1")
    bounded = AgentiumHistoryProvider(runtime, ANA, max_messages=bound)
    loaded = await bounded.get_messages("chat-1")
    assert halves_in_order(loaded) == []
    await provider.save_messages("chat-1", [*loaded, AFMessage("user", ["And now?"])])
    newest = (await runtime.read_history(ANA, "chat-1", max_groups=1)).groups[-1]
    assert [m.content for m in newest.messages] == ["And now?"]
    assert kinds(await provider.get_messages("chat-1")) == [*kinds(before), ("user", ["And now?"])]
