"""Stored group seqs are checked against one bound, ``MAX_SEQ``, wherever a record names one.

A group, a divergence, a receipt and an erasure record's digests all name group seqs: a stored
record naming one below 0 or past ``MAX_SEQ`` is damage, refused on decode (every store decodes
through ``decode_snapshot`` / ``decode_archived_group``), and the stored row is left as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _stored_rows_support import KEY, KINDS, Rows, refused_and_left_alone, resealed, stored_rows

from agentium_harness import VerifiedIdentity
from agentium_harness._codec import digest_bytes
from agentium_harness._errors import ArchiveCorruptError, InvalidArgumentError, SnapshotCorruptError
from agentium_harness._history import MessageGroup
from agentium_harness._ports import OpContext
from agentium_harness._ports.erasure import (
    ErasedGroups,
    EraseTarget,
    ErasureKind,
    ErasureLedger,
    ErasureRecord,
    ErasureState,
    SeqRange,
)
from agentium_harness._ports.sessions import SessionSnapshot, seal_snapshot, snapshot_bytes
from agentium_harness._ports.snapshot import ArchivedDigest, ArchiveDivergence
from agentium_harness._scope import SessionKey
from agentium_harness._validators import MAX_COUNT, MAX_SEQ
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio


@pytest.fixture(params=KINDS)
async def rows(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rows]:
    async with stored_rows(request.param, tmp_path) as held:
        yield held


GONE = SessionKey("tenant", "user", "gone")
DIGEST = "sha256:" + "ab" * 32

#: Seqs no group can have: below 0, and one past the largest.
IMPOSSIBLE = {"negative": -1, "past MAX_SEQ": MAX_SEQ + 1}


def _ledger_bytes(seq: int) -> bytes:
    record = ErasureRecord(
        erasure_id="0" * 24,
        kind=ErasureKind.RETENTION,
        target=EraseTarget.groups_of(GONE, [SeqRange(seq, seq + 1)]),
        reason="retention",
        operator=VerifiedIdentity("tenant", "ops", "sso"),
        state=ErasureState.COMPLETE,
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        completed_at=datetime(2025, 1, 1, tzinfo=UTC),
        sessions=(ErasedGroups(GONE, 1, (SeqRange(seq, seq + 1),), ((seq, DIGEST),)),),
    )
    ledger = SessionSnapshot(memory_scope=None, ledger=ErasureLedger(records=(record,)))
    return snapshot_bytes(seal_snapshot(ledger))


@pytest.mark.parametrize("seq", list(IMPOSSIBLE.values()), ids=list(IMPOSSIBLE))
async def test_an_erasure_record_naming_an_impossible_seq_is_refused_and_left_alone(
    rows: Rows, seq: int
) -> None:
    # The largest seq a group may have is recorded and loads back as it was.
    rows.write(_ledger_bytes(MAX_SEQ))
    loaded = await rows.store.load(KEY, OpContext())
    assert loaded.snapshot.ledger.records[0].sessions[0].digests == ((MAX_SEQ, DIGEST),)

    def edit(plain: dict[str, Any]) -> None:
        plain["ledger"]["records"][0]["sessions"][0]["digests"][0][0] = seq

    await refused_and_left_alone(rows, resealed(_ledger_bytes(1), edit))
    with pytest.raises(InvalidArgumentError, match="digests"):
        ErasedGroups(GONE, 1, (), ((seq, DIGEST),))


@pytest.mark.parametrize("seq", list(IMPOSSIBLE.values()), ids=list(IMPOSSIBLE))
async def test_a_receipt_naming_an_impossible_seq_is_refused_and_left_alone(rows: Rows, seq: int) -> None:
    def edit(plain: dict[str, Any]) -> None:
        plain["receipts"] = [{"digest": DIGEST, "seq": seq}]

    found = rows.read()
    assert found is not None
    await refused_and_left_alone(rows, resealed(found[1], edit))
    with pytest.raises(InvalidArgumentError, match="seq"):
        ArchivedDigest(seq, DIGEST)


async def test_a_resident_group_past_max_seq_is_refused_and_left_alone() -> None:
    # The bound a divergence has is the bound a group has: a group the divergence check would
    # refuse to name is refused itself (the SQLite store keys its rows by seq below 2**32 anyway).
    store = InMemorySessionStore()
    await store.save(KEY, scoped_snapshot(KEY, groups=1), None, OpContext())
    found = store.raw(KEY)
    assert found is not None

    def edit(plain: dict[str, Any]) -> None:
        plain["resident"][0]["seq"] = plain["boundary"] = MAX_SEQ + 1
        plain["next_seq"] = MAX_SEQ + 2

    damaged = resealed(found[1], edit)
    store.put_raw(KEY, found[0], damaged)
    for _ in range(2):
        with pytest.raises(SnapshotCorruptError, match="cannot be decoded"):
            await store.load(KEY, OpContext())
    assert store.raw(KEY) == (found[0], damaged)


async def test_an_archived_group_past_max_seq_is_refused_and_left_alone() -> None:
    archive = InMemoryArchive()
    data = plain_group(MAX_SEQ).canonical_bytes()
    archive.put_raw(KEY, MAX_SEQ, data, digest_bytes(data))
    assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [MAX_SEQ]
    past = data.replace(b'"seq":%d' % MAX_SEQ, b'"seq":%d' % (MAX_SEQ + 1))
    archive.put_raw(KEY, MAX_SEQ + 1, past, digest_bytes(past))
    for _ in range(2):
        with pytest.raises(ArchiveCorruptError, match="cannot be decoded"):
            await archive.read_groups(KEY, MAX_SEQ + 1, 10, OpContext())
    assert archive.raw(KEY, MAX_SEQ + 1) == (past, digest_bytes(past))


def test_every_record_naming_a_group_seq_has_the_one_bound() -> None:
    # A group, a divergence, a receipt, an erasure record's digests and a seq range all take
    # MAX_SEQ and refuse the seq after it: no record names a group another would refuse.
    assert MAX_SEQ == MAX_COUNT - 1  # so next_seq, a count, stays within MAX_COUNT
    assert MessageGroup(MAX_SEQ, ()).seq == MAX_SEQ
    assert ArchiveDivergence((MAX_SEQ,), "conflict").seqs == (MAX_SEQ,)
    assert ArchivedDigest(MAX_SEQ, DIGEST).seq == MAX_SEQ
    assert ErasedGroups(GONE, 1, (), ((MAX_SEQ, DIGEST),)).digests == ((MAX_SEQ, DIGEST),)
    assert MAX_SEQ in SeqRange(MAX_SEQ, MAX_SEQ + 1)
    builds: list[Callable[[int], object]] = [
        lambda seq: MessageGroup(seq, ()),
        lambda seq: ArchiveDivergence((seq,), "conflict"),
        lambda seq: ArchivedDigest(seq, DIGEST),
        lambda seq: ErasedGroups(GONE, 1, (), ((seq, DIGEST),)),
        lambda seq: SeqRange(seq, seq + 1),
    ]
    for build in builds:
        with pytest.raises(InvalidArgumentError):
            build(MAX_SEQ + 1)
