"""The seal's fast paths against the plain encoding: the header in parts, the scope's text, the rows.

A sealed snapshot's bytes, digest and header must be what the converter and
``canonical_json`` give for it, whatever takes the fast path and whatever
does not (fields of other than the exact types, a memory scope whose ids
are ``str`` subclasses); and the rows a store writes (each resident group's
seq, bytes and digest), carried on from the snapshot before, must be the
plain rows.
"""

from __future__ import annotations

import gc
from typing import Any

import attrs
import pytest
from _encoding_support import plain_snapshot_bytes as _plain
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import Message, MessageGroup, Role, Scope, SessionKey, ToolCall
from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._ports.snapshot import (
    _SNAPSHOTS,
    _TAILS,
    ArchivedDigest,
    SessionSnapshot,
    decode_snapshot,
    seal_new_snapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_header,
    snapshot_parts,
    verify_snapshot,
)
from agentium_harness.adapters._sqlite_rows import split_snapshot


def _group(seq: int, text: str) -> MessageGroup:
    return MessageGroup(seq, (Message(Role.USER, text), Message(Role.ASSISTANT, text.upper())))


def _assert_sealed_as_plain(sealed: SessionSnapshot, header_known: bool) -> None:
    unsealed = attrs.evolve(sealed, digest=None)
    assert sealed.digest == digest_bytes(_plain(unsealed))
    assert snapshot_bytes(sealed) == _plain(sealed)
    header = snapshot_header(sealed)
    if header_known:
        assert header == _plain(attrs.evolve(sealed, resident=()))
    else:
        assert header is None
    verify_snapshot(SessionKey("t", "u", "s"), sealed)


class _Number(int):
    """An ``int`` subclass: JSON writes it as its number, but it is not the exact type the fast path takes."""


@attrs.frozen(slots=True)
class _OwnSnapshot(SessionSnapshot):
    """A subclass of the record: sealed through the converter's path."""


@pytest.mark.parametrize("receipts", [(), (ArchivedDigest(1, "sha256:" + "00" * 32),)])
def test_a_snapshot_of_other_than_the_exact_types_is_sealed_as_the_plain_encoding(
    receipts: tuple[ArchivedDigest, ...],
) -> None:
    groups = (_group(2, "a"), _group(3, "b"))
    scope = Scope("t", "u", "s")
    # An int subclass is written as its number: the header is cut out of the plain encoding.
    for fields in (
        {"boundary": _Number(2), "next_seq": 4},
        {"boundary": 2, "next_seq": _Number(4)},
    ):
        sealed = seal_new_snapshot(memory_scope=scope, resident=groups, receipts=receipts, **fields)
        _assert_sealed_as_plain(sealed, header_known=True)
    sealed = seal_snapshot(_OwnSnapshot(scope, 2, 4, groups, receipts=receipts))
    _assert_sealed_as_plain(sealed, header_known=True)
    # A bool is written as ``true``: the digest's place is not where the fast path looks, so the
    # bytes are encoded whole and there is no header (a store keeps such a snapshot whole).
    sealed = seal_new_snapshot(memory_scope=scope, boundary=True, next_seq=1, resident=(), receipts=receipts)
    _assert_sealed_as_plain(sealed, header_known=False)


class _Alias(str):
    """An id that compares (and hashes) equal to another text than its own."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("t")


def test_a_scope_whose_ids_are_str_subclasses_is_written_as_its_own_text() -> None:
    # The scope's text is remembered by value: one equal to a remembered scope but written
    # otherwise must not be given the remembered text.
    plain = seal_new_snapshot(memory_scope=Scope("t", "u", "s"), boundary=0, next_seq=0)
    _assert_sealed_as_plain(plain, header_known=True)
    odd = Scope(_Alias("x"), "u", "s")
    # A Scope keeps its ids as plain text (the alias's own __eq__ is gone), so it can no longer
    # pass for the remembered scope; it is still written as its own text.
    assert type(odd.tenant) is str and odd != Scope("t", "u", "s")
    sealed = seal_new_snapshot(memory_scope=odd, boundary=0, next_seq=0)
    assert b'"tenant":"x"' in snapshot_bytes(sealed)
    _assert_sealed_as_plain(sealed, header_known=True)


# -- the rows a store writes: carried on from the predecessor's, by identity -------------------------


def _call_group(seq: int, number: int | float) -> MessageGroup:
    """A group whose tool call's argument is ``number``: ``1`` and ``1.0`` are equal, written otherwise."""
    return MessageGroup(
        seq, (Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "tool", {"n": number}),)),)
    )


def _plain_rows(snapshot: SessionSnapshot) -> list[tuple[int, bytes, str]]:
    rows = []
    for g in snapshot.resident:
        data = canonical_json(unstructure(g))
        rows.append((g.seq, data, digest_bytes(data)))
    return rows


def _assert_rows_as_plain(sealed: SessionSnapshot) -> None:
    whole, header, rows = snapshot_parts(sealed)
    assert list(rows) == _plain_rows(sealed)
    assert whole == _plain(sealed) and header == _plain(attrs.evolve(sealed, resident=()))
    split = split_snapshot(sealed, whole)
    assert list(split.rows) == _plain_rows(sealed) and split.data == whole
    assert split.header == header  # the resident seqs run from the boundary to next_seq here
    # Equal bytes that are not the ones the seal wrote: the header is cut out of them instead.
    again = split_snapshot(sealed, bytes(bytearray(whole)))
    assert again.header == header and list(again.rows) == _plain_rows(sealed)


STEPS = st.lists(
    st.tuples(
        st.integers(0, 3),  # groups archived (dropped from the front)
        st.integers(0, 3),  # groups added
        st.one_of(st.none(), st.integers(0, 5)),  # a carried group replaced by an equal copy
        st.booleans(),  # the store asked for the predecessor's rows before this seal
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), STEPS)
def test_rows_carried_on_from_the_predecessor_equal_the_plain_rows(first: int, steps: list[Any]) -> None:
    # What commits do, turn after turn: the next snapshot keeps the last groups of the one before
    # (the same objects) and adds its own. Sometimes a kept group is replaced by an equal copy that
    # is written otherwise: its row must be its own, not the one it equals.
    scope = Scope("t", "u", "s")
    groups = tuple(_call_group(seq, seq) for seq in range(first))
    previous = seal_new_snapshot(memory_scope=scope, boundary=0, next_seq=first, resident=groups)
    kept = [previous]
    for archived, added, replaced, asked in steps:
        if asked:
            snapshot_parts(previous)
        carried = list(previous.resident[archived:])
        boundary = previous.next_seq - len(carried)
        if replaced is not None and replaced < len(carried):
            group = carried[replaced]
            number = group.messages[0].tool_calls[0].arguments["n"]
            copy = _call_group(group.seq, float(number) if type(number) is int else int(number))
            assert copy == group and copy.canonical_bytes() != group.canonical_bytes()
            carried[replaced] = copy
        new = [_call_group(previous.next_seq + i, previous.next_seq + i) for i in range(added)]
        sealed = seal_new_snapshot(
            memory_scope=scope,
            boundary=boundary,
            next_seq=previous.next_seq + added,
            resident=(*carried, *new),
        )
        _assert_rows_as_plain(sealed)
        kept.append(sealed)
        previous = sealed


def test_an_equal_copy_of_a_carried_group_keeps_its_own_row() -> None:
    scope = Scope("t", "u", "s")
    first, second = _call_group(0, 0), _call_group(1, 1)
    previous = seal_new_snapshot(memory_scope=scope, boundary=0, next_seq=2, resident=(first, second))
    snapshot_parts(previous)  # the store wrote it: its rows are known
    copy = _call_group(0, 0.0)
    assert copy == first and copy.canonical_bytes() != first.canonical_bytes()
    # The predecessor's last group is the one before the new one, as after a turn.
    sealed = seal_new_snapshot(
        memory_scope=scope, boundary=0, next_seq=3, resident=(copy, second, _call_group(2, 2))
    )
    _assert_rows_as_plain(sealed)
    assert snapshot_parts(sealed)[2][0][1] == copy.canonical_bytes()


def test_the_rows_leave_with_their_snapshots() -> None:
    gc.collect()
    before = len(_TAILS), len(_SNAPSHOTS)
    scope = Scope("t", "u", "s")
    groups = tuple(_call_group(seq, seq) for seq in range(30))
    snapshots = [
        seal_new_snapshot(memory_scope=scope, boundary=i, next_seq=i + 5, resident=groups[i : i + 5])
        for i in range(25)
    ]
    for snapshot in snapshots:
        snapshot_parts(snapshot)
    assert len(_TAILS) >= before[0] + 25
    del snapshots, snapshot
    gc.collect()
    assert (len(_TAILS), len(_SNAPSHOTS)) <= before or (
        len(_TAILS) <= before[0] and len(_SNAPSHOTS) <= before[1]
    )


def test_a_decoded_snapshot_saved_again_is_carried_on_by_the_next_seal() -> None:
    # A snapshot this process did not seal (decoded from a store) whose rows a store wrote
    # (saved again, as a restore does): the next seal carries its groups' rows on by identity,
    # and an equal copy of one that is written otherwise still gets its own row.
    scope = Scope("t", "u", "s")
    key = SessionKey("t", "u", "s")
    sealed = seal_new_snapshot(
        memory_scope=scope, boundary=0, next_seq=3, resident=tuple(_call_group(s, s) for s in range(3))
    )
    decoded = decode_snapshot(key, snapshot_bytes(sealed), "test")
    assert decoded == sealed and decoded is not sealed
    snapshot_parts(decoded)  # the store wrote it: its rows are known
    assert _TAILS.get(id(decoded.resident[-1])) is not None  # listed, as a sealed snapshot is
    carried = list(decoded.resident[1:])
    following = seal_new_snapshot(
        memory_scope=scope, boundary=1, next_seq=4, resident=(*carried, _call_group(3, 3))
    )
    _assert_rows_as_plain(following)
    copy = _call_group(1, 1.0)
    assert copy == carried[0] and copy.canonical_bytes() != carried[0].canonical_bytes()
    other = seal_new_snapshot(
        memory_scope=scope, boundary=1, next_seq=4, resident=(copy, carried[1], _call_group(3, 3))
    )
    _assert_rows_as_plain(other)


def test_groups_shared_by_two_sessions_snapshots_get_each_snapshots_own_rows_and_digest() -> None:
    # A guard: the same group objects held by snapshots of two sessions (one decoded from a store
    # and saved again, one sealed here) are carried on by identity into either session's next
    # seal; the rows are the groups' own, and each digest covers its own session's header.
    one, two = Scope("t", "u", "s1"), Scope("t2", "u2", "s2", "p")
    groups = tuple(_call_group(s, s) for s in range(3))
    first = seal_new_snapshot(memory_scope=one, boundary=0, next_seq=3, resident=groups)
    decoded = decode_snapshot(SessionKey("t", "u", "s1"), snapshot_bytes(first), "test")
    snapshot_parts(decoded)  # listed under its own last group (a different object from first's)
    shared = seal_new_snapshot(memory_scope=two, boundary=0, next_seq=3, resident=groups)
    _assert_rows_as_plain(shared)
    for scope, held in ((one, decoded.resident), (two, groups)):
        for carried in (held, held[1:]):
            following = seal_new_snapshot(
                memory_scope=scope,
                boundary=carried[0].seq,
                next_seq=4,
                resident=(*carried, _call_group(3, 3)),
            )
            _assert_rows_as_plain(following)
            assert following.memory_scope == scope


def test_a_listed_snapshot_evolved_is_carried_on_as_its_copy_holds() -> None:
    # A guard: a copy of a listed snapshot with other groups (attrs.evolve) is a snapshot of its
    # own: its next seal's rows are its groups', never the listed original's.
    scope = Scope("t", "u", "s")
    listed = seal_new_snapshot(
        memory_scope=scope, boundary=0, next_seq=2, resident=(_call_group(0, 0), _call_group(1, 1))
    )
    copy = attrs.evolve(listed, resident=(_call_group(0, 0.0), listed.resident[1]), digest=None)
    assert copy.resident[0] == listed.resident[0]
    following = seal_new_snapshot(
        memory_scope=scope, boundary=0, next_seq=3, resident=(*copy.resident, _call_group(2, 2))
    )
    _assert_rows_as_plain(following)
    assert snapshot_parts(following)[2][0][1] == canonical_json(unstructure(copy.resident[0]))
