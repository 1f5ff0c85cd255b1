"""The SQLite archive and session store keep each group in one row, written once (issue 28).

A turn that evicts a group writes the new group's row and the session's row;
the evicted group's row becomes the archive's by adoption, and no other
resident group is rewritten. Everything else about the adapters is as before:
reads are checked as strictly, erasures of one adapter leave the other's
rows, and a file written by an earlier version (schema version 1) is
migrated in place on first open.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    ArchiveCorruptError,
    EraseTarget,
    ErasureState,
    OpContext,
    OperatorAttestation,
    PhysicalErasure,
    ResidentLimits,
    RuntimeLimits,
    SeqRange,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters._sqlite_pack import unpack
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import (
    SCHEMA_VERSION,
    SQLiteArchive,
    SQLiteConfig,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.plugin_api import StoredSnapshot, snapshot_bytes
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_harness.testing.sqlite_rows import archived_seqs

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test")
KEY = SessionKey("acme", "ana", "s1")
TEXT = "a question long enough to look like a real one, " * 10  # ~500 characters, as a turn has


def _runtime(path: Path, **limits: Any) -> Any:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[TEXT], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(**limits)) if limits else None,
        owned=[archive, store],
    )
    return runtime, archive, store


def _group_rows(path: Path) -> dict[int, bytes]:
    with sqlite3.connect(path) as conn:
        return {int(i): bytes(d) for i, d in conn.execute("SELECT id, data FROM groups")}


def _wal_frames(path: Path) -> int:
    """Frames appended to the write-ahead log so far (each a 24-byte header and one page)."""
    with sqlite3.connect(path) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    size = os.path.getsize(str(path) + "-wal")
    return max(0, size - 32) // (24 + page)  # 32: the log's own header


async def test_an_evicting_turn_writes_its_group_and_the_session_row_not_the_resident_groups(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentium.db"
    runtime, _, _ = _runtime(path)
    async with runtime:
        for n in range(12):  # past the 8 resident groups: every turn from here evicts one
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        before = _group_rows(path)
        result = await runtime.run(ANA, "s1", f"12 {TEXT}")
        assert result.archived and result.archived[0].seq == 4
        after = _group_rows(path)
        # Every row there was is there, byte for byte (the evicted one adopted as it is); one is new.
        assert {i: d for i, d in after.items() if i in before} == before
        assert len(after) == len(before) + 1
        frames = _wal_frames(path)
        for n in range(13, 43):
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        per_turn = (_wal_frames(path) - frames) / 30
    # The new group's leaf page, the session row's page, and now and then a new page (the file
    # grows). Rewriting the snapshot and inserting the evicted group again took about 9.
    assert per_turn <= 4, per_turn
    assert archived_seqs(path, KEY) == list(range(35))


async def test_a_damaged_or_missing_resident_row_fails_closed_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        snapshot = scoped_snapshot(KEY, " resident", groups=3)
        await store.save(KEY, snapshot, None, OpContext())
        rows = _group_rows(path)
        assert len(rows) == 3  # one row per resident group, none for the snapshot's other fields
        first = min(rows)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE groups SET data = ? WHERE id = ?",
                (unpack(rows[first], 1 << 20).replace(b"resident", b"Resident"), first),
            )
        damaged = _group_rows(path)
        for _ in range(2):
            with pytest.raises(SnapshotCorruptError, match="digest"):
                await SQLiteSessionStore(SQLiteConfig(path=str(path))).load(KEY, OpContext())
        assert _group_rows(path) == damaged
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM groups WHERE id = ?", (first,))
        with pytest.raises(SnapshotCorruptError, match="incomplete"):
            await store.load(KEY, OpContext())
    finally:
        await store.aclose()


async def test_each_adapters_erasure_leaves_the_others_rows(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        for n in range(6):  # groups 0-3 archived by adoption, 4 and 5 resident
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        stored = await store.load(KEY, OpContext())
        assert stored is not None and [g.seq for g in stored.snapshot.resident] == [4, 5]
        archived = list(await archive.read_groups(KEY, 0, 10, OpContext()))
        assert [g.seq for g in archived] == [0, 1, 2, 3]

        # The archive's erasure takes the adopted rows; the resident groups stay the store's.
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(0, 2)]), OpContext())
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [2, 3]
        again = await SQLiteSessionStore(SQLiteConfig(path=str(path))).load(KEY, OpContext())
        assert again is not None and again.snapshot == stored.snapshot

        # The store's erasure takes the snapshot and its resident rows; the archive keeps 2 and 3.
        await store.erase(EraseTarget.session("acme", "ana", "s1"), OpContext())
        assert await store.load(KEY, OpContext()) is None
        assert await archive.read_groups(KEY, 0, 10, OpContext()) == archived[2:]
        assert archived_seqs(path, KEY) == [2, 3]


async def test_a_snapshot_this_layout_cannot_split_is_stored_whole(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    runtime, archive, store = _runtime(path, max_groups=1)
    async with runtime:
        for n in range(8):  # groups 0-6 archived by adoption
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        await store.erase(EraseTarget.session("acme", "ana", "s1"), OpContext())
        # A new snapshot of the session whose resident groups (5, 6) are below what the archive holds.
        fresh = scoped_snapshot(KEY, " again")
        assert [g.seq for g in fresh.resident] == [5, 6]
        revision = await store.save(KEY, fresh, None, OpContext())
        loaded = await SQLiteSessionStore(SQLiteConfig(path=str(path))).load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision and loaded.snapshot == fresh
        assert snapshot_bytes(loaded.snapshot) == snapshot_bytes(fresh)
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == list(range(7))


# -- schema version 1 files ----------------------------------------------------------------------

V1_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    """CREATE TABLE archive_groups (
        tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        seq INTEGER NOT NULL CHECK (seq >= 0), digest TEXT NOT NULL, data BLOB NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE session_snapshots (
        tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        revision INTEGER NOT NULL CHECK (revision >= 1), data BLOB NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id)) WITHOUT ROWID""",
    "INSERT INTO meta VALUES ('schema_version', '1')",
)


def _v1_file(
    path: Path, archived: list[tuple[SessionKey, int]], snapshots: list[tuple[SessionKey, int, bytes]]
) -> None:
    """A database as agentium-harness wrote it before schema version 2 (WAL, the two old tables)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in V1_SCHEMA:
            conn.execute(statement)
        for key, seq in archived:
            group = plain_group(seq, f" of {key.session}")
            conn.execute(
                "INSERT INTO archive_groups VALUES (?, ?, ?, ?, ?, ?)",
                (*key.key_segments(), seq, group.digest, group.canonical_bytes()),
            )
        for key, revision, data in snapshots:
            conn.execute(
                "INSERT INTO session_snapshots VALUES (?, ?, ?, ?, ?)", (*key.key_segments(), revision, data)
            )


async def test_a_version_1_file_is_migrated_in_place_on_first_open(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    other = SessionKey("acme", "bob", "s9")
    snapshot = scoped_snapshot(KEY, " from v1", groups=2)  # boundary 5: groups 0-4 archived
    _v1_file(
        path,
        [(KEY, seq) for seq in range(5)] + [(other, 0)],
        [(KEY, 7, snapshot_bytes(snapshot))],
    )
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == 7 and loaded.snapshot == snapshot
        groups = await archive.read_groups(KEY, 0, 10, OpContext())
        assert groups == [plain_group(seq, " of s1") for seq in range(5)]
        assert await archive.read_groups(other, 0, 10, OpContext()) == [plain_group(0, " of s9")]
        assert await store.list_sessions("acme", "ana", 10, OpContext()) == ["s1"]
        with sqlite3.connect(path) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
            floor = conn.execute("SELECT id, floor FROM revision_floor").fetchall()
            guards = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert version == str(SCHEMA_VERSION) == "4"  # straight to the current version
        assert floor == [(0, 0)]
        # The floor's triggers (it only rises) come with it.
        assert {"revision_floor_update_only_rises", "revision_floor_insert_only_rises"} <= guards
        assert "revision_floor_kept" in guards
        assert {"archive_groups", "session_snapshots"}.isdisjoint(tables)
        # The session goes on from where it was: the next save splits the snapshot into rows.
        await store.save(KEY, scoped_snapshot(KEY, " next", groups=3), 7, OpContext())
        assert len(_group_rows(path)) == 6 + 3
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_version_1_file_that_cannot_be_migrated_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    _v1_file(path, [(KEY, 0), (KEY, 2**32)], [])
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        with pytest.raises(Exception, match="cannot be migrated") as caught:
            await archive.read_groups(KEY, 0, 10, OpContext())
        assert type(caught.value).__name__ == "ArchiveError"
        with pytest.raises(SQLiteStorageError, match="cannot be migrated"):
            await store.load(KEY, OpContext())
    finally:
        await archive.aclose()
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == "1"
        assert conn.execute("SELECT count(*) FROM archive_groups").fetchone()[0] == 2


async def _six_turns(path: Path) -> StoredSnapshot:
    """Six turns with two groups resident: groups 0-3 archived by adoption, 4 and 5 resident."""
    runtime, _, store = _runtime(path, max_groups=2)
    async with runtime:
        for n in range(6):
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        stored = await store.load(KEY, OpContext())
    assert stored is not None and [g.seq for g in stored.snapshot.resident] == [4, 5]
    return stored


def _set_adopted(path: Path, value: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET adopted = ?", (value,))


async def test_a_watermark_moved_back_is_refused_and_no_archived_group_is_deleted(tmp_path: Path) -> None:
    # ``adopted`` is covered by no digest, and it says which rows are the archive's: moved back
    # below the boundary, the adopted rows above it looked like the store's stale rows, and the
    # next turn's save deleted them (archived groups lost for good).
    path = tmp_path / "agentium.db"
    stored = await _six_turns(path)
    rows = _group_rows(path)
    _set_adopted(path, 1)

    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        with pytest.raises(SnapshotCorruptError, match="damaged"):
            await runtime.run(ANA, "s1", TEXT)
        with pytest.raises(SnapshotCorruptError, match="damaged"):
            await runtime.read_history(ANA, "s1", max_groups=10, view=False)
        # The save refuses on its own too (a host or a caller that did not load first).
        with pytest.raises(SnapshotCorruptError, match="neither rewritten nor deleted"):
            await store.save(KEY, stored.snapshot, stored.revision, OpContext())
    assert _group_rows(path) == rows

    _set_adopted(path, 4)  # repaired: every group is there
    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0, 1, 2, 3]
        await runtime.run(ANA, "s1", TEXT)
    assert archived_seqs(path, KEY) == [0, 1, 2, 3, 4]


OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")


def _by_session(path: Path) -> dict[str, list[tuple[int, str, bytes]]]:
    """Every group row (id, digest, data) under its session id, and each session row as one more row."""
    with sqlite3.connect(path) as conn:
        sessions = conn.execute("SELECT sid, user_id || '/' || session_id, * FROM sessions").fetchall()
        rows = conn.execute("SELECT id, digest, data FROM groups ORDER BY id").fetchall()
    return {
        name: [(0, repr(row), b""), *(r for r in rows if r[0] >> 33 == sid)] for sid, name, *row in sessions
    }


def only_ana_s1_gone(path: Path, before: dict[str, list[tuple[int, str, bytes]]]) -> None:
    """Nothing of ana/s1 is left in the file; ana/s2 and bob/s1 are as ``before``, byte for byte."""
    after = _by_session(path)
    assert "ana/s1" not in after
    assert after["ana/s2"] == before["ana/s2"] and after["bob/s1"] == before["bob/s1"]


async def _three_sessions_one_watermark_moved_back(path: Path) -> dict[str, list[tuple[int, str, bytes]]]:
    """Six turns of ana/s1 (0-3 adopted, 4-5 resident), three of ana/s2 and of bob/s1; s1's watermark at 1."""
    runtime, _, _ = _runtime(path, max_groups=2)
    async with runtime:
        for n in range(6):
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        for who in (ANA, VerifiedIdentity("acme", "bob", "test")):
            for n in range(3):
                await runtime.run(who, "s2" if who is ANA else "s1", f"{n} {TEXT}")
    before = _by_session(path)
    assert [len(before[name]) for name in ("ana/s1", "ana/s2", "bob/s1")] == [7, 4, 4]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET adopted = 1 WHERE user_id = 'ana' AND session_id = 's1'")
    return before


@pytest.mark.parametrize("level", ["session", "user"])
async def test_a_watermark_moved_back_never_stops_an_erasure_and_leaves_nothing_of_the_target(
    tmp_path: Path, level: str
) -> None:
    # The damage check of joined_snapshot stopped the store's erasure (dry run included), so the
    # erasure stayed pending on damage in what the operator asked to remove, on every retry.
    path = tmp_path / "agentium.db"
    before = await _three_sessions_one_watermark_moved_back(path)
    runtime, _, store = _runtime(path, max_groups=2)
    async with runtime:
        with pytest.raises(SnapshotCorruptError, match="above the archive's watermark"):
            await store.load(KEY, OpContext())  # a load refuses it as before
        target = EraseTarget.user("acme", "ana")
        if level == "session":
            target = EraseTarget.session("acme", "ana", "s1")
        result = await runtime.erase(target, reason="dsr", attestation=OPERATOR)
    counts = {s.role: {c.kind: c.count for c in s.counts} for s in result.record.stores}
    # The archive takes groups 0-3 (1-3 below the snapshot's boundary: adopted rows whatever the
    # watermark says), the store its snapshot; a user erasure takes s2 too (one archived group).
    assert result.record.state is ErasureState.COMPLETE
    extra = 1 if level == "user" else 0
    assert counts == {"archive": {"group": 4 + extra}, "session_store": {"snapshot": 1 + extra}}
    erased = {s.session.session: s for s in result.record.sessions}
    assert erased["s1"].count == 6 and erased["s1"].snapshot
    after = _by_session(path)
    left = {"bob/s1"} if level == "user" else {"ana/s2", "bob/s1"}
    assert "ana/s1" not in after and ("ana/s2" in after) is (level == "session")
    for name in left:
        assert after[name] == before[name]  # other sessions' rows byte for byte


async def test_a_watermark_moved_back_store_erasure_leaves_the_archived_groups_to_the_archive(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentium.db"
    before = await _three_sessions_one_watermark_moved_back(path)
    runtime, archive, store = _runtime(path, max_groups=2)
    target = EraseTarget.session("acme", "ana", "s1")
    async with runtime:
        report = await store.erase(target, OpContext())
        # Erased unread and reported with no groups, as any damaged snapshot.
        assert report.count("snapshot") == 1 and [s.groups for s in report.sessions] == [()]
        # Only the resident rows went: the archive still holds its four groups, watermark over them.
        assert archived_seqs(path, KEY) == [0, 1, 2, 3]
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0, 1, 2, 3]
        report = await archive.erase(target, OpContext())
        assert report.count("group") == 4
        assert [seq for s in report.sessions for seq, _ in s.groups] == [0, 1, 2, 3]
    only_ana_s1_gone(path, before)


@pytest.mark.parametrize("first", ["archive", "store"])
async def test_a_watermark_moved_back_over_a_group_the_archive_also_holds_leaves_no_copy_of_it(
    tmp_path: Path, first: str
) -> None:
    # Group 2 is a store row (below the boundary, above the moved-back watermark) and an archive row
    # of its own. The store's erasure left its row (below the boundary: "the archive's") and the
    # archive's skipped it (it has a row of its own for seq 2): both reported complete, and the
    # erased session's group 2 was read back from the archive.
    path = tmp_path / "agentium.db"
    before = await _three_sessions_one_watermark_moved_back(path)
    with sqlite3.connect(path) as conn:
        query = "SELECT sid FROM sessions WHERE user_id = 'ana' AND session_id = 's1'"
        (sid,) = conn.execute(query).fetchone()
        conn.execute(
            "INSERT INTO groups (id, digest, data) SELECT id + 1, digest, data FROM groups WHERE id = ?",
            ((sid << 33) + (2 << 1),),
        )
    runtime, archive, store = _runtime(path, max_groups=2)
    target = EraseTarget.session("acme", "ana", "s1")
    async with runtime:
        for adapter in (archive, store) if first == "archive" else (store, archive):
            assert (await adapter.erase(target, OpContext())).status.value == "complete"
        assert await archive.read_groups(KEY, 0, 10, OpContext()) == []
    only_ana_s1_gone(path, before)


@pytest.mark.parametrize("adopted", [5, -1, 2**40, 2.5, "x"])
async def test_a_watermark_past_the_boundary_or_not_a_seq_is_refused_by_every_operation(
    tmp_path: Path, adopted: object
) -> None:
    path = tmp_path / "agentium.db"
    await _six_turns(path)
    rows = _group_rows(path)
    _set_adopted(path, adopted)

    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        with pytest.raises(ArchiveCorruptError, match="watermark"):
            await archive.read_groups(KEY, 0, 10, OpContext())
        with pytest.raises(ArchiveCorruptError, match="watermark"):
            # Past the boundary, the resident rows 4 and 5 looked archived and were erased.
            await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(0, 10)]), OpContext())
        with pytest.raises(ArchiveCorruptError, match="watermark"):
            await archive.append(KEY, [plain_group(6)], OpContext())
        with pytest.raises(SnapshotCorruptError, match="watermark"):
            await store.load(KEY, OpContext())
        with pytest.raises(SnapshotCorruptError, match="watermark"):
            await store.erase(EraseTarget.session("acme", "ana", "s1"), OpContext())
        with pytest.raises(SnapshotCorruptError, match="watermark"):
            await runtime.run(ANA, "s1", TEXT)
    assert _group_rows(path) == rows


@pytest.mark.parametrize("sid", [2**30 - 1, 2**40])
async def test_a_session_number_whose_rows_end_past_63_bits_is_refused_by_every_operation(
    tmp_path: Path, sid: int
) -> None:
    # A session's rows end at (sid + 1) << 33 (an exclusive bound): for the last number creation
    # allowed (2**30 - 1) or one a damaged file holds, that is past SQLite's integers, and every
    # archive read and erasure raised an untyped OverflowError.
    path = tmp_path / "agentium.db"
    await _six_turns(path)
    with sqlite3.connect(path) as conn:
        (old,) = conn.execute("SELECT sid FROM sessions").fetchone()
        # Every row id of the session moved with it (kept within 63 bits: seqs are small).
        shift = (min(sid, 2**30 - 1) - old) << 33
        conn.execute("UPDATE groups SET id = id + ?", (shift,))
        conn.execute("UPDATE sessions SET sid = ?", (sid,))
    rows = _group_rows(path)

    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        with pytest.raises(ArchiveCorruptError, match="session number"):
            await archive.read_groups(KEY, 0, 10, OpContext())
        with pytest.raises(ArchiveCorruptError, match="session number"):
            await archive.erase(EraseTarget.session("acme", "ana", "s1"), OpContext())
        with pytest.raises(ArchiveCorruptError, match="session number"):
            await archive.append(KEY, [plain_group(6)], OpContext())
        with pytest.raises(SnapshotCorruptError, match="session number"):
            await store.load(KEY, OpContext())
        with pytest.raises(SnapshotCorruptError, match="session number"):
            await store.erase(EraseTarget.session("acme", "ana", "s1"), OpContext())
    assert _group_rows(path) == rows


async def test_an_erase_with_a_reader_holding_the_log_says_unreferenced_within_its_deadline(
    tmp_path: Path,
) -> None:
    # Each checkpoint attempt used to wait out the busy timeout (5 s by default), 50 times: the
    # erase outlasted every deadline instead of reporting what it could not do.
    path = tmp_path / "agentium.db"
    runtime, archive, _ = _runtime(path, max_groups=1)
    async with runtime:
        for n in range(3):
            await runtime.run(ANA, "s1", f"{n} {TEXT}")
        reader = sqlite3.connect(path)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM groups").fetchone()  # holds its snapshot of the log
            report = await archive.erase(
                EraseTarget.groups_of(KEY, [SeqRange(0, 1)]), OpContext.with_timeout(20)
            )
        finally:
            reader.close()
        assert report.physical is PhysicalErasure.UNREFERENCED and "another connection" in report.detail
        assert report.count("group") == 1
        # The connection's own busy timeout is as it was: a writer still waits for the lock.
        assert (await runtime.run(ANA, "s1", TEXT)).committed


async def test_a_version_1_file_with_a_huge_seq_is_refused_without_reading_it(tmp_path: Path) -> None:
    # A text seq passes version 1's CHECK (text sorts above every number); the refusal fetched it
    # whole and put its repr into the SchemaError: a 64 MiB value read, a 64 MiB message.
    import tracemalloc

    path = tmp_path / "agentium.db"
    _v1_file(path, [(KEY, 0), (KEY, 1)], [])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE archive_groups SET seq = printf('%.*c', ?, 'x') WHERE seq = 1", (64 << 20,))
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    tracemalloc.start()
    try:
        with pytest.raises(SQLiteStorageError, match="cannot be migrated") as caught:
            await store.load(KEY, OpContext())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await store.aclose()
    assert peak < 8 << 20, f"{peak} bytes traced: the huge seq was read into Python"
    assert len(str(caught.value)) < 1000
    assert f"seq of {64 << 20} characters" in str(caught.value)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == "1"
