"""The peer benchmark counts every commit a turn makes, on connections opened while it counts too.

The OpenAI Agents SDK's ``SQLiteSession`` opens one connection per worker
thread, and asyncio's default executor starts a new thread whenever none is
idle at the moment a call is submitted: a count that traced only the
connections that existed when it began missed the commits made on a newer
one (CI once printed 0.50 commits per turn for the SDK).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

WORKERS = Path(__file__).resolve().parents[1] / "benchmarks" / "_peer_workers"


@pytest.fixture(scope="module")
def common() -> Iterator[ModuleType]:
    # The workers import ``common`` as a top-level module, as they do when run as scripts.
    sys.path.insert(0, str(WORKERS))
    sys.modules.pop("common", None)
    try:
        import common as module

        assert Path(module.__file__ or "").parent == WORKERS
        yield module
    finally:
        sys.path.remove(str(WORKERS))
        for name in ("common", "openai_agents_worker"):
            sys.modules.pop(name, None)


class _NewConnectionEachTurn:
    """A system that opens a fresh connection for every turn and commits on it once."""

    def __init__(self, common: ModuleType, db: Path, follow: bool) -> None:
        self._common = common
        self._db = db
        self._follow = follow
        self._conns: list[sqlite3.Connection] = []
        first = self._open()
        first.execute("CREATE TABLE t (x)")

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._db, isolation_level=None)
        if self._follow:
            self._common.follow_connection(conn)
        self._conns.append(conn)
        return conn

    def run(self, n: int, max_seconds: float) -> object:
        def turn(k: int) -> None:
            conn = self._open()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t VALUES (?)", (k,))
            conn.execute("COMMIT")

        return self._common.timed_loop(turn, 0, n, max_seconds)

    def connections(self) -> Sequence[sqlite3.Connection]:
        return list(self._conns)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


@pytest.mark.parametrize("follow", [True, False])
def test_commits_on_a_connection_opened_during_the_count_are_counted_when_followed(
    common: ModuleType, tmp_path: Path, follow: bool
) -> None:
    system = _NewConnectionEachTurn(common, tmp_path / "db.sqlite", follow)
    try:
        counted = common.count_commits(system, 4)
    finally:
        system.close()
    # Unfollowed, the count sees none of them: what the SDK worker did before it followed its connections.
    assert counted == (1.0 if follow else 0.0)
    assert common._COUNTING[0] is None  # the count does not outlive itself


def test_the_agents_sdk_worker_counts_one_commit_per_turn_on_a_new_worker_thread(
    common: ModuleType, tmp_path: Path
) -> None:
    # The SDK comes with the openai-agents integration's test extra, which the README's test
    # command installs: missing, this fails (never skips), as the backend tests do.
    import agents.memory.sqlite_session  # noqa: F401
    import openai_agents_worker as worker

    for shape in ("growing", "held"):
        db = str(tmp_path / f"{shape}.sqlite")
        asyncio.run(worker._seed(db, 10))
        system = worker.OpenAIAgents(db, 10, shape)
        try:
            system.run(1, 1.0)  # warm-up: the session's first connection exists
            # A fresh executor: every call of the count runs on a thread with no connection yet.
            system._loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
            assert common.count_commits(system, 3) == 1.0, shape
        finally:
            system.close()
