"""An SDK item to the Agentium message ``add_items`` appends: its role, its readable text, its shape.

``append`` stores a value of the host's own types as what it holds: a
``dict`` or ``list`` subclass as what ``dict.items`` and ``list.__iter__``
give, a ``str``, ``int`` or ``float`` subclass as its characters or number
(core refuses the item if its canonical encoding says otherwise). The
role, text and shape are read from that same view (:func:`_held`), never
through the host's own methods (a ``get``, an ``__eq__`` or ``__hash__``,
a ``__format__``), so the message's role and content (what recall indexes,
what summaries and ``run()`` read) are those of the item stored. The SDK's
own items are exact types all the way down: for them this costs a type
check per value read, no copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, cast

from agentium_harness import InvalidPayloadError, Message, Role

from ._errors import ForeignItemError

__all__ = [
    "ITEM_FORMAT",
    "MAX_CONTENT_CHARS",
    "MESSAGE_ROLES",
    "check_item_shape",
    "item_to_message",
]

#: ``Message.payload_format`` of an SDK item: a Responses API input item, as the SDK stores it.
ITEM_FORMAT: Final = "openai.responses.input_item/v1"
#: The readable ``content`` is cut to this many characters (the item itself is never cut).
MAX_CONTENT_CHARS: Final = 16_384

#: A message item's role to Agentium's (``developer`` is ``system``).
MESSAGE_ROLES: Final = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}

#: How ``append``'s canonical encoding reads a value (its C encoder: a ``dict`` subclass's own ``items``).
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
#: How deep :func:`_held` copies: past core's nesting bound (64), where ``append`` refuses the item.
_HELD_DEPTH: Final = 70


def _held(value: Any, depth: int = 0) -> Any:
    """What a value of the host's own types holds, as ``append`` stores it; exact types come back as they are.

    Read with the base types' own methods (``type()`` cannot be told otherwise, as ``__class__``
    can): none of the host's code runs. Anything else (a tuple, a mapping that is no dict, an
    object) is left as it is, and ``append`` refuses it.
    """
    kind = type(value)
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, bool) or value is None:
        return value
    if issubclass(kind, int):
        return int.__index__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if depth < _HELD_DEPTH:
        if issubclass(kind, dict):
            held: dict[Any, Any] = {}
            for key, item in dict.items(value):
                held[str.__str__(key) if issubclass(type(key), str) else key] = _held(item, depth + 1)
            return held
        if issubclass(kind, list):
            return [_held(item, depth + 1) for item in list.__iter__(value)]
    return value


def _text_of_parts(parts: object) -> str:
    """The text of a message's content: a string, or the text of each part of a list."""
    if type(parts) is not str and type(parts) is not list:
        parts = _held(parts)  # a str or list of the host's own type: what it holds
    if type(parts) is str:
        return parts
    if type(parts) is not list:
        return ""
    texts: list[str] = []
    for part in parts:
        if type(part) is not dict and isinstance(part, dict):
            part = _held(part)  # a dict of the host's own type: what it holds, as stored
        if type(part) is dict:
            # What ``part.get("text", part.get("refusal"))`` gives, without a call for each key.
            text = part["text"] if "text" in part else part.get("refusal")
            if isinstance(text, str):
                texts.append(text)  # join reads a str subclass's characters: none of its methods run
                continue
            kind = part.get("type")
            if type(kind) is str:
                texts.append(f"[{kind}]")
            elif issubclass(type(kind), str):  # an f-string would run a str subclass's own __format__
                texts.append(f"[{str.__str__(kind)}]")
        elif isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            # A mapping that is no dict: read through its own get (append refuses it: no plain JSON).
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("type"), str):
                texts.append(f"[{part['type']}]")
    return "\n".join(texts)


def _call_id(item: Mapping[str, Any]) -> str | None:
    """An output item's ``call_id`` as ``tool_call_id`` if core takes it (1 to 256 printable characters)."""
    call_id = item.get("call_id")
    if isinstance(call_id, str):
        call_id = str.__str__(call_id)  # its characters: a str subclass's own methods are not run
        if 0 < len(call_id) <= 256 and call_id.isprintable():
            return call_id
    return None  # the item keeps its call_id whatever it is (the payload is kept exactly)


def _role_and_text(item: Mapping[str, Any]) -> tuple[Role, str]:
    """The item's role, and a short, readable text for it (its kind and its words), never its raw JSON.

    One function for both (each reads the item's ``type``): every appended item is read so.
    An output item's role is ``tool``: a tool's output, not the user's words.
    """
    kind: Any = item.get("type")
    role: Any = item.get("role")
    # A str of the host's own type is compared and hashed as its characters (what is stored).
    if type(kind) is not str and kind is not None:
        kind = _held(kind)
    if type(role) is not str and role is not None:
        role = _held(role)
    # None and the plain "message" are no output (checked first: the common items, without a call).
    named = type(kind) is str  # compared only then: an object's own __eq__ never runs
    message = kind is None or (named and kind == "message")
    output = not message and named and kind.endswith("_output")
    mapped = MESSAGE_ROLES.get(role) if type(role) is str and message else None
    if mapped is None:
        mapped = Role.TOOL if output else Role.ASSISTANT
    if "role" in item and message:
        return mapped, _text_of_parts(item.get("content"))
    if named and kind == "function_call":
        name, arguments = item.get("name", "?"), item.get("arguments", "")
        if type(name) is not str:  # an f-string runs a value's own __format__: what it holds is shown
            name = _held(name)
        if type(arguments) is not str:
            arguments = _held(arguments)
        return mapped, f"[function_call {name}] {arguments}"
    if output:
        produced = item.get("output")
        if type(produced) is not str and type(produced) is not list and type(produced) is not dict:
            produced = _held(produced)  # one of the host's own types: what it holds
        text = produced if type(produced) is str else _text_of_parts(produced)
        if not text and produced is not None:
            try:
                # An exact dict: json reads a dict subclass inside through its items(), which append
                # refuses unless they are what it holds, and a str or number subclass by its value.
                text = json.dumps(produced, ensure_ascii=False, allow_nan=False)[:MAX_CONTENT_CHARS]
            except (TypeError, ValueError, RecursionError):
                # Not plain JSON (nan, an object, a cycle, too deep): append() refuses the whole
                # item with InvalidPayloadError, which says what is wrong; no text is needed.
                text = ""
        call_id = item.get("call_id", "?")
        if type(call_id) is not str:
            call_id = _held(call_id)
        return mapped, f"[{kind} {call_id}] {text}"
    if named and kind == "reasoning":
        return mapped, "[reasoning] " + _text_of_parts(item.get("summary"))
    return mapped, f"[{kind if named else 'item'}]"


def item_to_message(item: object) -> Message:
    """The Agentium message for one SDK item: the item whole as its payload, readable text as content.

    The item must be a mapping; plain JSON is checked by ``HarnessRuntime.append``, refusing the
    call with ``InvalidPayloadError``. Values of the host's own types are read as what they hold,
    as append stores them; a ``dict`` subclass is checked here to give that when read whole (its
    own ``items``), else ``InvalidPayloadError``, and the payload is that checked copy.
    """
    if type(item) is not dict and not isinstance(item, Mapping):  # a dict: no ABC check (Python-level)
        raise ForeignItemError(
            f"an SDK item is a mapping (a Responses API input item), got {type(item).__name__}; "
            "pass the items the SDK gives you, or build dicts"
        )
    held = item if type(item) is dict or not isinstance(item, dict) else _checked_copy(item)
    try:
        role, text = _role_and_text(held)
        # A str subclass runs its own code wherever Agentium measures or encodes the text (its
        # encode, its len): the exact str of its characters (str.__str__ runs none of it) is used.
        text = str.__str__(text)
        call_id = _call_id(held) if role is Role.TOOL else None
    except Exception as exc:
        # Reading a mapping that is no dict runs its own code (its __getitem__, a part's get):
        # whatever that raises, the host gets this integration's typed error, not a bare one.
        raise ForeignItemError(
            f"an SDK item could not be read as a mapping ({type(exc).__name__} raised reading it); "
            "nothing was written"
        ) from exc
    if len(text) > MAX_CONTENT_CHARS:
        text = text[: MAX_CONTENT_CHARS - 1] + "…"
    # The payload is the item (an exact dict: append checks and copies it, and refuses it whole)
    # or the checked copy of a dict subclass: append then runs none of its code, so what it stores
    # is what was read here.
    return Message(role, text, tool_call_id=call_id, payload=held, payload_format=ITEM_FORMAT)


def _checked_copy(item: dict[str, Any]) -> dict[str, Any]:
    """What a ``dict`` subclass holds (:func:`_held`) if it gives that read whole; else refused.

    ``append`` refuses a subclass whose canonical encoding (its own ``items``) is not what it
    holds, and it stored one whose ``items`` changed it when read (a ``tool`` role after the
    shape was checked: every later ``get_items`` failed on it). Encoded here as ``append`` would,
    and compared with the copy (exact types: ``==`` runs none of the host's code); ``append`` is
    given the copy, on which no code of the host's runs.
    """
    held = _held(item)
    try:
        given = json.loads(_ENCODER.encode(item))
    except Exception as exc:  # its own items() ran: whatever it raised, the typed error
        raise InvalidPayloadError(
            f"an SDK item is not plain JSON: reading it raised {type(exc).__name__}; nothing was written"
        ) from exc
    if type(held) is not dict or given != held:
        raise InvalidPayloadError(
            "an SDK item is not plain JSON: read whole (its own items()) it is not what it holds, or "
            "it holds a tuple or a non-string key; nothing was written"
        )
    return cast("dict[str, Any]", held)


def check_item_shape(item: Mapping[str, Any], position: int) -> None:
    """Refuse a mapping that has the shape of no Responses API input item (:class:`ForeignItemError`).

    Every input item has a non-empty str ``type``, or is a message (``type``
    absent or ``"message"``) whose ``role`` is ``user``, ``assistant``,
    ``system`` or ``developer``, or an item reference (an ``id``, with
    ``type`` optional). Anything else (``{}``, a ``type`` of 5, a ``tool``
    role, which is Chat Completions') the SDK never stores; kept, it would be
    sent to the model on every later run of the session and refused there, so
    ``add_items`` refuses it first. Only the shape is checked: a ``type`` this
    SDK release does not know passes, for items of later releases. A ``dict`` subclass is checked as
    what it holds (what ``append`` stores), not by its own ``get``. The error names no value of the item.
    """
    try:
        held = item if type(item) is dict or not isinstance(item, dict) else _held(item)
        kind, role, ref = held.get("type"), held.get("role"), held.get("id")
    except Exception as exc:  # a mapping that is no dict runs its own code when read
        raise ForeignItemError(
            f"item {position} could not be read as a mapping ({type(exc).__name__} raised reading it); "
            "nothing was written"
        ) from exc
    # A str subclass (a StrEnum) is compared by its characters: none of its own methods run. Its
    # type() says so: an object whose __class__ says str is none (str.__str__ of it would raise).
    if kind is None or (issubclass(type(kind), str) and str.__str__(kind) == "message"):
        if issubclass(type(role), str) and str.__str__(role) in MESSAGE_ROLES:
            return
        if kind is None and role is None and issubclass(type(ref), str):
            return  # an item reference, whose type may be left out
        raise ForeignItemError(
            f"item {position} is a message (no type, or type 'message') whose role is not user, assistant, "
            f"system or developer (got a {type(role).__name__}), and no item reference: no SDK item has "
            "that shape; nothing was written"
        )
    if not issubclass(type(kind), str) or not str.__str__(kind):
        raise ForeignItemError(
            f"item {position} has a type that is not a non-empty str (got a {type(kind).__name__}): no SDK "
            "item has that shape; nothing was written"
        )
