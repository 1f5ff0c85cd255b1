"""The seal's fast paths against the plain encoding: the header written in parts, the scope's text.

A sealed snapshot's bytes, digest and header must be what the converter and
``canonical_json`` give for it, whatever takes the fast path and whatever
does not (fields of other than the exact types, a memory scope whose ids
are ``str`` subclasses).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentium_harness import Message, MessageGroup, Role, Scope, SessionKey
from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._ports.snapshot import (
    ArchivedDigest,
    SessionSnapshot,
    seal_new_snapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_header,
    verify_snapshot,
)


def _plain(snapshot: SessionSnapshot) -> bytes:
    """The plain canonical encoding: the converter's data, absent summary and empty receipts left out."""
    data: dict[str, Any] = unstructure(snapshot)
    if data["summary"] is None:
        del data["summary"]
    if not data["receipts"]:
        del data["receipts"]
    return canonical_json(data)


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


@pytest.mark.parametrize("receipts", [(), (ArchivedDigest(1, "sha256:00"),)])
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
    assert odd == Scope("t", "u", "s")
    sealed = seal_new_snapshot(memory_scope=odd, boundary=0, next_seq=0)
    assert b'"tenant":"x"' in snapshot_bytes(sealed)
    _assert_sealed_as_plain(sealed, header_known=True)
