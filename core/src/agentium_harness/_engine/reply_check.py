"""The check of a provider's reply, before anything acts on it (step 7 of a turn).

A reply is refused with :class:`~agentium_harness._errors.ContractViolationError`
before any of its tool calls runs when it is not a ``ModelResponse`` holding a
``Message``, when its usage is no plain count, when it carries tool calls the
provider did not declare or more than :data:`MAX_TOOL_CALLS`, when it is not
what ``append`` would store, or when its text is over :data:`MAX_REPLY_BYTES`.

A call naming the id of an earlier call of the same reply, of the same turn,
or of a call in the history the request sends is no error: it is given an id
of its own (:func:`.call_ids.distinct_ids`).
"""

from __future__ import annotations

from .._errors import ContractViolationError, InvalidArgumentError
from .._history import Message, ToolCall
from .._ports.provider import ModelResponse, Usage
from .._text import clean_text
from .._validators import MAX_COUNT
from .history_checks import check_reply

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_TOOL_CALLS",
    "check_calls",
    "check_response",
    "checked_response",
    "count_of",
]

#: Most tool calls one provider reply may carry; a reply with more is a contract violation.
MAX_TOOL_CALLS = 128
#: Most UTF-8 bytes of text in one provider reply: a longer one is a contract violation (8 MiB).
MAX_REPLY_BYTES = 8 * 1024 * 1024


def count_of(value: object, what: str) -> int | None:
    """A token count a provider reported, as a plain ``int`` from 0 to ``MAX_COUNT``; ``None`` (unknown) kept.

    Anything else (a bool, a float, below 0, past the ceiling of every count) is a
    :class:`ContractViolationError`. The value is copied as a plain ``int`` first: an ``int``
    subclass's own comparisons and arithmetic are not trusted.
    """
    if value is None:
        return None
    plain = int.__int__(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if plain is None or not 0 <= plain <= MAX_COUNT:
        # Never the number itself: one of more than 4,300 digits cannot even be printed.
        shown = (
            f"a {clean_text(type(value).__name__)}"
            if plain is None
            else ("below 0" if plain < 0 else "too large")
        )
        raise ContractViolationError(
            f"provider returned invalid usage ({what} is {shown}: a count is an int from 0 to {MAX_COUNT}); "
            "none of its tool calls was run"
        )
    return plain


def check_calls(calls: tuple[ToolCall, ...], may_call_tools: bool) -> None:
    """Tool calls only when declared, at most :data:`MAX_TOOL_CALLS`, well formed.

    An id named twice (in the reply, the turn or the history sent) is no error here:
    :func:`.call_ids.distinct_ids` renames the later call.
    """
    if calls and not may_call_tools:
        raise ContractViolationError(
            "provider returned tool calls but does not declare the tool_calls capability; "
            "none of its tool calls was run"
        )
    if len(calls) > MAX_TOOL_CALLS:
        raise ContractViolationError(
            f"provider returned {len(calls)} tool calls in one reply, over the limit of {MAX_TOOL_CALLS}; "
            "none of its tool calls was run"
        )
    for call in calls:
        if (
            not isinstance(call, ToolCall)
            or not isinstance(call.arguments, dict)
            or not isinstance(call.id, str)
        ):
            raise ContractViolationError("provider returned a malformed tool call")


def check_response(response: object, may_call_tools: bool) -> Message:
    """The reply as a plain assistant message, or :class:`ContractViolationError` before anything runs."""
    return checked_response(response, may_call_tools)[0]


def checked_response(response: object, may_call_tools: bool) -> tuple[Message, Usage]:
    """The reply as a plain assistant message and its usage as plain counts (or ContractViolationError).

    Each field of the response is read once: what is checked is what is used (a subclass's
    property could answer differently on a second read).
    """
    if not isinstance(response, ModelResponse):
        raise ContractViolationError(
            f"provider returned {clean_text(type(response).__name__)}, not a ModelResponse"
        )
    given = response.message
    if not isinstance(given, Message):
        # Said apart: "returned ModelResponse, not a ModelResponse" sent the author to the wrong field.
        raise ContractViolationError(
            f"provider returned a ModelResponse whose message is a {clean_text(type(given).__name__)}, "
            "not a Message"
        )
    reported = response.usage
    if not isinstance(reported, Usage):
        raise ContractViolationError(
            f"provider returned invalid usage (a {clean_text(type(reported).__name__)})"
        )
    usage = Usage(
        input_tokens=count_of(reported.input_tokens, "input_tokens"),
        output_tokens=count_of(reported.output_tokens, "output_tokens"),
    )
    calls = given.tool_calls
    if not isinstance(calls, tuple):
        raise ContractViolationError("provider returned a malformed tool call")
    check_calls(calls, may_call_tools)  # before the copy: it bounds the work of copying
    try:
        # The checks ``append`` applies (valid text, plain JSON arguments nested at most
        # MAX_ARGUMENT_DEPTH, a bounded payload named by its format), on a plain copy: a reply
        # never becomes history ``append`` would refuse, or that its own decoder would.
        reply = check_reply(given)
    except InvalidArgumentError as exc:
        what = clean_text(str(exc)).removesuffix("; nothing was written")
        raise ContractViolationError(
            f"provider returned a message that cannot be encoded canonically ({what}); "
            "none of its tool calls was run"
        ) from exc
    # Again on the copy, which is what runs and is kept: a Message subclass may answer a second
    # read of its tool calls with others than the first.
    check_calls(reply.tool_calls, may_call_tools)
    content = reply.content
    if len(content) * 4 > MAX_REPLY_BYTES and len(content.encode("utf-8")) > MAX_REPLY_BYTES:
        raise ContractViolationError(
            f"provider returned a reply of more than {MAX_REPLY_BYTES} bytes of text; "
            "none of its tool calls was run"
        )
    return reply, usage
