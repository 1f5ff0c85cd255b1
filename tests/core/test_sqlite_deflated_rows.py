"""Schema version 4: group rows stored deflated when smaller, read strictly, old rows read as they are."""

from __future__ import annotations

import random
import sqlite3
import string
import zlib
from pathlib import Path

import pytest

from agentium_harness import ArchiveCorruptError, SnapshotCorruptError
from agentium_harness._ports import OpContext
from agentium_harness._scope import Scope, SessionKey
from agentium_harness.adapters import _sqlite_archive, _sqlite_rows, _sqlite_snapshot_read
from agentium_harness.adapters._sqlite_pack import (
    MIN_PACKED,
    PackedRowError,
    PackedRowOverBound,
    pack,
    unpack,
)
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import EraseStatus, EraseTarget, MessageGroup, SessionSnapshot, seal_snapshot
from agentium_harness.testing import plain_group
from agentium_harness.testing.sqlite_rows import database_bytes, group_row, with_inflated_rows

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
SCOPE = Scope("acme", "ana", "s1")
TEXT = "The archive keeps every word of the conversation, in order, checked on every read. " * 8


def _adapters(path: Path) -> tuple[SQLiteArchive, SQLiteSessionStore]:
    return SQLiteArchive(SQLiteConfig(path=str(path))), SQLiteSessionStore(SQLiteConfig(path=str(path)))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _stored(path: Path, count: int, archived: int) -> tuple[tuple[MessageGroup, ...], int]:
    """Groups 0..count-1 of ~1 KB each: the first ``archived`` appended to the archive, the rest
    resident in a saved snapshot; returns them and the snapshot's revision (adapters closed)."""
    archive, store = _adapters(path)
    groups = tuple(plain_group(seq, f"{seq} {TEXT}") for seq in range(count))
    try:
        await archive.append(KEY, groups[:archived], OpContext())
        snapshot = seal_snapshot(SessionSnapshot(SCOPE, archived, count, groups[archived:]))
        revision = await store.save(KEY, snapshot, None, OpContext())
    finally:
        await archive.aclose()
        await store.aclose()
    return groups, revision


def _rows(path: Path) -> dict[int, tuple[str, bytes]]:
    with sqlite3.connect(path) as conn:
        return {int(i): (str(d), bytes(b)) for i, d, b in conn.execute("SELECT id, digest, data FROM groups")}


def _set(path: Path, row: int, data: bytes) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE groups SET data = ? WHERE id = ?", (data, row))


def test_pack_round_trips_and_keeps_small_or_incompressible_rows_as_they_are() -> None:
    data = plain_group(0, TEXT).canonical_bytes()
    packed = pack(data)
    assert packed[:1] != b"{" and len(packed) < len(data) // 3
    assert unpack(packed, len(data)) == data
    small = plain_group(0, "hi").canonical_bytes()
    assert len(small) < MIN_PACKED and pack(small) == small
    # Random-looking text deflates to more than it is: kept as it is.
    noise = plain_group(0, bytes(range(256)).hex() * 2).canonical_bytes()
    assert pack(noise) == noise or len(pack(noise)) < len(noise)
    # A row as it is, or anything that is no zlib stream (damaged JSON, too deep, empty), comes
    # back unchanged for the strict decoder to judge; its size is the caller's to check.
    for raw in (small, b"", b"[[[[[[[[", b"x", b"8 not a header"):
        assert unpack(raw, 0) == raw


@pytest.mark.parametrize(
    ("stored", "error"),
    [
        (zlib.compress(b'{"a":1}')[:-3], PackedRowError),  # cut short
        (zlib.compress(b'{"a":1}') + b"x", PackedRowError),  # bytes after the stream
        (zlib.compress(b'{"a":1}')[:-1] + b"\x00", PackedRowError),  # checksum
        (b"\x78\x9c garbage", PackedRowError),
        (zlib.compress(b"{" + b" " * 100_000 + b"}"), PackedRowOverBound),  # a bomb, over the bound
    ],
    ids=["truncated", "trailing", "checksum", "garbage", "over-bound"],
)
def test_unpack_refuses_damage_and_never_inflates_past_its_bound(
    stored: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        unpack(stored, 1000)
    with pytest.raises(PackedRowError):
        unpack(zlib.compress(b"{}" * 10), -5)  # nothing left of the bound: never "no limit"


async def test_a_turns_rows_are_deflated_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    groups, _ = await _stored(path, 4, 2)
    archive, store = _adapters(path)
    ctx = OpContext()
    try:
        rows = _rows(path)
        assert len(rows) == 4
        for digest, data in rows.values():
            assert data[:1] != b"{" and len(data) < 400, len(data)  # ~1 KB of JSON each
            assert digest.startswith("sha256:")
        assert list(await archive.read_groups(KEY, 0, 10, ctx)) == list(groups[:2])
        loaded = await store.load(KEY, ctx)
        assert loaded is not None and loaded.snapshot.resident == groups[2:]
        assert group_row(path, KEY, 0)[1] == groups[0].canonical_bytes()  # the test helper inflates
    finally:
        await archive.aclose()
        await store.aclose()


async def test_rows_stored_as_they_are_by_version_3_are_read_and_never_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    groups, stored = await _stored(path, 4, 2)
    ctx = OpContext()
    # What version 3 wrote: canonical JSON as it is, and the version it recorded.
    by_seq = {g.seq: g for g in groups}
    for row in _rows(path):
        _set(path, row, by_seq[(row >> 1) & 0xFFFFFFFF].canonical_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    before = _rows(path)
    archive, store = _adapters(path)
    try:
        assert list(await archive.read_groups(KEY, 0, 10, ctx)) == list(groups[:2])
        loaded = await store.load(KEY, ctx)
        assert loaded is not None and loaded.snapshot.resident == groups[2:] and loaded.revision == stored
        assert _rows(path) == before  # read as they are, not rewritten
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    finally:
        await archive.aclose()
        await store.aclose()


@pytest.mark.parametrize("damage", ["truncated", "bit", "bomb"])
async def test_a_damaged_deflated_row_fails_closed_and_is_left_alone(
    tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.db"
    await _stored(path, 2, 1)
    ctx = OpContext()
    rows = _rows(path)
    for row, (_, data) in rows.items():
        if damage == "truncated":
            bad = data[: len(data) // 2]
        elif damage == "bit":
            bad = data[:40] + bytes([data[40] ^ 0x10]) + data[41:]
        else:  # a valid stream whose JSON is larger than anything the decoder reads back (bound lowered)
            for module in (_sqlite_archive, _sqlite_rows, _sqlite_snapshot_read):
                monkeypatch.setattr(module, "JSON_BYTES", 100_000)
            bad = zlib.compress(b"{" + b" " * 1_000_000 + b"}", 9)
        _set(path, row, bad)
    damaged = _rows(path)
    archive, store = _adapters(path)
    try:
        with pytest.raises(ArchiveCorruptError):
            await archive.read_groups(KEY, 0, 10, ctx)
        with pytest.raises(SnapshotCorruptError):
            await store.load(KEY, ctx)
        assert _rows(path) == damaged  # nothing changed
        # Damage never stops an erasure: the snapshot is erased unread (reported with no groups),
        # the archived group by its digest alone.
        target = EraseTarget.session("acme", "ana", "s1")
        report = await store.erase(target, ctx)
        assert report.status is EraseStatus.COMPLETE and [s.session for s in report.sessions] == [KEY]
        assert [g for s in report.sessions for g in s.groups] == []
        assert (await archive.erase(target, ctx)).status is EraseStatus.COMPLETE
        assert _rows(path) == {}
    finally:
        await archive.aclose()
        await store.aclose()


def _logged(path: Path, row: bytes) -> sqlite3.Connection:
    """A connection to a new database holding ``row``, in its log only: no checkpoint while it is open."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE groups (id INTEGER PRIMARY KEY, digest TEXT, data BLOB)")
    conn.execute("INSERT INTO groups VALUES (1, 'x', ?)", (row,))
    conn.commit()
    return conn


def _files_holding(row: bytes, folder: Path, *, checkpointed: bool) -> bytes:
    """The bytes of a database (and its log) holding ``row``: in the file, or only in the log."""
    path = folder / "b.db"
    conn = _logged(path, row)
    try:
        if checkpointed:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Read while the connection is open: closing the last one would checkpoint the log.
        log = Path(f"{path}-wal").read_bytes()
        assert (len(log) > len(row)) is not checkpointed
        return path.read_bytes() + log
    finally:
        conn.close()


@pytest.mark.parametrize("checkpointed", [True, False], ids=["in-the-file", "in-the-log"])
async def test_with_inflated_rows_finds_a_word_past_the_first_page_of_a_deflated_row(
    tmp_path: Path, checkpointed: bool
) -> None:
    # A row deflated to more than a page spills into overflow pages, each starting with the
    # number of the next: the stream is not contiguous in the file. A test asserting that an
    # erasure left no copy of a word must still see the word when it lies past the first page.
    words = random.Random(7)
    text = " ".join(
        "".join(words.choices(string.ascii_lowercase, k=words.randint(3, 9))) for _ in range(3000)
    )
    group = plain_group(0, f"EARLYWORD {text} LATEWORD")
    path = tmp_path / "a.db"
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        await archive.append(KEY, [group], OpContext())
    finally:
        await archive.aclose()
    with sqlite3.connect(path) as conn:
        (stored,) = conn.execute("SELECT data FROM groups").fetchone()
    assert 3 * 4096 < len(stored) < group.size_bytes  # deflated, over several pages
    found = with_inflated_rows(_files_holding(stored, tmp_path, checkpointed=checkpointed))
    assert b"EARLYWORD" in found and b"LATEWORD" in found


@pytest.mark.parametrize(
    "data",
    [
        b"SQLite format 3\x00" + bytes(200),  # page size 0
        b"SQLite format 3\x00\x03\x00" + bytes(5000),  # page size not a power of two
        b"\x37\x7f\x06\x82\x00\x2d\xe2\x18" + bytes(100),  # a log header and no frame
        b"x\x9c",  # a zlib header and nothing after it
    ],
    ids=["page-size-0", "page-size-odd", "log-header-only", "stream-header-only"],
)
def test_with_inflated_rows_reads_damaged_files_as_they_are(data: bytes) -> None:
    assert with_inflated_rows(data) == data


def test_database_bytes_reads_the_file_its_log_and_its_journal_inflated_while_a_connection_is_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    deflated = zlib.compress(("LOGWORD " + "quokka " * 300).encode())
    conn = _logged(path, deflated)
    try:
        # Made after the open, which would take a journal for a hot one and roll it back.
        (tmp_path / "c.db-journal").write_bytes(zlib.compress(("JOURNALWORD " + "wombat " * 300).encode()))
        # The row is in the log only (no checkpoint while this connection is open), deflated.
        found = database_bytes(path)
        assert b"LOGWORD" in found and b"JOURNALWORD" in found
        assert conn.execute("SELECT count(*) FROM groups").fetchone() == (1,)
    finally:
        conn.close()
    (tmp_path / "c.db-journal").unlink()
    assert b"JOURNALWORD" not in database_bytes(path)  # a missing companion reads as empty


@pytest.mark.parametrize("damage", ["bit", "replaced"])
async def test_an_equal_append_over_a_damaged_archived_row_fails_closed(tmp_path: Path, damage: str) -> None:
    # A group appended again with its digest (a retry, a deferred eviction) was acknowledged on the
    # digest column alone: with the row's bytes damaged, the joint commit moved the boundary past
    # the group and dropped the snapshot's copy, the only intact one, for a receipt of damage.
    path = tmp_path / "a.db"
    groups = tuple(plain_group(seq, f"{seq} {TEXT}") for seq in range(2))
    archive, store = _adapters(path)
    ctx = OpContext()
    try:
        await archive.append(KEY, groups[:1], ctx)
        revision = await store.save(KEY, seal_snapshot(SessionSnapshot(SCOPE, 0, 2, groups)), None, ctx)
        (row,) = [i for i in _rows(path) if i & 1]  # the archive's own row of group 0
        data = _rows(path)[row][1]
        other = pack(plain_group(0, f"0 {TEXT} (changed)").canonical_bytes())
        _set(path, row, data[:40] + bytes([data[40] ^ 0x10]) + data[41:] if damage == "bit" else other)
        damaged = _rows(path)
        with pytest.raises(ArchiveCorruptError, match="damaged"):
            await archive.append(KEY, groups[:1], ctx)
        evicted = seal_snapshot(SessionSnapshot(SCOPE, 1, 2, groups[1:]))
        with pytest.raises(ArchiveCorruptError, match="damaged"):
            await store.commit_with_archive(archive, KEY, groups[:1], evicted, revision, ctx)
        assert _rows(path) == damaged  # nothing written: the snapshot still holds group 0
        loaded = await store.load(KEY, ctx)
        assert loaded is not None and loaded.revision == revision and loaded.snapshot.resident == groups
    finally:
        await archive.aclose()
        await store.aclose()
