"""SQLite-specific behaviour of the built-in archive and session store.

The shared port behaviour is covered by the contract suites in
``tests/contracts``; these tests look at the file, the raw rows and the
SQLite mechanics (WAL, locks, lazy opening, interruption).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness._codec import structure
from agentium_harness._errors import (
    ArchiveConflictError,
    ArchiveError,
    InvalidArgumentError,
    InvalidIdError,
    OperationCancelledError,
    SessionConflictError,
    SnapshotCorruptError,
)
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._ports import OpContext
from agentium_harness._ports.memory import MemoryScope
from agentium_harness._ports.recall import RecallLimits
from agentium_harness._scope import Scope, SessionKey
from agentium_harness.adapters._sqlite_sql import immediate_transaction
from agentium_harness.adapters.sqlite import (
    SCHEMA_VERSION,
    SQLiteArchive,
    SQLiteConfig,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing import plain_group, rich_group, scoped_snapshot
from agentium_harness.testing.sqlite_rows import archived_seqs, set_group_row, snapshot_row

pytestmark = pytest.mark.anyio

KEY = SessionKey("tenant", "user", "session")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentium.db"


@pytest.fixture
def config(db: Path) -> SQLiteConfig:
    return SQLiteConfig(path=str(db), busy_timeout_ms=10_000)


@pytest.fixture
async def archive(config: SQLiteConfig) -> AsyncIterator[SQLiteArchive]:
    adapter = SQLiteArchive(config)
    yield adapter
    await adapter.aclose()


@pytest.fixture
async def store(config: SQLiteConfig) -> AsyncIterator[SQLiteSessionStore]:
    adapter = SQLiteSessionStore(config)
    yield adapter
    await adapter.aclose()


def raw(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(db), isolation_level=None)


def count_rows(db: Path, table: str) -> int:
    with raw(db) as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # table names are literals here
    return int(n)


def _all_rows(db: Path) -> tuple[list[Any], list[Any]]:
    with raw(db) as conn:
        sessions = conn.execute("SELECT * FROM sessions").fetchall()
        return sessions, conn.execute("SELECT * FROM groups").fetchall()


def cancelled() -> OpContext:
    ctx = OpContext()
    ctx.signal.cancel("test cancelled it")
    return ctx


# -- config -------------------------------------------------------------------------------------


def test_config_defaults() -> None:
    config = SQLiteConfig()
    assert (config.path, config.busy_timeout_ms, config.synchronous) == ("agentium.db", 5000, "FULL")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"path": ""},
        {"path": "   "},
        {"path": ":memory:"},
        {"path": "file:x.db?mode=memory"},
        {"path": "a\x00b"},
        {"busy_timeout_ms": -1},
        {"busy_timeout_ms": True},
        {"busy_timeout_ms": 1.5},
        {"synchronous": "OFF"},
        {"synchronous": "full"},
        {"synchronous": "FULL; DROP TABLE meta"},
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SQLiteConfig(**kwargs)  # type: ignore[arg-type]


def test_config_structures_from_plain_data(tmp_path: Path) -> None:
    config = structure({"path": str(tmp_path / "x.db"), "synchronous": "NORMAL"}, SQLiteConfig)
    assert config == SQLiteConfig(path=str(tmp_path / "x.db"), synchronous="NORMAL")


def test_both_adapters_are_registered_as_sqlite(tmp_path: Path) -> None:
    registry = PluginRegistry.load(autoload=False)
    assert not [p for p in registry.problems if "sqlite" in str(p)]
    db = tmp_path / "registered.db"
    for kind, cls in (("archive", SQLiteArchive), ("session_store", SQLiteSessionStore)):
        spec = registry.get(kind, "sqlite")
        assert spec.adapter_class is cls
        assert spec.config_class is SQLiteConfig
        assert spec.description
        adapter = spec.build(SQLiteConfig(path=str(db)))
        assert isinstance(adapter, cls)
    assert not db.exists(), "building a registered adapter must not touch storage"


# -- lazy opening, WAL, one file ----------------------------------------------------------------


async def test_construction_does_no_io_until_first_call(db: Path, config: SQLiteConfig) -> None:
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        assert not await anyio.Path(db).exists()
        assert [p async for p in anyio.Path(db.parent).iterdir()] == []
        await archive.append(KEY, [plain_group(0)], OpContext())
        assert await anyio.Path(db).exists()
        await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    finally:
        await archive.aclose()
        await store.aclose()


async def test_relative_path_is_resolved_when_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    archive = SQLiteArchive(SQLiteConfig(path="rel.db"))
    monkeypatch.chdir(tmp_path.parent)
    try:
        await archive.append(KEY, [plain_group(0)], OpContext())
    finally:
        await archive.aclose()
    assert (tmp_path / "rel.db").exists()
    assert archive.path == str(tmp_path / "rel.db")


async def test_wal_mode_schema_and_one_shared_file(
    db: Path, archive: SQLiteArchive, store: SQLiteSessionStore
) -> None:
    await archive.append(KEY, [plain_group(0)], OpContext())
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    with raw(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"meta", "sessions", "groups"} <= tables
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(SCHEMA_VERSION),)
    # One session row; the archived group and the snapshot's two resident groups are rows of their own.
    assert count_rows(db, "sessions") == 1
    assert count_rows(db, "groups") == 3
    assert archived_seqs(db, KEY) == [0]


async def test_health_reports_wal(db: Path, archive: SQLiteArchive, store: SQLiteSessionStore) -> None:
    # A health check creates no database: before the first write it says the file is not there yet.
    assert "does not exist yet" in await archive.health(OpContext())
    assert "does not exist yet" in await store.health(OpContext())
    assert not await anyio.Path(db).exists()
    await archive.append(KEY, [plain_group(0)], OpContext())
    assert "journal_mode=wal" in await archive.health(OpContext())
    assert "journal_mode=wal" in await store.health(OpContext())


async def test_newer_schema_version_is_refused(db: Path, config: SQLiteConfig) -> None:
    with raw(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        with pytest.raises(ArchiveError, match="schema version 99"):
            await archive.append(KEY, [plain_group(0)], OpContext())
        with pytest.raises(SQLiteStorageError, match="schema version 99"):
            await store.load(KEY, OpContext())
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_file_that_is_not_a_database_gives_a_typed_error(db: Path, config: SQLiteConfig) -> None:
    await anyio.Path(db).write_bytes(b"this is not a sqlite database, just text" * 100)
    archive = SQLiteArchive(config)
    try:
        with pytest.raises(ArchiveError, match="failed on"):
            await archive.append(KEY, [plain_group(0)], OpContext())
    finally:
        await archive.aclose()


# -- archive ------------------------------------------------------------------------------------


async def test_receipt_location_uses_the_encoded_key(archive: SQLiteArchive) -> None:
    key = SessionKey("a/b", "ü ser", "../x*")
    [receipt] = await archive.append(key, [plain_group(7)], OpContext())
    assert receipt.location == f"sqlite://agentium.db#{key.key()}/7"
    assert receipt.location == "sqlite://agentium.db#a%2Fb/%C3%BC%20ser/%2E%2E%2Fx%2A/7"


async def test_conflicting_batch_leaves_the_table_unchanged(db: Path, archive: SQLiteArchive) -> None:
    await archive.append(KEY, [plain_group(0), plain_group(1)], OpContext())
    with raw(db) as conn:
        before = conn.execute("SELECT * FROM groups ORDER BY id").fetchall()
    with pytest.raises(ArchiveConflictError):
        await archive.append(KEY, [plain_group(2), plain_group(3), plain_group(1, " changed")], OpContext())
    with raw(db) as conn:
        after = conn.execute("SELECT * FROM groups ORDER BY id").fetchall()
    assert after == before
    assert len(after) == 2


async def test_ids_are_bound_as_parameters(db: Path, archive: SQLiteArchive) -> None:
    key = SessionKey("t'); DROP TABLE groups; --", 'u" OR 1=1 --', "s%_")
    await archive.append(key, [rich_group(0, key)], OpContext())
    assert await archive.read_groups(SessionKey("t", "u", "s"), 0, 10, OpContext()) == []
    assert await archive.read_groups(key, 0, 10, OpContext()) == [rich_group(0, key)]
    with raw(db) as conn:
        assert conn.execute("SELECT tenant_id, user_id, session_id FROM sessions").fetchall() == [
            (key.tenant, key.user, key.session)
        ]


async def test_negative_bounds_never_widen(archive: SQLiteArchive, store: SQLiteSessionStore) -> None:
    await archive.append(KEY, [plain_group(s) for s in range(3)], OpContext())
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    # SQLite reads a negative LIMIT as "no limit"; the adapters must not.
    assert await archive.read_groups(KEY, 0, -1, OpContext()) == []
    assert await store.list_sessions(KEY.tenant, KEY.user, -1, OpContext()) == []


async def test_a_damaged_archive_row_is_reported(db: Path, archive: SQLiteArchive) -> None:
    await archive.append(KEY, [plain_group(0), plain_group(1)], OpContext())
    set_group_row(db, KEY, 1, b"{}")
    with pytest.raises(ArchiveError, match="does not match its stored digest"):
        await archive.read_groups(KEY, 0, 10, OpContext())
    assert await archive.read_groups(KEY, 0, 1, OpContext()) == [plain_group(0)]


async def test_two_archive_instances_on_one_file_see_each_others_writes(config: SQLiteConfig) -> None:
    first, second = SQLiteArchive(config), SQLiteArchive(config)
    try:
        await first.append(KEY, [plain_group(0)], OpContext())
        assert await second.read_groups(KEY, 0, 10, OpContext()) == [plain_group(0)]
        await second.append(KEY, [plain_group(1)], OpContext())
        assert await first.read_groups(KEY, 0, 10, OpContext()) == [plain_group(0), plain_group(1)]
        with pytest.raises(ArchiveConflictError):
            await second.append(KEY, [plain_group(0, " other")], OpContext())
    finally:
        await first.aclose()
        await second.aclose()


# -- session store ------------------------------------------------------------------------------


async def test_revisions_count_from_one(store: SQLiteSessionStore) -> None:
    revision = await store.save(KEY, scoped_snapshot(KEY, " 1"), None, OpContext())
    assert revision == 1
    assert await store.save(KEY, scoped_snapshot(KEY, " 2"), 1, OpContext()) == 2
    assert await store.save(KEY, scoped_snapshot(KEY, " 3"), 2, OpContext()) == 3


@pytest.mark.parametrize(
    ("revision", "data"),
    [
        (1, b"{not json"),
        (1, b'{"memory_scope": null, "unexpected": 1}'),
        (1, b"[1, 2, 3]"),
        (1, b"\xff\xfe binary junk"),
        (1, 42),
        (1, '{"memory_scope": "text, not a scope"}'),
        ("one", None),
    ],
)
async def test_a_corrupt_snapshot_row_raises_and_is_left_untouched(
    db: Path, store: SQLiteSessionStore, revision: object, data: object
) -> None:
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    with raw(db) as conn:
        # Write what a damaged or foreign writer could, the session's whole snapshot in its row.
        conn.execute(
            "UPDATE sessions SET revision = ?, inline = 1, snapshot = ? WHERE session_id = ?",
            (revision, data if data is not None else b"{}", KEY.session),
        )
    before = _all_rows(db)
    with pytest.raises(SnapshotCorruptError, match="nothing was changed"):
        await store.load(KEY, OpContext())
    assert _all_rows(db) == before


async def _attempt(
    store: SQLiteSessionStore, i: int, base: int, marker: str, results: list[tuple[int, int | None]]
) -> None:
    try:
        results.append((i, await store.save(KEY, scoped_snapshot(KEY, marker), base, OpContext())))
    except SessionConflictError:
        results.append((i, None))


async def test_two_store_instances_racing_compare_and_set_have_one_winner(config: SQLiteConfig) -> None:
    stores = [SQLiteSessionStore(config) for _ in range(3)]
    try:
        revision = await stores[0].save(KEY, scoped_snapshot(KEY, " base"), None, OpContext())
        for round_ in range(5):
            results: list[tuple[int, int | None]] = []
            async with anyio.create_task_group() as tg:
                for i in range(9):
                    tg.start_soon(_attempt, stores[i % 3], i, revision, f" r{round_} w{i}", results)
            winners = [(i, new) for i, new in results if new is not None]
            assert len(results) == 9
            assert len(winners) == 1, results
            winner, revision = winners[0]
            loaded = await stores[(winner + 1) % 3].load(KEY, OpContext())
            assert loaded is not None
            assert loaded.revision == revision
            assert loaded.snapshot == scoped_snapshot(KEY, f" r{round_} w{winner}")
    finally:
        for s in stores:
            await s.aclose()


def test_compare_and_set_holds_across_threads_and_event_loops(config: SQLiteConfig) -> None:
    """Writers in separate threads (each with its own event loop and adapter) still have one winner."""
    anyio.run(_seed_base, config)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def writer(i: int) -> None:
        async def main() -> None:
            store = SQLiteSessionStore(config)
            try:
                barrier.wait()
                await store.save(KEY, scoped_snapshot(KEY, f" t{i}"), 1, OpContext())
                outcomes.append("won")
            except SessionConflictError:
                outcomes.append("conflict")
            finally:
                await store.aclose()

        anyio.run(main)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "won"]


async def _seed_base(config: SQLiteConfig) -> None:
    store = SQLiteSessionStore(config)
    try:
        assert await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext()) == 1
    finally:
        await store.aclose()


# -- cancellation, deadlines, locks ---------------------------------------------------------------


async def test_a_cancelled_signal_refuses_work_and_writes_nothing(
    db: Path, archive: SQLiteArchive, store: SQLiteSessionStore
) -> None:
    with pytest.raises(OperationCancelledError, match="test cancelled it"):
        await archive.append(KEY, [plain_group(0)], cancelled())
    with pytest.raises(OperationCancelledError):
        await store.save(KEY, scoped_snapshot(KEY), None, cancelled())
    assert not await anyio.Path(db).exists(), "a refused call must not even open the database"
    await archive.append(KEY, [plain_group(0)], OpContext())
    with pytest.raises(OperationCancelledError):
        await archive.append(KEY, [plain_group(1)], cancelled())
    with pytest.raises(OperationCancelledError):
        await store.save(KEY, scoped_snapshot(KEY), None, cancelled())
    assert archived_seqs(db, KEY) == [0]
    assert snapshot_row(db, KEY) is None


# Runs for tens of seconds unless interrupted, so a broken interrupt fails the
# time assertions instead of hanging the suite (a worker thread cannot be killed).
_ENDLESS = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) "
    "SELECT count(*) FROM c"
)


async def test_a_deadline_interrupts_a_running_statement(archive: SQLiteArchive) -> None:
    started = time.monotonic()
    with pytest.raises(OperationCancelledError, match="deadline"):
        await archive.run(OpContext.with_timeout(0.3), "endless", lambda c: c.execute(_ENDLESS).fetchone())
    assert time.monotonic() - started < 10
    # The adapter is still usable afterwards.
    await archive.append(KEY, [plain_group(0)], OpContext())


async def test_a_signal_cancelled_mid_statement_interrupts_it(archive: SQLiteArchive) -> None:
    ctx = OpContext()
    # Cancelled from another thread, as a host's watchdog would.
    timer = threading.Timer(0.3, ctx.signal.cancel, args=("stop now",))
    timer.start()
    try:
        started = time.monotonic()
        with pytest.raises(OperationCancelledError, match="stop now"):
            await archive.run(ctx, "endless", lambda c: c.execute(_ENDLESS).fetchone())
        assert time.monotonic() - started < 10
    finally:
        timer.cancel()
    await archive.append(KEY, [plain_group(0)], OpContext())


async def test_anyio_cancellation_interrupts_the_worker_thread(archive: SQLiteArchive) -> None:
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await archive.run(OpContext(), "endless", lambda c: c.execute(_ENDLESS).fetchone())
    assert scope.cancelled_caught, "the caller's cancel scope must see its own cancellation"
    assert time.monotonic() - started < 10
    await archive.append(KEY, [plain_group(0)], OpContext())


async def test_a_held_lock_fails_within_the_deadline(db: Path, store: SQLiteSessionStore) -> None:
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    blocker = raw(db)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(OperationCancelledError):
            await store.save(KEY, scoped_snapshot(KEY, " x"), 1, OpContext.with_timeout(0.4))
        # busy_timeout is 10 s; the deadline must cut the wait short.
        assert time.monotonic() - started < 5
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.save(KEY, scoped_snapshot(KEY, " x"), 1, OpContext()) == 2


@pytest.mark.parametrize("wal", [True, False], ids=["schema-wait", "wal-switch-wait"])
async def test_a_held_lock_fails_the_first_call_within_the_deadline(
    db: Path, config: SQLiteConfig, wal: bool
) -> None:
    """Opening (WAL switch, schema) waits for another writer too: the first call's deadline bounds it."""
    blocker = sqlite3.connect(db, isolation_level=None)
    if wal:  # a WAL file without the tables: creating them needs the write lock
        blocker.execute("PRAGMA journal_mode = WAL")
    # On a WAL file another writer's lock; on a new rollback-journal file an exclusive one.
    blocker.execute("BEGIN IMMEDIATE" if wal else "BEGIN EXCLUSIVE")
    blocker.execute("CREATE TABLE IF NOT EXISTS other (x)")
    store = SQLiteSessionStore(config)  # busy_timeout is 10 s
    try:
        started = time.monotonic()
        with pytest.raises(OperationCancelledError):
            await store.load(KEY, OpContext.with_timeout(0.4))
        assert time.monotonic() - started < 5
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    try:
        assert await store.load(KEY, OpContext()) is None  # opens once the lock is gone
    finally:
        await store.aclose()


async def test_a_file_that_failed_to_open_is_opened_afresh_once_replaced(
    db: Path, config: SQLiteConfig
) -> None:
    """An open that failed leaves no connection behind: a repaired file is used by the next call."""
    await anyio.Path(db).write_bytes(b"this is not a SQLite database " * 200)
    store = SQLiteSessionStore(config)
    try:
        with pytest.raises(SQLiteStorageError):
            await store.load(KEY, OpContext())
        good = db.with_name("good.db")
        other = SQLiteSessionStore(SQLiteConfig(path=str(good)))
        await other.save(KEY, scoped_snapshot(KEY), None, OpContext())
        await other.aclose()
        os.replace(good, db)
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == 1
    finally:
        await store.aclose()


def _bad_calls(archive: SQLiteArchive, store: SQLiteSessionStore) -> list[Any]:
    """Calls with one bad argument each (what a host could pass past the type hints)."""
    snap = scoped_snapshot(KEY, " x")
    ctx = OpContext()
    return [
        lambda: archive.append("acme/ana/s1", [plain_group(0)], ctx),
        lambda: archive.append(KEY, None, ctx),
        lambda: archive.append(KEY, [None], ctx),
        lambda: archive.append(KEY, [plain_group(0)], None),
        lambda: archive.read_groups(KEY, "0", 5, ctx),
        lambda: archive.read_groups(KEY, 0, None, ctx),
        lambda: archive.read_groups(None, 0, 5, ctx),
        lambda: store.load("acme/ana/s1", ctx),
        lambda: store.load(KEY, None),
        lambda: store.save(KEY, None, None, ctx),
        lambda: store.save(None, snap, None, ctx),
        lambda: store.save(KEY, snap, "1", ctx),
        lambda: store.save(KEY, snap, True, ctx),
        lambda: store.commit_with_archive(archive, KEY, [None], snap, None, ctx),
        lambda: store.commit_with_archive(archive, KEY, [plain_group(0)], None, None, ctx),
        lambda: store.list_sessions("acme", "ana", "5", ctx),
        lambda: store.list_sessions("acme", "ana", None, ctx),
        lambda: store.list_sessions(["acme"], "ana", 5, ctx),
        lambda: store.list_sessions("acme", "ana", 5, ctx, after=5),
        # Ids no key holds: a lone surrogate escaped from sqlite3's binding as a bare UnicodeEncodeError.
        lambda: store.list_sessions("\ud800", "ana", 5, ctx),
        lambda: store.list_sessions("acme", "\udfff", 5, ctx),
        lambda: store.list_sessions("acme", "ana", 5, ctx, after="s\ud800"),
    ]


async def test_listing_refuses_ids_no_key_holds_typed_before_reading(
    db: Path, store: SQLiteSessionStore
) -> None:
    # A NUL or empty id listed nothing (as if the user had no session), a lone surrogate escaped as a
    # bare UnicodeEncodeError; each is InvalidIdError now, as the S3 store's, and nothing is touched.
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    before = _all_rows(db)
    for tenant, user, after in (
        ("", KEY.user, None),
        (KEY.tenant, "x\x00", None),
        ("\ud800", KEY.user, None),
        (KEY.tenant, KEY.user, "\udfff"),
        (KEY.tenant, KEY.user, ""),
    ):
        with pytest.raises(InvalidIdError):
            await store.list_sessions(tenant, user, 10, OpContext(), after=after)
    assert _all_rows(db) == before


async def test_bad_arguments_are_typed_errors_and_change_nothing(
    db: Path, archive: SQLiteArchive, store: SQLiteSessionStore
) -> None:
    # Each used to raise a bare TypeError or AttributeError (or a misleading conflict).
    calls = _bad_calls(archive, store)
    for call in calls:
        with pytest.raises(InvalidArgumentError):
            await call()
    assert not await anyio.Path(db).exists(), "refused before the database was even opened"


async def test_a_damaged_session_id_is_reported_not_made_up(db: Path, store: SQLiteSessionStore) -> None:
    # str() of a BLOB id listed a session "b's1'" that never existed.
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    with raw(db) as conn:
        conn.execute("UPDATE sessions SET session_id = CAST(session_id AS BLOB)")
    with pytest.raises(SnapshotCorruptError, match="damaged"):
        await store.list_sessions(KEY.tenant, KEY.user, 10, OpContext())
    # An id no key holds (a NUL) was listed, for no load and no next page's ``after`` to take.
    with raw(db) as conn:
        conn.execute("UPDATE sessions SET session_id = ?", ("s\x001",))
    before = _all_rows(db)
    with pytest.raises(SnapshotCorruptError, match="no key holds"):
        await store.list_sessions(KEY.tenant, KEY.user, 10, OpContext())
    assert _all_rows(db) == before


async def _first_read(db: Path, kind: str) -> object:
    """The first call of a fresh adapter of ``kind`` on ``db``: a read.

    It must succeed, so its deadline is generous: a read that waited for the
    other writer's lock would still fail, at the 10 s busy timeout ("locked").
    """
    ctx = OpContext.with_timeout(30.0)
    if kind == "session store":
        store = SQLiteSessionStore(SQLiteConfig(path=str(db), busy_timeout_ms=10_000))
        try:
            return await store.load(KEY, ctx)
        finally:
            await store.aclose()
    if kind == "recall":
        recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), busy_timeout_ms=10_000))
        try:
            session = await recall.open(Scope("acme", "alice", "s1"), RecallLimits(), ctx)
            return await session.discover("anything", 5, ctx)
        finally:
            await recall.aclose()
    memory = SQLiteMemoryStore(SQLiteConfig(path=str(db), busy_timeout_ms=10_000))
    try:
        return await memory.list_facts(MemoryScope("acme", "alice"), 5, ctx)
    finally:
        await memory.aclose()


@pytest.mark.parametrize("kind", ["session store", "recall", "memory"])
async def test_a_fresh_adapter_reads_while_another_process_writes(db: Path, kind: str) -> None:
    """WAL lets readers proceed while a writer holds the lock; a set-up file is opened with reads only."""
    await _first_read(db, kind)  # creates the tables
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    blocker.execute("CREATE TABLE IF NOT EXISTS other (x)")
    try:
        found = await _first_read(db, kind)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert found in (None, [])


async def test_a_held_lock_past_the_busy_timeout_is_a_storage_error(db: Path, config: SQLiteConfig) -> None:
    store = SQLiteSessionStore(attrs.evolve(config, busy_timeout_ms=200))
    try:
        await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
        blocker = raw(db)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(SQLiteStorageError, match="locked"):
                await store.save(KEY, scoped_snapshot(KEY, " x"), 1, OpContext())
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == 1
    finally:
        await store.aclose()


async def test_a_failed_commit_leaves_the_connection_usable(db: Path, archive: SQLiteArchive) -> None:
    await archive.append(KEY, [plain_group(0)], OpContext())
    with raw(db) as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
        )

    def violate_at_commit(conn: sqlite3.Connection) -> None:
        # A deferred foreign key is checked at COMMIT, which then fails with the
        # transaction still open.
        with immediate_transaction(conn):
            conn.execute("INSERT INTO child (parent_id) VALUES (42)")

    with pytest.raises(ArchiveError, match="FOREIGN KEY"):
        await archive.run(OpContext(), "bad commit", violate_at_commit)
    assert count_rows(db, "child") == 0
    await archive.append(KEY, [plain_group(1)], OpContext())
    assert archived_seqs(db, KEY) == [0, 1]


# -- closing ------------------------------------------------------------------------------------


async def test_aclose_is_idempotent_and_later_calls_are_refused(
    db: Path, archive: SQLiteArchive, store: SQLiteSessionStore
) -> None:
    await archive.append(KEY, [plain_group(0)], OpContext())
    await store.save(KEY, scoped_snapshot(KEY), None, OpContext())
    for adapter in (archive, store):
        await adapter.aclose()
        await adapter.aclose()
    with pytest.raises(ArchiveError, match="closed"):
        await archive.read_groups(KEY, 0, 1, OpContext())
    with pytest.raises(SQLiteStorageError, match="closed"):
        await store.load(KEY, OpContext())
    # The connection is really closed: the WAL is checkpointed and removed on last close.
    assert not await anyio.Path(f"{db}-wal").exists()


async def test_aclose_before_use_creates_nothing(db: Path, config: SQLiteConfig) -> None:
    archive = SQLiteArchive(config)
    await archive.aclose()
    await archive.aclose()
    assert not await anyio.Path(db).exists()
