"""Canonical history records: message groups, their encodings and digests.

A :class:`MessageGroup` is the unit of canonical history: one user turn with
everything the model and tools produced for it, or the messages one
``HarnessRuntime.append`` call committed. A group is *complete* when every
tool call it contains has its result and every tool result answers an
earlier call of the group, once; completeness is computed from the
messages, never asserted by a flag. Only complete groups are evicted, archived
or summarised.

The parts of a group (its messages, the record retained with it) are
defined in ``_history_messages`` and a *control group*, which holds no
messages but a :class:`HistoryControl` record, in ``_history_controls``;
both are re-exported here (see docs/history-api.md).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as _json_string
from typing import Any, ClassVar, Final

import attrs

from ._codec import canonical_json, digest_bytes, unstructure
from ._errors import EncodingError, InvalidArgumentError
from ._history_controls import (
    ControlKind,
    HistoryControl,
    InterruptionCause,
    MessageRef,
    RetractedSpan,
    TurnInterruption,
    ViewState,
)
from ._history_messages import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_FORMAT_LENGTH,
    PARTS_HAND_BUILT,
    Message,
    RetainedRecord,
    Role,
    ToolCall,
    estimate_tokens,
    hand_built_json,
    match_tool_results,
    message_data,
    message_json,
    message_tokens,
    new_write_id,
    retained_data,
    retained_json_text,
    write_id_field,
)
from ._json import copy_plain_json
from ._scope import Scope, exact_scope_ids
from ._tuples import tuple_of_messages
from ._validators import MAX_SEQ, seq_field

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_FORMAT_LENGTH",
    "ControlKind",
    "HistoryControl",
    "InterruptionCause",
    "Message",
    "MessageGroup",
    "MessageRef",
    "RetainedRecord",
    "RetractedSpan",
    "Role",
    "ToolCall",
    "TurnInterruption",
    "ViewState",
    "adopt_messages_encoding",
    "appended_group",
    "bytes_and_digest",
    "detached",
    "detached_message",
    "estimate_tokens",
    "match_tool_results",
    "message_json",
    "message_tokens",
    "new_write_id",
    "planning_sizes",
    "tokens_and_size",
]


# A group is frozen, and a turn asks for its bytes many times (eviction
# planning, the archive append, the receipt check, the snapshot encoding), so
# each group object is encoded once. The cache is keyed by object identity and
# its entry removed when the object dies, so an id can never be reused while
# its entry is alive. The one way to make an entry stale is to mutate a tool
# call's arguments dict inside a committed group, which the engine never does
# (tool handlers receive a copy).
_ENCODED: dict[int, list[Any]] = {}


def _cache(
    group: MessageGroup, data: bytes, digest: str | None = None, tokens: int | None = None
) -> list[Any]:
    """Record ``data`` as ``group``'s canonical bytes (with its digest and tokens when known)."""
    key = id(group)
    entry: list[Any] = [data, digest, tokens, None, None, None]
    # The entry leaves when the group dies (the callback runs before its id can be reused);
    # a weak reference kept in the entry costs a third of a weakref.finalize.
    entry[3] = weakref.ref(group, lambda _, key=key: _ENCODED.pop(key, None))  # type: ignore[misc]
    _ENCODED[key] = entry
    return entry


def _encoding(group: MessageGroup) -> list[Any]:
    """``[canonical bytes, digest or None, tokens or None, weak ref, sent tokens or None, planned or None]``.

    ``group``'s, encoded on first use. The fifth slot is :func:`sent_tokens`' memo, the
    last :func:`planning_sizes`'.
    """
    cached = _ENCODED.get(id(group))
    return cached if cached is not None else _cache(group, _group_json(group))


_MESSAGE_FIELDS: Final = ("role", "content", "tool_calls", "tool_call_id", "payload", "payload_format")


def detached_message(message: Message) -> Message:
    """``message``, or an equal copy whose payload and tool-call arguments are new objects.

    What a read hands to a host: the adapters keep the groups they decoded
    (and the snapshot its resident groups) and hand the same objects to
    every read and to request assembly, so a payload or an arguments dict
    changed in place would change what later reads return and what ``run()``
    sends. A message with neither is returned as it is (its fields are
    immutable).
    """
    payload, calls = message.payload, message.tool_calls
    mutable = type(payload) is dict or type(payload) is list
    if not mutable and not calls:
        return message
    copy = _new_object(Message)
    for name in _MESSAGE_FIELDS:
        _set_field(copy, name, getattr(message, name))
    if mutable:
        _set_field(copy, "payload", copy_plain_json(payload))
    if calls:
        _set_field(copy, "tool_calls", tuple(_detached_call(c) for c in calls))
    return copy


def _detached_call(call: ToolCall) -> ToolCall:
    copy = _new_object(ToolCall)
    _set_field(copy, "id", call.id)
    _set_field(copy, "name", call.name)
    _set_field(copy, "arguments", copy_plain_json(call.arguments))
    return copy


def detached(group: MessageGroup, messages: tuple[Message, ...] | None = None) -> MessageGroup:
    """``group``, or an equal copy of it whose messages are :func:`detached_message` copies.

    ``messages``, when given, are such copies already made of all its
    messages. The copy shares the group's cached encoding (its bytes are the
    same): nothing is encoded again.
    """
    if messages is None:
        if all(m.payload is None and not m.tool_calls for m in group.messages):
            return group
        messages = tuple(map(detached_message, group.messages))
    copy = _new_object(MessageGroup)
    _set_field(copy, "seq", group.seq)
    _set_field(copy, "messages", messages)
    _set_field(copy, "retained", group.retained)
    _set_field(copy, "control", group.control)
    cached = _ENCODED.get(id(group))
    if cached is not None:
        _cache(copy, cached[0], cached[1], cached[2])[4] = cached[4]
    return copy


def tokens_and_size(group: MessageGroup) -> tuple[int, int]:
    """``(group.estimated_tokens, group.size_bytes)`` with one look-up of the group's cached encoding."""
    cached = _ENCODED.get(id(group)) or _encoding(group)
    tokens: int | None = cached[2]
    if tokens is None:
        tokens = cached[2] = sum(map(message_tokens, group.messages))
    return tokens, len(cached[0])


def planning_sizes(
    groups: Sequence[MessageGroup], sent: Callable[[MessageGroup], int]
) -> list[tuple[int, int]]:
    """Each group's ``(tokens, bytes)`` as eviction planning counts them; each figure made once per group.

    The tokens are :func:`tokens_and_size`'s, or for a group holding a
    payload (a foreign item, sent otherwise than stored) at least
    ``sent(group)`` (:func:`sent_tokens`). A commit plans over every resident
    group, nearly all carried on from the turn before: their figures are
    kept with their encoding and read in place at C speed, with no call per group.
    """
    return [
        (entry[5], len(entry[0])) if entry is not None and entry[5] is not None else _planned(group, sent)
        for group, entry in zip(groups, map(_ENCODED.get, map(id, groups)), strict=True)
    ]


def _planned(group: MessageGroup, sent: Callable[[MessageGroup], int]) -> tuple[int, int]:
    tokens, size = tokens_and_size(group)
    held = group.messages
    # A payload anywhere (counted against None at C speed): the group is sent rewritten.
    if list(map(_PAYLOAD, held)).count(None) != len(held):
        tokens = max(tokens, sent_tokens(group, sent))
    (_ENCODED.get(id(group)) or _encoding(group))[5] = tokens
    return tokens, size


_PAYLOAD: Final = operator.attrgetter("payload")


def sent_tokens(group: MessageGroup, count: Callable[[MessageGroup], int]) -> int:
    """``count(group)``, computed once per group and kept with the group's cached encoding.

    For a figure that depends only on the group's fields, such as the tokens
    of the group as ``run()`` sends it (eviction planning counts every
    resident group on every commit, and a group holding foreign items is sent
    rewritten). A group is immutable once encoded (its bytes are cached the
    same way), so the figure cannot go stale; it leaves with the group.
    """
    cached = _ENCODED.get(id(group)) or _encoding(group)
    found: int | None = cached[4]
    if found is None:
        found = cached[4] = count(group)
    return found


def bytes_and_digest(group: MessageGroup) -> tuple[bytes, str]:
    """``(group.canonical_bytes(), group.digest)`` with one look-up of the group's cached encoding."""
    cached = _ENCODED.get(id(group)) or _encoding(group)
    digest: str | None = cached[1]
    if digest is None:
        digest = cached[1] = digest_bytes(cached[0])
    return cached[0], digest


def adopt_stored_encoding(group: MessageGroup, data: bytes, digest: str) -> bool:
    """Whether ``data`` is exactly ``group``'s canonical encoding; if so ``digest`` becomes its digest.

    For a group just decoded from stored bytes whose digest the reader has
    already checked (``digest`` is the digest of ``data``): comparing the
    re-encoding with the stored bytes proves the canonical form, and the
    digest need not be computed a second time. False means the bytes are not
    canonical (or ``digest`` is not this group's), which is damage.
    """
    cached = _encoding(group)
    if cached[0] != data:
        return False
    if cached[1] is None:
        cached[1] = digest
    return bool(cached[1] == digest)


def adopt_messages_encoding(group: MessageGroup, messages_json: bytes) -> None:
    """Encode ``group`` around ``messages_json``, the canonical JSON of its messages' list.

    For a group just built from messages whose list's encoding the caller
    has (the append check encodes them to check them): the group's bytes are
    that text with the group's other keys around it, as canonical JSON would
    write them, so its messages are not encoded a second time. Only a plain
    new group (no encoding yet, no control record) is encoded so; any other
    is left to be encoded on first use, as ever.
    """
    _adopt_around(group, messages_json)


def _adopt_around(group: MessageGroup, messages_json: bytes) -> bytes | None:
    """:func:`adopt_messages_encoding`; the retained record's JSON it wrote, ``None`` if it wrote none."""
    if (
        not _HAND_BUILT
        or type(group) is not MessageGroup
        or group.control is not None
        or type(group.seq) is not int
        or id(group) in _ENCODED
    ):
        return None
    retained = group.retained
    if retained is None:
        retained_json = b"null"
    else:
        text = retained_json_text(retained)
        try:
            retained_json = canonical_json(retained_data(retained)) if text is None else text.encode("utf-8")
        except (EncodingError, UnicodeEncodeError):
            return None  # left to the group's own encoding, which says what is wrong
    _adopt(group, messages_json, retained_json)
    return retained_json


def _adopt(group: MessageGroup, messages_json: bytes, retained_json: bytes) -> None:
    """Cache ``group``'s encoding: its messages' and retained record's JSON with its seq around them."""
    # Keys in canonical (sorted) order; the encoder writes each value as it would alone.
    _cache(group, b'{"messages":%b,"retained":%b,"seq":%d}' % (messages_json, retained_json, group.seq))


# The group an append commits retains its scope and nothing else, so every append to a session
# retains an equal record: one frozen RetainedRecord per scope is built (its constructor run) and
# encoded, and shared by the groups. Looked up by the scope's fields, only when each is an exact
# str (or None): a subclass may compare equal and differ. Bounded; forgotten all at once when full.
_APPEND_RETAINED: dict[tuple[str | None, ...], tuple[RetainedRecord, bytes]] = {}
_MAX_APPEND_RETAINED: Final = 1024
_new_object = object.__new__
_set_field = object.__setattr__


def appended_group(
    seq: int,
    messages: tuple[Message, ...],
    scope: Scope,
    messages_json: bytes | None,
    write_id: str | None = None,
) -> MessageGroup:
    """``MessageGroup(seq, messages, retained=RetainedRecord(scope, write_id=write_id))``, encoded.

    The group an append commits, from messages the append check has just
    copied and encoded (``messages_json`` is the canonical JSON of their
    list, or ``None`` when they were checked one by one): equal to the group
    the constructor builds, with its encoding built as
    :func:`adopt_messages_encoding` builds it. For a plain seq, a tuple of
    messages and a scope seen before, the group is built as its constructor
    would (each field set with ``object.__setattr__``, which attrs' ``__init__``
    does too) without running again what its converter and validators would
    find (a tuple is its own tuple; an ``int`` from 0 to ``MAX_SEQ`` is a valid seq;
    no control record, so no message can be in one's way), and the scope's
    retained record and its JSON are the ones built for that scope before.
    """
    ids = exact_scope_ids(scope)
    found = _APPEND_RETAINED.get(ids) if ids is not None else None
    if (
        found is None
        or messages_json is None
        or type(seq) is not int
        or not 0 <= seq <= MAX_SEQ
        or type(messages) is not tuple
    ):
        return _appended_plainly(seq, messages, scope, messages_json, ids, write_id)
    retained, retained_json = found
    if write_id is not None:
        retained, retained_json = _with_write_id(retained, retained_json, write_id)
    group: MessageGroup = _new_object(MessageGroup)
    _set_field(group, "seq", seq)
    _set_field(group, "messages", messages)
    _set_field(group, "retained", retained)
    _set_field(group, "control", None)
    _adopt(group, messages_json, retained_json)
    return group


def _appended_plainly(
    seq: int,
    messages: tuple[Message, ...],
    scope: Scope,
    messages_json: bytes | None,
    ids: tuple[str | None, ...] | None,
    write_id: str | None,
) -> MessageGroup:
    """:func:`appended_group` by the constructors; the scope's record is remembered for the next."""
    base = RetainedRecord(scope)
    retained = base if write_id is None else RetainedRecord(scope, write_id=write_id)
    group = MessageGroup(seq=seq, messages=messages, retained=retained)
    if messages_json is None:
        return group
    retained_json = _adopt_around(group, messages_json)
    # The scope's record is remembered without a write id (each append has its own).
    base_text = retained_json_text(base) if retained_json is not None and ids is not None else None
    if base_text is not None and ids is not None:
        if len(_APPEND_RETAINED) >= _MAX_APPEND_RETAINED:
            _APPEND_RETAINED.clear()
        _APPEND_RETAINED[ids] = (base, base_text.encode("utf-8"))
    return group


_RETAINED_FIELDS: Final = tuple(a.name for a in attrs.fields(RetainedRecord))


def _with_write_id(
    retained: RetainedRecord, retained_json: bytes, write_id: str
) -> tuple[RetainedRecord, bytes]:
    """``retained`` (a usual record without a write id) with ``write_id`` set, and its JSON.

    Built as the constructor would build it (each field set with
    ``object.__setattr__``, the write id checked by its validator); its JSON
    is the record's with the ``write_id`` key added last, where it sorts.
    """
    write_id_field(write_id)
    record: RetainedRecord = _new_object(RetainedRecord)
    for name in _RETAINED_FIELDS:
        _set_field(record, name, getattr(retained, name))
    _set_field(record, "write_id", write_id)
    return record, b'%b,"write_id":"%b"}' % (retained_json[:-1], write_id.encode("ascii"))


def _control_has_no_messages(instance: MessageGroup, attribute: Any, value: HistoryControl | None) -> None:
    if value is not None and instance.messages:
        raise InvalidArgumentError("a control group holds a control record and no messages")


@attrs.frozen(slots=True)
class MessageGroup:
    """A complete-or-not run of messages, numbered by ``seq`` within its session.

    A control group has no messages and a ``control`` record (a retraction or
    a view reset); ``control`` is left out of the encoding when ``None``, so
    message groups keep their bytes and digests.
    """

    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("control",)

    seq: int = attrs.field(validator=seq_field)
    messages: tuple[Message, ...] = attrs.field(converter=tuple_of_messages)
    retained: RetainedRecord | None = None
    #: Set on a control group (which then has no messages): what it records.
    control: HistoryControl | None = attrs.field(default=None, validator=_control_has_no_messages)

    @property
    def missing_tool_results(self) -> tuple[str, ...]:
        """IDs of tool calls in this group that have no tool result message after them."""
        return match_tool_results(self.messages)[0]

    @property
    def orphan_tool_results(self) -> tuple[int, ...]:
        """Indexes of tool results that answer no open tool call made earlier in this group.

        A result must follow the call it answers, in the same group, once:
        a group that is only a tool result (its call lost or in another
        group) is not a turn anyone can read back. A result holding a
        foreign framework's item (a ``payload``) is the exception: its call
        is that framework's item, which core does not pair (see
        :func:`~agentium_harness._history_messages.match_tool_results`).
        """
        return match_tool_results(self.messages)[1]

    @property
    def is_complete(self) -> bool:
        """True for a control group, and for a non-empty group whose every call and result pair up.

        Every tool call has its result after it, and every result answers a call
        (a result holding a foreign framework's item may answer none: :attr:`orphan_tool_results`).
        """
        if self.control is not None:
            return True
        if not self.messages:
            return False
        missing, orphans = match_tool_results(self.messages)  # one pass for both
        return not missing and not orphans

    def canonical_bytes(self) -> bytes:
        """The canonical JSON encoding of this group (computed once per group object)."""
        data: bytes = (_ENCODED.get(id(self)) or _encoding(self))[0]  # one look-up once encoded
        return data

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of :meth:`canonical_bytes` (computed once per group object)."""
        cached = _ENCODED.get(id(self)) or _encoding(self)
        digest: str | None = cached[1]
        if digest is None:
            digest = cached[1] = digest_bytes(cached[0])
        return digest

    @property
    def size_bytes(self) -> int:
        """Length of the canonical encoding in bytes."""
        return len((_ENCODED.get(id(self)) or _encoding(self))[0])

    @property
    def estimated_tokens(self) -> int:
        """Token estimate of all messages (computed once per group object)."""
        return tokens_and_size(self)[0]


# The converter's data for a group, built by hand: what encoding a group costs is mostly the
# converter's walk, and a group is encoded once in its life, at its commit. Exact by
# construction for these records (their fields are checked against the names below at import,
# and a subclass takes the converter's path); values inside arguments and payloads are passed
# as they are, and whatever JSON cannot take as it is (a set, a time, a record, an enum that is
# not a str or int) makes the encoding fail and take the converter's path, which turns those
# into plain data first. What JSON takes as it is (tuples, str and int enums) it writes exactly
# as it writes the converter's plain form.
_HAND_BUILT: Final = (
    PARTS_HAND_BUILT
    and [a.name for a in attrs.fields(MessageGroup)] == ["seq", "messages", "retained", "control"]
    and MessageGroup.__agentium_omit_if_none__ == ("control",)
)


def _group_data(group: MessageGroup) -> dict[str, Any] | None:
    """The converter's data for ``group`` (up to tuples for lists), or ``None`` where it must do it."""
    if not _HAND_BUILT or type(group) is not MessageGroup:
        return None
    messages: list[dict[str, Any]] = []
    for m in group.messages:
        data = message_data(m)
        if data is None:
            return None
        messages.append(data)
    retained = group.retained
    built = {
        "messages": messages,
        "retained": None if retained is None else retained_data(retained),
        "seq": group.seq,
    }
    if group.control is not None:
        built["control"] = unstructure(group.control)
    return built


def _text_group_json(group: MessageGroup) -> bytes | None:
    """The canonical JSON of a group of text messages (a turn's), written out; ``None`` for any other.

    The messages hold text only (no tool calls, no payload) and the retained
    record is the usual one (or none): every value is a string, ``None`` or
    the seq, so the text is the keys in sorted order with each string as the
    encoder writes it (:func:`json.encoder.encode_basestring`, what
    :func:`canonical_json` uses). About three times cheaper than the
    encoder's walk over the converter's data; a lone surrogate (or anything
    unexpected) gives ``None``, and the encoder's path says what is wrong.
    """
    if not _HAND_BUILT or type(group) is not MessageGroup or group.control is not None:
        return None
    seq = group.seq
    if type(seq) is not int:
        return None
    parts = []
    for m in group.messages:
        content = m.content
        if (
            type(m) is not Message
            or m.tool_calls
            or m.payload is not None
            or m.payload_format is not None
            or not isinstance(content, str)
        ):
            return None
        call_id = m.tool_call_id  # as the encoder writes it (any other type: the encoder's path)
        call_id = "null" if call_id is None else _json_string(call_id) if isinstance(call_id, str) else None
        if call_id is None:
            return None
        parts.append(
            f'{{"content":{_json_string(content)},"role":{_json_string(m.role)},'
            f'"tool_call_id":{call_id},"tool_calls":[]}}'
        )
    retained = group.retained
    if retained is None:
        retained_text: str | None = "null"
    else:
        retained_text = retained_json_text(retained)
        if retained_text is None:
            return None
    text = f'{{"messages":[{",".join(parts)}],"retained":{retained_text},"seq":{int.__repr__(seq)}}}'
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate: the encoder's path refuses it in its own words


def _group_json(group: MessageGroup) -> bytes:
    """The canonical JSON bytes of ``group``: :func:`canonical_json` of the converter's data for it."""
    text = _text_group_json(group)
    if text is not None:
        return text
    return hand_built_json(_group_data(group), group)
