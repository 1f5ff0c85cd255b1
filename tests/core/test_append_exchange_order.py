"""``append`` refuses a group with a message between an assistant's tool calls and their results.

Chat Completions (``agentium-provider-openai`` sends history so) refuses a
request whose assistant tool calls are not followed at once by their ``tool``
results, and ``run()`` sends a group as it was committed: one message between
a call and its result would make every later turn of the session fail. Such a
group is refused with ``IncompleteGroupError`` and nothing is written. Foreign
tool results (a payload ``tool`` message answering no call of core's, or an
integration's legacy one) keep their acceptance: ``run()`` sends them after
the exchange. ``run()``'s own groups, read back and appended, still pass. A tool call id
is one call's in its group: one named again, in the same message or a later
step, is refused (``InvalidArgumentError``), nothing written.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    EffectLevel,
    HarnessRuntime,
    IncompleteGroupError,
    InvalidArgumentError,
    Message,
    Role,
    SessionKey,
    Tool,
    ToolCall,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
FORMAT = "some.framework.result/v1"
OPENAI_ITEM = "openai.responses.input_item/v1"


def _calling(*ids: str) -> Message:
    return Message(Role.ASSISTANT, "", tool_calls=tuple(ToolCall(i, "fetch", {"q": i}) for i in ids))


def _result(call_id: str) -> Message:
    return Message(Role.TOOL, f"out {call_id}", tool_call_id=call_id)


def _foreign(call_id: str | None) -> Message:
    return Message(
        Role.TOOL, "[result] page", tool_call_id=call_id, payload={"k": "result"}, payload_format=FORMAT
    )


USER = Message(Role.USER, "hi")

REFUSED = [
    pytest.param(
        [USER, _calling("c1"), Message(Role.USER, "interjection"), _result("c1")], 2, id="user-between"
    ),
    pytest.param(
        [USER, _calling("c1", "c2"), _result("c1"), Message(Role.USER, "wait"), _result("c2")],
        3,
        id="user-between-two-results",
    ),
    pytest.param([USER, _calling("c1"), Message(Role.SYSTEM, "note"), _result("c1")], 2, id="system-between"),
    pytest.param(
        [USER, _calling("c1"), Message(Role.ASSISTANT, "thinking"), _result("c1")], 2, id="assistant-text"
    ),
    pytest.param(
        [USER, _calling("c1"), _calling("c2"), _result("c1"), _result("c2")], 2, id="calls-before-results"
    ),
    pytest.param(
        [
            USER,
            _calling("c1"),
            # A user message item of the SDK's (a payload, but no tool output): the user's words.
            Message(Role.USER, "hi", payload={"role": "user", "content": "hi"}, payload_format=OPENAI_ITEM),
            _result("c1"),
        ],
        2,
        id="user-item-with-payload-between",
    ),
]


def _runtime(provider: ScriptedProvider | None = None, tools: ToolRegistry | None = None) -> Any:
    return create_harness_runtime(
        provider=provider or ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        **({"tools": tools} if tools is not None else {}),
    )


async def _state(rt: HarnessRuntime) -> Any:
    """Everything stored and shown for the session: raw rows, revision, next seq and history."""
    page = await rt.read_history(ANA, "s1", max_groups=100)
    archive, store = rt.archive, rt.session_store
    assert isinstance(archive, InMemoryArchive) and isinstance(store, InMemorySessionStore)
    rows = {seq: archive.raw(KEY, seq) for seq in range(16)}
    return (
        store.raw(KEY),
        {s: r for s, r in rows.items() if r is not None},
        page.snapshot_revision,
        page.next_seq,
        page.messages,
    )


@pytest.mark.parametrize(("messages", "index"), REFUSED)
async def test_a_message_between_a_tool_call_and_its_result_is_refused_nothing_written(
    messages: list[Message], index: int
) -> None:
    rt = _runtime()
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
            before = await _state(rt)
            with pytest.raises(IncompleteGroupError, match=f"message {index} \\("):
                await rt.append(ANA, "s1", messages)
            assert await _state(rt) == before
            # Moved after the results, the same messages are one valid group.
            moved = [m for i, m in enumerate(messages) if i != index] + [messages[index]]
            if not messages[index].tool_calls:
                await rt.append(ANA, "s1", moved)


def _answered_in_turn(messages: list[Message]) -> bool:
    """Whether each message with tool calls is followed at once by one ``tool`` message per call."""
    for at, message in enumerate(messages):
        if message.tool_calls:
            after = messages[at + 1 : at + 1 + len(message.tool_calls)]
            ids = sorted(m.tool_call_id or "" for m in after if m.role is Role.TOOL)
            if ids != sorted(c.id for c in message.tool_calls):
                return False
    return True


ACCEPTED = [
    pytest.param(
        [USER, _calling("c1", "c2"), _result("c2"), _result("c1"), Message(Role.ASSISTANT, "done")],
        id="results-in-any-order",
    ),
    pytest.param([USER, _calling("c1"), _foreign("c9"), _result("c1")], id="foreign-result-between"),
    pytest.param([USER, _calling("c1"), _foreign(None), _result("c1")], id="foreign-result-no-id-between"),
    pytest.param(
        [
            USER,
            _calling("c1"),
            # An output the OpenAI Agents integration once stored as a user message: a tool's output.
            Message(
                Role.USER,
                "[function_call_output x] out",
                payload={"type": "function_call_output", "call_id": "x", "output": "out"},
                payload_format=OPENAI_ITEM,
            ),
            _result("c1"),
        ],
        id="legacy-output-between",
    ),
    pytest.param([USER, _calling("c1"), _foreign("c1")], id="payload-result-answering-the-call"),
]


@pytest.mark.parametrize("messages", ACCEPTED)
async def test_tool_results_alone_between_calls_and_results_are_accepted_and_sent_well_formed(
    messages: list[Message],
) -> None:
    provider = ScriptedProvider(replies=["ok"])
    rt = _runtime(provider)
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", messages)
            await rt.run(ANA, "s1", "next")
    (request,) = provider.calls
    sent = [*request.history, *request.turn]
    assert _answered_in_turn(sent), [(m.role.value, m.tool_call_id) for m in sent]


async def test_runs_own_groups_read_back_are_appended_again() -> None:
    """A host copying history (read_history, then append to another session) is never refused."""

    async def fetch(args: Any) -> str:
        return "page"

    script: list[object] = [
        {"content": "", "tool_calls": [{"id": "c1", "name": "fetch"}, {"id": "c2", "name": "fetch"}]},
        {"content": "", "tool_calls": [{"id": "c3", "name": "fetch"}]},
        "fetched",
    ]
    provider = ScriptedProvider(replies=script)
    rt = _runtime(provider, ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]))
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "fetch twice", grants=["fetch"])
            (entry,) = (await rt.read_history(ANA, "s1", max_groups=10)).groups
            messages = list(entry.group.messages)
            assert [m.role for m in messages].count(Role.TOOL) == 3
            copied = await rt.append(ANA, "s2", messages)
            again = (await rt.read_history(ANA, "s2", max_groups=10)).messages
    assert copied.seq == 0 and list(again) == messages


def _with_calls(role: Role, **extra: Any) -> Message:
    return Message(role, "asks", tool_calls=(ToolCall("c9", "fetch", {"q": "x"}),), **extra)


@pytest.mark.parametrize(
    "caller",
    [
        pytest.param(
            _with_calls(Role.TOOL, payload={"k": "result"}, payload_format=FORMAT), id="foreign-tool"
        ),
        pytest.param(_with_calls(Role.USER), id="user"),
        pytest.param(_with_calls(Role.SYSTEM), id="system"),
    ],
)
async def test_tool_calls_on_a_message_not_the_assistants_are_refused_nothing_written(
    caller: Message,
) -> None:
    # run() sends a foreign tool message as data and a user message as text, never their calls: the
    # results after them would reach the model answering no call (a request the API refuses).
    rt = _runtime()
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
            before = await _state(rt)
            with pytest.raises(InvalidArgumentError, match=r"message 1 \(\w+\) carries tool calls"):
                await rt.append(ANA, "s1", [USER, caller, _result("c9")])
            assert await _state(rt) == before


async def test_one_assistant_message_naming_a_call_id_twice_is_refused_nothing_written() -> None:
    # run() refuses such a reply from a provider ("each result answers exactly one call"), and Chat
    # Completions refuses a request holding it ("Duplicate value for 'tool_call_id'"): appended, the
    # group was sent on every later turn of the session.
    rt = _runtime()
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
            before = await _state(rt)
            with pytest.raises(
                InvalidArgumentError, match=r"message 1 \(assistant\) names tool call id 'c1' twice"
            ):
                await rt.append(ANA, "s1", [USER, _calling("c1", "c1"), _result("c1"), _result("c1")])
            assert await _state(rt) == before
            # The same calls with an id each are one valid group.
            await rt.append(ANA, "s1", [USER, _calling("c1", "c2"), _result("c1"), _result("c2")])


REUSED = [
    pytest.param(
        [USER, _calling("c1"), _result("c1"), _calling("c1"), _result("c1"), Message(Role.USER, "more")],
        3,
        1,
        id="on-the-next-step",
    ),
    pytest.param(
        [USER, _calling("c1"), _result("c1"), _calling("c2", "c1"), _result("c2"), _result("c1")],
        3,
        1,
        id="second-call-of-a-later-step",
    ),
    pytest.param(
        [
            USER,
            _calling("a", "b"),
            _result("b"),
            _result("a"),
            Message(Role.ASSISTANT, "and again"),
            Message(Role.USER, "once more"),
            _calling("b"),
            _result("b"),
        ],
        6,
        1,
        id="steps-apart",
    ),
]


@pytest.mark.parametrize(("messages", "index", "first"), REUSED)
async def test_a_call_id_named_again_on_a_later_step_is_refused_nothing_written(
    messages: list[Message], index: int, first: int
) -> None:
    # run() sends a group as committed: with one id on two calls, the request of every later turn
    # holds two tool results of that id, which Chat Completions refuses ("Duplicate value for
    # 'tool_call_id'"); the pairing of results to calls is ambiguous too.
    rt = _runtime()
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
            before = await _state(rt)
            with pytest.raises(
                InvalidArgumentError,
                match=rf"message {index} \(assistant\) names tool call id '\w+', already named by "
                rf"message {first}",
            ) as caught:
                await rt.append(ANA, "s1", messages)
            assert not isinstance(caught.value, IncompleteGroupError)  # every call is answered
            assert "nothing was written" in str(caught.value)
            assert await _state(rt) == before


async def test_a_foreign_result_naming_an_answered_call_id_is_still_accepted() -> None:
    # A payload tool message answering no open call is sent as data (no tool_call_id on the wire):
    # naming an id already answered repeats nothing in the request.
    provider = ScriptedProvider(replies=["ok"])
    rt = _runtime(provider)
    async with rt:
        with anyio.fail_after(30):
            await rt.append(ANA, "s1", [USER, _calling("c1"), _result("c1"), _foreign("c1")])
            await rt.run(ANA, "s1", "next")
    (request,) = provider.calls
    sent = [*request.history, *request.turn]
    ids = [m.tool_call_id for m in sent if m.role is Role.TOOL]
    assert ids == ["c1"] and _answered_in_turn(sent)
