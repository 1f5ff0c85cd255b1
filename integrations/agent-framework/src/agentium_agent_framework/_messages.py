"""Agent Framework messages as Agentium messages, and back: one framework message, one Agentium message.

Each message is kept whole as its payload (``Message.to_dict()``, format
:data:`MESSAGE_FORMAT`) with readable text as its content; a load decodes it
with ``Message.from_dict`` and fails closed on one it cannot. Kept apart
from the provider (:mod:`._provider`), which reads and writes history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from agent_framework import Content
from agent_framework import Message as AFMessage

from agentium_harness import MAX_APPEND_MESSAGES, InvalidArgumentError, Message, Role
from agentium_harness.plugin_api import copy_plain_json, read_host_items

__all__ = [
    "MAX_CONTENT_CHARS",
    "MESSAGE_FORMAT",
    "ForeignMessageError",
    "from_agentium",
    "listed",
    "to_agentium",
]

#: ``Message.payload_format`` of an Agent Framework message: ``agent_framework.Message.to_dict()``.
MESSAGE_FORMAT: Final = "agent_framework.message/v1"
#: The readable ``content`` is cut to this many characters (the message itself is never cut).
MAX_CONTENT_CHARS: Final = 16_384


_ROLES: Final = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}


class ForeignMessageError(InvalidArgumentError):
    """History holds something that is not an Agent Framework message, or a message cannot be stored.

    On ``save_messages`` nothing was written. On ``get_messages`` the read
    failed closed: nothing was skipped and nothing was changed. Its text
    names no message content, only the type of what was raised and where
    (which message); the exception the message raised is its ``__cause__``.
    """


def _readable(message: AFMessage) -> str:
    """Readable text for ``message``: its text, and a short line per call or result (never raw JSON)."""
    parts: list[str] = []
    for content in message.contents:
        kind = getattr(content, "type", None)
        if kind == "text":
            parts.append(str(getattr(content, "text", "") or ""))
        elif kind == "function_call":
            parts.append(
                f"[function_call {getattr(content, 'name', '?')}] {getattr(content, 'arguments', '')}"
            )
        elif kind == "function_result":
            parts.append(
                f"[function_result {getattr(content, 'call_id', '?')}] {getattr(content, 'result', '')}"
            )
        elif isinstance(kind, str):
            parts.append(f"[{kind}]")
    text = "\n".join(p for p in parts if p)
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


def _result_call_id(message: AFMessage) -> str | None:
    """The ``call_id`` of a ``tool`` message's one ``function_result``, if core takes it as an id.

    Core refuses an id that is empty, longer than 256 characters or holds a control character;
    the message keeps its contents whatever they are (the payload is kept exactly).
    """
    contents = message.contents
    ids = [getattr(c, "call_id", None) for c in contents if getattr(c, "type", None) == "function_result"]
    if len(ids) != 1 or not isinstance(ids[0], str):
        return None
    call_id = str.__str__(ids[0])  # its characters: a str subclass's own methods are not run
    return call_id if 0 < len(call_id) <= 256 and call_id.isprintable() else None


def to_agentium(message: AFMessage) -> Message:
    """The Agentium message for one framework message: ``to_dict()`` as payload, readable text as content.

    Roles: ``user``, ``assistant`` and ``system`` keep theirs (``developer``
    is ``system``); a ``tool`` message (function results) is a ``tool``
    message (its result's ``call_id`` as ``tool_call_id`` when it holds one
    result whose id core takes). Its call is a framework message, not one of
    core's structured calls (a run may save a call and its result in
    different saves), and a ``tool`` message with a payload needs none:
    Agentium's own ``run()`` shows it to the model as ``tool_output`` source
    data, never as the user's words. A message of any other role is ``user``.
    """
    if not isinstance(message, AFMessage):
        raise ForeignMessageError(
            f"save_messages takes agent_framework.Message objects, got {type(message).__name__}; "
            "nothing was written"
        )
    try:
        framework_role = str(message.role)
        role = Role.TOOL if framework_role == "tool" else _ROLES.get(framework_role, Role.USER)
        call_id = _result_call_id(message) if role is Role.TOOL else None
        text, payload = _readable(message), message.to_dict()
    except Exception as exc:
        # A message's role, contents and to_dict() are the framework's (or a subclass's) code:
        # whatever they raise, the host gets this integration's typed error, not a bare one.
        raise ForeignMessageError(
            f"a message could not be read or serialized ({type(exc).__name__} raised); nothing was written"
        ) from exc
    try:
        # A load decodes every message with Message.from_dict and fails closed on one it cannot
        # (it never skips one): a to_dict() that does not decode (a subclass's own) would make
        # every later load of the session fail. It is refused here, before anything is written.
        AFMessage.from_dict(payload)
    except Exception as exc:
        raise ForeignMessageError(
            f"a message's to_dict() does not decode as an Agent Framework message "
            f"({type(exc).__name__} raised by Message.from_dict), so no load could read it back; "
            "nothing was written"
        ) from exc
    return Message(role, text, tool_call_id=call_id, payload=payload, payload_format=MESSAGE_FORMAT)


def listed(messages: Sequence[AFMessage]) -> list[AFMessage]:
    """The messages of a ``save_messages`` call, read once; what iterating them raises is a typed error.

    A sequence of the host's own type runs its own code when iterated
    (:func:`~agentium_harness.plugin_api.read_host_items`): whatever that raises
    reaches the host as :class:`ForeignMessageError`, and a sequence that never
    ends is cut off past ``MAX_APPEND_MESSAGES`` (``append`` takes no more).
    """
    try:
        return read_host_items(
            messages,
            MAX_APPEND_MESSAGES,
            too_many=f"save_messages takes at most {MAX_APPEND_MESSAGES} messages in one call; "
            "nothing was written",
            unreadable="save_messages could not iterate its messages",
        )
    except InvalidArgumentError as exc:
        raise ForeignMessageError(str(exc)) from exc.__cause__


def _from_native(message: Message, where: str) -> AFMessage:
    """The framework message for one Agentium's own ``run()`` committed (no payload).

    As the framework itself holds a tool exchange: an assistant message's
    text and a ``function_call`` content per tool call it made; a tool result
    as a ``tool`` message holding a ``function_result`` content. Never the
    tool's output as a ``user`` message: it may be a fetched page, and shown
    as the user's words it would speak for the user.
    """
    if message.role is Role.TOOL:
        if message.tool_call_id is None:
            # Core refuses such a message at append: a tool result answering no call is damage.
            raise ForeignMessageError(f"{where} is a tool result naming no call; the history is damaged")
        return AFMessage(
            "tool", [Content.from_function_result(call_id=message.tool_call_id, result=message.content)]
        )
    if not message.tool_calls:
        return AFMessage(message.role.value, [message.content])
    contents = [Content.from_text(message.content)] if message.content else []
    for call in message.tool_calls:
        # A copy: the message may be the one the runtime's adapters hold (a read without copy).
        arguments = copy_plain_json(call.arguments)
        contents.append(Content.from_function_call(call_id=call.id, name=call.name, arguments=arguments))
    return AFMessage(message.role.value, contents)


def from_agentium(message: Message, where: str) -> AFMessage:
    """The framework message a committed message stands for; another format fails closed.

    A message without a payload (committed by Agentium's own ``run()``) is
    the message the framework holds for it: a tool result a ``tool``
    message of ``function_result`` content, an assistant's tool calls
    ``function_call`` contents (:func:`_from_native`).
    """
    if message.payload_format == MESSAGE_FORMAT:
        if not isinstance(message.payload, dict):
            raise ForeignMessageError(f"{where} has payload_format {MESSAGE_FORMAT} but no message object")
        try:
            return AFMessage.from_dict(message.payload)
        except Exception as exc:  # the framework's own decoder: any failure is damage, never skipped
            # Only the exception's type: its text may quote the stored message (the decoder names
            # what it read), and errors carry no user's words. The exception is kept as __cause__.
            raise ForeignMessageError(
                f"{where} does not decode as an Agent Framework message ({type(exc).__name__} raised "
                "by Message.from_dict); the history is damaged: nothing was skipped or changed"
            ) from exc
    if message.payload_format is not None:
        raise ForeignMessageError(
            f"{where} holds a {message.payload_format!r} item, not an Agent Framework message "
            f"({MESSAGE_FORMAT}); this session id is used by another framework's integration"
        )
    return _from_native(message, where)
