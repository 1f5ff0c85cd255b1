"""The built-in adapters run the same contract suites that third-party adapters run.

Each also provides the corruption hooks: they rewrite stored bytes behind the
adapter's back (directly in the dict, or with :mod:`sqlite3` in the file).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import HistoryArchive
from agentium_harness._ports.sessions import SessionStore
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing import (
    ArchiveContract,
    CorruptStored,
    RawStorage,
    SessionStoreContract,
    raw_files,
    scoped_snapshot,
)
from agentium_harness.testing.erasure_contract import marker, tail
from agentium_harness.testing.sqlite_rows import (
    group_row,
    set_group_row,
    set_snapshot_row,
    snapshot_row,
    with_inflated_rows,
)

Transform = Callable[[bytes], bytes]


class TestInMemoryArchive(ArchiveContract):
    @pytest.fixture
    def archive(self) -> InMemoryArchive:
        return InMemoryArchive()

    @pytest.fixture
    def corrupt_archived_group(self, archive: InMemoryArchive) -> CorruptStored:
        def corrupt(key: SessionKey, seq: int, transform: Transform) -> None:
            stored = archive.raw(key, seq)
            if stored is None:
                raise LookupError(f"no stored group {seq} of {key!r}")
            data, digest = stored
            archive.put_raw(key, seq, transform(data), digest)

        return corrupt

    @pytest.fixture
    def raw_storage(self, archive: InMemoryArchive) -> RawStorage:
        # The in-process "backend" is the archive's own dict of stored bytes.
        return lambda: b"".join(data for groups in archive._groups.values() for data, _ in groups.values())


class TestInMemorySessionStore(SessionStoreContract):
    @pytest.fixture
    def session_store(self) -> InMemorySessionStore:
        return InMemorySessionStore()

    @pytest.fixture
    def corrupt_snapshot(self, session_store: InMemorySessionStore) -> CorruptStored:
        def corrupt(key: SessionKey, transform: Transform) -> None:
            row = session_store.raw(key)
            if row is None:
                raise LookupError(f"no stored snapshot of {key!r}")
            session_store.put_raw(key, row[0], transform(row[1]))

        return corrupt

    @pytest.fixture
    def raw_storage(self, session_store: InMemorySessionStore) -> RawStorage:
        return lambda: b"".join(data for _, data in session_store._rows.values())


@pytest.fixture
def db_config(tmp_path: Path) -> SQLiteConfig:
    return SQLiteConfig(path=str(tmp_path / "contract.db"), busy_timeout_ms=30_000)


@pytest.fixture
def db_files(db_config: SQLiteConfig) -> RawStorage:
    # The database file and its write-ahead log: erased rows must be in neither. Group rows may be
    # stored deflated (schema version 4): their text is shown as well, so a copy left is found.
    files = raw_files(db_config.path, db_config.path + "-wal", db_config.path + "-journal")

    def read() -> bytes:
        raw = files()
        assert isinstance(raw, bytes)  # raw_files reads synchronously
        return with_inflated_rows(raw)

    return read


class TestSQLiteArchive(ArchiveContract):
    @pytest.fixture
    async def archive(self, db_config: SQLiteConfig) -> AsyncIterator[HistoryArchive]:
        adapter = SQLiteArchive(db_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_archive(self, db_config: SQLiteConfig) -> Callable[[], HistoryArchive]:
        return lambda: SQLiteArchive(db_config)

    @pytest.fixture
    def raw_storage(self, db_files: RawStorage) -> RawStorage:
        return db_files

    @pytest.fixture
    def corrupt_archived_group(self, db_config: SQLiteConfig) -> CorruptStored:
        def corrupt(key: SessionKey, seq: int, transform: Transform) -> None:
            # The stored digest is left alone, as a flipped bit on disk would leave it.
            _, data = group_row(db_config.path, key, seq)
            set_group_row(db_config.path, key, seq, transform(data))

        return corrupt


class TestSQLiteSessionStore(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, db_config: SQLiteConfig) -> AsyncIterator[SessionStore]:
        adapter = SQLiteSessionStore(db_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_session_store(self, db_config: SQLiteConfig) -> Callable[[], SessionStore]:
        return lambda: SQLiteSessionStore(db_config)

    @pytest.fixture
    def raw_storage(self, db_files: RawStorage) -> RawStorage:
        return db_files

    @pytest.fixture
    def corrupt_snapshot(self, db_config: SQLiteConfig) -> CorruptStored:
        def corrupt(key: SessionKey, transform: Transform) -> None:
            found = snapshot_row(db_config.path, key)
            if found is None:
                raise LookupError(f"no stored snapshot of {key!r}")
            set_snapshot_row(db_config.path, key, transform(found[1]))

        return corrupt


@pytest.mark.anyio
async def test_the_sqlite_raw_storage_shows_what_a_deflated_row_holds(
    db_config: SQLiteConfig, db_files: RawStorage
) -> None:
    # The byte-level erasure tests look for a marker in raw_storage. The adapters store a group
    # deflated when that is smaller (schema version 4): a copy left in such a row must still show,
    # or 'the erased text is nowhere' would hold with the text still on disk.
    key = SessionKey("tenant-1", "user-1", "session-1")
    text = marker("deflated")
    store = SQLiteSessionStore(db_config)
    try:
        await store.save(key, scoped_snapshot(key, text), None, OpContext())
    finally:
        await store.aclose()
    with sqlite3.connect(db_config.path) as conn:  # keep only the deflated rows, zeroing the others
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("DELETE FROM groups WHERE hex(substr(data, 1, 1)) = '7B'")
        (left,) = conn.execute("SELECT count(*) FROM groups").fetchone()
    assert left == 1  # the snapshot's rich group, stored deflated
    with sqlite3.connect(db_config.path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = db_files()
    assert isinstance(raw, bytes)
    assert tail(text) in raw
