"""First open of a SQLite database file while another connection is writing it.

The archive and the session store default to the same file and each opens its
own connection lazily, switching the file to WAL on first use. On a file still
in its initial rollback-journal mode, SQLite refuses that switch at once with
SQLITE_BUSY while another connection holds a write lock (its busy handler does
not wait for the lock upgrade), so the adapter must retry it within the busy
timeout. Without the retry, two adapters or processes opening a new database
together failed with "database is locked" a few percent of the time; the
history state machine found it, and this test pins the scenario down
deterministically. The same collision on a file already in WAL mode is the
control: SQLite waits by itself there.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

sqlite = pytest.importorskip("agentium_harness.adapters.sqlite", reason="needs the SQLite adapters")

from agentium_harness._ports import OpContext  # noqa: E402
from agentium_harness._scope import SessionKey  # noqa: E402

KEY = SessionKey("acme", "alice", "a/b")
HOLD_S = 0.3

ADAPTERS = {
    "session_store": lambda a: a.load(KEY, OpContext.with_timeout(30)),
    "archive": lambda a: a.read_groups(KEY, 0, 1, OpContext.with_timeout(30)),
}


def _adapter(kind: str, path: Path) -> Any:
    config_cls = getattr(sqlite, "SQLiteConfig", None)
    cls = sqlite.SQLiteSessionStore if kind == "session_store" else sqlite.SQLiteArchive
    if config_cls is None:
        config_cls = (
            sqlite.SQLiteSessionStoreConfig if kind == "session_store" else sqlite.SQLiteArchiveConfig
        )
    return cls(config_cls(path=str(path)))


def _first_call_while_locked(kind: str, path: Path, *, wal: bool) -> tuple[str | None, float]:
    """Another connection writes ``path`` for HOLD_S seconds; the adapter's first call runs meanwhile.

    Answers the call's error (``None``) and how long after the writer released its lock the call
    ended: negative when the call did not wait for it. Measured from the release, not from the call's
    start: a loaded machine may wake this thread late after the lock was taken, and the time the call
    then waited is shorter than HOLD_S although it waited all the same.
    """
    locked, done = threading.Event(), threading.Event()
    released: list[float] = []

    def writer() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            if wal:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS someone_elses (x)")
            locked.set()
            done.wait(HOLD_S)
            released.append(time.monotonic())  # the lock goes with the COMMIT below, not before
            conn.execute("COMMIT")
        finally:
            conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    assert locked.wait(30)

    async def main() -> str | None:
        adapter = _adapter(kind, path)
        try:
            await ADAPTERS[kind](adapter)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            await adapter.aclose()
        return None

    try:
        error = anyio.run(main)
        ended = time.monotonic()
    finally:
        done.set()
        thread.join()
    return error, ended - released[0]


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_first_open_of_a_new_file_waits_for_another_writer(kind: str, tmp_path: Path) -> None:
    """The WAL switch on a new file is retried while another connection writes, within the busy timeout."""
    error, after_release = _first_call_while_locked(kind, tmp_path / "agentium.db", wal=False)
    assert error is None, f"first call failed ({after_release:+.3f}s from the writer's release): {error}"
    assert after_release >= 0, after_release


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_first_open_of_a_wal_file_waits_for_another_writer(kind: str, tmp_path: Path) -> None:
    """Control: the same collision on a file already in WAL mode waits for the lock and succeeds."""
    error, after_release = _first_call_while_locked(kind, tmp_path / "agentium.db", wal=True)
    assert error is None, error
    # It really had to wait for the other writer (so the lock in this test is real).
    assert after_release >= 0, after_release
