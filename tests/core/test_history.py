"""Canonical history records: completeness, canonical bytes and digests (R2, R3)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentium_harness._codec import from_json, structure, to_json, unstructure
from agentium_harness._history import (
    Message,
    MessageGroup,
    RetainedRecord,
    Role,
    ToolCall,
    estimate_tokens,
)
from agentium_harness._scope import Scope
from agentium_harness._validators import MAX_SEQ

SCOPE = Scope("acme", "alice", "s1", project="p")


def user(text: str) -> Message:
    return Message(Role.USER, text)


def call(*calls: ToolCall, content: str = "") -> Message:
    return Message(Role.ASSISTANT, content, tool_calls=calls)


def result(call_id: str, content: str = "ok") -> Message:
    return Message(Role.TOOL, content, tool_call_id=call_id)


def simple_group(seq: int = 0, text: str = "hello") -> MessageGroup:
    return MessageGroup(seq, (user(text), Message(Role.ASSISTANT, "hi")))


# ---------------------------------------------------------------------------
# Completeness is computed, never asserted
# ---------------------------------------------------------------------------


def test_group_without_tool_calls_is_complete() -> None:
    group = simple_group()
    assert group.is_complete
    assert group.missing_tool_results == ()


def test_tool_call_without_result_is_incomplete_and_named() -> None:
    group = MessageGroup(0, (user("weather?"), call(ToolCall("c1", "weather", {"city": "Oslo"}))))
    assert not group.is_complete
    assert group.missing_tool_results == ("c1",)


def test_tool_call_with_result_is_complete() -> None:
    group = MessageGroup(
        0,
        (
            user("weather?"),
            call(ToolCall("c1", "weather", {"city": "Oslo"})),
            result("c1", "rain"),
            Message(Role.ASSISTANT, "It rains."),
        ),
    )
    assert group.is_complete
    assert group.missing_tool_results == ()


def test_only_the_unanswered_calls_are_listed_in_order() -> None:
    group = MessageGroup(
        3,
        (
            user("do three things"),
            call(ToolCall("a", "t"), ToolCall("b", "t"), ToolCall("c", "t")),
            result("b"),
        ),
    )
    assert not group.is_complete
    assert group.missing_tool_results == ("a", "c")


def test_a_result_for_another_call_does_not_complete_a_group() -> None:
    group = MessageGroup(0, (user("x"), call(ToolCall("c1", "t")), result("c2")))
    assert group.missing_tool_results == ("c1",)
    assert not group.is_complete


def test_only_tool_messages_answer_calls() -> None:
    # A non-tool message carrying a tool_call_id does not count as a result.
    stray = Message(Role.USER, "ok", tool_call_id="c1")
    group = MessageGroup(0, (user("x"), call(ToolCall("c1", "t")), stray))
    assert not group.is_complete


def test_empty_group_is_incomplete() -> None:
    group = MessageGroup(0, ())
    assert not group.is_complete
    assert group.missing_tool_results == ()


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [-1, True, False, 1.0, "1", None])
def test_seq_must_be_a_non_negative_int(seq: object) -> None:
    with pytest.raises(ValueError, match="seq must be a non-negative int"):
        MessageGroup(seq, ())  # type: ignore[arg-type]


def test_seq_zero_and_large_are_accepted() -> None:
    assert MessageGroup(0, ()).seq == 0
    assert MessageGroup(MAX_SEQ, ()).seq == MAX_SEQ


def test_role_converter_accepts_values_and_refuses_unknown_roles() -> None:
    assert Message("user").role is Role.USER  # type: ignore[arg-type]
    assert Message(Role.TOOL).role is Role.TOOL
    with pytest.raises(ValueError):
        Message("wizard")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Message("USER")  # type: ignore[arg-type]


def test_tool_call_ids_are_validated() -> None:
    with pytest.raises(ValueError):
        ToolCall("", "t")
    with pytest.raises(ValueError):
        ToolCall("c1", "bad\x00name")


def test_records_are_frozen_and_messages_become_tuples() -> None:
    group = MessageGroup(0, [user("a")])  # type: ignore[arg-type]
    assert isinstance(group.messages, tuple)
    with pytest.raises(AttributeError):
        group.seq = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Canonical bytes and digests
# ---------------------------------------------------------------------------


def test_canonical_bytes_are_pinned() -> None:
    # Archived digests must never drift: this is the exact encoding.
    group = MessageGroup(0, (user("hi"),))
    assert group.canonical_bytes() == (
        b'{"messages":[{"content":"hi","role":"user","tool_call_id":null,"tool_calls":[]}],'
        b'"retained":null,"seq":0}'
    )
    assert group.digest == "sha256:" + hashlib.sha256(group.canonical_bytes()).hexdigest()


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys), keys
    return dict(pairs)


def test_canonical_bytes_are_sorted_compact_utf8() -> None:
    group = MessageGroup(
        7,
        (
            user("héllo — 日本 😀"),
            call(ToolCall("c1", "search", {"zeta": 1, "alpha": {"y": 2, "b": [1, 2]}})),
            result("c1", "ünïcode"),
        ),
        retained=RetainedRecord(SCOPE, uncertainty=("stale?",)),
    )
    data = group.canonical_bytes()
    text = data.decode("utf-8")  # valid UTF-8
    assert "héllo — 日本 😀" in text  # kept as UTF-8 ...
    assert "\\u" not in text  # ... never \u-escaped
    # Compact: re-encoding compactly with sorted keys reproduces the same bytes.
    parsed = json.loads(data, object_pairs_hook=_pairs_hook)
    assert json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() == data
    assert group.size_bytes == len(data)


def test_digest_format() -> None:
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", simple_group().digest)


def test_same_content_same_digest() -> None:
    assert simple_group().digest == simple_group().digest
    assert simple_group().canonical_bytes() == simple_group().canonical_bytes()


def test_argument_key_order_does_not_change_the_digest() -> None:
    a = MessageGroup(0, (call(ToolCall("c1", "t", {"a": 1, "b": {"x": 1, "y": 2}})), result("c1")))
    b = MessageGroup(0, (call(ToolCall("c1", "t", {"b": {"y": 2, "x": 1}, "a": 1})), result("c1")))
    assert list(a.messages[0].tool_calls[0].arguments) != list(b.messages[0].tool_calls[0].arguments)
    assert a.digest == b.digest
    assert a.canonical_bytes() == b.canonical_bytes()


BASE = MessageGroup(
    1,
    (user("q"), call(ToolCall("c1", "t", {"k": 1})), result("c1", "r"), Message(Role.ASSISTANT, "a")),
)
CHANGES = {
    "seq": MessageGroup(2, BASE.messages),
    "content": MessageGroup(1, (user("Q"), *BASE.messages[1:])),
    "role": MessageGroup(1, (Message(Role.SYSTEM, "q"), *BASE.messages[1:])),
    "argument value": MessageGroup(
        1, (BASE.messages[0], call(ToolCall("c1", "t", {"k": 2})), *BASE.messages[2:])
    ),
    "argument type": MessageGroup(
        1, (BASE.messages[0], call(ToolCall("c1", "t", {"k": True})), *BASE.messages[2:])
    ),
    "tool name": MessageGroup(1, (BASE.messages[0], call(ToolCall("c1", "u", {"k": 1})), *BASE.messages[2:])),
    "message order": MessageGroup(
        1, (BASE.messages[0], BASE.messages[1], BASE.messages[3], BASE.messages[2])
    ),
    "dropped message": MessageGroup(1, BASE.messages[:-1]),
    "trailing space": MessageGroup(1, (*BASE.messages[:-1], Message(Role.ASSISTANT, "a "))),
    "retained": MessageGroup(1, BASE.messages, retained=RetainedRecord(SCOPE)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_changes_the_digest(change: str) -> None:
    assert CHANGES[change].digest != BASE.digest


def test_retained_record_fields_are_part_of_the_digest() -> None:
    base = MessageGroup(0, (user("x"),), retained=RetainedRecord(SCOPE))
    for variant in (
        RetainedRecord(SCOPE, source_view_revision="r1"),
        RetainedRecord(SCOPE, summary_policy="p"),
        RetainedRecord(SCOPE, summary_version="2"),
        RetainedRecord(SCOPE, uncertainty=("partial recall",)),
        RetainedRecord(Scope("acme", "alice", "s1")),
    ):
        assert MessageGroup(0, (user("x"),), retained=variant).digest != base.digest


# ---------------------------------------------------------------------------
# Token estimates
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("é", 1), ("éé", 1), ("😀😀", 2)]
)
def test_estimate_tokens_counts_utf8_bytes(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


@given(st.text())
def test_estimate_tokens_is_deterministic_and_byte_based(text: str) -> None:
    n = len(text.encode("utf-8"))
    assert estimate_tokens(text) == estimate_tokens(text) == -(-n // 4)


def test_message_estimate_includes_tool_calls_and_overhead() -> None:
    plain = Message(Role.ASSISTANT, "abcd")
    with_call = Message(Role.ASSISTANT, "abcd", tool_calls=(ToolCall("c1", "search", {"q": "x"}),))
    assert plain.estimated_tokens == estimate_tokens("abcd") + 4
    assert with_call.estimated_tokens > plain.estimated_tokens
    group = MessageGroup(0, (plain, with_call))
    assert group.estimated_tokens == plain.estimated_tokens + with_call.estimated_tokens


# ---------------------------------------------------------------------------
# Round trip through the one converter
# ---------------------------------------------------------------------------

_id = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12)
_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
_json = st.recursive(
    _json_scalar,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
_tool_calls = st.builds(ToolCall, _id, _id, st.dictionaries(st.text(max_size=6), _json, max_size=4))
_messages = st.builds(
    Message,
    st.sampled_from(Role),
    st.text(),
    st.lists(_tool_calls, max_size=2).map(tuple),
    st.none() | _id,
)
_scopes = st.builds(Scope, _id, _id, _id, st.none() | _id, st.none() | _id)
_retained = st.none() | st.builds(
    RetainedRecord,
    _scopes,
    st.none() | st.text(),
    st.none() | st.text(),
    st.none() | st.text(),
    st.lists(st.text(), max_size=3).map(tuple),
)
groups = st.builds(
    MessageGroup, st.integers(0, MAX_SEQ), st.lists(_messages, max_size=5).map(tuple), _retained
)


@given(groups)
def test_structure_unstructure_round_trip(group: MessageGroup) -> None:
    plain = unstructure(group)
    back = structure(plain, MessageGroup)
    assert back == group
    assert back.digest == group.digest
    assert back.is_complete == group.is_complete


@given(groups)
def test_json_round_trip_keeps_the_digest(group: MessageGroup) -> None:
    text = to_json(group)
    back = from_json(text, MessageGroup)
    assert back == group
    assert to_json(back) == text
    assert back.canonical_bytes() == group.canonical_bytes()


def test_unstructured_roles_are_plain_strings() -> None:
    plain = unstructure(simple_group())
    assert plain["messages"][0]["role"] == "user"
    assert type(plain["messages"][0]["role"]) is str
