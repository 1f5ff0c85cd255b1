"""Adapters sharing one SQLite file leave it whole when they close together.

SQLite copies the WAL into the database file and removes it only when the
closing connection is the file's last. The runtime closes its adapters
concurrently, and two connections closed at the same moment can each still see
the other: then neither checkpoints, the ``-wal`` file outlives the process and
the database file alone lacks every commit (a copy of it would be missing
them). This was seen as a flaky CLI test: after ``agentium run`` the file was
sometimes still 4 KiB with its WAL beside it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio

from agentium_harness import OpContext, SessionKey, SourceOwner
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

ROUNDS = 60
KEY = SessionKey("t", "u", "s")


def _open_and_close_together(path: Path) -> None:
    adapters = [
        SQLiteArchive(SQLiteConfig(path=str(path))),
        SQLiteSessionStore(SQLiteConfig(path=str(path))),
        SQLiteRecallStore(SQLiteRecallConfig(path=str(path))),
    ]
    archive, store, recall = adapters

    async def use() -> None:
        # Every adapter opens its connection (creating the file and its tables).
        assert await archive.read_groups(KEY, 0, 1, OpContext.with_timeout(30.0)) == []
        assert await store.load(KEY, OpContext.with_timeout(30.0)) is None
        assert await recall.delete_document(SourceOwner("t"), "doc", OpContext.with_timeout(30.0)) is False

    anyio.run(use)
    together = threading.Barrier(len(adapters))

    def close(adapter: SQLiteArchive | SQLiteSessionStore | SQLiteRecallStore) -> None:
        async def main() -> None:
            together.wait(timeout=30)
            await adapter.aclose()

        anyio.run(main)

    threads = [threading.Thread(target=close, args=(adapter,)) for adapter in adapters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(adapter.closed for adapter in adapters)


def test_adapters_closed_together_on_one_file_leave_no_wal_behind(tmp_path: Path) -> None:
    left = []
    for n in range(ROUNDS):
        path = tmp_path / f"state-{n}.db"
        _open_and_close_together(path)
        if (tmp_path / f"state-{n}.db-wal").exists():
            left.append(n)
    assert left == [], f"{len(left)} of {ROUNDS} files kept their WAL after every adapter closed"
    # What the adapters committed (their tables) is in the database file itself: more than the
    # one header page WAL mode writes before anything is checkpointed.
    assert (tmp_path / "state-0.db").stat().st_size > 4096
