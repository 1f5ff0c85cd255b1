"""The provider reply check refuses at least what the plain encoding check did, and keeps a plain copy.

The check is now the one ``append`` applies (valid text, plain JSON
arguments and payloads, a payload named by its format), on a plain
:class:`Message` copy: whatever the reply, it raises
:class:`ContractViolationError` wherever the plain check it replaced did, and
a reply it accepts is that check's message as a plain ``Message``, which
encodes canonically.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import ContractViolationError, Message, Role, ToolCall
from agentium_harness._codec import MAX_ARGUMENT_DEPTH, canonical_json, json_depth_exceeds, unstructure
from agentium_harness._engine.reply_check import check_response as _check_response
from agentium_harness.plugin_api import ModelResponse, Usage


def _plain_check(response: Any, may_call_tools: bool) -> Message:
    # The check as it was (a5875de), shortcut-free: attrs.evolve, then the converter's encoding.
    if not isinstance(response, ModelResponse) or not isinstance(response.message, Message):
        raise ContractViolationError(
            f"provider returned {type(response).__name__}, not a ModelResponse; the session was not changed"
        )
    usage = response.usage
    if not isinstance(usage, Usage) or not all(
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
        for v in (usage.input_tokens, usage.output_tokens)
    ):
        raise ContractViolationError(f"provider returned invalid usage {usage!r}")
    reply = attrs.evolve(response.message, role=Role.ASSISTANT, tool_call_id=None)
    if reply.tool_calls and not may_call_tools:
        raise ContractViolationError(
            "provider returned tool calls but does not declare the tool_calls capability; "
            "no tool was run and the session was not changed"
        )
    # An id named twice in one reply was refused here too; the turn now renames the second call
    # (test_run_call_id_reuse.py), so the check it is compared with no longer refuses it.
    for call in reply.tool_calls:
        if not isinstance(call, ToolCall) or not isinstance(call.arguments, dict):
            raise ContractViolationError("provider returned a malformed tool call")
    try:
        canonical_json(unstructure(reply))
        for call in reply.tool_calls:
            if json_depth_exceeds(canonical_json(call.arguments), MAX_ARGUMENT_DEPTH):
                raise ValueError(f"tool call arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels")
    except (ValueError, TypeError) as exc:
        raise ContractViolationError(
            f"provider returned a message that cannot be encoded canonically ({exc}); "
            "no tool was run and the session was not changed"
        ) from exc
    return reply


@attrs.frozen(slots=True)
class Tagged(Message):
    tag: Any = None


CONTENT = st.one_of(st.text(max_size=8), st.just("é\ud800"), st.just("\udfff"), st.integers(), st.none())
VALUES = st.one_of(st.integers(), st.just(math.nan), st.just({1, 2}), st.text(max_size=3), st.just((1,)))
COUNTS = st.one_of(st.none(), st.integers(-1, 5), st.just(True), st.just(1.0))


@st.composite
def responses(draw: st.DrawFn) -> Any:
    calls = tuple(
        ToolCall(draw(st.sampled_from(["a", "b"])), "t", {"k": draw(VALUES)})
        for _ in range(draw(st.integers(0, 2)))
    )
    payload = draw(st.one_of(st.none(), VALUES))
    fields = {
        "role": draw(st.sampled_from(Role)),
        "content": draw(CONTENT),
        "tool_calls": calls if draw(st.booleans()) else (),
        "tool_call_id": draw(st.one_of(st.none(), st.just("x"))),
        "payload": payload,
        "payload_format": draw(st.one_of(st.none(), st.just("x/v1"), st.just(3))),
    }
    message = Tagged(**fields, tag=draw(VALUES)) if draw(st.integers(0, 5)) == 0 else Message(**fields)
    if draw(st.integers(0, 9)) == 0:
        return message  # not a ModelResponse at all
    return ModelResponse(message, Usage(draw(COUNTS), draw(COUNTS)))


def _outcome(check: Any, response: Any, may_call_tools: bool) -> Any:
    try:
        return check(response, may_call_tools)
    except ContractViolationError as exc:
        return str(exc)


def _plain(message: Message) -> Message:
    return Message(
        message.role,
        message.content,
        message.tool_calls,
        message.tool_call_id,
        message.payload,
        message.payload_format,
    )


@settings(max_examples=500, deadline=None)
@given(responses(), st.booleans())
def test_the_reply_check_refuses_what_the_plain_check_did_and_keeps_a_plain_copy(
    response: Any, may_call_tools: bool
) -> None:
    got = _outcome(_check_response, response, may_call_tools)
    if isinstance(response, ModelResponse) and isinstance(response.message, Message):
        # A subclass's own fields are not history: the plain check judges Message's fields.
        response = ModelResponse(_plain(response.message), response.usage)
    expected = _outcome(_plain_check, response, may_call_tools)
    if isinstance(expected, str):
        assert isinstance(got, str)
    if isinstance(got, Message):
        assert type(got) is Message and got == _plain(expected)
        canonical_json(unstructure(got))  # what is kept encodes


def test_a_reply_of_a_message_subclass_is_kept_as_a_plain_message() -> None:
    # Only Message's fields are history: a subclass's own field is not kept (nor encoded).
    response = ModelResponse(Tagged(Role.ASSISTANT, "hi", tag=math.nan))
    got = _check_response(response, False)
    assert type(got) is Message and got == Message(Role.ASSISTANT, "hi")
    fine = ModelResponse(Tagged(Role.USER, "hi", tag=1))
    assert _check_response(fine, False) == Message(Role.ASSISTANT, "hi")


def test_a_model_response_whose_message_is_not_a_message_names_the_message_field() -> None:
    # It said "provider returned ModelResponse, not a ModelResponse", sending the author elsewhere.
    for message in ("hello", None, {"role": "assistant", "content": "hi"}):
        response = ModelResponse(message)  # type: ignore[arg-type]
        assert _outcome(_check_response, response, False) == (
            f"provider returned a ModelResponse whose message is a {type(message).__name__}, not a Message"
        )
    assert _outcome(_check_response, "hello", False) == "provider returned str, not a ModelResponse"
