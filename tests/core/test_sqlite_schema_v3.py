"""Schema version 3 of the SQLite archive and session store: the revision floor is a version of its own.

The ``revision_floor`` table came in without a version bump, so a library
from before it opened a file that had it and erased without raising it:
revisions of an erased session could come back. Files are now at version 3
(the floor and its one row); code of version 2 refuses them, and a version 2
file (with or without the table) is brought to version 3 on first open, in
one transaction, keeping every session and archived group. And the session
store refuses to erase while its floor is damaged or missing, as the
PostgreSQL and S3 stores do: nothing is deleted, nothing is changed. The
file itself keeps the floor from going down or away (triggers, as
PostgreSQL's), added to a version 3 file without them on open.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    ArchiveError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionStoreError,
    SnapshotCorruptError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import (
    SCHEMA_VERSION,
    SQLiteArchive,
    SQLiteConfig,
    SQLiteRevisionFloorError,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.plugin_api import OpContext, snapshot_bytes
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
OTHER = SessionKey("acme", "bob", "s9")
ANA = VerifiedIdentity("acme", "ana", "test")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")

# The tables of schema version 2, as agentium-harness created them before the floor.
V2_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    """CREATE TABLE sessions (
        sid INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL,
        session_id TEXT NOT NULL, adopted INTEGER NOT NULL DEFAULT 0, revision INTEGER,
        boundary INTEGER, next_seq INTEGER, inline INTEGER, snapshot BLOB,
        UNIQUE (tenant_id, user_id, session_id))""",
    "CREATE TABLE groups (id INTEGER PRIMARY KEY, digest TEXT NOT NULL, data BLOB NOT NULL)",
    "INSERT INTO meta VALUES ('schema_version', '2')",
)
# What version 2 code that knew the floor added (without changing the version).
V2_FLOOR = "CREATE TABLE revision_floor (id INTEGER PRIMARY KEY CHECK (id = 0), floor INTEGER NOT NULL)"


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _archived_id(sid: int, seq: int) -> int:
    return sid << 33 | seq << 1 | 1  # version 2's key of an archived group's row


def _v2_file(path: Path, floor: object) -> bytes:
    """A version 2 database: KEY's snapshot (revision 7, stored whole), archived groups 0-4, OTHER's 0.

    ``floor``: the revision_floor row version 2 code that knew it left (``None``: no table at all,
    ``"no-row"``: the table only).
    Returns KEY's snapshot bytes.
    """
    data = snapshot_bytes(scoped_snapshot(KEY, " from v2", groups=2))  # boundary 5
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in V2_SCHEMA:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO sessions (sid, tenant_id, user_id, session_id, revision, inline, snapshot) "
            "VALUES (1, ?, ?, ?, 7, 1, ?)",
            (*KEY.key_segments(), data),
        )
        conn.execute(
            "INSERT INTO sessions (sid, tenant_id, user_id, session_id) VALUES (2, ?, ?, ?)",
            OTHER.key_segments(),
        )
        rows = [(_archived_id(1, seq), plain_group(seq, " of s1")) for seq in range(5)]
        rows.append((_archived_id(2, 0), plain_group(0, " of s9")))
        conn.executemany(
            "INSERT INTO groups VALUES (?, ?, ?)", [(i, g.digest, g.canonical_bytes()) for i, g in rows]
        )
        if floor is not None:
            conn.execute(V2_FLOOR)
        if floor is not None and floor != "no-row":
            conn.execute("INSERT INTO revision_floor VALUES (0, ?)", (floor,))
        conn.commit()
    return data


def _dump(path: Path) -> list[str]:
    """Every table's definition and rows, as SQL text: equal before and after means nothing was written."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return list(conn.iterdump())


def _raw(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(sql, params).fetchall()
        conn.commit()
        return rows


GUARDS = ("revision_floor_update_only_rises", "revision_floor_insert_only_rises", "revision_floor_kept")


def _damage(path: Path, sql: str) -> None:
    """Run ``sql`` on the floor with its triggers dropped first (they refuse it): damage from outside.

    As a file written before the triggers, or a tool that dropped them, could leave it; an open
    connection keeps going without them, a new open makes them again.
    """
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for name in GUARDS:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(sql)
        conn.commit()


def _guards(path: Path) -> set[object]:
    return {r[0] for r in _raw(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}


@pytest.mark.parametrize("floor", [None, "no-row", 9], ids=["before-the-floor", "table-only", "with-a-floor"])
async def test_a_version_2_file_is_upgraded_on_first_open_and_keeps_its_sessions_and_archive(
    floor: int | str | None, tmp_path: Path
) -> None:
    path = tmp_path / "agentium.db"
    data = _v2_file(path, floor)
    kept = floor if isinstance(floor, int) else 0
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        loaded = await store.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == 7 and snapshot_bytes(loaded.snapshot) == data
        assert await archive.read_groups(KEY, 0, 10, _ctx()) == [plain_group(s, " of s1") for s in range(5)]
        assert await archive.read_groups(OTHER, 0, 10, _ctx()) == [plain_group(0, " of s9")]
        assert await store.list_sessions("acme", "ana", 10, _ctx()) == ["s1"]
        # The current version (4), with the floor's row: a new one at 0, or the one version 2 code left, kept.
        assert _raw(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
        assert SCHEMA_VERSION == 4
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, kept)]
        assert _guards(path) == set(GUARDS)  # and its triggers: it only rises from now on
        with pytest.raises(sqlite3.IntegrityError, match="only rises; DELETE refused"):
            _raw(path, "DELETE FROM revision_floor")
        # The erase raises it; the id used again starts above every revision it had.
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        raised = max(7, kept)
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, raised)]
        assert await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx()) == raised + 1
        with pytest.raises(SessionConflictError):
            await store.save(KEY, scoped_snapshot(KEY, " stale"), 7, _ctx())
        # The session store's erasure leaves the archive's rows.
        assert len(await archive.read_groups(KEY, 0, 10, _ctx())) == 5
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_damaged_floor_of_a_version_2_file_is_kept_and_still_refuses_an_erase(tmp_path: Path) -> None:
    # The upgrade makes the row only where there is none: a damaged one is not overwritten with 0.
    path = tmp_path / "agentium.db"
    _v2_file(path, "damaged")
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        loaded = await store.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == 7
        assert _raw(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("4",)]
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, "damaged")]
        with pytest.raises(SQLiteRevisionFloorError, match="damaged"):
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert (await store.load(KEY, _ctx())) is not None
    finally:
        await store.aclose()


async def test_a_file_of_a_newer_version_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    _v2_file(path, None)
    # What a later version might have left: its own version, and no floor table this code would make.
    _raw(path, "UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    before = _dump(path)
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        with pytest.raises(SQLiteStorageError, match="schema version 5"):
            await store.load(KEY, _ctx())
        with pytest.raises(SQLiteStorageError, match="schema version 5"):
            await store.save(OTHER, scoped_snapshot(OTHER, " x"), None, _ctx())
        with pytest.raises(ArchiveError, match="schema version 5"):
            await archive.append(OTHER, [plain_group(1, " of s9")], _ctx())
    finally:
        await archive.aclose()
        await store.aclose()
    assert _dump(path) == before


DAMAGE = {
    "damaged": "UPDATE revision_floor SET floor = 'x' WHERE id = 0",
    "negative": "UPDATE revision_floor SET floor = -1 WHERE id = 0",
    "row-missing": "DELETE FROM revision_floor",
    "table-missing": "DROP TABLE revision_floor",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_an_erase_is_refused_while_the_floor_is_damaged_or_missing_and_changes_nothing(
    damage: str, tmp_path: Path
) -> None:
    path = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        await archive.append(KEY, [plain_group(0, " archived")], _ctx())
        revision = await store.save(KEY, scoped_snapshot(KEY, " kept"), None, _ctx())
        _damage(path, DAMAGE[damage])  # while both adapters have the file open
        before = _dump(path)
        with pytest.raises(SQLiteRevisionFloorError, match=r"revision floor is (damaged|missing)") as caught:
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        # The adapter's own family, as PostgreSQL's and S3's refusals are theirs.
        assert isinstance(caught.value, SQLiteStorageError) and isinstance(caught.value, SessionStoreError)
        with pytest.raises(SQLiteRevisionFloorError):
            await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert _dump(path) == before
        loaded = await store.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == revision
        assert await archive.read_groups(KEY, 0, 10, _ctx()) == [plain_group(0, " archived")]
        # A dry run still says what an erase would remove (as PostgreSQL's and S3's do).
        plan = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=True)
        assert [s.session for s in plan.sessions] == [KEY]
        assert _dump(path) == before
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_create_without_the_floor_row_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
        _damage(path, "DELETE FROM revision_floor")  # read as 0 before: a revision an erased session had
        before = _dump(path)
        with pytest.raises(SQLiteRevisionFloorError, match="missing") as caught:
            await store.save(OTHER, scoped_snapshot(OTHER, " b"), None, _ctx())
        assert isinstance(caught.value, SnapshotCorruptError)  # what a damaged floor raised before
        with pytest.raises(SQLiteRevisionFloorError, match="missing"):
            await store.commit_with_archive(
                archive, OTHER, [plain_group(0, " c")], scoped_snapshot(OTHER, " c"), None, _ctx()
            )
        assert _dump(path) == before
        # A session that exists saves on: its revision comes from its own row.
        assert await store.save(KEY, scoped_snapshot(KEY, " d"), revision, _ctx()) == revision + 1
    finally:
        await archive.aclose()
        await store.aclose()


def _runtime(path: Path) -> tuple[Any, SQLiteArchive, SQLiteSessionStore]:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),  # turns 3 and on archive groups
        owned=[archive, store],
    )
    return runtime, archive, store


async def test_an_engine_erasure_at_a_missing_floor_is_refused_before_anything_is_erased(
    tmp_path: Path,
) -> None:
    # The engine's first erasure of a tenant creates its ledger: refused like any create, so the
    # erasure stops before its record, and nothing of any store is touched.
    path = tmp_path / "agentium.db"
    runtime, archive, store = _runtime(path)
    target = EraseTarget.session("acme", "ana", "s1")
    async with runtime:
        for text in ("first", "second", "third", "fourth"):
            await runtime.run(ANA, "s1", text)
        revision = (await runtime.inspect_session(ANA, "s1")).revision
        archived = await archive.read_groups(KEY, 0, 100, _ctx())
        assert revision is not None and archived  # the snapshot and archived groups both
        _damage(path, "DELETE FROM revision_floor")
        before = _dump(path)
        with pytest.raises(SQLiteRevisionFloorError, match="missing"):
            await runtime.erase(target, reason="dsr", attestation=OPERATOR)
        assert _dump(path) == before
        view = await runtime.inspect_session(ANA, "s1")
        assert view.revision == revision and view.erasures == ()  # no tombstone, none pending
        assert await archive.read_groups(KEY, 0, 100, _ctx()) == archived
        # An operator restores the floor (no lower than any revision ever was); the erasure runs.
        _raw(path, "INSERT INTO revision_floor (id, floor) VALUES (0, ?)", revision)
        done = await runtime.erase(target, reason="dsr", attestation=OPERATOR)
        assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE
        assert await store.load(KEY, _ctx()) is None
        assert await archive.read_groups(KEY, 0, 100, _ctx()) == []
        assert _raw(path, "SELECT floor FROM revision_floor") == [(revision,)]


async def test_an_engine_erasure_after_another_stops_pending_and_erases_nothing_until_the_floor_is_back(
    tmp_path: Path,
) -> None:
    # The tenant's ledger exists (an earlier erasure): the new erasure's header joins it, its own
    # record (a create) is refused, and the erasure stays pending with every store untouched.
    path = tmp_path / "agentium.db"
    runtime, archive, store = _runtime(path)
    async with runtime:
        await runtime.run(ANA, "s0", "erased first")
        await runtime.erase(EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR)
        for text in ("first", "second", "third", "fourth"):
            await runtime.run(ANA, "s1", text)
        revision = (await runtime.inspect_session(ANA, "s1")).revision
        archived = await archive.read_groups(KEY, 0, 100, _ctx())
        assert revision is not None and archived
        (floor,) = _raw(path, "SELECT floor FROM revision_floor")
        _damage(path, "DELETE FROM revision_floor")
        target = EraseTarget.session("acme", "ana", "s1")
        with pytest.raises(ErasureIncompleteError, match="missing") as caught:
            await runtime.erase(target, reason="dsr", attestation=OPERATOR)
        record = caught.value.record
        assert record is not None and record.state is ErasureState.PENDING
        view = await runtime.inspect_session(ANA, "s1")
        assert view.revision == revision
        assert [r.state for r in view.erasures] == [ErasureState.PENDING]  # no tombstone
        assert await archive.read_groups(KEY, 0, 100, _ctx()) == archived
        _raw(path, "INSERT INTO revision_floor (id, floor) VALUES (0, ?)", max(floor[0], revision))
        (done,) = await runtime.resume_erasures(OPERATOR)
        assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE
        assert await store.load(KEY, _ctx()) is None
        assert await archive.read_groups(KEY, 0, 100, _ctx()) == []


# -- the floor's triggers: the database refuses to lower it, whoever writes -------------------------

LOWERING = {
    "update-lower": ("UPDATE revision_floor SET floor = 6 WHERE id = 0", "UPDATE refused"),
    "update-to-0": ("UPDATE revision_floor SET floor = 0", "UPDATE refused"),
    "update-not-a-number": ("UPDATE revision_floor SET floor = 'x' WHERE id = 0", "UPDATE refused"),
    "update-negative": ("UPDATE revision_floor SET floor = -1 WHERE id = 0", "UPDATE refused"),
    "delete": ("DELETE FROM revision_floor", "DELETE refused"),
    "replace-lower": ("INSERT OR REPLACE INTO revision_floor (id, floor) VALUES (0, 0)", "INSERT refused"),
    "replace-not-a-number": ("REPLACE INTO revision_floor (id, floor) VALUES (0, 'x')", "INSERT refused"),
}


@pytest.mark.parametrize("write", sorted(LOWERING))
async def test_raw_sql_that_lowers_or_removes_the_floor_is_refused_by_the_database(
    write: str, tmp_path: Path
) -> None:
    path = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, " x"), None, _ctx())
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())  # the erase raises it
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, revision)]
        _raw(path, "UPDATE revision_floor SET floor = 7 WHERE id = 0")  # raising it is allowed
        sql, refusal = LOWERING[write]
        # Another process's connection, with the adapter's still open: the file itself refuses.
        with pytest.raises(sqlite3.IntegrityError, match=f"revision floor only rises; {refusal}"):
            _raw(path, sql)
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, 7)]
        # Raising it stays possible (an operator's, or the next erase's), and a create starts above it.
        _raw(path, "UPDATE revision_floor SET floor = 9 WHERE id = 0")
        _raw(path, "INSERT OR REPLACE INTO revision_floor (id, floor) VALUES (0, 9)")  # the same value
        assert await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx()) == 10
    finally:
        await store.aclose()


async def test_a_version_3_file_without_the_triggers_gets_them_on_open_and_keeps_its_floor(
    tmp_path: Path,
) -> None:
    # What this version's code before the triggers left: version 3, the floor, no triggers.
    path = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(path))
    store = SQLiteSessionStore(config)
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
    finally:
        await store.aclose()
    _damage(path, "UPDATE revision_floor SET floor = 5 WHERE id = 0")  # drops the triggers (and raises)
    assert _guards(path) == set()
    _raw(path, "UPDATE revision_floor SET floor = 4 WHERE id = 0")  # nothing stops it yet
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        await archive.read_groups(KEY, 0, 10, _ctx())  # either adapter's first open makes them
        assert _guards(path) == set(GUARDS)
        assert _raw(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("4",)]
        assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, 4)]  # kept as it was
        with pytest.raises(sqlite3.IntegrityError, match="only rises; UPDATE refused"):
            _raw(path, "UPDATE revision_floor SET floor = 3 WHERE id = 0")
        assert await store.save(KEY, scoped_snapshot(KEY, " b"), None, _ctx()) == 5 > revision
        # A later open of a file that has them only reads (nothing written, nothing refused).
        before = _dump(path)
        again = SQLiteSessionStore(config)
        try:
            loaded = await again.load(KEY, _ctx())
            assert loaded is not None and loaded.revision == 5
        finally:
            await again.aclose()
        assert _dump(path) == before
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_damaged_floor_from_before_the_triggers_can_still_be_repaired(tmp_path: Path) -> None:
    # The triggers refuse only a lowering of an intact floor: the documented repair still works.
    path = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
        _damage(path, "UPDATE revision_floor SET floor = 'x' WHERE id = 0")
    finally:
        await store.aclose()
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        with pytest.raises(SQLiteRevisionFloorError, match="damaged"):
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert _guards(path) == set(GUARDS)  # the open made them again; the damage is still there
        _raw(path, "INSERT OR REPLACE INTO revision_floor (id, floor) VALUES (0, 1000001)")
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert await store.save(KEY, scoped_snapshot(KEY, " b"), None, _ctx()) == 1000002
    finally:
        await store.aclose()


@pytest.mark.parametrize("damage", ["row-missing", "table-missing"])
async def test_a_version_3_file_whose_floor_is_missing_stays_refused_after_the_upgrade_to_4(
    damage: str, tmp_path: Path
) -> None:
    # Version 4 changes only the recorded version of a version 3 file. Its floor's row was made with
    # the table, once: missing later it is damage, never made again at 0 (below a revision an
    # erased session had), by the upgrade or anything else.
    path = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(path))
    store = SQLiteSessionStore(config)
    try:
        await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
    finally:
        await store.aclose()
    assert _raw(path, "SELECT id, floor FROM revision_floor") == [(0, 1)]
    _damage(path, DAMAGE[damage])
    _raw(path, "UPDATE meta SET value = '3' WHERE key = 'schema_version'")  # as version 3 left it
    store = SQLiteSessionStore(config)
    try:
        with pytest.raises(SQLiteRevisionFloorError, match="missing"):
            await store.save(OTHER, scoped_snapshot(OTHER, " b"), None, _ctx())
        assert _raw(path, "SELECT id, floor FROM revision_floor") == []  # not made again at 0
        assert _raw(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("4",)]
    finally:
        await store.aclose()
