"""The SQLite session store answers a load without a worker thread only when nothing changed (issue 28).

A load of a session whose row this store wrote or read last, with no commit
by any other connection since (``PRAGMA data_version`` unchanged), hands back
the snapshot it already has. Every other case must read the row: another
store object on the file, another process, and a save of its own that raised
(it may have committed: this connection's own commits never change its
data_version).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import attrs
import pytest

from agentium_harness import EraseTarget, OpContext, OperationCancelledError, SessionKey
from agentium_harness.adapters.sqlite import (
    SQLiteArchive,
    SQLiteConfig,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.plugin_api import seal_snapshot
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

T = TypeVar("T")
KEY = SessionKey("tenant", "user", "session")


class CountingStore(SQLiteSessionStore):
    """Counts the calls that went to a worker thread, and can make the next save raise after it ran."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.threaded: list[str] = []
        self.fail_after_save = False

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        self.threaded.append(operation)
        value = await super().run(ctx, operation, work)
        if operation == "session save" and self.fail_after_save:
            self.fail_after_save = False
            # The transaction committed; the caller is told it failed (a COMMIT whose answer was lost).
            raise SQLiteStorageError("session save: the answer was lost")
        return value


def _config(tmp_path: Path) -> SQLiteConfig:
    return SQLiteConfig(path=str(tmp_path / "agentium.db"))


def _next(marker: str) -> Any:
    """A different sealed snapshot of ``KEY`` (its groups carry ``marker``)."""
    return seal_snapshot(attrs.evolve(scoped_snapshot(KEY, marker), summary=None))


@contextlib.contextmanager
def _another_writer_holds_the_lock(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holds the file's write lock (``BEGIN IMMEDIATE``) until released or done."""
    blocker = sqlite3.connect(str(tmp_path / "agentium.db"), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield blocker
    finally:
        if blocker.in_transaction:  # the test did not release it: end the other writer's transaction
            blocker.execute("ROLLBACK")
        blocker.close()


async def _write_while_the_lock_is_held_briefly(tmp_path: Path, write: Callable[[], Awaitable[T]]) -> T:
    """Run ``write`` while another writer holds the lock, which it releases after 0.3 s."""
    with _another_writer_holds_the_lock(tmp_path) as blocker:
        async with anyio.create_task_group() as tg:

            async def release() -> None:
                await anyio.sleep(0.3)
                blocker.execute("ROLLBACK")

            tg.start_soon(release)
            return await write()


async def test_an_unchanged_session_loads_without_a_worker_thread(tmp_path: Path) -> None:
    store = CountingStore(_config(tmp_path))
    try:
        first = scoped_snapshot(KEY, "a")
        revision = await store.save(KEY, first, None, OpContext())
        store.threaded.clear()
        for _ in range(3):
            loaded = await store.load(KEY, OpContext())
            assert loaded is not None and loaded.revision == revision and loaded.snapshot == first
        assert store.threaded == []
    finally:
        await store.aclose()


async def test_a_write_by_another_store_on_the_file_is_read(tmp_path: Path) -> None:
    mine, other = CountingStore(_config(tmp_path)), SQLiteSessionStore(_config(tmp_path))
    try:
        revision = await mine.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        newer = _next("b")
        await other.save(KEY, newer, revision, OpContext())
        mine.threaded.clear()
        loaded = await mine.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1 and loaded.snapshot == newer
        assert mine.threaded == ["session load"]
    finally:
        await mine.aclose()
        await other.aclose()


async def test_a_write_by_another_process_is_read(tmp_path: Path) -> None:
    store = SQLiteSessionStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        assert (await store.load(KEY, OpContext())) is not None
        script = (
            "import anyio, attrs\n"
            "from agentium_harness import EraseTarget, OpContext, SessionKey\n"
            "from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore\n"
            "from agentium_harness.plugin_api import seal_snapshot\n"
            "from agentium_harness.testing import scoped_snapshot\n"
            "async def main():\n"
            f"    store = SQLiteSessionStore(SQLiteConfig(path={str(tmp_path / 'agentium.db')!r}))\n"
            "    key = SessionKey('tenant', 'user', 'session')\n"
            "    snap = seal_snapshot(attrs.evolve(scoped_snapshot(key, 'from elsewhere'), summary=None))\n"
            f"    await store.save(key, snap, {revision}, OpContext())\n"
            "    await store.aclose()\n"
            "anyio.run(main)\n"
        )
        done = await anyio.run_process([sys.executable, "-c", script], check=False)
        assert done.returncode == 0, done.stderr
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1
        assert loaded.snapshot == _next("from elsewhere")
    finally:
        await store.aclose()


async def test_a_save_that_raised_is_read_back_not_remembered(tmp_path: Path) -> None:
    store = CountingStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        newer = _next("b")
        store.fail_after_save = True
        with pytest.raises(SQLiteStorageError):
            await store.save(KEY, newer, revision, OpContext())
        # It landed: a load must say so (the engine settles a failed save this way).
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1 and loaded.snapshot == newer
    finally:
        await store.aclose()


async def test_a_closed_store_refuses_the_load_it_could_answer_from_memory(tmp_path: Path) -> None:
    store = SQLiteSessionStore(_config(tmp_path))
    await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
    await store.aclose()
    with pytest.raises(SQLiteStorageError, match="closed"):
        await store.load(KEY, OpContext())


async def test_an_absent_session_stays_absent_without_a_worker_thread_until_written(tmp_path: Path) -> None:
    # Every turn also reads its tenant's erasure fence, a row that is usually absent.
    mine, other = CountingStore(_config(tmp_path)), SQLiteSessionStore(_config(tmp_path))
    try:
        assert await mine.load(KEY, OpContext()) is None
        assert await mine.load(KEY, OpContext()) is None
        assert mine.threaded == ["session load"]
        snapshot = scoped_snapshot(KEY, "a")
        await other.save(KEY, snapshot, None, OpContext())
        loaded = await mine.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == 1 and loaded.snapshot == snapshot
    finally:
        await mine.aclose()
        await other.aclose()


async def test_its_own_first_save_of_an_absent_session_is_read_back(tmp_path: Path) -> None:
    store = CountingStore(_config(tmp_path))
    try:
        assert await store.load(KEY, OpContext()) is None
        store.fail_after_save = True
        with pytest.raises(SQLiteStorageError):
            await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == 1
    finally:
        await store.aclose()


class InterleavingStore(SQLiteSessionStore):
    """Runs a load's read between a save's start and its write, and lets the load finish after the save."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.save_started = anyio.Event()
        self.load_read = anyio.Event()
        self.save_done = anyio.Event()
        self.interleave = False

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        if not self.interleave:
            return await super().run(ctx, operation, work)
        if operation == "session save":
            self.save_started.set()
            await self.load_read.wait()  # the load has read the row as it was before this save
            return await super().run(ctx, operation, work)
        value = await super().run(ctx, operation, work)
        self.load_read.set()
        await self.save_done.wait()  # ...and remembers it only after the save remembered its own
        return value


async def test_a_load_that_read_before_a_save_cannot_remember_the_older_row_after_it(tmp_path: Path) -> None:
    # Two event loops sharing one store can interleave like this: a load that starts after a save
    # began reads the row before the save's write (one connection: the calls take turns) and
    # finishes after the save. It must not leave the older row remembered for later loads.
    first = SQLiteSessionStore(_config(tmp_path))
    revision = await first.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
    await first.aclose()
    store = InterleavingStore(_config(tmp_path))  # remembers nothing yet: the load below reads the row
    try:
        newer = _next("b")
        store.interleave = True
        seen: list[int | None] = []

        async def save() -> None:
            await store.save(KEY, newer, revision, OpContext())
            store.save_done.set()

        async def load() -> None:
            await store.save_started.wait()
            loaded = await store.load(KEY, OpContext())
            seen.append(None if loaded is None else loaded.revision)

        async with anyio.create_task_group() as tg:
            tg.start_soon(save)
            tg.start_soon(load)
        store.interleave = False
        assert seen == [revision]  # the load read the row as it was, which is right for it
        later = await store.load(KEY, OpContext())
        assert later is not None and later.revision == revision + 1 and later.snapshot == newer
    finally:
        await store.aclose()


@pytest.mark.parametrize("between", ["nothing", "a load"])
async def test_a_write_after_a_write_still_waits_for_another_writers_lock(
    tmp_path: Path, between: str
) -> None:
    # A write leaves the connection ready for the next load's look at data_version (which must
    # never wait); the write after it must still wait its busy timeout for another writer's lock.
    store = CountingStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        if between == "a load":
            store.threaded.clear()
            assert (await store.load(KEY, OpContext())) is not None
            assert store.threaded == []  # answered on the loop, as before
        newer = _next("b")
        assert await _write_while_the_lock_is_held_briefly(
            tmp_path, lambda: store.save(KEY, newer, revision, OpContext.with_timeout(30))
        ) == (revision + 1)
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1 and loaded.snapshot == newer
    finally:
        await store.aclose()


async def test_every_write_by_another_store_is_read_however_many_loads_were_answered_between(
    tmp_path: Path,
) -> None:
    # Loads answered from memory look at the file each time (one reused statement): a write by
    # another connection after any number of them is read, and the next one after that too.
    mine, other = CountingStore(_config(tmp_path)), SQLiteSessionStore(_config(tmp_path))
    try:
        revision = await mine.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        for marker in ("b", "c", "d"):
            mine.threaded.clear()
            for _ in range(3):
                assert (await mine.load(KEY, OpContext())) is not None
            assert mine.threaded == []
            newer = _next(marker)
            revision = await other.save(KEY, newer, revision, OpContext())
            loaded = await mine.load(KEY, OpContext())
            assert loaded is not None and loaded.revision == revision and loaded.snapshot == newer
            assert mine.threaded == ["session load"]
    finally:
        await mine.aclose()
        await other.aclose()


async def test_a_load_answered_from_memory_leaves_no_read_open_on_the_file(tmp_path: Path) -> None:
    # Its look at data_version ends its read at once: a checkpoint by another connection can
    # still move every commit into the database file and empty the WAL.
    store, other = SQLiteSessionStore(_config(tmp_path)), SQLiteSessionStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        await other.save(KEY, _next("b"), revision, OpContext())
        for _ in range(3):
            assert (await store.load(KEY, OpContext())) is not None
        checkpointer = sqlite3.connect(str(tmp_path / "agentium.db"), isolation_level=None)
        try:
            busy, _, _ = checkpointer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            checkpointer.close()
        assert busy == 0
    finally:
        await store.aclose()
        await other.aclose()


class HeldSaveStore(SQLiteSessionStore):
    """Holds the first save after its write committed, before the save goes on to remember its row.

    What a save on a busy event loop sharing the store with another loop does: its write is over
    on the worker thread, but its caller resumes only later, after the other loop's calls ran.
    """

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.hold = False
        self.written = anyio.Event()
        self.release = anyio.Event()

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        value = await super().run(ctx, operation, work)
        if operation == "session save" and self.hold:
            self.hold = False
            self.written.set()
            await self.release.wait()
        return value


async def test_a_save_resumed_after_a_later_save_does_not_leave_its_older_row_remembered(
    tmp_path: Path,
) -> None:
    store = HeldSaveStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        older, newer = _next("b"), _next("c")
        store.hold = True
        newest: list[int] = []

        async def later() -> None:
            await store.written.wait()
            loaded = await store.load(KEY, OpContext())  # the held save's row: it committed
            assert loaded is not None and loaded.revision == revision + 1
            newest.append(await store.save(KEY, newer, loaded.revision, OpContext()))
            store.release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            await store.save(KEY, older, revision, OpContext())
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and (loaded.revision, loaded.snapshot) == (newest[0], newer)
    finally:
        await store.aclose()


async def test_a_save_resumed_after_an_erase_does_not_bring_the_erased_row_back(tmp_path: Path) -> None:
    store = HeldSaveStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        store.hold = True

        async def erase() -> None:
            await store.written.wait()
            report = await store.erase(EraseTarget.session("tenant", "user", "session"), OpContext())
            assert report.count("snapshot") == 1
            store.release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(erase)
            await store.save(KEY, _next("b"), revision, OpContext())
        assert await store.load(KEY, OpContext()) is None  # erased: never served from memory
    finally:
        await store.aclose()


async def _joint_commit(
    store: SQLiteSessionStore, archive: SQLiteArchive, snapshot: Any, revision: int, ctx: OpContext
) -> int:
    new, _ = await store.commit_with_archive(archive, KEY, [], snapshot, revision, ctx)
    return new


@pytest.mark.parametrize("write", ["save", "joint commit"])
async def test_an_uncontended_write_after_a_write_sets_no_busy_timeout(tmp_path: Path, write: str) -> None:
    # A write leaves the busy timeout at 0 for the loads' peeks; the next write asks for the lock
    # without waiting first, and sets its busy timeout only if another writer holds the lock.
    store, archive = SQLiteSessionStore(_config(tmp_path)), SQLiteArchive(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        conn = store._conn
        assert conn is not None
        ran: list[str] = []
        conn.set_trace_callback(ran.append)
        newer = _next("b")
        if write == "save":
            assert await store.save(KEY, newer, revision, OpContext.with_timeout(30)) == revision + 1
        else:
            assert (
                await _joint_commit(store, archive, newer, revision, OpContext.with_timeout(30))
                == revision + 1
            )
        conn.set_trace_callback(None)
        assert "BEGIN IMMEDIATE" in ran and "COMMIT" in ran
        assert [s for s in ran if "busy_timeout" in s] == []
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1 and loaded.snapshot == newer
    finally:
        await store.aclose()
        await archive.aclose()


async def test_a_joint_commit_after_a_write_still_waits_for_another_writers_lock(tmp_path: Path) -> None:
    store, archive = SQLiteSessionStore(_config(tmp_path)), SQLiteArchive(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        newer = _next("b")
        assert await _write_while_the_lock_is_held_briefly(
            tmp_path, lambda: _joint_commit(store, archive, newer, revision, OpContext.with_timeout(30))
        ) == (revision + 1)
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision + 1 and loaded.snapshot == newer
    finally:
        await store.aclose()
        await archive.aclose()


async def test_a_joint_commit_after_a_write_fails_within_its_deadline_while_the_lock_is_held(
    tmp_path: Path,
) -> None:
    # The busy timeout (5 s here) is capped by the deadline when the write finds the lock held.
    store, archive = SQLiteSessionStore(_config(tmp_path)), SQLiteArchive(_config(tmp_path))
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, OpContext())
        with _another_writer_holds_the_lock(tmp_path), pytest.raises(OperationCancelledError):
            await _joint_commit(store, archive, _next("b"), revision, OpContext.with_timeout(0.4))
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision  # nothing was written
        assert await _joint_commit(store, archive, _next("c"), revision, OpContext.with_timeout(30)) == (
            revision + 1
        )
    finally:
        await store.aclose()
        await archive.aclose()
