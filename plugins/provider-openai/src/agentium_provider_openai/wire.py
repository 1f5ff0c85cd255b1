"""The Chat Completions wire format: a :class:`ModelRequest` out, a chat completion body back.

Out (:func:`request_messages`, :func:`request_tools`):

1. the host instructions as the one ``system`` (or ``developer``) message;
2. the labeled source data (:meth:`ModelRequest.render_sources`: the notice that
   says how block text is escaped, then each block rendered inside its
   ``<source-data …>`` wrapper), in a ``user``-role message of its
   own (or, with ``source_placement = "with_input"``, as a separate text part of
   the turn's first user message) — never merged into the instructions (R4);
3. resident history, then the turn so far, with assistant tool calls
   (``arguments`` as a JSON string) and ``tool`` results by ``tool_call_id``;
4. granted tools as ``function`` tools.

Back (:func:`parse_completion`): the first choice's message (its ``role``
``assistant``, or not given) becomes an assistant :class:`Message`; its tool
calls become :class:`ToolCall` with ``arguments`` parsed as a JSON object
(size-capped, strictly, depth-capped); usage is taken from ``usage``. Any shape this cannot use is an
:class:`OpenAIMalformedReplyError`, never a crash; an answer the server says
it cut off (``finish_reason`` ``length`` or ``content_filter``) is an
:class:`OpenAIIncompleteReplyError`, and none of its tool calls is parsed or run.
One that says it calls a tool yet holds no tool call (a legacy
``function_call``) is malformed: never taken for an empty answer.
"""

from __future__ import annotations

import json
from typing import Any, Final

from agentium_harness import InvalidArgumentError, InvalidIdError
from agentium_harness.plugin_api import (
    SOURCE_DATA_NOTICE,
    InvalidJSONError,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
    decode_json,
)

from .config import DEFAULT_MAX_TOOL_ARGUMENTS_BYTES, MAX_TOOL_ARGUMENTS_DEPTH, REPLY_ENVELOPE_DEPTH
from .errors import OpenAIIncompleteReplyError, OpenAIMalformedReplyError, OpenAIReplyLimitError, scrub

__all__ = [
    "INCOMPLETE_FINISH_REASONS",
    "SOURCE_PREAMBLE",
    "check_sendable",
    "decode_reply",
    "holds_lone_surrogate",
    "parse_completion",
    "request_messages",
    "request_tools",
    "shown",
]

#: ``finish_reason`` values that say the answer was cut off: its text may be
#: partial and its tool calls' arguments truncated, so none of it is used.
INCOMPLETE_FINISH_REASONS: Final = frozenset({"length", "content_filter"})

#: The first line of the source-data message: the core's notice, which says
#: what the blocks are and how their text is escaped; the blocks follow.
SOURCE_PREAMBLE: Final = SOURCE_DATA_NOTICE

#: ``parameters`` of a granted tool whose host gave no JSON Schema: the model
#: may pass any JSON object.
ANY_OBJECT: Final[dict[str, Any]] = {"type": "object", "additionalProperties": True}

_WIRE_ROLE: Final = {
    Role.SYSTEM: "system",
    Role.USER: "user",
    Role.ASSISTANT: "assistant",
    Role.TOOL: "tool",
}


def _message(message: Message) -> dict[str, Any]:
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    wire: dict[str, Any] = {"role": _WIRE_ROLE[message.role], "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        # OpenAI wants null content beside tool calls when there is no text.
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def request_messages(
    request: ModelRequest, *, instructions_role: str = "system", source_placement: str = "separate"
) -> list[dict[str, Any]]:
    """The ``messages`` array for ``request``, in the order the request gives (see the module doc)."""
    messages: list[dict[str, Any]] = [{"role": instructions_role, "content": request.instructions}]
    conversation = [_message(m) for m in (*request.history, *request.turn)]
    if request.sources:
        sources = request.render_sources()
        first_input = next(
            (i for i, m in enumerate(conversation) if i >= len(request.history) and m["role"] == "user"),
            None,
        )
        if source_placement == "with_input" and first_input is not None:
            # Two text parts of one user message: the template sees one user
            # turn, the model still sees the source data apart from the input.
            item = conversation[first_input]
            item["content"] = [
                {"type": "text", "text": sources},
                {"type": "text", "text": item["content"]},
            ]
        else:
            messages.append({"role": "user", "content": sources})
    messages.extend(conversation)
    return messages


def request_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """The granted tools as Chat Completions ``function`` tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters) if t.parameters is not None else dict(ANY_OBJECT),
            },
        }
        for t in tools
    ]


def holds_lone_surrogate(value: object) -> bool:
    """True when a string anywhere in ``value`` (JSON-like data) cannot be encoded as UTF-8.

    A lone surrogate (what Python makes of bytes that were not UTF-8) cannot be
    sent: the client's JSON encoder would raise a bare ``UnicodeEncodeError``.
    """
    pending = [value]
    while pending:  # a loop, not recursion: a tool's schema may nest deeply
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def check_sendable(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
    """Refuse (:class:`InvalidArgumentError`) a request with text that cannot be sent; say where, not what."""
    for i, message in enumerate(messages):
        if holds_lone_surrogate(message):
            raise InvalidArgumentError(
                f"the request's messages[{i}] (role {message.get('role')}) holds text that is not valid "
                "Unicode (a lone surrogate); nothing was sent"
            )
    for i, tool in enumerate(tools):
        if holds_lone_surrogate(tool):
            raise InvalidArgumentError(
                f"the request's tools[{i}] holds text that is not valid Unicode (a lone surrogate); "
                "nothing was sent"
            )


#: At most this many characters of a server's value (a tool's name, its arguments) are quoted.
_SHOWN_CHARS: Final = 80


def shown(value: object, secret: str | None) -> str:
    """A server's value as a message quotes it: text scrubbed of the key, anything else by type only.

    Only text is quoted (a list or an object could be large, or hide the key
    where a cut would split it); the key is replaced before the text is cut.
    """
    if isinstance(value, str):
        # Quoted by hand: repr() would escape scrub's escapes a second time.
        return f"'{scrub(value, secret, _SHOWN_CHARS)}'"
    return f"a JSON {type(value).__name__}"


def _malformed(what: str) -> OpenAIMalformedReplyError:
    return OpenAIMalformedReplyError(
        f"the server's chat completion is malformed: {what}; nothing from it was used and no tool ran"
    )


def _depth_limit(what: str, max_depth: int, *, body: bool = False) -> OpenAIReplyLimitError:
    allowance = f" plus {REPLY_ENVELOPE_DEPTH} levels of its own" if body else ""
    return OpenAIReplyLimitError(
        f"the server's chat completion is past a limit: {what} nest arrays and objects deeper than "
        f"max_tool_arguments_depth={max_depth}{allowance}; nothing from it was used and no tool ran",
        limit="max_tool_arguments_depth",
        value=max_depth,
    )


#: The largest token count taken from a reply's ``usage``: the largest integer a
#: JSON number carries exactly everywhere (2**53 - 1). Far past any real call.
MAX_TOKEN_COUNT: Final = 2**53 - 1


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    # A count the server does not give (or gives as nonsense: negative, not an
    # integer, or a 1000-digit number that would swamp every sum it joins) stays
    # unknown: the engine then estimates it and says so.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _arguments(
    index: int, name: object, raw: object, max_bytes: int, max_depth: int, secret: str | None
) -> object:
    """The decoded arguments of tool call ``index``: sized, then parsed strictly within the depth cap."""
    what = f"the arguments of tool call {index} ({shown(name, secret)})"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}  # some servers send "" for a call without arguments
    if isinstance(raw, dict):
        # Not the standard wire form, but unambiguous: an object already. It
        # goes through its JSON text like the standard form, so the same caps
        # and the same strictness apply.
        try:
            raw = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        except RecursionError:
            raise _depth_limit(what, max_depth) from None
        except (ValueError, TypeError) as exc:
            raise _malformed(f"{what} are not JSON data ({scrub(str(exc), secret)})") from None
    elif not isinstance(raw, str):
        raise _malformed(f"{what} are not a JSON string")
    assert isinstance(raw, str)
    # A character is at least one byte: a long string is refused without encoding it.
    size = len(raw) if len(raw) > max_bytes else len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise OpenAIReplyLimitError(
            f"the server's chat completion is past a limit: {what} are {size} bytes, more than "
            f"max_tool_arguments_bytes={max_bytes}; nothing from it was used and no tool ran",
            limit="max_tool_arguments_bytes",
            value=max_bytes,
        )
    try:
        return decode_json(raw, max_depth=max_depth, max_bytes=max_bytes)
    except InvalidJSONError as exc:
        if exc.limit == "max_depth":
            raise _depth_limit(what, max_depth) from None
        reason = scrub(exc.reason.removeprefix("not valid JSON: "), secret)
        raise _malformed(f"{what} are not valid JSON ({reason}): {shown(raw, secret)}") from None


def _tool_call(index: int, item: object, max_bytes: int, max_depth: int, secret: str | None) -> ToolCall:
    if not isinstance(item, dict):
        raise _malformed(f"tool_calls[{index}] is not an object")
    kind = item.get("type", "function")
    function = item.get("function")
    if kind != "function" or not isinstance(function, dict):
        raise _malformed(f"tool_calls[{index}] is not a function call (type {shown(kind, secret)})")
    name = function.get("name")
    arguments = _arguments(index, name, function.get("arguments"), max_bytes, max_depth, secret)
    if not isinstance(arguments, dict):
        raise _malformed(
            f"the arguments of tool call {index} ({shown(name, secret)}) are JSON "
            f"{type(arguments).__name__}, not an object"
        )
    try:
        return ToolCall(item.get("id"), name, arguments)  # type: ignore[arg-type]  # checked by ToolCall
    except InvalidIdError as exc:
        raise _malformed(f"tool call {index} has no usable id or name ({scrub(str(exc), secret)})") from None


def _refuse_incomplete(choice: dict[str, Any], message: dict[str, Any]) -> None:
    """Refuse an answer the server says it cut off, before any of its tool calls is even parsed."""
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        # A list or an object says nothing usable about the answer (and cannot even
        # be looked up in a set: it is unhashable).
        raise _malformed(f"its finish_reason is {shown(reason, None)}, not text")
    if reason not in INCOMPLETE_FINISH_REASONS:
        return
    raw_calls = message.get("tool_calls")
    calls = len(raw_calls) if isinstance(raw_calls, list) else 0
    held = f" with {calls} tool call(s), none of which ran" if calls else ""
    hint = (
        "raise max_completion_tokens (or the server's output limit) or shorten the request"
        if reason == "length"
        else "the server's content filter stopped the answer"
    )
    raise OpenAIIncompleteReplyError(
        f"the server cut its answer off (finish_reason {reason!r}){held}; nothing of the answer was used "
        f"({hint})",
        finish_reason=str(reason),
        tool_calls=calls,
    )


#: ``finish_reason`` values that say the answer is a call (of a tool, or a legacy function).
CALL_FINISH_REASONS: Final = frozenset({"tool_calls", "function_call"})


def _refuse_lost_calls(choice: dict[str, Any], message: dict[str, Any], secret: str | None) -> None:
    """Refuse an answer that says it calls a tool yet holds no tool call: the call was lost, not answered.

    Taken as it stands, it would be a complete answer of its text (often none): the
    turn would commit an empty answer in place of the call the model made.
    """
    legacy = message.get("function_call")
    if legacy is not None:
        # The deprecated functions API: never asked for (tools are offered, "functions" is reserved).
        name = legacy.get("name") if isinstance(legacy, dict) else legacy
        raise _malformed(
            f"its message holds a legacy function_call ({shown(name, secret)}) instead of tool_calls; "
            "the call was not run and is not taken for an empty answer"
        )
    if choice.get("finish_reason") in CALL_FINISH_REASONS:
        raise _malformed(
            f"its finish_reason is {choice['finish_reason']!r} but it holds no tool call; "
            "the call was lost and is not taken for an empty answer"
        )


def decode_reply(
    data: bytes, *, max_tool_arguments_depth: int = MAX_TOOL_ARGUMENTS_DEPTH, secret: str | None = None
) -> object:
    """A reply body (already read within ``max_reply_bytes``) decoded strictly, as plain JSON data.

    The core's :func:`decode_json` does the work: nesting deeper than
    ``max_tool_arguments_depth`` plus :data:`REPLY_ENVELOPE_DEPTH` is refused
    from the bytes before parsing (an :class:`OpenAIReplyLimitError`), as are
    text that is not UTF-8 or not JSON, a duplicate object key, ``NaN`` or
    ``Infinity``, and a lone surrogate escape (an :class:`OpenAIMalformedReplyError`).
    A reason that quotes the body (a repeated key) is scrubbed of ``secret``.
    """
    try:
        return decode_json(
            data, max_depth=max_tool_arguments_depth + REPLY_ENVELOPE_DEPTH, max_bytes=len(data)
        )
    except InvalidJSONError as exc:
        if exc.limit == "max_depth":
            raise _depth_limit("the body", max_tool_arguments_depth, body=True) from None
        raise _malformed(f"the body is not JSON it can use ({scrub(exc.reason, secret)})") from None


def parse_completion(
    body: object,
    *,
    max_tool_arguments_bytes: int = DEFAULT_MAX_TOOL_ARGUMENTS_BYTES,
    max_tool_arguments_depth: int = MAX_TOOL_ARGUMENTS_DEPTH,
    secret: str | None = None,
) -> ModelResponse:
    """The model's answer in a chat completion body (a JSON value decoded by :func:`decode_reply`).

    Raises :class:`OpenAIMalformedReplyError` for any body it cannot use: not
    an object, an ``error`` object, no ``choices``, a choice without a message,
    a message whose ``role`` is given and is not ``"assistant"``, a
    ``finish_reason`` that is neither text nor null, content or a ``refusal``
    that is not text, a refusal beside answer text or tool calls, a malformed
    tool call, or an answer that says it calls a tool
    (a legacy ``function_call``, ``finish_reason`` ``tool_calls`` or
    ``function_call``) yet holds no tool call; its subclass
    :class:`OpenAIReplyLimitError` for a tool call whose arguments are larger
    than ``max_tool_arguments_bytes`` or nested deeper than
    ``max_tool_arguments_depth``.
    Raises :class:`OpenAIIncompleteReplyError` when the first choice's
    ``finish_reason`` is ``"length"`` or ``"content_filter"``: a cut-off answer
    is never used, and none of its tool calls runs.

    Whatever a message quotes of the server's text (an error object's
    ``message``, a tool's name, the start of bad arguments) goes through
    :func:`scrub` with ``secret``, the API key: an echoed key shows as ``***``.
    """
    if not isinstance(body, dict):
        raise _malformed(f"the body is JSON {type(body).__name__}, not an object")
    if "error" in body and "choices" not in body:
        error = body["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        # Only the server's own message is quoted, as for an HTTP error's body.
        said = f" ('{scrub(detail, secret)}')" if isinstance(detail, str) and detail.strip() else ""
        raise _malformed(f"the body is an error object{said}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _malformed("it has no choices (the server returned no answer)")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise _malformed("its first choice has no message object")
    role = message.get("role")
    if role is not None and role != "assistant":
        # A reply in another speaker's name (a user turn, a system or tool message) is never
        # taken for the model's own answer. A missing role claims no speaker: it is the answer.
        raise _malformed(f"its message's role is {shown(role, secret)}, not 'assistant'")
    _refuse_incomplete(choice, message)
    content = message.get("content")
    refusal = message.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        # A refusal it cannot read is never dropped: beside null content it was an empty answer.
        raise _malformed(f"its message's refusal is {shown(refusal, secret)}, not text")
    blank = content is None or (isinstance(content, str) and not content.strip())
    refused = isinstance(refusal, str) and bool(refusal.strip())
    if refused and ((not blank and isinstance(content, str)) or message.get("tool_calls")):
        # A refusal is the whole answer (OpenAI sends it with null content and no call): beside text
        # one of the two was dropped, beside tool calls the calls of a model that declined would run.
        beside = "tool calls" if message.get("tool_calls") else "answer text"
        raise _malformed(f"its message holds a refusal beside {beside}; neither was used and no tool ran")
    if blank and refused:
        # OpenAI puts a model's refusal here with null content: it is the answer, not nothing.
        # Only text (or null) gives way to it: [] or false is a shape this cannot read, refused below.
        content = refusal
    if content is None:
        content = ""
    elif not isinstance(content, str):
        raise _malformed(f"the message content is JSON {type(content).__name__}, not text")
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif not isinstance(raw_calls, list):
        # Even an empty object, "" or false: a shape this cannot read is never taken for "no calls".
        raise _malformed(f"tool_calls is {shown(raw_calls, secret)}, not a list")
    calls = tuple(
        _tool_call(i, item, max_tool_arguments_bytes, max_tool_arguments_depth, secret)
        for i, item in enumerate(raw_calls)
    )
    if not calls:
        _refuse_lost_calls(choice, message, secret)
    usage = body.get("usage")
    counts = usage if isinstance(usage, dict) else {}
    return ModelResponse(
        message=Message(Role.ASSISTANT, content, tool_calls=calls),
        usage=Usage(
            input_tokens=_count(counts, "prompt_tokens"), output_tokens=_count(counts, "completion_tokens")
        ),
    )
