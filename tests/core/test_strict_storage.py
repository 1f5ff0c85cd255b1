"""Stored rows are decoded strictly and re-checked: damage fails closed with a typed error, rows untouched.

Rows are rewritten directly (with :mod:`agentium_harness.testing.sqlite_rows` in a temp database file, or
in the in-memory adapters' dicts), as disk damage or a stray tool would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._errors import (
    ArchiveCorruptError,
    ArchiveError,
    InvalidArgumentError,
    SnapshotCorruptError,
)
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import check_archived_group
from agentium_harness._ports.sessions import (
    SNAPSHOT_FORMAT_VERSION,
    SessionSnapshot,
    decode_snapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_digest,
    verify_snapshot,
)
from agentium_harness._ports.snapshot import ArchiveDivergence
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing import legacy_snapshot, plain_group, rich_group, scoped_snapshot
from agentium_harness.testing.sqlite_rows import (
    group_row,
    move_group_row,
    put_group_row,
    set_group_row,
    set_snapshot_row,
    snapshot_row,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("tenant", "user", "session")
OTHER = SessionKey("tenant", "user", "other")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentium.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteSessionStore]:
    adapter = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    yield adapter
    await adapter.aclose()


@pytest.fixture
async def archive(db: Path) -> AsyncIterator[SQLiteArchive]:
    adapter = SQLiteArchive(SQLiteConfig(path=str(db)))
    yield adapter
    await adapter.aclose()


def _snapshot_row(db: Path, key: SessionKey = KEY) -> tuple[Any, ...]:
    found = snapshot_row(db, key)
    assert found is not None
    return found


def _set_snapshot_data(db: Path, data: bytes, key: SessionKey = KEY) -> None:
    set_snapshot_row(db, key, data)


def _edit_json(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """Decode, change one field, re-encode canonically: a well-formed row with a wrong value."""
    plain = json.loads(data)
    edit(plain)
    return canonical_json(plain)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(plain: dict[str, Any]) -> None:
        target: Any = plain
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return edit


# -- snapshots ----------------------------------------------------------------------------------

SNAPSHOT_EDITS = {
    "a flipped letter in a message": None,
    "null where a memory scope id belongs": (("memory_scope", "tenant"), None),
    "a number where message text belongs": (("resident", 0, "messages", 0, "content"), 12),
    "a string where an int belongs": (("boundary",), "5"),
    "a bool where an int belongs": (("next_seq",), True),
    "a float where an int belongs": (("resident", 1, "seq"), 6.0),
    "a null tool call id": (("resident", 0, "messages", 1, "tool_calls", 0, "id"), None),
    "the digest removed": (("digest",), None),
    "an unknown field": (("extra",), 1),
}


@pytest.mark.parametrize("case", list(SNAPSHOT_EDITS), ids=list(SNAPSHOT_EDITS))
async def test_damaged_sqlite_snapshot_row_fails_closed_and_is_left_alone(
    db: Path, store: SQLiteSessionStore, case: str
) -> None:
    await store.save(KEY, scoped_snapshot(KEY, " corruption-target"), None, OpContext())
    revision, data = _snapshot_row(db)
    edit = SNAPSHOT_EDITS[case]
    if edit is None:
        damaged = data.replace(b"corruption-target", b"corruption-tarGet", 1)
    else:
        damaged = _edit_json(data, _set(*edit))
    assert damaged != data
    _set_snapshot_data(db, damaged)
    for _ in range(2):
        with pytest.raises(SnapshotCorruptError):
            await store.load(KEY, OpContext())
    assert _snapshot_row(db) == (revision, damaged), "the damaged row must be left exactly as it was"


async def test_a_random_bit_flip_anywhere_in_a_snapshot_row_fails_closed(
    db: Path, store: SQLiteSessionStore
) -> None:
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    _, data = _snapshot_row(db)
    # Every 37th byte, lowest bit flipped: whatever it hits (syntax, a key, a
    # digit, the digest), the load must fail closed, never return a snapshot.
    for offset in range(0, len(data), 37):
        damaged = data[:offset] + bytes([data[offset] ^ 1]) + data[offset + 1 :]
        _set_snapshot_data(db, damaged)
        with pytest.raises(SnapshotCorruptError):
            loaded = await store.load(KEY, OpContext())
            pytest.fail(f"a flip at byte {offset} loaded as {loaded!r}")
        assert _snapshot_row(db)[1] == damaged


async def test_legacy_and_format_2_snapshots_without_digest_still_load(
    db: Path, store: SQLiteSessionStore
) -> None:
    await store.save(KEY, legacy_snapshot(), None, OpContext())
    loaded = await store.load(KEY, OpContext())
    assert loaded is not None and loaded.snapshot == legacy_snapshot()
    v2 = SessionSnapshot(memory_scope=scoped_snapshot(OTHER).memory_scope, format_version=2)
    set_snapshot_row(db, OTHER, canonical_json(unstructure(v2)), revision=1)
    loaded = await store.load(OTHER, OpContext())
    assert loaded is not None and loaded.snapshot == v2


async def test_a_snapshot_from_a_newer_format_is_refused(db: Path, store: SQLiteSessionStore) -> None:
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    newer = attrs_evolve_sealed(scoped_snapshot(KEY), format_version=SNAPSHOT_FORMAT_VERSION + 1)
    _set_snapshot_data(db, canonical_json(unstructure(newer)))
    with pytest.raises(SnapshotCorruptError, match="newer"):
        await store.load(KEY, OpContext())


@pytest.mark.parametrize("version", [0, -1, -(2**40)])
@pytest.mark.parametrize("sealed", [True, False], ids=["with its digest", "without a digest"])
async def test_a_snapshot_below_the_first_format_is_refused_and_left_alone(
    db: Path, store: SQLiteSessionStore, version: int, sealed: bool
) -> None:
    # No format below 1 was ever written: such a row is damage or an unknown format, whether or not
    # its digest matches (digests are unkeyed) and whether or not it claims a pre-digest format.
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    revision, _ = _snapshot_row(db)
    if sealed:
        bad = attrs_evolve_sealed(scoped_snapshot(KEY), format_version=version)
    else:
        bad = attrs.evolve(scoped_snapshot(KEY), format_version=version, digest=None)
    data = snapshot_bytes(bad)
    _set_snapshot_data(db, data)
    for _ in range(2):
        with pytest.raises(SnapshotCorruptError, match=f"format {version}, which no version"):
            await store.load(KEY, OpContext())
    assert _snapshot_row(db) == (revision, data), "the damaged row must be left exactly as it was"
    # Nor can such a snapshot be saved (the store would refuse to load it): nothing is written.
    with pytest.raises(SnapshotCorruptError, match=f"format {version}, which no version"):
        await store.save(OTHER, bad, None, OpContext())
    assert snapshot_row(db, OTHER) is None
    memory = InMemorySessionStore()
    with pytest.raises(SnapshotCorruptError, match=f"format {version}, which no version"):
        await memory.save(OTHER, bad, None, OpContext())
    assert memory.raw(OTHER) is None


@pytest.mark.parametrize("version", ["3", 3.0, True, None], ids=["str", "float", "bool", "None"])
async def test_a_format_version_that_is_no_int_is_a_typed_error_and_writes_nothing(version: object) -> None:
    # A snapshot object an adapter built itself (no strict decoder): a TypeError from comparing
    # "3" with 1, or True taken for format 1, would not be the typed error of damaged data.
    bad = attrs.evolve(scoped_snapshot(KEY), format_version=version)
    with pytest.raises(SnapshotCorruptError, match="format_version that is not an int"):
        verify_snapshot(KEY, bad)
    store = InMemorySessionStore()
    with pytest.raises(SnapshotCorruptError, match="format_version that is not an int"):
        await store.save(KEY, bad, None, OpContext())
    assert store.raw(KEY) is None


@pytest.mark.parametrize(
    "seqs", [(-1,), (3, -7), (2**63,)], ids=["negative", "one negative", "past MAX_COUNT"]
)
async def test_a_divergence_naming_an_impossible_seq_is_refused_and_left_alone(
    db: Path, store: SQLiteSessionStore, seqs: tuple[int, ...]
) -> None:
    # A divergence names group seqs the archive conflicted at: never below 0 (nor past the most
    # groups a session holds). With a matching digest it is still damage, not a seq to show an operator.
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    revision, data = _snapshot_row(db)
    damaged = _edit_json(data, _set(("divergence",), {"detail": "conflict", "seqs": list(seqs)}))
    plain = json.loads(damaged)
    plain["digest"] = None
    plain["digest"] = digest_bytes(canonical_json(plain))
    damaged = canonical_json(plain)
    _set_snapshot_data(db, damaged)
    for _ in range(2):
        with pytest.raises(SnapshotCorruptError, match="divergence"):
            await store.load(KEY, OpContext())
    assert _snapshot_row(db) == (revision, damaged)
    # Nor can such a divergence be built (and so saved): the typed error of a bad argument.
    with pytest.raises(InvalidArgumentError, match="seqs"):
        ArchiveDivergence(seqs, "conflict")


def _ledger_snapshot() -> SessionSnapshot:
    from datetime import UTC, datetime

    from agentium_harness import VerifiedIdentity
    from agentium_harness._ports.erasure import (
        ErasedGroups,
        EraseTarget,
        ErasureKind,
        ErasureLedger,
        ErasureRecord,
        ErasureState,
    )

    record = ErasureRecord(
        erasure_id="0" * 24,
        kind=ErasureKind.ERASURE,
        target=EraseTarget.session("tenant", "user", "gone"),
        reason="dsr",
        operator=VerifiedIdentity("tenant", "ops", "sso"),
        state=ErasureState.COMPLETE,
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        completed_at=datetime(2025, 1, 1, tzinfo=UTC),
        sessions=(ErasedGroups(SessionKey("tenant", "user", "gone"), count=2),),
        omitted_sessions=1,
    )
    return seal_snapshot(SessionSnapshot(memory_scope=None, ledger=ErasureLedger(records=(record,))))


_RECORD = ("ledger", "records", 0)
RECORD_EDITS = {
    "negative omitted_sessions": ((*_RECORD, "omitted_sessions"), -1),
    "a negative session count": ((*_RECORD, "sessions", 0, "count"), -1),
    "a reason holding NUL": ((*_RECORD, "reason"), "dsr\x00"),
    "a blank reason": ((*_RECORD, "reason"), "  "),
    "a reason past 1024 bytes": ((*_RECORD, "reason"), "é" * 513),
    "a statement holding NUL": ((*_RECORD, "statement"), "signed\x00"),
    "a statement past 1024 bytes": ((*_RECORD, "statement"), "s" * 1025),
}


@pytest.mark.parametrize("case", list(RECORD_EDITS), ids=list(RECORD_EDITS))
async def test_an_erasure_record_erase_would_refuse_is_refused_when_stored_and_left_alone(
    db: Path, store: SQLiteSessionStore, case: str
) -> None:
    # An erasure record (its tombstone) holds what erase() accepted: counts never negative, a
    # reason and statement within MAX_ERASURE_REASON_BYTES without NUL. A stored one otherwise is
    # damage, refused even with a matching digest, rather than shown by erasure_status.
    data = snapshot_bytes(_ledger_snapshot())
    assert decode_snapshot(KEY, data, "ledger") == _ledger_snapshot()
    path, value = RECORD_EDITS[case]
    plain = json.loads(_edit_json(data, _set(path, value)))
    plain["digest"] = None
    plain["digest"] = digest_bytes(canonical_json(plain))
    damaged = canonical_json(plain)
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    revision, _ = _snapshot_row(db)
    _set_snapshot_data(db, damaged)
    for _ in range(2):
        with pytest.raises(SnapshotCorruptError, match="cannot be decoded"):
            await store.load(KEY, OpContext())
    assert _snapshot_row(db) == (revision, damaged)


def attrs_evolve_sealed(snapshot: SessionSnapshot, **changes: Any) -> SessionSnapshot:
    """A snapshot with ``changes`` whose digest matches them (so only the change is wrong)."""
    changed = attrs.evolve(snapshot, digest=None, **changes)
    return attrs.evolve(changed, digest=snapshot_digest(changed))


async def test_saving_an_unsealed_current_snapshot_is_refused_and_writes_nothing(
    db: Path, store: SQLiteSessionStore
) -> None:
    unsealed = SessionSnapshot(memory_scope=scoped_snapshot(KEY).memory_scope)
    with pytest.raises(SnapshotCorruptError, match="no digest"):
        await store.save(KEY, unsealed, None, OpContext())
    stale = attrs.evolve(scoped_snapshot(KEY), boundary=4)  # keeps the old digest
    with pytest.raises(SnapshotCorruptError, match="does not match"):
        await store.save(KEY, stale, None, OpContext())
    assert await store.load(KEY, OpContext()) is None


async def test_memory_store_checks_snapshots_too() -> None:
    store = InMemorySessionStore()
    await store.save(KEY, scoped_snapshot(KEY, " corruption-target"), None, OpContext())
    row = store.raw(KEY)
    assert row is not None
    damaged = row[1].replace(b"corruption-target", b"corruption-tarGet", 1)
    store.put_raw(KEY, row[0], damaged)
    with pytest.raises(SnapshotCorruptError, match="digest"):
        await store.load(KEY, OpContext())
    store.put_raw(KEY, row[0], _edit_json(row[1], _set(("boundary",), "5")))
    with pytest.raises(SnapshotCorruptError, match="expected an integer"):
        await store.load(KEY, OpContext())
    with pytest.raises(SnapshotCorruptError, match="no digest"):
        await store.save(OTHER, SessionSnapshot(memory_scope=None), None, OpContext())
    assert store.raw(OTHER) is None


def test_seal_is_stable_and_verifies() -> None:
    sealed = scoped_snapshot(KEY)
    assert sealed.digest == snapshot_digest(sealed)
    assert seal_snapshot(sealed) == sealed


# -- archived groups ----------------------------------------------------------------------------


def _group_row(db: Path, seq: int, key: SessionKey = KEY) -> tuple[Any, ...]:
    return group_row(db, key, seq)


GROUP_EDITS = {
    "null where the tool call id belongs": (("messages", 1, "tool_calls", 0, "id"), None),
    "a number where text belongs": (("messages", 0, "content"), 12),
    "a string where the seq belongs": (("seq",), "1"),
    "a null scope id": (("retained", "scope", "user"), None),
}


@pytest.mark.parametrize("case", list(GROUP_EDITS), ids=list(GROUP_EDITS))
@pytest.mark.parametrize("fix_digest", [False, True], ids=["stale digest", "digest rewritten too"])
async def test_damaged_sqlite_group_row_fails_closed_and_is_left_alone(
    db: Path, archive: SQLiteArchive, case: str, fix_digest: bool
) -> None:
    await archive.append(KEY, [rich_group(0, KEY), rich_group(1, KEY)], OpContext())
    digest, data = _group_row(db, 1)
    damaged = _edit_json(data, _set(*GROUP_EDITS[case]))
    new_digest = digest_bytes(damaged) if fix_digest else digest
    set_group_row(db, KEY, 1, damaged, new_digest)
    with pytest.raises(ArchiveCorruptError):
        await archive.read_groups(KEY, 0, 10, OpContext())
    assert _group_row(db, 1) == (new_digest, damaged)
    # The intact group before it still reads.
    assert [g.seq for g in await archive.read_groups(KEY, 0, 1, OpContext())] == [0]


async def test_a_row_copied_under_another_session_is_refused(db: Path, archive: SQLiteArchive) -> None:
    await archive.append(KEY, [rich_group(0, KEY)], OpContext())
    digest, data = _group_row(db, 0)
    # A consistent row (data and digest agree) filed under the wrong key.
    put_group_row(db, OTHER, 0, data, digest)
    with pytest.raises(ArchiveCorruptError, match="belongs to session tenant/user/session"):
        await archive.read_groups(OTHER, 0, 10, OpContext())
    assert len(await archive.read_groups(KEY, 0, 10, OpContext())) == 1


async def test_a_row_moved_to_another_seq_is_refused(db: Path, archive: SQLiteArchive) -> None:
    await archive.append(KEY, [plain_group(0)], OpContext())
    move_group_row(db, KEY, 0, 7)
    with pytest.raises(ArchiveCorruptError, match="seq 7"):
        await archive.read_groups(KEY, 0, 10, OpContext())


async def test_a_non_canonical_rewrite_with_a_matching_digest_is_refused(
    db: Path, archive: SQLiteArchive
) -> None:
    # Same content, other bytes: the stored digest no longer describes the
    # canonical group the archive would return, so the read refuses it.
    await archive.append(KEY, [plain_group(0)], OpContext())
    _, data = _group_row(db, 0)
    spaced = json.dumps(json.loads(data), indent=1).encode()
    set_group_row(db, KEY, 0, spaced, digest_bytes(spaced))
    with pytest.raises(ArchiveCorruptError, match="digest"):
        await archive.read_groups(KEY, 0, 10, OpContext())


async def test_memory_archive_rechecks_groups_too() -> None:
    archive = InMemoryArchive()
    await archive.append(KEY, [rich_group(0, KEY)], OpContext())
    stored = archive.raw(KEY, 0)
    assert stored is not None
    archive.put_raw(KEY, 0, stored[0].replace(b"release", b"releasE", 1), stored[1])
    with pytest.raises(ArchiveCorruptError, match="digest"):
        await archive.read_groups(KEY, 0, 10, OpContext())
    archive.put_raw(OTHER, 0, *stored)
    with pytest.raises(ArchiveCorruptError, match="belongs to session"):
        await archive.read_groups(OTHER, 0, 10, OpContext())
    retyped = _edit_json(stored[0], _set(("seq",), "0"))
    archive.put_raw(KEY, 0, retyped, digest_bytes(retyped))
    with pytest.raises(ArchiveCorruptError, match="expected an integer"):
        await archive.read_groups(KEY, 0, 10, OpContext())


def test_check_archived_group_rules() -> None:
    group = rich_group(3, KEY)
    check_archived_group(KEY, group, expected_seq=3, expected_digest=group.digest)
    check_archived_group(OTHER, plain_group(3))  # no retained record: no scope to compare
    with pytest.raises(ArchiveCorruptError, match="belongs to session"):
        check_archived_group(OTHER, group)
    with pytest.raises(ArchiveCorruptError, match="seq 4"):
        check_archived_group(KEY, group, expected_seq=4)
    with pytest.raises(ArchiveCorruptError, match="digest"):
        check_archived_group(KEY, group, expected_digest=plain_group(3).digest)
    assert issubclass(ArchiveCorruptError, ArchiveError)
