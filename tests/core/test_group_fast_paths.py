"""The group an append commits, built fast, equals the plain one (issue 28, fifth pass).

``appended_group`` builds the group an append commits without running its
constructor again for what the append check has just done, and shares one
retained record (and its JSON) per scope. It is held here to the plain
constructors, value for value and byte for byte, whatever the messages and
the scope.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import Message, MessageGroup, RetainedRecord, Role, Scope, ToolCall
from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._engine.history_checks import check_messages_encoded
from agentium_harness._history import (
    _APPEND_RETAINED,
    _MAX_APPEND_RETAINED,
    appended_group,
)

TEXT = st.one_of(st.text(max_size=30), st.sampled_from(['"retained":null', "\\", '"', "é", "\U0001f600"]))
IDS = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
SCOPES = st.builds(Scope, IDS, IDS, IDS, st.one_of(st.none(), IDS), st.one_of(st.none(), IDS))
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def appended(draw: st.DrawFn) -> list[Message]:
    """Messages an append takes: a complete group (calls answered), with payloads or not."""
    messages = []
    for n in range(draw(st.integers(1, 3))):
        calls = tuple(
            ToolCall(f"c{n}{i}", "tool", draw(st.dictionaries(TEXT, JSON, max_size=2)))
            for i in range(draw(st.integers(0, 2)))
        )
        payload = draw(st.one_of(st.none(), JSON))
        messages.append(
            Message(
                # Only an assistant message may carry tool calls (append refuses any other's).
                Role.ASSISTANT if calls else draw(st.sampled_from([Role.USER, Role.ASSISTANT, Role.SYSTEM])),
                draw(TEXT),
                calls,
                payload=payload,
                payload_format=None if payload is None else "x/v1",
            )
        )
        messages.extend(Message(Role.TOOL, draw(TEXT), tool_call_id=c.id) for c in calls)
    return messages


def _fields(group: MessageGroup) -> list[tuple[str, Any, type]]:
    values = [(a.name, getattr(group, a.name)) for a in attrs.fields(MessageGroup)]
    return [(name, value, type(value)) for name, value in values]


def _assert_as_plain(group: MessageGroup, seq: int, messages: tuple[Message, ...], scope: Scope) -> None:
    plain = MessageGroup(seq=seq, messages=messages, retained=RetainedRecord(scope))
    assert type(group) is MessageGroup
    assert group == plain
    assert _fields(group) == _fields(plain)
    assert group.messages is messages
    assert group.retained is not None and group.retained == plain.retained
    assert attrs.asdict(group.retained, recurse=False) == attrs.asdict(plain.retained, recurse=False)
    assert unstructure(group) == unstructure(plain)
    expected = canonical_json(unstructure(plain))
    assert group.canonical_bytes() == expected
    assert group.digest == digest_bytes(expected)
    assert group.size_bytes == len(expected)
    assert group.estimated_tokens == plain.estimated_tokens
    assert group.is_complete == plain.is_complete


@settings(max_examples=300, deadline=None)
@given(appended(), st.integers(0, 10**9), SCOPES)
def test_the_appended_group_equals_the_group_its_constructors_build(
    given_messages: list[Message], seq: int, scope: Scope
) -> None:
    messages, encoded = check_messages_encoded(given_messages)
    _APPEND_RETAINED.clear()
    first = appended_group(seq, messages, scope, encoded)  # by the constructors: remembers the scope
    _assert_as_plain(first, seq, messages, scope)
    if encoded is None:
        return  # checked one by one: no encoding to build around, always the constructors' path
    assert _APPEND_RETAINED  # the fast path is what the next calls take
    again = appended_group(seq, messages, Scope(*attrs.astuple(scope)), encoded)  # an equal scope
    assert again.retained is first.retained  # the fast path, with the scope's one record
    _assert_as_plain(again, seq, messages, scope)
    later = appended_group(seq + 1, messages, scope, encoded)
    _assert_as_plain(later, seq + 1, messages, scope)


def test_the_appended_group_of_a_scope_with_str_subclass_ids_is_built_by_its_constructors() -> None:
    class Id(str):
        __slots__ = ()

    messages, encoded = check_messages_encoded([Message(Role.USER, "hi")])
    plain_scope = Scope("t", "u", "s")
    assert appended_group(0, messages, plain_scope, encoded).retained is not None
    # The constructor keeps the plain text of each id, so only a scope changed behind its back
    # holds subclass ids: the remembered records must not be looked up by them.
    assert type(Scope(Id("t"), "u", "s").tenant) is str
    odd = Scope("t", "u", "s")
    for name in ("tenant", "user", "session"):
        object.__setattr__(odd, name, Id(getattr(odd, name)))
    group = appended_group(1, messages, odd, encoded)
    # Equal fields, but not the remembered record of the exact-str scope: its own, as built.
    assert group.retained is not None and group.retained.scope is odd
    _assert_as_plain(group, 1, messages, odd)


def test_the_remembered_scopes_are_bounded() -> None:
    messages, encoded = check_messages_encoded([Message(Role.USER, "hi")])
    _APPEND_RETAINED.clear()
    for n in range(_MAX_APPEND_RETAINED + 5):
        appended_group(n, messages, Scope("t", "u", f"s{n}"), encoded)
        assert len(_APPEND_RETAINED) <= _MAX_APPEND_RETAINED
    assert ("t", "u", f"s{_MAX_APPEND_RETAINED + 4}", None, None) in _APPEND_RETAINED
