"""OpenAI Agents SDK items to Agentium messages and back.

Every item the SDK stores is kept whole in ``Message.payload`` (plain JSON,
part of the group's canonical bytes and digest) under :data:`ITEM_FORMAT`,
so ``get_items`` gives back exactly what ``add_items`` was given. ``content``
is a readable rendering of the item — what recall indexes, what summaries
read and what Agentium's own ``run()`` would send — never the item's JSON.

Roles: a message item keeps its role (``developer`` is Agentium's
``system``); an item that answers a call (``function_call_output`` and the
other ``*_output`` items) is ``user`` input, since the client supplies it;
every other item (``function_call``, ``reasoning``, hosted tool calls…) is
``assistant`` output. Tool calls are not mapped onto Agentium's structured
``tool_calls``: the SDK may store a call and its output in different
``add_items`` calls (an approval interrupts a run between them), and
Agentium refuses a group that holds half a tool exchange.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from agentium_harness import Message, Role
from agentium_harness.plugin_api import copy_plain_json

from ._errors import ForeignItemError

__all__ = ["ITEM_FORMAT", "MAX_CONTENT_CHARS", "check_item_shape", "item_to_message", "message_to_item"]

#: ``Message.payload_format`` of an SDK item: a Responses API input item, as the SDK stores it.
ITEM_FORMAT: Final = "openai.responses.input_item/v1"
#: The readable ``content`` is cut to this many characters (the item itself is never cut).
MAX_CONTENT_CHARS: Final = 16_384

_MESSAGE_ROLES: Final = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}


def _text_of_parts(parts: object) -> str:
    """The text of a message's content: a string, or the text of each part of a list."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif type(part) is dict:
            # What ``part.get("text", part.get("refusal"))`` gives, without a call for each key.
            text = part["text"] if "text" in part else part.get("refusal")
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("type"), str):
                texts.append(f"[{part['type']}]")
        elif isinstance(part, Mapping):  # a mapping of the host's own: read through its get
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("type"), str):
                texts.append(f"[{part['type']}]")
    return "\n".join(texts)


def _role_and_text(item: Mapping[str, Any]) -> tuple[Role, str]:
    """The item's role, and a short, readable text for it (its kind and its words), never its raw JSON.

    One function for both (each reads the item's ``type``): every appended item is read so.
    """
    kind = item.get("type")
    role = item.get("role")
    message = kind in (None, "message")
    # None and the plain "message" are no output (checked first: the common items, without a call).
    plain = kind is None or (type(kind) is str and kind == "message")
    output = not plain and isinstance(kind, str) and kind.endswith("_output")
    mapped = _MESSAGE_ROLES.get(role) if isinstance(role, str) and message else None
    if mapped is None:
        mapped = Role.USER if output else Role.ASSISTANT
    if "role" in item and message:
        return mapped, _text_of_parts(item.get("content"))
    if kind == "function_call":
        return mapped, f"[function_call {item.get('name', '?')}] {item.get('arguments', '')}"
    if output:
        produced = item.get("output")
        text = produced if isinstance(produced, str) else _text_of_parts(produced)
        if not text and produced is not None:
            try:
                text = json.dumps(produced, ensure_ascii=False, allow_nan=False)[:MAX_CONTENT_CHARS]
            except (TypeError, ValueError, RecursionError):
                # Not plain JSON (nan, an object, a cycle, too deep): append() refuses the whole
                # item with InvalidPayloadError, which says what is wrong; no text is needed.
                text = ""
        return mapped, f"[{kind} {item.get('call_id', '?')}] {text}"
    if kind == "reasoning":
        return mapped, "[reasoning] " + _text_of_parts(item.get("summary"))
    return mapped, f"[{kind if isinstance(kind, str) else 'item'}]"


def item_to_message(item: object) -> Message:
    """The Agentium message for one SDK item: the item whole as its payload, readable text as content.

    The item must be a mapping; whether it is plain JSON (no ``nan``, no
    tuples, no non-string keys…) is checked by ``HarnessRuntime.append``,
    which refuses the whole call with ``InvalidPayloadError`` otherwise.
    """
    if type(item) is not dict and not isinstance(item, Mapping):  # a dict: no ABC check (Python-level)
        raise ForeignItemError(
            f"an SDK item is a mapping (a Responses API input item), got {type(item).__name__}; "
            "pass the items the SDK gives you, or build dicts"
        )
    try:
        role, text = _role_and_text(item)
        # A message's content is handed on as the item holds it: a str subclass runs its own
        # code wherever Agentium measures or encodes the text (its encode, its len). The exact
        # str of its characters (str.__str__ runs none of the subclass's methods) is used.
        text = str.__str__(text)
    except Exception as exc:
        # Reading a mapping that is no dict runs its own code (its __getitem__, a part's get):
        # whatever that raises, the host gets this integration's typed error, not a bare one.
        raise ForeignItemError(
            f"an SDK item could not be read as a mapping ({type(exc).__name__} raised reading it); "
            "nothing was written"
        ) from exc
    if len(text) > MAX_CONTENT_CHARS:
        text = text[: MAX_CONTENT_CHARS - 1] + "…"
    # The payload is passed as given: append() checks and copies it (and refuses it whole).
    return Message(role, text, payload=item, payload_format=ITEM_FORMAT)


def check_item_shape(item: Mapping[str, Any], position: int) -> None:
    """Refuse a mapping that has the shape of no Responses API input item (:class:`ForeignItemError`).

    Every input item has a non-empty str ``type``, or is a message (``type``
    absent or ``"message"``) whose ``role`` is ``user``, ``assistant``,
    ``system`` or ``developer``, or an item reference (an ``id``, with
    ``type`` optional). Anything else (``{}``, a ``type`` of 5, a ``tool``
    role, which is Chat Completions') the SDK never stores; kept, it would be
    sent to the model on every later run of the session and refused there, so
    ``add_items`` refuses it first. Only the shape is checked: a ``type`` this
    SDK release does not know passes, for items of later releases. The error
    names no value of the item (it may be a user's words).
    """
    try:
        kind, role, ref = item.get("type"), item.get("role"), item.get("id")
    except Exception as exc:  # a mapping that is no dict runs its own code when read
        raise ForeignItemError(
            f"item {position} could not be read as a mapping ({type(exc).__name__} raised reading it); "
            "nothing was written"
        ) from exc
    if kind is None or (isinstance(kind, str) and str.__str__(kind) == "message"):
        # A str subclass (a StrEnum) is compared by its characters: none of its own methods run.
        if isinstance(role, str) and str.__str__(role) in _MESSAGE_ROLES:
            return
        if kind is None and role is None and isinstance(ref, str):
            return  # an item reference, whose type may be left out
        raise ForeignItemError(
            f"item {position} is a message (no type, or type 'message') whose role is not user, assistant, "
            f"system or developer (got a {type(role).__name__}), and no item reference: no SDK item has "
            "that shape; nothing was written"
        )
    if not isinstance(kind, str) or not str.__str__(kind):
        raise ForeignItemError(
            f"item {position} has a type that is not a non-empty str (got a {type(kind).__name__}): no SDK "
            "item has that shape; nothing was written"
        )


def message_to_item(message: Message, where: str | Callable[[], str]) -> dict[str, Any]:
    """The SDK item a committed message stands for: a new dict the caller may change.

    A message this integration wrote gives back a copy of its payload,
    equal to the item appended. The copy matters: the session reads with
    ``read_history(copy=False)``, which hands back the groups the adapters
    already decoded, so an item changed in place by the SDK or the host
    would otherwise change what every later read returns (the SDK's own
    sessions decode fresh items on every read). A
    message without a payload (committed by Agentium's own ``run()``) is
    read as an easy input message of its role (a tool result as ``user``
    text). A payload of any other format is another framework's item:
    reading it as an SDK item would be a guess, so :class:`ForeignItemError`
    is raised and nothing is skipped. ``where`` names the message in an
    error (a function: built only then).
    """
    if message.payload_format == ITEM_FORMAT:
        payload = message.payload
        if not isinstance(payload, dict):
            place = where() if callable(where) else where
            raise ForeignItemError(
                f"{place} has payload_format {ITEM_FORMAT} but its payload is a {type(payload).__name__}, "
                "not an item; the history is damaged (read it with read_history(view=False) to audit it)"
            )
        return cast("dict[str, Any]", copy_plain_json(payload))
    if message.payload_format is not None:
        where = where() if callable(where) else where
        raise ForeignItemError(
            f"{where} holds a {message.payload_format!r} item, not an OpenAI Agents SDK item "
            f"({ITEM_FORMAT}); this session id is used by another framework's integration: "
            "use another session id"
        )
    role = "user" if message.role is Role.TOOL else message.role.value
    return {"role": role, "content": message.content}
