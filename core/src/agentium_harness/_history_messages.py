"""The parts of a canonical history group: its messages and the record retained with it.

A :class:`Message` is one message of canonical history; what a message holds
(text, tool calls, a foreign framework's item) and how many tokens it is
estimated at are defined here, with :func:`match_tool_results`, which pairs a
run of messages' tool calls with their results, and the
:class:`RetainedRecord` kept with a group about how its answer was produced;
and how each part is written in its group's canonical JSON. Re-exported from
``_history``, where the groups that hold them live and are encoded.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Iterable
from json.encoder import encode_basestring as _json_string
from typing import Any, ClassVar, Final

import attrs

from ._codec import MAX_ARGUMENT_DEPTH, canonical_json, json_depth_exceeds, unstructure
from ._errors import EncodingError, InvalidArgumentError, InvalidIdError
from ._history_controls import TurnInterruption
from ._scope import Scope, validate_id
from ._validators import plain_str, str_tuple
from ._verdicts import VerificationRecord

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_FORMAT_LENGTH",
    "PARTS_HAND_BUILT",
    "PAYLOAD_FORMAT",
    "Message",
    "RetainedRecord",
    "Role",
    "ToolCall",
    "estimate_tokens",
    "hand_built_json",
    "match_tool_results",
    "message_data",
    "message_json",
    "message_tokens",
    "messages_tokens",
    "new_write_id",
    "retained_data",
    "retained_json_text",
    "stored_messages_issue",
    "stored_parts_need_checking",
    "usual_retained",
    "write_id_field",
]

#: Largest ``Message.payload``, in bytes of its canonical JSON encoding (8 MiB).
MAX_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
#: Longest ``Message.payload_format`` name, in characters.
MAX_PAYLOAD_FORMAT_LENGTH: Final = 128
#: A well-formed ``Message.payload_format`` name (``append`` and the stored-data decoders hold to it).
PAYLOAD_FORMAT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+-]*")


def estimate_tokens(text: str) -> int:
    """A deterministic, model-free token estimate: one token per 4 UTF-8 bytes, rounded up.

    :raises InvalidArgumentError: ``text`` is not a ``str`` (it raised ``AttributeError``).
    """
    # An ASCII string (str.isascii() reads a flag, it does not scan) is as many UTF-8 bytes as
    # characters: no need to encode it to count them.
    if type(text) is str and text.isascii():
        return (len(text) + 3) // 4
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
    return (len(text.encode("utf-8")) + 3) // 4


class Role(enum.StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def _tool_call_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)


@attrs.frozen(slots=True)
class ToolCall:
    """A tool call requested by the model. ``arguments`` is plain JSON data."""

    id: str = attrs.field(converter=plain_str, validator=_tool_call_id)
    name: str = attrs.field(converter=plain_str, validator=_tool_call_id)
    arguments: dict[str, Any] = attrs.field(factory=dict, hash=False)


def _to_role(value: str) -> Role:
    """``Role(value)``, with a member given back at once.

    An Enum call is a Python-level lookup, and every message built (each
    turn's, each appended copy, each decoded one) converts its role. A value
    that is no role is refused with :class:`InvalidArgumentError` (a
    ``ValueError`` too, so a decoder's catch of ``ValueError`` still holds).
    """
    if type(value) is Role:
        return value
    try:
        return Role(value)
    except ValueError:
        # Only the type is named for anything but a short exact str: a host's object's repr is its code.
        shown = repr(value) if type(value) is str and len(value) <= 40 else f"a {type(value).__name__}"
        raise InvalidArgumentError(
            f"message role must be one of {', '.join(r.value for r in Role)}, got {shown}"
        ) from None


def _to_tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """``tool_calls`` as a tuple; a value that is not iterable is refused with :class:`InvalidArgumentError`.

    What the items are is checked where a message is committed (``append``, a provider's reply).
    """
    try:
        return tuple(value)  # what tuple_of_tool_calls does (its typing is this function's), one call less
    except TypeError:
        if hasattr(type(value), "__iter__"):
            raise  # an iterable whose own iteration failed: its error, as it raised it
        raise InvalidArgumentError(
            f"message tool_calls must be an iterable of ToolCall, got a {type(value).__name__}"
        ) from None


@attrs.frozen(slots=True)
class Message:
    """One message of canonical history.

    ``content`` is the readable text: what ``run()`` sends the model, what
    recall indexes and summaries read. A host that keeps history in another
    framework's item format stores the item itself in ``payload`` (plain
    JSON: objects with string keys, arrays, strings, finite numbers, booleans,
    null) named by ``payload_format`` (for example
    ``openai.responses.input_item/v1``); the item is part of the group's
    canonical bytes and digest and comes back from ``read_history`` exactly
    as it was appended (an object's keys in code-point order, as canonical
    JSON writes them). ``HarnessRuntime.append`` checks it: a value that is
    not plain JSON (a tuple, a non-string key, ``nan`` or ``inf``, a lone
    surrogate), nested deeper than 64 levels or larger than
    :data:`MAX_PAYLOAD_BYTES` is refused with
    :class:`~agentium_harness._errors.InvalidPayloadError`. ``run()`` never
    sends a payload to the model. Both fields are left out of the encoding
    when ``None``, so messages without a payload keep their bytes and digests.

    ``append`` (and a provider's reply) commits a checked copy whose text
    fields (``content``, ``tool_call_id``, ``payload_format``, each tool
    call's ``id`` and ``name``) are exact ``str``: a ``str`` subclass (a
    ``str`` enum, ``markupsafe.Markup``, or one whose own methods lie or
    raise) is kept as the text it holds, with the same canonical bytes, and
    none of its methods runs inside the engine.

    ``role`` is a :class:`Role` or its value: anything else, or ``tool_calls``
    that are not iterable, is refused with
    :class:`~agentium_harness._errors.InvalidArgumentError` as the message is built.
    """

    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("payload", "payload_format")

    role: Role = attrs.field(converter=_to_role)
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_to_tool_calls)
    tool_call_id: str | None = None
    #: A foreign framework's item, kept exactly (plain JSON); ``None`` when there is none.
    payload: Any = attrs.field(default=None, hash=False)
    #: What ``payload`` is, e.g. ``openai.responses.input_item/v1``; set exactly when ``payload`` is.
    payload_format: str | None = None

    @property
    def estimated_tokens(self) -> int:
        """Token estimate of the content and tool calls."""
        return _tokens_of(self)


def message_tokens(message: Message) -> int:
    """``message.estimated_tokens``, as a function: what sums over many messages map over."""
    if type(message) is Message and not message.tool_calls:
        # Most messages, inlined: a request sums this over its whole history every step.
        content = message.content
        n = len(content) if type(content) is str and content.isascii() else len(content.encode("utf-8"))
        return (n + 3) // 4 + 4
    return message.estimated_tokens  # tool calls, or a subclass that may define its own estimate


def messages_tokens(messages: Iterable[Message]) -> int:
    """``sum(map(message_tokens, messages))``, with the common case inlined in the loop.

    A request's estimate sums its whole history every step: a plain message
    is counted here without a call of its own (the same arithmetic as
    :func:`message_tokens`); any other goes through that function.
    """
    total = 0
    for message in messages:
        if type(message) is Message and not message.tool_calls:
            content = message.content
            n = len(content) if type(content) is str and content.isascii() else len(content.encode("utf-8"))
            total += (n + 3) // 4 + 4
        else:
            total += message_tokens(message)
    return total


def _tokens_of(message: Message) -> int:
    if not message.tool_calls:
        return estimate_tokens(message.content) + 4  # the same sum, without its loop
    extra = sum(estimate_tokens(c.name) + estimate_tokens(str(c.arguments)) for c in message.tool_calls)
    return estimate_tokens(message.content) + extra + 4


def match_tool_results(messages: tuple[Message, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``(ids of calls left unanswered, indexes of results answering no open call)``, in message order.

    Ids are unique within one reply, not within a turn: a model may reuse an
    id on a later step, so each result answers the earliest call with its id
    that is still open, and a call is open until a result after it answers it.

    A tool result holding a foreign framework's item (a ``payload``) that
    answers no open call is no orphan: its call is a foreign item too (an
    integration's ``function_call``, perhaps in an earlier group), which that
    framework pairs, not core. ``run()`` shows it to the model as tool-output
    source data, never as a ``tool`` message answering nothing. One that
    answers an open call pairs as any result does.
    """
    open_calls: dict[str, list[int]] = {}
    order: list[tuple[int, str]] = []
    orphans: list[int] = []
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            open_calls.setdefault(call.id, []).append(len(order))
            order.append((index, call.id))
        if message.role is Role.TOOL:
            pending = open_calls.get(message.tool_call_id or "")
            if message.tool_call_id is not None and pending:
                pending.pop(0)
            elif message.payload is None:
                orphans.append(index)
    if not order:
        return (), tuple(orphans)  # no call at all (most groups): nothing left open
    still_open = sorted(n for positions in open_calls.values() for n in positions)
    return tuple(order[n][1] for n in still_open), tuple(orphans)


@attrs.frozen(slots=True)
class RetainedRecord:
    """What is kept with a committed group about how its answer was produced (R26).

    ``source_view_revision`` identifies the validated view of recalled sources,
    ``summary_policy``/``summary_version`` the summary that was in the request,
    ``uncertainty`` every caveat the run carried, and ``verification`` the
    verdict, evidence and revision count of a verified completion, and
    ``interruption`` why a group committed after its tools ran has no answer.
    """

    #: Left out of the encoding when ``None``: groups committed before
    #: these fields existed keep their bytes and digests.
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("verification", "interruption", "write_id")

    scope: Scope
    source_view_revision: str | None = None
    summary_policy: str | None = None
    summary_version: str | None = None
    uncertainty: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)
    #: How the turn's completion was judged, when it was verified (R27).
    verification: VerificationRecord | None = None
    #: Set when the turn stopped after its tools ran: the group holds what ran, not an answer.
    interruption: TurnInterruption | None = None
    #: A random id (32 lowercase hex digits) the engine gives every group it commits. Two equal
    #: writes racing on one revision (the same words appended by two hosts, two pops of the same
    #: message) would otherwise have the same bytes and digest, and a save refused by
    #: compare-and-set, read back to learn whether it landed (a store may refuse its own retried
    #: write), would take the winner's group for its own: both writers told committed, one write
    #: in history. ``None`` on groups committed before it existed: their bytes stay as they were.
    write_id: str | None = attrs.field(default=None, validator=lambda i, a, v: write_id_field(v))


_WRITE_ID: Final = re.compile(r"[0-9a-f]{32}")


def write_id_field(value: object) -> None:
    """Refuse a ``RetainedRecord.write_id`` that is not ``None`` or 32 lowercase hex digits."""
    if value is None:
        return
    if type(value) is not str or _WRITE_ID.fullmatch(value) is None:
        raise InvalidArgumentError("write_id must be None or 32 lowercase hex digits")


def new_write_id() -> str:
    """A new random write id for a group the engine commits (:attr:`RetainedRecord.write_id`)."""
    return secrets.token_hex(16)


# The converter's data for a message and a retained record, built by hand, for the groups'
# encodings (``_history``), checked at import like theirs: exact for these records, their
# fields checked against the names below (a subclass takes the converter's path).
PARTS_HAND_BUILT: Final = (
    [a.name for a in attrs.fields(Message)]
    == ["role", "content", "tool_calls", "tool_call_id", "payload", "payload_format"]
    and [a.name for a in attrs.fields(ToolCall)] == ["id", "name", "arguments"]
    and Message.__agentium_omit_if_none__ == ("payload", "payload_format")
    and not hasattr(ToolCall, "__agentium_omit_if_none__")
    and [a.name for a in attrs.fields(RetainedRecord)]
    == [
        "scope",
        "source_view_revision",
        "summary_policy",
        "summary_version",
        "uncertainty",
        "verification",
        "interruption",
        "write_id",
    ]
    and RetainedRecord.__agentium_omit_if_none__ == ("verification", "interruption", "write_id")
    and [a.name for a in attrs.fields(Scope)] == ["tenant", "user", "session", "project", "repository"]
    and not hasattr(Scope, "__agentium_omit_if_none__")
)


def usual_retained(retained: RetainedRecord) -> bool:
    """Whether ``retained`` is the usual record: exact types, no verification, no interruption."""
    return (
        type(retained) is RetainedRecord
        and type(retained.scope) is Scope
        and retained.verification is None
        and retained.interruption is None
    )


def retained_data(retained: RetainedRecord) -> Any:
    """The converter's data for ``retained``: by hand for the usual record, else by the converter.

    The usual record has no verification and no interruption (both left out when ``None``).
    """
    if not usual_retained(retained):
        return unstructure(retained)
    scope = retained.scope
    data = {
        "scope": {
            "project": scope.project,
            "repository": scope.repository,
            "session": scope.session,
            "tenant": scope.tenant,
            "user": scope.user,
        },
        "source_view_revision": retained.source_view_revision,
        "summary_policy": retained.summary_policy,
        "summary_version": retained.summary_version,
        "uncertainty": retained.uncertainty,
    }
    if retained.write_id is not None:
        data["write_id"] = retained.write_id
    return data


def message_data(m: Message) -> dict[str, Any] | None:
    """The converter's data for message ``m`` (as :func:`_group_data`), or ``None`` where it must do it."""
    if type(m) is not Message:
        return None
    calls = []
    for c in m.tool_calls:
        if type(c) is not ToolCall:
            return None
        calls.append({"arguments": c.arguments, "id": c.id, "name": c.name})
    data = {
        "content": m.content,
        "role": m.role,  # a Role is a str: JSON writes its text (.value is a Python-level property)
        "tool_call_id": m.tool_call_id,
        "tool_calls": calls,
    }
    if m.payload is not None:
        data["payload"] = m.payload
    if m.payload_format is not None:
        data["payload_format"] = m.payload_format
    return data


def message_json(message: Message) -> bytes:
    """Canonical JSON bytes of one message, as :func:`canonical_json` of the converter's data for it.

    Built by hand like a group's (:func:`_group_json`), the converter's
    path taken where that cannot be done; raises :class:`EncodingError`
    exactly where ``canonical_json(unstructure(message))`` does.
    """
    return hand_built_json(message_data(message) if PARTS_HAND_BUILT else None, message)


def hand_built_json(data: Any, value: object) -> bytes:
    """Canonical JSON of ``data``, the converter's data for ``value`` built by hand, else of the converter's.

    ``data`` is ``None`` where it could not be built by hand; where it cannot
    be encoded as it is (something inside needs the converter first, or
    cannot be encoded at all), the converter's path is taken, and says so.
    """
    if data is not None:
        try:
            return canonical_json(data)
        except EncodingError:
            pass
    return canonical_json(unstructure(value))


def retained_json_text(retained: RetainedRecord) -> str | None:
    """The usual retained record's JSON text (see :func:`_text_group_json`), or ``None``."""
    if not usual_retained(retained):
        return None
    scope = retained.scope
    # Each str | None field as the encoder writes it (None for any other value); no call per field.
    fields = [
        "null" if value is None else _json_string(value) if isinstance(value, str) else None
        for value in (
            scope.project,
            scope.repository,
            scope.session,
            scope.tenant,
            scope.user,
            retained.source_view_revision,
            retained.summary_policy,
            retained.summary_version,
        )
    ]
    uncertainty = retained.uncertainty
    if None in fields or (uncertainty and not all(isinstance(u, str) for u in uncertainty)):
        return None
    project, repository, session, tenant, user, revision, policy, version = fields
    write_id = retained.write_id
    if write_id is not None and type(write_id) is not str:
        return None
    # ``write_id`` sorts last of the keys; left out when ``None``, as the converter leaves it.
    tail = "" if write_id is None else f',"write_id":{_json_string(write_id)}'
    return (
        f'{{"scope":{{"project":{project},"repository":{repository},"session":{session},'
        f'"tenant":{tenant},"user":{user}}},"source_view_revision":{revision},'
        f'"summary_policy":{policy},"summary_version":{version},'
        f'"uncertainty":[{",".join(map(_json_string, uncertainty))}]{tail}}}'
    )


def stored_parts_need_checking(data: bytes, payload_level: int) -> bool:
    """Whether stored JSON ``data`` could hold a payload or arguments over ``append``'s bounds.

    ``payload_level`` is how many arrays and objects a message's payload sits
    inside in ``data`` (3 in a group's encoding: the group, its messages'
    list, the message). A text no longer than :data:`MAX_PAYLOAD_BYTES` and
    nesting no deeper than ``payload_level + MAX_ARGUMENT_DEPTH`` cannot hold
    one (arguments sit deeper than a payload), so most rows need no more than
    this scan at C speed; otherwise :func:`stored_messages_issue` checks each part.
    """
    return len(data) > MAX_PAYLOAD_BYTES or json_depth_exceeds(data, payload_level + MAX_ARGUMENT_DEPTH)


def _part_issue(part: object, what: str) -> str | None:
    encoded = canonical_json(part)  # decoded from canonical JSON: plain data, it encodes
    if len(encoded) > MAX_PAYLOAD_BYTES:
        return f"{what} is {len(encoded)} bytes as canonical JSON, over the limit of {MAX_PAYLOAD_BYTES}"
    if json_depth_exceeds(encoded, MAX_ARGUMENT_DEPTH):
        return f"{what}: nested deeper than {MAX_ARGUMENT_DEPTH} levels of arrays and objects"
    return None


def stored_messages_issue(messages: tuple[Message, ...], data: bytes, payload_level: int) -> str | None:
    """What ``append`` would have refused in messages decoded from stored ``data``, or ``None``.

    The decoders of stored groups and snapshots call it on what they decoded:
    a digest is unkeyed, so a record written by something other than
    Agentium can match its digest and still hold what the public API never
    commits. The types and what the constructors check (a role, each tool
    call's id and name) are the strict decode's; here, what ``append``
    checks besides: a ``tool_call_id`` that is an id (``validate_id``: not
    empty, no control character, at most 256 characters), ``payload`` and
    ``payload_format`` together or neither, a format matching
    :data:`PAYLOAD_FORMAT` within :data:`MAX_PAYLOAD_FORMAT_LENGTH`, and
    each payload and each tool call's arguments within
    :data:`MAX_PAYLOAD_BYTES` and :data:`MAX_ARGUMENT_DEPTH` levels (looked
    at one by one only when :func:`stored_parts_need_checking` says ``data``
    could hold one over them; ``payload_level`` is its argument). Content is
    free text (a lone surrogate never decodes).
    """
    check_parts: bool | None = None  # found out at the first payload or tool call, if any
    for index, message in enumerate(messages):
        call_id = message.tool_call_id
        if call_id is not None:
            try:
                validate_id(call_id, "tool_call_id")
            except InvalidIdError as exc:
                return f"message {index}: {exc}"
        payload, payload_format = message.payload, message.payload_format
        if payload is None and payload_format is None and not message.tool_calls:
            continue  # a text message (most): nothing more to look at
        if (payload is None) != (payload_format is None):
            return f"message {index}: payload and payload_format must be set together"
        if payload_format is not None and (
            len(payload_format) > MAX_PAYLOAD_FORMAT_LENGTH or not PAYLOAD_FORMAT.fullmatch(payload_format)
        ):
            return f"message {index}: payload_format {payload_format[:80]!r} is not a well-formed name"
        if check_parts is None:
            check_parts = stored_parts_need_checking(data, payload_level)
        if check_parts:
            issue = None if payload is None else _part_issue(payload, f"message {index}: payload")
            for call in message.tool_calls:
                issue = issue or _part_issue(call.arguments, f"message {index}: tool call arguments")
            if issue is not None:
                return issue
    return None
