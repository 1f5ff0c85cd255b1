"""Disk-limit worker: N small fsynced SQLite commits per "turn", nothing else.

The floor under any durable turn on this machine: a plain ``sqlite3`` loop,
WAL and ``synchronous=FULL`` like every system measured, doing ``--commits``
transactions per turn, each one ``INSERT`` of a small row (an id and 64
bytes) and a ``COMMIT``. N is Agentium's commits per turn, counted by the
parent in the same run. There is no history to seed.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence

import common

INCLUDES = "N x (INSERT one small row; COMMIT) on a plain sqlite3 connection, WAL + synchronous=FULL"


class DiskLimit:
    """A table and a connection; a turn is ``commits`` single-row transactions."""

    includes = INCLUDES

    def __init__(self, db_path: str, commits: int) -> None:
        self.versions = {"sqlite": sqlite3.sqlite_version}
        self._commits = commits
        self._conn = sqlite3.connect(db_path, isolation_level=None)
        common.durable_wal(self._conn)
        self._conn.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        self._payload = b"x" * 64

    def _turn(self, i: int) -> None:
        for _ in range(self._commits):
            self._conn.execute("BEGIN")
            self._conn.execute("INSERT INTO rows (data) VALUES (?)", (self._payload,))
            self._conn.execute("COMMIT")

    def run(self, n: int, max_seconds: float) -> common.TurnLog:
        """Up to ``n`` timed turns of ``commits`` commits each."""
        return common.timed_loop(self._turn, 0, n, max_seconds)

    def connections(self) -> Sequence[sqlite3.Connection]:
        """The one connection."""
        return [self._conn]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def main() -> None:
    """Serve timed turns (``--seed`` is a no-op: there is no history)."""
    args = common.arguments(__doc__.splitlines()[0])
    if args.seed:
        common.seed_all(args.seed, lambda db, n: {})
        return
    common.serve(lambda: DiskLimit(args.db, args.commits))


if __name__ == "__main__":
    sys.exit(main())
