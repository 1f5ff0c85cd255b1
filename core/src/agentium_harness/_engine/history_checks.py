"""Arguments of the history API, checked before anything is admitted (bad input changes nothing).

Messages given to ``append`` become canonical history as they are, so each
one is checked and copied here: text that is valid Unicode, tool-call
arguments and payloads that are plain JSON (what canonical JSON stores and
gives back unchanged), bounded in depth and size, and a payload format that
names the payload. The copies are private: a host that mutates its dicts
after the call cannot change what was committed.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any, Final

from .._codec import MAX_ARGUMENT_DEPTH, canonical_json, json_depth_exceeds
from .._errors import (
    EncodingError,
    IncompleteGroupError,
    InvalidArgumentError,
    InvalidPayloadError,
)
from .._history import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_FORMAT_LENGTH,
    Message,
    MessageGroup,
    Role,
    ToolCall,
    match_tool_results,
)
from .._history_messages import PAYLOAD_FORMAT
from .._host_items import read_host_items
from .._json import same_plain_json
from .._text import cut_text
from .._validators import check_count, exact_int, lone_surrogate_at, shown_number, validate_id
from .foreign_results import interjection

__all__ = [
    "MAX_APPEND_BYTES",
    "MAX_APPEND_MESSAGES",
    "MAX_LIST_LIMIT",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_GROUPS",
    "MAX_REASON_BYTES",
    "MAX_RETRACTION_SPANS",
    "MAX_RETRACT_COUNT",
    "check_before_seq",
    "check_expected_revision",
    "check_group_size",
    "check_messages",
    "check_messages_encoded",
    "check_reason",
    "check_reply",
    "plain_json",
]

#: Messages one ``append`` call may commit (one group).
MAX_APPEND_MESSAGES: Final = 10_000
#: Canonical bytes of the group one ``append`` call commits (32 MiB).
MAX_APPEND_BYTES: Final = 32 * 1024 * 1024
#: Groups one ``read_history`` page may hold (its ``max_groups`` ceiling).
MAX_PAGE_GROUPS: Final = 1_000
#: Canonical bytes one ``read_history`` page may hold (its ``max_bytes`` ceiling, 256 MiB).
MAX_PAGE_BYTES: Final = 256 * 1024 * 1024
#: Session ids one ``list_sessions`` page may hold (its ``limit`` ceiling).
MAX_LIST_LIMIT: Final = 1_000
#: Messages one ``retract`` call may take out of the view.
MAX_RETRACT_COUNT: Final = 10_000
#: Retracted spans a session's view may hold (its snapshot keeps them; each save rewrites them):
#: a retraction that would add one past it is refused with ``RetractionLimitError``, and
#: ``reset_view`` starts the view with none. About 50 bytes each in the snapshot, so the view
#: state stays under a MiB. Not a decoding limit: a snapshot holding more still loads.
MAX_RETRACTION_SPANS: Final = 10_000
#: A retraction's or reset's reason is cut to this many UTF-8 bytes.
MAX_REASON_BYTES: Final = 1024

_FORMAT: Final = PAYLOAD_FORMAT  # one rule with the stored-data decoders
#: Digits of the longest integer Python decodes by default (``sys.int_info.default_max_str_digits``).
#: A process that raised its own limit could write a longer one that every process left at the
#: default (a reader, a later version of the host) fails to decode: committed history unreadable.
_MAX_INT_DIGITS: Final = 4300
_INT_CEILING: Final = 10**_MAX_INT_DIGITS
#: Where such an integer could be in canonical JSON text (a run of digits that long; inside a
#: string too, so the value itself is then walked to be sure). Tried only where a run starts (the
#: look-behind): tried inside runs too, text of many runs just short of it would cost quadratic time.
_LONG_DIGITS: Final = re.compile(rb"(?<![0-9])[0-9]{%d}" % (_MAX_INT_DIGITS + 1))
#: Payload formats found well formed (exact str; at most 64 kept): not matched again.
_KNOWN_FORMATS: set[str] = set()


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _fast_codec() -> tuple[Callable[[Any], str], Callable[[str], Any]] | None:
    """The C encoder and scanner canonical JSON runs on, built once, for the check at once.

    :func:`canonical_json` runs ``json``'s C encoder with these settings (sorted keys, compact,
    ``ensure_ascii=False``, ``allow_nan=False``), built again by ``JSONEncoder.iterencode`` on
    every call, and ``json.loads`` runs the C scanner behind Python-level wrappers. The check at
    once calls both directly: the same text both ways. The one difference is that this encoder
    keeps no record of the containers it is inside (``check_circular``): a value that contains
    itself fails with a ``RecursionError`` here instead of ``ValueError``, and like any failure
    of the check at once it leaves the messages to the one-by-one check, which says what is
    wrong in its own words. ``None`` without the C parts (then ``canonical_json`` is used).
    """
    # Not in the stubs (the C accelerators are an implementation detail of json): read as Any.
    make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
    make_scanner: Any = getattr(json.scanner, "c_make_scanner", None)
    if make_encoder is None or make_scanner is None:  # pragma: no cover - CPython has both
        return None
    encoder = make_encoder(None, _not_json, encode_basestring, None, ":", ",", True, False, False)
    scan: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    def decode(text: str) -> Any:
        value, end = scan(text, 0)
        if end != len(text):
            raise ValueError("extra data")  # never for the encoder's text; refused to be sure
        return value

    return encode, decode


_FAST: Final = _fast_codec()


def plain_json(value: object, what: str, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> Any:
    """A private copy of ``value`` if it is plain JSON within the bounds, else :class:`InvalidPayloadError`.

    The value is encoded canonically and decoded strictly again; it must come
    back the same, type for type (:func:`~agentium_harness._json.same_plain_json`:
    by what it holds, never by a subclass's own ``__eq__``), so a tuple (a
    list again), a non-string key (a string again),
    ``nan``/``inf`` or a lone surrogate is refused, and so is an integer of
    more than 4,300 digits (the most Python decodes by default, whatever
    limit this process set) and nesting deeper than 64 levels. The decoded
    copy is returned.
    """
    try:
        encoded = canonical_json(value)
    except EncodingError as exc:
        raise InvalidPayloadError(f"{what} is not plain JSON: {exc}; nothing was written") from exc
    except Exception as exc:
        # A mapping or list of the host's own runs its code when encoded (its __iter__, its
        # __getitem__): whatever that raises, the value is not plain JSON, and the host gets
        # the typed error, not the object's own exception.
        raise InvalidPayloadError(
            f"{what} is not plain JSON: reading it raised {type(exc).__name__}; nothing was written"
        ) from exc
    if len(encoded) > max_bytes:
        raise InvalidPayloadError(
            f"{what} is {len(encoded)} bytes as canonical JSON, over the limit of {max_bytes}; "
            "nothing was written"
        )
    if json_depth_exceeds(encoded, MAX_ARGUMENT_DEPTH):
        raise InvalidPayloadError(
            f"{what} is not storable JSON: the JSON text nests arrays or objects deeper than "
            f"{MAX_ARGUMENT_DEPTH} levels; nothing was written"
        )
    if _LONG_DIGITS.search(encoded) is not None and _long_int_in(value):
        raise InvalidPayloadError(
            f"{what} holds an integer of more than {_MAX_INT_DIGITS} digits, more than Python decodes by "
            "default (whatever limit this process set): it could not be read back; nothing was written"
        )
    # Text canonical_json just wrote needs none of the strict reader's other checks (it holds no
    # duplicate key of a string-keyed dict, no NaN, no lone surrogate, no number that is not
    # finite): the plain C decoder gives the same copy, and a value that did not come back equal
    # (a tuple, a non-string key) is refused below as before.
    copy = json.loads(encoded)
    # Type-strict, running nothing of the host's (a dict subclass whose __eq__ always says True
    # would otherwise let a tuple inside it come back a list).
    if not same_plain_json(copy, value):
        raise InvalidPayloadError(
            f"{what} is not plain JSON (only dicts with string keys, lists, strings, finite numbers, "
            "booleans and None come back unchanged; a tuple or a non-string key would not); "
            "nothing was written"
        )
    return copy


def _long_int_in(value: object) -> bool:
    """Whether plain JSON ``value`` holds an integer of more than :data:`_MAX_INT_DIGITS` digits."""
    # Read with the base types' own methods: a subclass's values(), __iter__ or __abs__ does not run.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(dict.values(item))
        elif isinstance(item, list):
            stack.extend(list.__iter__(item))
        elif (number := exact_int(item)) is not None and abs(number) >= _INT_CEILING:
            return True
    return False


def _format(value: object, at: str) -> str:
    """``value`` as a plain ``str`` if it is a well-formed payload format name, else refused."""
    # A plain copy first: a str subclass's own __len__ or __repr__ is not run (nor kept).
    plain = str.__str__(value) if isinstance(value, str) else None
    if plain is None or len(plain) > MAX_PAYLOAD_FORMAT_LENGTH or not _FORMAT.fullmatch(plain):
        shown = repr(plain) if plain is not None else f"a {type(value).__name__}"
        raise InvalidPayloadError(
            f"{at}payload_format must be a name such as 'openai.responses.input_item/v1' "
            f"(letters, digits and . _ : / + -, at most {MAX_PAYLOAD_FORMAT_LENGTH} characters), "
            f"got {shown:.200}; nothing was written"
        )
    return plain


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{what} must be a string, got {type(value).__name__}; nothing was written"
        )
    # A plain copy, checked: none of a str subclass's own methods (an ``encode`` that lies) is trusted.
    text = str.__str__(value)
    bad = lone_surrogate_at(text)
    if bad is not None:
        raise InvalidArgumentError(
            f"{what} holds a lone surrogate at index {bad} (not valid Unicode); nothing was written"
        )
    return text


def _message(message: object, index: int) -> Message:
    """A checked private copy of one message."""
    if not isinstance(message, Message):
        raise InvalidArgumentError(
            f"message {index} must be a Message, got {type(message).__name__}; nothing was written"
        )
    if not isinstance(message.role, Role):
        raise InvalidArgumentError(f"message {index}: role must be a Role; nothing was written")
    tool_call_id = message.tool_call_id
    if tool_call_id is not None:
        tool_call_id = validate_id(tool_call_id, f"message {index}: tool_call_id")  # its plain text
    return _copy(message, message.role, tool_call_id, f"message {index}: ")


def check_reply(message: Message) -> Message:
    """A checked private copy of a provider's reply, as the assistant message the turn keeps.

    The same checks as a message given to ``append`` (valid text, tool calls
    of plain JSON arguments, a payload that is plain JSON and named), so a
    reply never commits what ``append`` would refuse; the copy is a plain
    :class:`Message` whatever class the provider built. Raises
    :class:`InvalidArgumentError` (or :class:`InvalidPayloadError`) saying
    what is wrong.
    """
    return _copy(message, Role.ASSISTANT, None, "")


def _copy(message: Message, role: Role, tool_call_id: str | None, at: str) -> Message:
    content = _text(message.content, f"{at}content")
    if not isinstance(message.tool_calls, tuple | list):
        # Message converts what it is given; only an instance changed behind its back (or a
        # subclass) holds anything else, and iterating it could raise a bare TypeError.
        raise InvalidArgumentError(f"{at}tool_calls must be a tuple of ToolCall records; nothing was written")
    calls: list[ToolCall] = []
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            raise InvalidArgumentError(f"{at}tool_calls must hold ToolCall records")
        call_id, name = call.id, call.name
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise InvalidArgumentError(f"{at}a tool call's id and name must be strings; nothing was written")
        # Plain copies (ToolCall validates them again): a str subclass's own hash and == could make
        # the registry run another tool than the name committed says, its repr raise.
        call_id, name = str.__str__(call_id), str.__str__(name)
        if not isinstance(call.arguments, dict):
            raise InvalidPayloadError(f"{at}tool call {call_id!r} arguments must be a dict")
        arguments = plain_json(call.arguments, f"{at}tool call {call_id!r} arguments")
        calls.append(ToolCall(call_id, name, arguments))
    payload, payload_format = message.payload, message.payload_format
    if (payload is None) != (payload_format is None):
        raise InvalidPayloadError(
            f"{at}give payload and payload_format together (or neither); nothing was written"
        )
    if payload is not None:
        payload_format = _format(payload_format, at)
        payload = plain_json(payload, f"{at}payload")
    # Built directly, cheaper than attrs.evolve: every field of Message is named (a test checks
    # the list against Message's fields, so one added later cannot be dropped here unnoticed).
    return Message(
        role=role,
        content=content,
        tool_calls=tuple(calls),
        tool_call_id=tool_call_id,
        payload=payload,
        payload_format=payload_format,
    )


def _checked_at_once(messages: Sequence[object]) -> tuple[tuple[Message, ...], bytes] | None:
    """The checked copies of ``messages`` and their list's canonical JSON, with one encoding.

    What :func:`_message` does message by message, payload by payload, done
    with one canonical encoding and one decoding of the whole list: the
    encoding holds every payload and every tool call's arguments, so it
    refuses what theirs would; its bound covers each part's (a part is never
    longer than the whole, and nests two or four levels deeper in it); and
    each decoded part must equal its original, as each part's copy must. It
    is also the messages' part of the group's encoding (the copies encode to
    the same bytes: canonical JSON decoded and encoded again is unchanged),
    so the group is not encoded again. ``None`` whenever anything is not
    plainly right: :func:`_message` then checks again, one by one, and says
    exactly what is wrong, as before.
    """
    try:
        data: list[dict[str, Any]] = []
        text = 0
        for message in messages:
            if type(message) is not Message or not isinstance(message.role, Role):
                return None
            content = message.content
            if type(content) is not str:
                if not isinstance(content, str):
                    return None
                # The plain text it holds, copied without running any of its methods: the copy
                # commits exact text, so nothing of the host's class runs later (eviction, tokens).
                content = str.__str__(content)
            # (a lone surrogate in it fails the encoding below)
            text += len(content)
            if text > MAX_PAYLOAD_BYTES:
                return None  # far too long for one encoding within the bound: not worth trying
            calls = []
            for call in message.tool_calls:
                if (
                    type(call) is not ToolCall
                    or not isinstance(call.arguments, dict)
                    or type(call.id) is not str  # (ToolCall keeps plain ids: one changed behind its back)
                    or type(call.name) is not str
                ):
                    return None
                calls.append({"arguments": call.arguments, "id": call.id, "name": call.name})
            tool_call_id = message.tool_call_id
            if tool_call_id is not None:
                tool_call_id = validate_id(tool_call_id, "tool_call_id")  # its plain text
            item: dict[str, Any] = {
                "content": content,
                "role": message.role,  # a Role is a str: JSON writes its text
                "tool_call_id": tool_call_id,
                "tool_calls": calls,
            }
            payload, payload_format = message.payload, message.payload_format
            if (payload is None) != (payload_format is None):
                return None
            if payload is not None:
                if not (type(payload_format) is str and payload_format in _KNOWN_FORMATS):
                    payload_format = _format(payload_format, "message 0: ")  # its plain text
                    if len(_KNOWN_FORMATS) < 64:
                        _KNOWN_FORMATS.add(payload_format)  # a host uses one or two: the regex once each
                item["payload"] = payload
                item["payload_format"] = payload_format
            data.append(item)
        written = canonical_json(data).decode("utf-8") if _FAST is None else _FAST[0](data)
        encoded = written.encode("utf-8")  # a lone surrogate fails here, as in canonical_json
        if len(encoded) > MAX_PAYLOAD_BYTES or json_depth_exceeds(encoded, MAX_ARGUMENT_DEPTH + 2):
            return None
        if _LONG_DIGITS.search(encoded) is not None:
            return None  # perhaps an integer too long to read back: the one-by-one check says
        copies = json.loads(written) if _FAST is None else _FAST[1](written)
        checked = []
        for message, item, copy in zip(messages, data, copies, strict=True):
            assert isinstance(message, Message)
            calls_copied = []
            for given, call_copy in zip(item["tool_calls"], copy["tool_calls"], strict=True):
                if not same_plain_json(call_copy["arguments"], given["arguments"]):
                    return None
                calls_copied.append(ToolCall(given["id"], given["name"], call_copy["arguments"]))
            payload = None
            if "payload" in item:
                payload = copy["payload"]
                if not same_plain_json(payload, item["payload"]):
                    return None
            # Positional, in Message's field order (role, content, tool_calls, tool_call_id,
            # payload, payload_format; a test holds the list to Message's fields): keyword
            # arguments cost a quarter of the constructor's call more.
            checked.append(
                Message(
                    message.role,
                    item["content"],
                    tuple(calls_copied),
                    item["tool_call_id"],
                    payload,
                    item.get("payload_format"),
                )
            )
    except Exception:  # whatever it is, the exact checks meet it again and say what it is
        return None
    return tuple(checked), encoded


def check_messages(messages: object) -> tuple[Message, ...]:
    """Checked private copies of the messages of one ``append``: a complete group, not too many.

    At most :data:`MAX_APPEND_MESSAGES`; the group's size in bytes is
    checked by :func:`check_group_size` once its seq is known.
    """
    return check_messages_encoded(messages)[0]


def check_messages_encoded(messages: object) -> tuple[tuple[Message, ...], bytes | None]:
    """:func:`check_messages`, and the canonical JSON of the copies' list when it was had on the way.

    The bytes are the messages' part of their group's encoding
    (:func:`~agentium_harness._history.adopt_messages_encoding`); ``None``
    when the messages were checked one by one.
    """
    # A list or tuple passes without the Sequence ABC's Python-level instance check.
    if type(messages) is not list and type(messages) is not tuple:
        if isinstance(messages, str | bytes | Message) or not isinstance(messages, Sequence):
            raise InvalidArgumentError(
                f"messages must be a sequence of Message, got {type(messages).__name__}; nothing was written"
            )
        messages = _listed(messages)
    if not messages:
        raise IncompleteGroupError("append needs at least one message; nothing was written")
    if len(messages) > MAX_APPEND_MESSAGES:
        raise InvalidArgumentError(
            f"{len(messages)} messages in one append; at most {MAX_APPEND_MESSAGES}; nothing was written"
        )
    at_once = _checked_at_once(messages)
    if at_once is not None:
        checked, encoded = at_once
    else:
        checked, encoded = tuple([_message(m, i) for i, m in enumerate(messages)]), None
    calling = False  # any tool call at all: without one, no message can come between a call and its result
    named: dict[str, int] = {}  # each tool call id of the group: the message naming it
    for index, message in enumerate(checked):
        calls = message.tool_calls
        if not calls:
            continue
        calling = True
        # Only an assistant asks for tools: run() sends a user or tool message's calls nowhere (a
        # foreign result goes as data), so their results would reach the model with no call before.
        if message.role is not Role.ASSISTANT:
            raise InvalidArgumentError(
                f"message {index} ({message.role.value}) carries tool calls; only an assistant "
                "message may; nothing was written"
            )
        # Each call of the group answered by one result, as run() requires of a provider's replies
        # in one turn: run() sends the group as committed, and Chat Completions refuses a request
        # with two tool results of one id ("Duplicate value for 'tool_call_id'"), on every later turn.
        for call in calls:
            first = named.get(call.id)
            if first is None:
                named[call.id] = index
            elif first == index:
                raise InvalidArgumentError(
                    f"message {index} ({message.role.value}) names tool call id {call.id!r} twice; each "
                    "call of one message needs an id of its own; nothing was written"
                )
            else:
                raise InvalidArgumentError(
                    f"message {index} ({message.role.value}) names tool call id {call.id!r}, already "
                    f"named by message {first}; each tool call of a group needs an id of its own (run() "
                    "sends the group on every later turn, and a model API refuses a request with two "
                    "results of one id); nothing was written"
                )
    missing, orphans = match_tool_results(checked)
    if missing or orphans:
        what = []
        if missing:
            what.append(f"tool call(s) {list(missing)[:5]} have no result after them")
        if orphans:
            what.append(f"message(s) {list(orphans)[:5]} answer no earlier tool call")
        raise IncompleteGroupError(
            "the messages would form an incomplete group: " + "; ".join(what) + ". Append a tool call "
            "together with its result, in one call; nothing was written"
        )
    cut = interjection(checked) if calling else None
    if cut is not None:
        index, still_open = cut
        raise IncompleteGroupError(
            f"message {index} ({checked[index].role.value}) comes between tool call(s) "
            f"{list(still_open)[:5]} and their result(s): an assistant's tool calls must be answered "
            "by their tool results before any other message (a model API refuses a request "
            "otherwise, and run() would send this group on every later turn). Put the message after "
            "the results; nothing was written"
        )
    return checked, encoded


def _listed(messages: Sequence[object]) -> list[object]:
    """The messages of a sequence of the host's own type, read once and no further than the bound.

    Its ``__len__``, ``__iter__`` and ``__getitem__`` are the host's code and need not agree:
    one whose ``len`` said 1 committed any number of messages past :data:`MAX_APPEND_MESSAGES`,
    and one that never ended held the event loop in these checks for good
    (:func:`~agentium_harness._host_items.read_host_items`). The checks then read the plain list.
    """
    return read_host_items(
        messages,
        MAX_APPEND_MESSAGES,
        too_many=f"more than {MAX_APPEND_MESSAGES} messages in one append (MAX_APPEND_MESSAGES); "
        "nothing was written",
        unreadable="messages could not be read",
    )


def check_group_size(group: MessageGroup) -> None:
    """Refuse a group over :data:`MAX_APPEND_BYTES` of canonical JSON (before anything is written).

    Checked on the group as it would be committed (its seq and scope
    included), once its seq is known: the encoding is the one the commit
    uses, so the bound costs no second encoding of the messages.
    """
    if group.size_bytes > MAX_APPEND_BYTES:
        raise InvalidArgumentError(
            f"the group is {group.size_bytes} bytes as canonical JSON, over the limit of "
            f"{MAX_APPEND_BYTES}; nothing was written"
        )


def check_reason(reason: object) -> str:
    """A retraction's or reset's reason: valid text, cut to :data:`MAX_REASON_BYTES`."""
    text = _text(reason, "reason")
    return cut_text(text, MAX_REASON_BYTES)[0]


def check_expected_revision(value: object) -> int | None:
    """``None``, or a revision: an ``int`` of at least 0 (0: the session must not exist yet)."""
    if value is None:
        return None
    revision = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if revision is None or revision < 0:
        raise InvalidArgumentError(
            f"expected_revision must be None or an integer of at least 0, got {shown_number(value)}; "
            "nothing was written"
        )
    return revision


def check_before_seq(value: object, next_seq: int) -> int:
    """The exclusive upper seq of a page: ``next_seq`` for ``None``, else an int in ``0..next_seq``."""
    if value is None:
        return next_seq
    seq = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if seq is None or not 0 <= seq <= next_seq:
        raise InvalidArgumentError(
            f"before_seq must be None or an integer from 0 to {next_seq} (the session's next seq), "
            f"got {shown_number(value)}"
        )
    return seq


def check_page(max_groups: object, max_bytes: object) -> tuple[int, int | None]:
    """``max_groups`` and ``max_bytes`` of a page, by the one count rule with their ceilings."""
    groups = check_count(max_groups, "max_groups", ceiling=MAX_PAGE_GROUPS)
    size = None if max_bytes is None else check_count(max_bytes, "max_bytes", ceiling=MAX_PAGE_BYTES)
    return groups, size


def check_retract_count(count: object) -> int:
    """How many messages one ``retract`` takes: 1 to :data:`MAX_RETRACT_COUNT`."""
    return check_count(count, "count", ceiling=MAX_RETRACT_COUNT)
