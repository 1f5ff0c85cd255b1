"""The commit path's encodings are exact: built from cached parts, they equal the plain encoding.

A snapshot's bytes are written key by key from its parts' cached text (marks,
receipts, summary, view, scope) and its groups' cached encodings, instead of a
converter round through an evolved copy. Whatever the content, they must be
byte for byte the plain canonical encoding (the converter's, then
:func:`canonical_json`), sealed or not, so stored data keeps loading and
digests keep matching.
"""

from __future__ import annotations

import enum
import gc
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _encoding_support import plain_snapshot_bytes as _plain
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    InvalidArgumentError,
    Message,
    MessageGroup,
    RetainedRecord,
    Role,
    Scope,
    SessionKey,
    ToolCall,
)
from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._engine.history_checks import (
    _checked_at_once,
    _message,
    check_messages,
    check_messages_encoded,
)
from agentium_harness._errors import (
    AgentiumError,
    EncodingError,
    IncompleteGroupError,
    InvalidPayloadError,
)
from agentium_harness._history import (
    ControlKind,
    HistoryControl,
    InterruptionCause,
    MessageRef,
    RetractedSpan,
    TurnInterruption,
    ViewState,
    adopt_messages_encoding,
    bytes_and_digest,
    estimate_tokens,
    message_json,
    message_tokens,
    tokens_and_size,
)
from agentium_harness._ports.erasure import ErasureLedger, SeqRange
from agentium_harness._ports.provider import ModelRequest
from agentium_harness._ports.snapshot import (
    ArchivedDigest,
    ArchiveDivergence,
    ArchiveMark,
    SessionSnapshot,
    add_archive_mark,
    decode_snapshot,
    seal_new_snapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_digest,
    snapshot_header,
    verify_snapshot,
)
from agentium_harness._ports.snapshot_text import PART_TEXTS as _MARKS
from agentium_harness._ports.summary import Citation, CoverageGap, GapReason, SummaryState, TaskSummary
from agentium_harness._validators import MAX_SEQ

TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(['"resident":[]', '{"resident":[]}', "\\", '"', '"boundary":0,"digest":null,', "]"]),
)
IDS = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
SCOPES = st.builds(Scope, IDS, IDS, IDS, st.one_of(st.none(), IDS), st.one_of(st.none(), IDS))
DIGESTS = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)
TIMES = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.sampled_from([UTC])
)


def _group(seq: int, text: str, scope: Scope) -> MessageGroup:
    return MessageGroup(
        seq,
        (
            Message(Role.USER, text),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "tool", {"resident": [text]}),)),
            Message(Role.TOOL, text, tool_call_id="c1", payload={"k": [text, 1.5]}, payload_format="x/v1"),
        ),
        RetainedRecord(scope, uncertainty=(text,)),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> SessionSnapshot:
    scope = draw(st.one_of(st.none(), SCOPES))
    boundary = draw(st.integers(0, 40))
    texts = draw(st.lists(TEXT, max_size=4))
    groups = tuple(_group(boundary + i, t, scope or Scope("t", "u", "s")) for i, t in enumerate(texts))
    summary = draw(
        st.one_of(
            st.none(),
            st.builds(
                SummaryState,
                st.builds(
                    TaskSummary,
                    TEXT,
                    st.integers(0, boundary),
                    st.lists(st.builds(Citation, st.integers(0, 9), DIGESTS), max_size=2),
                    uncertainty=st.lists(TEXT, max_size=2),
                ),
                st.lists(
                    st.builds(CoverageGap, st.integers(0, 9), st.sampled_from(GapReason), TEXT), max_size=1
                ),
                st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3)),
                st.one_of(st.none(), st.integers(0, boundary)),
            ),
        )
    )
    view = draw(
        st.one_of(
            st.none(),
            st.builds(
                ViewState,
                st.integers(0, 5),
                st.lists(
                    st.builds(RetractedSpan, st.integers(0, 9), st.integers(0, 3), st.integers(0, 9)),
                    max_size=2,
                ),
                st.integers(0, 5),
            ),
        )
    )
    marks = draw(
        st.one_of(st.none(), st.lists(st.builds(ArchiveMark, st.integers(1, 10**6), TIMES), max_size=4))
    )
    return SessionSnapshot(
        memory_scope=scope,
        boundary=boundary,
        next_seq=boundary + len(groups),
        resident=groups,
        format_version=draw(st.integers(1, 3)),
        divergence=draw(
            st.one_of(st.none(), st.builds(ArchiveDivergence, st.lists(st.integers(0, 9), max_size=2), TEXT))
        ),
        digest=draw(st.one_of(st.none(), DIGESTS)),
        summary=summary,
        receipts=draw(st.lists(st.builds(ArchivedDigest, st.integers(0, 99), DIGESTS), max_size=3)),
        view=view,
        erased=draw(
            st.one_of(
                st.none(),
                st.lists(
                    st.builds(lambda a, n: SeqRange(a, a + n), st.integers(0, 9), st.integers(1, 3)),
                    max_size=2,
                ),
            )
        ),
        archived=marks,
        ledger=draw(st.one_of(st.none(), st.just(ErasureLedger()))),
    )


@settings(max_examples=100, deadline=None)
@given(snapshots())
def test_snapshot_bytes_equal_the_plain_encoding_whatever_the_parts(snapshot: SessionSnapshot) -> None:
    assert snapshot_bytes(snapshot) == _plain(snapshot)
    assert snapshot_digest(snapshot) == digest_bytes(_plain(attrs.evolve(snapshot, digest=None)))


@settings(max_examples=100, deadline=None)
@given(snapshots())
def test_a_sealed_snapshot_has_the_plain_bytes_digest_and_header(snapshot: SessionSnapshot) -> None:
    sealed = seal_snapshot(snapshot)
    unsealed = attrs.evolve(sealed, digest=None)
    assert sealed.format_version == 3
    assert sealed.digest == digest_bytes(_plain(unsealed))
    assert snapshot_bytes(sealed) == _plain(sealed)
    header = snapshot_header(sealed)
    assert header == _plain(attrs.evolve(sealed, resident=()))
    # Sealing an already sealed snapshot gives the same bytes and digest again.
    again = seal_snapshot(sealed)
    assert again.digest == sealed.digest and snapshot_bytes(again) == snapshot_bytes(sealed)


@settings(max_examples=70, deadline=None)
@given(snapshots())
def test_a_new_snapshot_sealed_as_built_equals_the_sealed_copy(snapshot: SessionSnapshot) -> None:
    # What a commit does: build the snapshot and seal it itself, not a copy (the digest and the
    # format are given here too, which a commit never does, to see them taken the copying way).
    fields = {a.name: getattr(snapshot, a.name) for a in attrs.fields(SessionSnapshot)}
    for kept in (fields, {k: v for k, v in fields.items() if k not in ("digest", "format_version")}):
        copied = seal_snapshot(SessionSnapshot(**kept))
        built = seal_new_snapshot(**kept)
        assert built == copied and built.digest == digest_bytes(_plain(attrs.evolve(built, digest=None)))
        assert snapshot_bytes(built) == snapshot_bytes(copied) == _plain(built)
        assert snapshot_header(built) == snapshot_header(copied)
        verify_snapshot(SessionKey("t", "u", "s"), built)


def test_a_snapshot_not_made_by_the_seal_has_no_header() -> None:
    assert snapshot_header(SessionSnapshot(Scope("t", "u", "s"))) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(TIMES, min_size=1, max_size=40), st.sampled_from([UTC, None]))
def test_archive_marks_carried_over_keep_their_text_and_equal_the_plain_encoding(
    times: list[datetime], zone: Any
) -> None:
    marks: tuple[ArchiveMark, ...] | None = None
    for below, when in enumerate(sorted(times), start=1):
        marks = add_archive_mark(marks, below, when)
    assert marks is not None
    for mark in marks:
        assert _MARKS.get(id(mark)) in (None, canonical_json(unstructure(mark)))
    snapshot = SessionSnapshot(Scope("t", "u", "s"), len(times), len(times), archived=marks)
    assert snapshot_bytes(snapshot) == _plain(snapshot)
    # The same marks in a tuple of their own (not the one the adds made) take the per-mark text.
    again = SessionSnapshot(Scope("t", "u", "s"), len(times), len(times), archived=list(marks))
    assert snapshot_bytes(again) == _plain(again)
    for mark in marks:
        assert _MARKS[id(mark)] == canonical_json(unstructure(mark))


def test_a_mark_with_a_time_in_another_zone_is_written_in_utc() -> None:
    from datetime import timezone

    when = datetime(2026, 5, 1, 12, 0, 0, 123, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    snapshot = SessionSnapshot(Scope("t", "u", "s"), 1, 1, archived=(ArchiveMark(1, when),))
    assert snapshot_bytes(snapshot) == _plain(snapshot)
    assert b'"at":"2026-05-01T06:30:00.000123Z"' in snapshot_bytes(snapshot)


#: A summary state saved before ``given_until`` existed, as that version wrote it.
_LEGACY_SUMMARY = (
    b'{"boundary":2,"digest":null,"divergence":null,"format_version":3,"memory_scope":{"project":null,'
    b'"repository":null,"session":"s","tenant":"t","user":"u"},"next_seq":2,"resident":[],"summary":'
    b'{"erased_citations":[0],"gaps":[],"summary":{"citations":[],"frontier":1,"policy":"default",'
    b'"text":"said","uncertainty":[],"version":"1"}}}'
)


def test_a_summary_state_without_given_until_keeps_the_bytes_it_had_before_the_field() -> None:
    key = SessionKey("t", "u", "s")
    legacy = SessionSnapshot(
        Scope("t", "u", "s"), 2, 2, summary=SummaryState(TaskSummary("said", 1), (), (0,))
    )
    assert snapshot_bytes(legacy) == _plain(legacy) == _LEGACY_SUMMARY  # so its digest is the one it had
    sealed = seal_snapshot(legacy)
    decoded = decode_snapshot(key, snapshot_bytes(sealed), "test")
    assert decoded == sealed and decoded.summary is not None and decoded.summary.given_until is None
    given = seal_snapshot(attrs.evolve(legacy, summary=attrs.evolve(legacy.summary, given_until=2)))
    assert b'"given_until":2' in snapshot_bytes(given) == _plain(given)
    assert decode_snapshot(key, snapshot_bytes(given), "test") == given


def test_the_part_caches_forget_dead_parts() -> None:
    before = len(_MARKS)
    summaries = [SummaryState(TaskSummary(f"s{i}", 0)) for i in range(20)]
    for s in summaries:
        snapshot_bytes(SessionSnapshot(Scope("t", "u", "s"), 0, 0, summary=s))
    assert len(_MARKS) >= before + 20
    del summaries, s
    gc.collect()
    assert len(_MARKS) <= before


def _reference_marks(
    marks: tuple[ArchiveMark, ...] | None, below: int, at: datetime
) -> tuple[ArchiveMark, ...]:
    """The rule as first written: drop the mark closest in time to the next one, the first of equals."""
    kept = [m for m in (marks or ()) if m.below < below]
    kept.append(ArchiveMark(below, at))
    while len(kept) > 32:
        gaps = [(kept[i + 1].at - kept[i].at, i) for i in range(len(kept) - 1)]
        del kept[min(gaps)[1]]
    return tuple(kept)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 5)), min_size=1, max_size=80))
def test_adding_archive_marks_keeps_the_rule(steps: list[tuple[int, int]]) -> None:
    # Equal gaps are frequent here (seconds 0-5): the first of equal gaps must go, as before.
    marks: tuple[ArchiveMark, ...] | None = None
    expected: tuple[ArchiveMark, ...] | None = None
    when = datetime(2026, 1, 1, tzinfo=UTC)
    for below, step in steps:
        when += timedelta(seconds=step)
        marks = add_archive_mark(marks, below, when)
        expected = _reference_marks(expected, below, when)
        assert [(m.below, m.at) for m in marks] == [(m.below, m.at) for m in expected]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-3, 5),
            st.sampled_from(["next"] * 12 + ["same", "zone", "back"]),
        ),
        min_size=30,
        max_size=90,
    )
)
def test_marks_added_turn_after_turn_keep_the_rule_and_the_plain_bytes(steps: list[tuple[int, str]]) -> None:
    # What commits do: each adds one mark past the last (a new boundary), to the marks carried over
    # from the snapshot before; past 32 one goes. Gaps repeat, times go back, some are in another
    # zone, some boundaries stay or move back: the marks and the bytes must be what the rule and
    # the plain encoding give, turn after turn.
    from datetime import timezone

    marks: tuple[ArchiveMark, ...] | None = None
    expected: tuple[ArchiveMark, ...] | None = None
    below, when = 0, datetime(2026, 1, 1, tzinfo=UTC)
    for step, kind in steps:
        below = max(1, below + {"next": 1, "zone": 1, "same": 0, "back": -3}[kind])
        when += timedelta(seconds=step, microseconds=step * 7)
        at = when.astimezone(timezone(timedelta(hours=2))) if kind == "zone" else when
        before, marks = marks, add_archive_mark(marks, below, at)
        expected = _reference_marks(expected, below, at)
        assert [(m.below, m.at) for m in marks] == [(m.below, m.at) for m in expected]
        if kind == "same":  # a retried commit: the same marks get the same mark again
            again = add_archive_mark(before, below, at)
            assert [(m.below, m.at) for m in again] == [(m.below, m.at) for m in expected]
        snapshot = SessionSnapshot(Scope("t", "u", "s"), below, below, archived=marks)
        assert snapshot_bytes(snapshot) == _plain(snapshot)
        sealed = seal_snapshot(snapshot)
        assert snapshot_header(sealed) == _plain(attrs.evolve(sealed, resident=()))


# -- groups: encoded once, by hand, exactly as the converter and canonical_json would ------------


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 7


class Plain(enum.Enum):
    ONE = "one"


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.sampled_from([Colour.RED, Size.BIG, Plain.ONE, datetime(2026, 1, 1, tzinfo=UTC)]),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(TEXT, inner, max_size=3),
        st.frozensets(st.integers(0, 5), max_size=3),
    ),
    max_leaves=8,
)


@st.composite
def groups(draw: st.DrawFn) -> MessageGroup:
    scope = draw(SCOPES)
    if draw(st.booleans()) and draw(st.booleans()):
        control = HistoryControl(
            draw(st.sampled_from(ControlKind)),
            draw(TEXT),
            draw(st.lists(st.builds(MessageRef, st.integers(0, 9), st.integers(0, 9)), max_size=2)),
        )
        return MessageGroup(draw(st.integers(0, 99)), (), RetainedRecord(scope), control=control)
    messages = []
    for _ in range(draw(st.integers(1, 3))):
        calls = tuple(
            ToolCall(f"c{i}", "tool", draw(st.dictionaries(TEXT, VALUES, max_size=3)))
            for i in range(draw(st.integers(0, 2)))
        )
        payload = draw(st.one_of(st.none(), VALUES))
        messages.append(
            Message(
                draw(st.sampled_from(Role)),
                draw(TEXT),
                calls,
                draw(st.one_of(st.none(), st.just("c0"))),
                payload=payload,
                payload_format=None if payload is None else "x/v1",
            )
        )
    retained = draw(
        st.one_of(
            st.none(),
            st.builds(
                RetainedRecord,
                st.just(scope),
                st.one_of(st.none(), TEXT),
                uncertainty=st.lists(TEXT, max_size=2),
                interruption=st.one_of(
                    st.none(), st.builds(TurnInterruption, st.sampled_from(InterruptionCause), TEXT)
                ),
            ),
        )
    )
    return MessageGroup(draw(st.integers(0, 99)), tuple(messages), retained)


def _plain_group(group: MessageGroup) -> bytes | type[EncodingError]:
    try:
        return canonical_json(unstructure(group))
    except EncodingError:
        return EncodingError


def _assert_encoded_as_plain(group: MessageGroup) -> bytes | None:
    """Check ``group``'s bytes, digest and size against the plain encoding; ``None`` where both refuse it."""
    expected = _plain_group(group)
    if expected is EncodingError:
        with pytest.raises(EncodingError):
            group.canonical_bytes()
        return None
    assert isinstance(expected, bytes)
    assert group.canonical_bytes() == expected
    assert group.digest == digest_bytes(expected)
    assert group.size_bytes == len(expected)
    return expected


@settings(max_examples=120, deadline=None)
@given(groups())
def test_a_group_is_encoded_exactly_as_the_converter_would(group: MessageGroup) -> None:
    expected = _assert_encoded_as_plain(group)
    if expected is None:
        return
    assert bytes_and_digest(group) == (expected, digest_bytes(expected))
    assert tokens_and_size(group) == (sum(m.estimated_tokens for m in group.messages), len(expected))


def test_the_append_check_copies_every_field_of_a_message() -> None:
    # check_messages builds its private copies field by field: a field added to Message must be
    # added there too (and to the group encoding's hand-built data), or it would be dropped.
    assert [a.name for a in attrs.fields(Message)] == [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "payload",
        "payload_format",
    ]
    message = Message(Role.TOOL, "r", tool_call_id="c1", payload={"a": [1]}, payload_format="x/v1")
    call = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {"k": "v"}),))
    copies = check_messages([call, message])
    assert copies == (call, message)
    assert copies[1].payload is not message.payload  # a private copy


# -- one message, and token estimates: the fast paths equal the plain computation ---------------


def _plain_message(message: Message) -> bytes | type[EncodingError]:
    try:
        return canonical_json(unstructure(message))
    except EncodingError:
        return EncodingError


@settings(max_examples=100, deadline=None)
@given(groups())
def test_a_message_is_encoded_exactly_as_the_converter_would(group: MessageGroup) -> None:
    # message_json is what the provider reply check encodes; it must refuse exactly what the
    # converter's encoding refuses and otherwise give its bytes.
    for message in group.messages:
        expected = _plain_message(message)
        if expected is EncodingError:
            with pytest.raises(EncodingError):
                message_json(message)
        else:
            assert message_json(message) == expected


def _plain_tokens(text: str) -> int:
    return (len(text.encode("utf-8")) + 3) // 4


def _plain_message_tokens(message: Message) -> int:
    extra = sum(_plain_tokens(c.name) + _plain_tokens(str(c.arguments)) for c in message.tool_calls)
    return _plain_tokens(message.content) + extra + 4


@settings(max_examples=100, deadline=None)
@given(st.text(), groups())
def test_token_estimates_count_utf8_bytes_whatever_the_text(text: str, group: MessageGroup) -> None:
    # The estimate skips encoding an ASCII string (its length is its byte count): non-ASCII
    # text, surrogates aside, must still count bytes.
    assert estimate_tokens(text) == _plain_tokens(text)
    for message in group.messages:
        assert message.estimated_tokens == message_tokens(message) == _plain_message_tokens(message)
    request = ModelRequest("sys é", history=group.messages, turn=group.messages[:1])
    assert request.estimated_tokens == (
        _plain_tokens("sys é")
        + sum(map(_plain_message_tokens, group.messages))
        + sum(map(_plain_message_tokens, group.messages[:1]))
    )


def test_a_message_subclass_keeps_its_own_token_estimate() -> None:
    @attrs.frozen(slots=True)
    class Counted(Message):
        @property
        def estimated_tokens(self) -> int:
            return 1000

    message = Counted(Role.USER, "hi")
    assert message_tokens(message) == 1000
    assert ModelRequest("", history=(message,)).estimated_tokens == 1000
    plain = Message(Role.USER, "hi")
    assert message_tokens(plain) == plain.estimated_tokens == 5


# -- the append check at once: equal to the check one message at a time, and its bytes exact -----


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


PLAIN = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False, allow_infinity=False),
        TEXT,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
#: Mostly plain JSON (the check at once must take it), sometimes not (it must give way).
ITEMS = st.one_of(PLAIN, PLAIN, PLAIN, VALUES, st.integers(60, 68).map(_deep), st.just({"x": "\ud800"}))


@st.composite
def appended(draw: st.DrawFn) -> list[Message]:
    messages = []
    for n in range(draw(st.integers(1, 3))):
        calls = tuple(
            ToolCall(f"c{n}{i}", "tool", draw(st.dictionaries(TEXT, ITEMS, max_size=2)))
            for i in range(draw(st.integers(0, 2)))
        )
        payload = draw(st.one_of(st.none(), ITEMS))
        messages.append(
            Message(
                draw(st.sampled_from(Role)),
                draw(st.one_of(TEXT, st.just("a\udc80b"))),
                calls,
                draw(st.one_of(st.none(), st.just("c00"), st.just("bad id"))),
                payload=payload,
                payload_format=draw(st.sampled_from(["x/v1", "bad format"]))
                if payload is not None
                else draw(st.sampled_from([None, None, "x/v1"])),
            )
        )
    return messages


def _one_by_one(messages: list[Message]) -> tuple[Message, ...] | tuple[type, str]:
    try:
        return tuple(_message(m, i) for i, m in enumerate(messages))
    except AgentiumError as exc:
        return type(exc), str(exc)


@settings(max_examples=150, deadline=None)
@given(appended(), st.integers(0, 10**6), SCOPES)
def test_the_append_check_at_once_equals_the_check_one_by_one(
    messages: list[Message], seq: int, scope: Scope
) -> None:
    # Whatever the messages, the check at once either gives way (None: the one-by-one check
    # then runs and raises its own exact error) or gives exactly the one-by-one copies, and the
    # bytes it hands the group are exactly the group's plain encoding.
    expected = _one_by_one(messages)
    at_once = _checked_at_once(messages)
    if at_once is None:
        return
    checked, encoded = at_once
    assert checked == expected
    for copy, given_message in zip(checked, messages, strict=True):
        if isinstance(given_message.payload, dict | list):
            assert copy.payload is not given_message.payload  # a private copy
        for call, given_call in zip(copy.tool_calls, given_message.tool_calls, strict=True):
            assert call.arguments is not given_call.arguments
    group = MessageGroup(seq, checked, RetainedRecord(scope))
    adopt_messages_encoding(group, encoded)
    assert group.canonical_bytes() == canonical_json(unstructure(group))
    assert group.digest == digest_bytes(canonical_json(unstructure(group)))


@settings(max_examples=70, deadline=None)
@given(appended())
def test_check_messages_refuses_what_the_one_by_one_check_refuses(messages: list[Message]) -> None:
    expected = _one_by_one(messages)
    try:
        got: Any = check_messages_encoded(messages)
    except AgentiumError as exc:
        got = (type(exc), str(exc))
    if isinstance(expected[0], type):
        assert got == expected
    elif isinstance(got[0], type):
        if any(m.tool_calls and m.role is not Role.ASSISTANT for m in messages):
            # Each message was fine alone, but only an assistant's tool calls can be sent.
            assert got[0] is InvalidArgumentError and "carries tool calls" in got[1]
        else:
            assert got[0] is IncompleteGroupError  # each message was fine; the group is not
    else:
        assert got[0] == expected


def test_plain_items_are_checked_at_once_and_its_bounds_are_the_parts_bounds() -> None:
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    messages = [
        Message(Role.USER, "q", payload={"role": "user", "content": "q"}, payload_format="x/v1"),
        Message(Role.ASSISTANT, "hi", payload=item, payload_format="x/v1"),
    ]
    checked, encoded = check_messages_encoded(messages)
    assert encoded is not None and checked == tuple(messages)
    # A payload nesting 64 deep is within the bound and is checked at once.
    deep = [Message(Role.USER, "x", payload=_deep(63), payload_format="x/v1")]
    assert check_messages_encoded(deep)[1] is not None
    call = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {"a": _deep(60)}),))
    result = Message(Role.TOOL, "r", tool_call_id="c1")
    assert check_messages_encoded([call, result])[1] is not None
    # Arguments nest four levels deeper in the list than alone: 64 deep, they are checked one by
    # one (and accepted, as ever).
    call = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {"a": _deep(62)}),))
    assert check_messages_encoded([call, result]) == ((call, result), None)
    # One level deeper is refused with the one-by-one check's words.
    with pytest.raises(InvalidPayloadError, match="message 0: payload is not storable JSON"):
        check_messages_encoded([Message(Role.USER, "x", payload=_deep(64), payload_format="x/v1")])
    too_deep = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {"a": _deep(63)}),))
    with pytest.raises(InvalidPayloadError, match="message 0: tool call 'c1' arguments is not storable"):
        check_messages_encoded([too_deep, result])


def test_a_payload_that_contains_itself_is_refused_in_the_one_by_one_checks_words() -> None:
    # The check at once encodes without the encoder's record of open containers: a value that
    # contains itself must make it give way, and the one-by-one check refuse it in its words.
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    calls: dict[str, Any] = {"x": []}
    calls["x"].append(calls)
    for messages in (
        [Message(Role.USER, "x", payload=looped, payload_format="x/v1")],
        [
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", calls),)),
            Message(Role.TOOL, "r", tool_call_id="c1"),
        ],
    ):
        assert _checked_at_once(messages) is None
        expected = _one_by_one(messages)
        assert isinstance(expected[0], type) and "Circular reference detected" in str(expected[1])
        with pytest.raises(InvalidPayloadError) as refused:
            check_messages_encoded(messages)
        assert (type(refused.value), str(refused.value)) == expected


OPT_TEXT = st.one_of(st.none(), TEXT, st.just("a\ud800"), st.integers(0, 3))


@st.composite
def text_groups(draw: st.DrawFn) -> MessageGroup:
    # A turn's group (text messages, the usual retained record), and its near misses.
    messages = tuple(
        Message(
            draw(st.sampled_from(Role)),
            draw(st.one_of(TEXT, st.just("é\udc80"), st.just("\u2028<\x00>"))),
            tool_call_id=draw(st.one_of(st.none(), IDS)),
        )
        for _ in range(draw(st.integers(0, 3)))
    )
    retained = draw(
        st.one_of(
            st.none(),
            st.builds(
                RetainedRecord,
                SCOPES,
                OPT_TEXT,
                OPT_TEXT,
                OPT_TEXT,
                uncertainty=st.lists(st.one_of(TEXT, st.just("\udfff")), max_size=2),
            ),
        )
    )
    return MessageGroup(draw(st.integers(0, MAX_SEQ)), messages, retained)


@settings(max_examples=120, deadline=None)
@given(text_groups())
def test_a_text_group_is_written_out_exactly_as_the_converter_would_encode_it(group: MessageGroup) -> None:
    # A turn's group is written out key by key: byte for byte the plain encoding, and refused
    # (EncodingError) exactly where the plain encoding refuses it.
    _assert_encoded_as_plain(group)


@pytest.mark.parametrize("role", [*Role, *(r.value for r in Role), "robot", 3, None])
def test_a_message_converts_its_role_as_the_enum_does(role: Any) -> None:
    # The role converter hands a member back as it is and asks the enum otherwise; what the enum
    # refuses is the library's typed error (bad input), naming the roles there are.
    try:
        expected: Any = Role(role)
    except ValueError:
        with pytest.raises(InvalidArgumentError, match="message role must be one of system, user"):
            Message(role)
        return
    assert Message(role).role is expected
