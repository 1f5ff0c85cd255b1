"""``testing.raw_files`` reads the files it is given without dropping this process's SQLite locks.

POSIX advisory locks belong to a process and a file: closing *any*
descriptor of the file in the process drops every lock the process holds on
it, the ones its SQLite connections hold included. ``raw_files`` opened and
closed each file in the test's own process, so a contract test reading a
store's raw bytes while the store held a write transaction left the database
unlocked: another process could then write beside that transaction
(``database_bytes`` already read in a child process for this reason).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from agentium_harness.testing import raw_files

#: Run in a child: can it take the write lock on the database at once? Prints "locked" or "free".
_TRY_WRITE = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
    "try:\n"
    "    conn.execute('BEGIN IMMEDIATE')\n"
    "    conn.execute('ROLLBACK')\n"
    "    print('free')\n"
    "except sqlite3.OperationalError:\n"
    "    print('locked')\n"
)


def _another_process_may_write(path: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", _TRY_WRITE, str(path)], capture_output=True, check=True, text=True, timeout=30
    )
    return done.stdout.strip() == "free"


def test_raw_files_keeps_the_write_lock_this_process_holds(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.execute("INSERT INTO t VALUES ('tangerine-42')")
        conn.execute("BEGIN IMMEDIATE")  # this process's write lock (a POSIX lock on the file)
        conn.execute("INSERT INTO t VALUES ('kiwi-7')")
        assert not _another_process_may_write(path)  # the lock holds: the test can fail
        raw = raw_files(str(path), f"{path}-wal", f"{path}-journal")()
        assert isinstance(raw, bytes) and b"tangerine-42" in raw  # it read the file (and its journal)
        assert not _another_process_may_write(path)  # and the lock still holds
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert _another_process_may_write(path)


def test_raw_files_reads_each_file_in_order_and_a_missing_one_as_empty(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"one\x00")
    second.write_bytes(b"two")
    assert raw_files(str(first), str(tmp_path / "missing"), str(second))() == b"one\x00two"
    assert raw_files(str(tmp_path / "missing"))() == b""
