"""An erasure on the SQLite adapters that says ``removed`` leaves no byte of the erased text in the files.

``secure_delete`` zeroes a deleted row where it lies, but B-tree rebalancing
(a snapshot or a fact rewritten at another size, a page split) leaves copies
of rows it moved in the unused space of other pages; the erasure rebuilds the
file (``VACUUM``) before it empties the log, so none survives.
"""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path

import pytest

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    MemoryFact,
    MemoryScope,
    Message,
    OperatorAttestation,
    PhysicalErasure,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import _sqlite_sql
from agentium_harness.adapters._sqlite_sql import scrub_log
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")


def _four_stores(db: Path) -> HarnessRuntime:
    """A runtime whose archive, session store, recall and memory stores all keep ``db``."""
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        recall=SQLiteRecallStore(SQLiteRecallConfig(path=str(db))),
        memory=SQLiteMemoryStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def test_a_user_erasure_leaves_no_copy_of_rows_sqlite_moved_while_they_lived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "agentium.db"
    # Every rebuild (VACUUM) of the file: it rewrites the whole file under the write lock.
    rebuilds: list[str] = []
    rebuild = _sqlite_sql._rebuild_file

    def counted(conn: sqlite3.Connection, stop: float) -> str:
        rebuilds.append(conn.execute("PRAGMA database_list").fetchone()[2])
        return rebuild(conn, stop)

    monkeypatch.setattr(_sqlite_sql, "_rebuild_file", counted)
    runtime = _four_stores(db)
    rng = random.Random(5)
    async with runtime:
        memory = runtime.memory
        assert memory is not None
        # Two users' rows interleaved on the same pages, of varied sizes: snapshots are rewritten
        # at another size on every append, pages split; rows move while they live.
        for n in range(200):
            user = ("ana", "bob")[n % 2]
            pad = "p" * rng.randint(10, 300)
            await runtime.append(
                VerifiedIdentity("acme", user, "sso"),
                f"s{n % 3}",
                [Message(Role.USER, f"{user}mark{n}z {pad}")],
            )
            await memory.remember(MemoryFact(MemoryScope("acme", user), f"{user}fact{n}z {pad}"))
        # Every word is in the file or its log before the erasure (the check reads the right bytes).
        assert len(set(re.findall(rb"ana(?:mark|fact)\d+z", database_bytes(db)))) == 200
        rebuilds.clear()
        result = await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        record = result.tombstone
        assert record is not None
        assert [s.physical for s in record.stores] == [PhysicalErasure.REMOVED] * len(record.stores)
        # Four stores on one file, each erasing something: the file is rebuilt once, after all of them.
        assert [s.role for s in record.stores] == ["recall", "memory", "archive", "session_store"]
        assert all(s.counts for s in record.stores)
        assert rebuilds == [str(db)]
    data = database_bytes(db)
    assert re.findall(rb"ana(?:mark|fact)\d+z", data) == []
    # The neighbour's rows are all still there (the check reads the right bytes).
    assert len(set(re.findall(rb"bob(?:mark|fact)\d+z", data))) == 200


def test_an_erase_the_file_cannot_be_rebuilt_for_says_unreferenced(tmp_path: Path) -> None:
    # A rebuild that cannot finish (here: no time left) must not be reported as a removal.
    db = tmp_path / "plain.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(500)])
        conn.execute("PRAGMA busy_timeout = 1234")
        physical, detail = scrub_log(conn, time_left=0.0)
        assert physical is PhysicalErasure.UNREFERENCED and "VACUUM" in detail
        # The connection's busy timeout is as it was.
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (1234,)
        assert scrub_log(conn) == (PhysicalErasure.REMOVED, "")
    finally:
        conn.close()


def test_a_file_over_the_rebuild_bound_is_not_rebuilt_and_the_erase_says_unreferenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rebuilding rewrites the whole file under the write lock: past the bound it is left for a
    # maintenance window, and the report says so rather than claim a removal.
    db = tmp_path / "big.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(500)])
        conn.execute("DELETE FROM t WHERE rowid % 2 = 0")
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        monkeypatch.setattr(_sqlite_sql, "MAX_REBUILD_BYTES", 64 * 1024)
        physical, detail = scrub_log(conn, time_left=5.0)
        assert physical is PhysicalErasure.UNREFERENCED and "MAX_REBUILD_BYTES" in detail
        assert conn.execute("PRAGMA page_count").fetchone() == (pages,)  # not rebuilt: as large
        monkeypatch.setattr(_sqlite_sql, "MAX_REBUILD_BYTES", 64 * 1024 * 1024)
        assert scrub_log(conn, time_left=5.0) == (PhysicalErasure.REMOVED, "")
        assert conn.execute("PRAGMA page_count").fetchone()[0] < pages  # rebuilt: the half-empty pages packed
    finally:
        conn.close()


async def test_a_file_the_one_clean_up_cannot_rebuild_is_reported_for_every_store_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The stores on one file erase without cleaning up and the engine cleans the file up once:
    # what that clean-up could not do is in the record of every store on the file, not lost.
    db = tmp_path / "agentium.db"
    runtime = _four_stores(db)
    async with runtime:
        for n in range(6):
            await runtime.append(VerifiedIdentity("acme", "ana", "sso"), "s1", [Message(Role.USER, f"m{n}")])
        monkeypatch.setattr(_sqlite_sql, "MAX_REBUILD_BYTES", 1024)
        result = await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
    record = result.tombstone
    assert record is not None and len(record.stores) == 4
    for store in record.stores:
        assert store.physical is PhysicalErasure.UNREFERENCED and "MAX_REBUILD_BYTES" in store.detail
    assert any("not fully cleaned up" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
