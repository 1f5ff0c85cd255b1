"""Embedded SQLite adapters: a durable history archive and a session store.

Both adapters use the standard library's :mod:`sqlite3`. By default they share
one database file (``agentium.db``); each adapter opens its own connection, so
the archive and the session store never wait on each other's Python objects,
only on SQLite's own locks. The database runs in WAL mode with a busy timeout,
which lets readers proceed while one writer commits.

Ownership: each adapter opens its connection lazily, on its first call, and
closes it in :meth:`~SQLiteArchive.aclose`. A file already in WAL mode with
every table at the current version is opened with reads only, so a first
read proceeds while another process writes. Setting up a new or older file
(switching it to WAL, creating or migrating the tables) waits for another
writer's lock like any write, bounded by that first call's deadline as well
as the busy timeout (a failed attempt closes the connection; the next call
opens the file afresh). Building an adapter does no I/O (the file is not
even created), as :class:`~agentium_harness._plugins.spec.AdapterSpec`
requires.

Threads: sqlite3 calls block, so they run in worker threads through the
public :class:`~agentium_harness.adapters.threaded.ThreadBoundAdapter` base
(a per-adapter ``CapacityLimiter(1)``; one connection is used by one thread at
a time). The connection is opened with ``check_same_thread=False`` because
successive calls may land on different worker threads.

Cancellation: every call checks its :class:`~agentium_harness._ports.OpContext`
before it starts and again when it reaches its worker thread, and raises
:class:`~agentium_harness._errors.OperationCancelledError` without touching the
database. While a statement runs, a progress handler aborts it when the signal
is cancelled, the deadline passes or the calling anyio task is cancelled; the
transaction is then rolled back. Once a transaction reaches ``COMMIT`` it is
allowed to finish, so an acknowledged write is never half-undone.

Records are stored as canonical JSON (:func:`agentium_harness._codec.canonical_json`);
no pickle is involved. Identifiers are always bound as SQL parameters.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import ClassVar, Final

from .._errors import (
    AgentiumError,
    SnapshotCorruptError,
)
from .._history import MessageGroup
from .._ports import OpContext
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    ErasedSession,
    EraseReport,
    EraseStatus,
    EraseTarget,
    PhysicalErasure,
    check_max_items,
    check_target,
    count_items,
)
from .._ports.recall_args import checked_argument, checked_count, checked_ctx, checked_key, checked_sequence
from .._ports.sessions import (
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    check_snapshot_scope,
    decode_snapshot,
    snapshot_bytes,
    verify_snapshot,
)
from .._scope import SessionKey, validate_id
from .._validators import valid_ids
from ._sqlite_archive import READ_BUDGET, RECENT_BYTES, SQLiteArchive
from ._sqlite_base import (
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    WAITS_ITSELF,
    SQLiteAdapterBase,
    SQLiteConfig,
    SQLiteRevisionFloorError,
    SQLiteStorageError,
    data_version,
)
from ._sqlite_bounds import ID_CHARS, bounded_select, oversize
from ._sqlite_rows import group_rows, save_snapshot, split_snapshot
from ._sqlite_rows_erase import covered_reports, drop_snapshot
from ._sqlite_snapshot_read import read_snapshot
from ._sqlite_sql import immediate_transaction, raise_revision_floor, read_transaction, scrub_log
from ._sqlite_writes import FenceMoved, checked_write, fence_unmoved, session_prefix

__all__ = [
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "SQLiteArchive",
    "SQLiteConfig",
    "SQLiteRevisionFloorError",
    "SQLiteSessionStore",
    "SQLiteStorageError",
]


#: How many sessions a store remembers having found without a row (see ``SQLiteSessionStore.load``).
_ABSENT_KEYS: Final = 1024
#: What ``SQLiteSessionStore._known_locked`` answers when only a read of the row can tell.
_NOT_KNOWN: Final[tuple[bool, None]] = (False, None)


class SQLiteSessionStore(SQLiteAdapterBase, SessionStore):
    """Revisioned session snapshots in a SQLite file, saved with compare-and-set.

    Revisions start at 1 and grow by one per save. ``save`` reads and writes
    inside one ``BEGIN IMMEDIATE`` transaction, so of two writers on the same
    base revision exactly one succeeds, across processes too. They never
    repeat for a key, even across an erasure of it: ``erase`` raises the
    file's revision floor to the highest revision it removes, in the same
    transaction, and a session created afterwards starts above it.
    """

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True,
        durable=True,
        listing=True,
        health_check=True,
        joint_archive_commit=True,
        erasure=True,
    )
    storage_error: ClassVar[type[AgentiumError]] = SQLiteStorageError
    adapter_name: ClassVar[str] = "sqlite session store"
    peeks_after_writes: ClassVar[bool] = True  # the next load of a session it wrote peeks first
    # Methods whose only wait is their thread hop (``run``): the engine may run them in its own task,
    # under the same deadline (``Ticket.call``'s ``hops_only``). Keep every await out of them but ``run``.
    _agentium_hops_only: ClassVar[frozenset[str]] = frozenset(
        {"commit_with_archive", "_agentium_commit_fenced", "load", "save"}
    )

    def __init__(self, config: SQLiteConfig | None = None) -> None:
        super().__init__(config)
        # The last bytes written or decoded per session, with the snapshot they
        # stand for and the connection's data_version when they were known to
        # be the row's: a load that finds the same revision and the same bytes
        # skips decoding, and one that finds the data_version unchanged skips
        # the read (see ``load``). The snapshot is kept as the StoredSnapshot a load hands back
        # (frozen): loads of an unchanged row return that same object. Bounded, least recently
        # used first out.
        self._recent: OrderedDict[SessionKey, tuple[int, bytes, StoredSnapshot, int]] = OrderedDict()
        self._recent_bytes = 0
        # Sessions found to have no row, with the data_version then: the same shortcut for a
        # load that finds nothing (every turn reads the tenant's erasure fence, usually absent).
        self._absent: OrderedDict[SessionKey, int] = OrderedDict()
        # The store serves several event loops at once (one worker thread each), so what it
        # remembers changes under a lock, and a row read before a write began is never
        # remembered after it: every write bumps the epoch, and a load or save remembers its
        # row only if the epoch is still the one it saw before its own call.
        self._recent_lock = threading.Lock()
        self._epoch = 0

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """The snapshot and its revision, or ``None``; an undecodable row raises ``SnapshotCorruptError``.

        When this store wrote or read the session's row last and no other
        connection has committed to the file since (``PRAGMA data_version``
        unchanged: no commit at all by anyone else, in any process), the row
        is still exactly what it was, and the snapshot is handed back without
        a worker thread: the version is read on the calling thread, which
        never waits for it (see ``_peek_data_version``). Otherwise the row
        is read and checked as usual.
        """
        checked_ctx(ctx, "session load")
        key = checked_key(key, "session load")
        with self._recent_lock:
            known, stored = self._known_locked(key, ctx)
            if known:
                return stored
            epoch = self._epoch

        def work(conn: sqlite3.Connection) -> tuple[tuple[object, object] | None, int]:
            # One read transaction: the version, the session's row and its group rows all as of
            # the same commit.
            with read_transaction(conn):
                version = data_version(conn)
                found = read_snapshot(conn, key)
            return (None if found is None else (found[0], found[1])), version

        row, version = await self.run(ctx, "session load", work)
        if row is None:
            with self._recent_lock:
                self._drop(key)
                if self._epoch == epoch:
                    self._absent[key] = version
                    if len(self._absent) > _ABSENT_KEYS:
                        self._absent.popitem(last=False)
            return None
        revision, data = row
        where = f"snapshot of session {key.key()} in {self._path}"
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
            raise SnapshotCorruptError(f"{where} has an invalid revision {revision!r}; nothing was changed")
        if data is None:
            raise SnapshotCorruptError(
                f"{where} is incomplete (a resident group's row is missing or damaged); nothing was changed"
            )
        if not isinstance(data, bytes | str):
            raise SnapshotCorruptError(f"{where} holds {type(data).__name__}, not JSON; nothing was changed")
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        with self._recent_lock:
            recent = self._recent.get(key)
        if recent is not None and recent[0] == revision and recent[1] == raw:
            # The row holds exactly the bytes this store last wrote or decoded
            # for this revision, so decoding them again would give an equal
            # snapshot: hand back that one (its groups keep their encodings).
            self._remember(epoch, key, revision, recent[1], recent[2].snapshot, version)
            return recent[2]
        # Defence in depth (the engine checks too): a flipped bit that still
        # decodes fails here, before it can reach a model or be re-archived.
        with self._recent_lock:
            self._drop(key)
        snapshot = decode_snapshot(key, raw, where)
        self._remember(epoch, key, revision, raw, snapshot, version)
        return StoredSnapshot(snapshot=snapshot, revision=revision)

    def _known_locked(self, key: SessionKey, ctx: OpContext) -> tuple[bool, StoredSnapshot | None]:
        """Under the lock: ``(True, what load answers)`` when this store knows ``key``'s row unchanged.

        ``(False, None)`` otherwise: only a read of the row can tell.
        All under the lock: what this store remembers cannot change (no write
        of any row can begin, on any loop) between the look at it and the
        answer. The peek never waits (see ``_peek_data_version``).
        """
        recent = self._recent.get(key)
        if recent is not None:
            ctx.raise_if_expired("session load")
            if self._peek_data_version() == recent[3]:  # None (not now) never equals it
                self._recent.move_to_end(key)
                return True, recent[2]
        else:
            # A session is remembered with a row or without one, never both (``_drop`` first).
            absent = self._absent.get(key)
            if absent is not None:
                ctx.raise_if_expired("session load")
                if self._peek_data_version() == absent:
                    self._absent.move_to_end(key)
                    return True, None
        return _NOT_KNOWN

    def _agentium_load_known(
        self, keys: tuple[SessionKey, ...], ctx: OpContext
    ) -> tuple[StoredSnapshot | None, ...] | None:
        """What :meth:`load` answers for each of ``keys``, when every one is known unchanged; never waits.

        For the engine's load (``_engine.load``, the erasure fence and the
        session): it takes these answers instead of running a bounded call (a
        task, a cancel scope and a loop iteration) around loads that would
        not wait for anything either. All of them as of one look at the file
        (one ``data_version`` peek, under the lock): they agree with each
        other as the rows did at that moment. ``None`` when any one needs a
        read of its row (or the peek cannot be had now): the engine then
        calls :meth:`load` as usual.
        """
        checked_ctx(ctx, "session load")
        for key in keys:
            if type(key) is not SessionKey:  # only then can the check refuse it: not called for the rest
                checked_key(key, "session load")
        # Plain loops, no generator expressions: each of those costs a call and one per item.
        with self._recent_lock:
            ctx.raise_if_expired("session load")
            found: list[tuple[SessionKey, int, StoredSnapshot | None]] = []
            for key in keys:
                recent = self._recent.get(key)
                if recent is not None:
                    found.append((key, recent[3], recent[2]))
                    continue
                absent = self._absent.get(key)  # never both (``_drop`` first)
                if absent is None:
                    return None
                found.append((key, absent, None))
            version = self._peek_data_version()  # None (not now) never equals a version
            answers: list[StoredSnapshot | None] = []
            for _, seen, _ in found:
                if seen != version:
                    return None
            for key, _, stored in found:
                (self._recent if stored is not None else self._absent).move_to_end(key)
                answers.append(stored)
            return tuple(answers)

    def _remember(
        self, epoch: int, key: SessionKey, revision: int, data: bytes, snapshot: SessionSnapshot, version: int
    ) -> None:
        """Remember ``key``'s row unless a write began since ``epoch`` (it may be older than the file)."""
        with self._recent_lock:
            self._drop(key)
            if self._epoch == epoch:
                self._keep_locked(key, revision, data, snapshot, version)

    def _remember_written(
        self, began: int, key: SessionKey, revision: int, data: bytes, snapshot: SessionSnapshot, version: int
    ) -> None:
        """After a write of ``key``'s row begun at epoch ``began``: remember the row if still current.

        The write is over: the epoch moves on (a load that read the row before
        the write but finishes after it must not remember the older row, see
        :meth:`_forget`). The row is remembered only when no other write began
        since this one did (the epoch is still ``began``): a save whose caller
        resumed late (its loop busy, another loop's calls ran meanwhile) may
        find its row already replaced by a later save, or erased, and this
        connection's own commits never change its data_version, so a row kept
        then would be served as current.
        """
        with self._recent_lock:
            current = self._epoch == began
            self._epoch += 1
            self._drop(key)
            if current:
                self._keep_locked(key, revision, data, snapshot, version)

    def _keep_locked(
        self, key: SessionKey, revision: int, data: bytes, snapshot: SessionSnapshot, version: int
    ) -> None:
        """Under the lock, ``key`` dropped: remember its row (one too large for the bound is not)."""
        if len(data) <= RECENT_BYTES:
            stored = StoredSnapshot(snapshot=snapshot, revision=revision)  # what its loads hand back
            self._recent[key] = (revision, data, stored, version)
            self._recent_bytes += len(data)
            while self._recent_bytes > RECENT_BYTES:
                _, (_, dropped, _, _) = self._recent.popitem(last=False)
                self._recent_bytes -= len(dropped)

    def _forget_all(self) -> int:
        """Forget every row, before a write of many; returns the new epoch."""
        with self._recent_lock:
            self._epoch += 1
            self._recent.clear()
            self._recent_bytes = 0
            self._absent.clear()
            return self._epoch

    def _forget(self, key: SessionKey) -> int:
        """Drop what this store remembers of ``key``'s row before a write; returns the new epoch.

        A write that fails may still have committed (a COMMIT that raised),
        and this connection's own commits do not change its data_version, so
        a remembered row must never outlive a write that did not confirm it;
        and a load on another loop that read the row before this write must
        not remember it after (the epoch moves on). A write calls it before it
        starts and again when it is over, so such a load is refused whether it
        took its epoch before the write began or while it waited to run.
        """
        with self._recent_lock:
            self._epoch += 1
            self._drop(key)
            return self._epoch

    def _drop(self, key: SessionKey) -> None:
        """Under the lock: forget ``key``'s row (after a doubt), leaving the epoch as it is."""
        self._absent.pop(key, None)
        previous = self._recent.pop(key, None)
        if previous is not None:
            self._recent_bytes -= len(previous[1])

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Compare-and-set: store only if the current revision is ``expected_revision``; return the new.

        A snapshot this store would refuse to load (format 3 or later without
        its digest, or with a wrong one) raises ``SnapshotCorruptError`` and
        writes nothing: seal it with :func:`~agentium_harness._ports.sessions.seal_snapshot`.
        Another session's snapshot raises ``SnapshotScopeMismatchError``, writing nothing.
        """
        key = checked_write(key, snapshot, expected_revision, ctx, "session save")
        verify_snapshot(key, snapshot)
        check_snapshot_scope(key, snapshot, self.adapter_name)
        # The exact canonical bytes, joined from the groups' cached encodings, and
        # split into the session's row and one row per resident group.
        data = snapshot_bytes(snapshot)
        rows = split_snapshot(snapshot, data)

        def work(conn: sqlite3.Connection) -> tuple[int, int]:
            with immediate_transaction(conn, self.begin_immediate):
                # Inside the write transaction no one else can commit, and this
                # connection's own commit leaves its data_version as it is.
                version = data_version(conn)
                revision, _ = save_snapshot(conn, key, rows, expected_revision)
                return revision, version

        began = self._forget(key)
        waits = WAITS_ITSELF.set(True)  # its BEGIN IMMEDIATE waits for another writer itself
        try:
            revision, version = await self.run(ctx, "session save", work)
        finally:
            WAITS_ITSELF.reset(waits)
        # Forget again now the write is over, and remember the row unless another write began since
        # this one (see _remember_written): a load that read the row before this write but finishes
        # after it must not remember the older row (see _forget).
        self._remember_written(began, key, revision, data, snapshot, version)
        return revision

    def shares_transactions_with(self, archive: object) -> bool:
        """True when ``archive`` is an open SQLite archive on this store's own database file."""
        return (
            isinstance(archive, SQLiteArchive)
            and archive.path == self._path
            and not archive.closed
            and not self.closed
        )

    async def commit_with_archive(
        self,
        archive: HistoryArchive,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        snapshot: SessionSnapshot,
        expected_revision: int | None,
        ctx: OpContext,
    ) -> tuple[int, Sequence[ArchiveReceipt]]:
        """Append ``groups`` to the archive's table and save ``snapshot`` in ONE transaction.

        Declared by ``joint_archive_commit``; the engine calls it only when
        :meth:`shares_transactions_with` says the archive lives in this file.
        Both writes commit together or neither does, so a crash can never
        leave the boundary past what is archived (R3), and a turn costs one
        fsynced commit instead of two. Conflicts raise exactly what the
        separate calls raise (``ArchiveConflictError``, ``SessionConflictError``)
        and write nothing.
        """
        return await self._joint_write(archive, key, groups, snapshot, expected_revision, ctx, None)

    async def _agentium_commit_fenced(
        self,
        archive: HistoryArchive,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        snapshot: SessionSnapshot,
        expected_revision: int | None,
        fence: tuple[SessionKey, int | None],
        ctx: OpContext,
    ) -> tuple[int, Sequence[ArchiveReceipt]] | None:
        """:meth:`commit_with_archive` if ``fence[0]``'s row is at revision ``fence[1]`` in its transaction.

        The engine's commit fence (the tenant's erasure ledger at the revision its load saw,
        ``_sqlite_writes.fence_unmoved``). ``None``: it moved; rolled back, nothing written.
        """
        try:
            return await self._joint_write(archive, key, groups, snapshot, expected_revision, ctx, fence)
        except FenceMoved:
            return None  # as after a failed write, the row is forgotten (``_forget``)

    async def _joint_write(
        self,
        archive: HistoryArchive,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        snapshot: SessionSnapshot,
        expected_revision: int | None,
        ctx: OpContext,
        fence: tuple[SessionKey, int | None] | None,
    ) -> tuple[int, Sequence[ArchiveReceipt]]:
        if not self.shares_transactions_with(archive):
            raise SQLiteStorageError(
                f"{self.adapter_name}: commit_with_archive needs a SQLite archive on {self._path}"
            )
        assert isinstance(archive, SQLiteArchive)
        key = checked_write(key, snapshot, expected_revision, ctx, "session commit")
        for group in checked_sequence(groups, "groups", "session commit"):
            if type(group) is not MessageGroup:  # only then can the check refuse it
                checked_argument(group, MessageGroup, "each of groups", "session commit")
        verify_snapshot(key, snapshot)
        check_snapshot_scope(key, snapshot, self.adapter_name)  # as in save
        data = snapshot_bytes(snapshot)
        rows = split_snapshot(snapshot, data)
        evicted = group_rows(groups)
        prefix = session_prefix(self._location_prefix(), key)  # the archive's: same file (checked above)

        def work(conn: sqlite3.Connection) -> tuple[int, list[ArchiveReceipt], int]:
            with immediate_transaction(conn, self.begin_immediate):
                if fence is not None and not fence_unmoved(conn, fence):
                    raise FenceMoved  # rolled back: nothing written
                version = data_version(conn)  # as in save
                # The evicted groups' resident rows become the archive's as they are (adopted).
                revision, receipts = save_snapshot(conn, key, rows, expected_revision, evicted, prefix)
                return revision, receipts, version

        began = self._forget(key)
        waits = WAITS_ITSELF.set(True)  # as in save
        try:
            revision, receipts, version = await self.run(ctx, "session commit with archive", work)
        finally:
            WAITS_ITSELF.reset(waits)
        self._remember_written(began, key, revision, data, snapshot, version)  # as in save
        return revision, receipts

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids of one user (after ``after``, when given), sorted by code point."""
        checked_ctx(ctx, "session list")
        # Ids no key could hold are refused (InvalidIdError), not listed as no session: a lone
        # surrogate escaped from sqlite3's binding as a bare UnicodeEncodeError.
        tenant, user = validate_id(tenant, "tenant"), validate_id(user, "user")
        after = None if after is None else validate_id(after, "after")
        # A negative LIMIT would mean "no limit" to SQLite.
        bound = max(0, checked_count(limit, "limit", "session list"))

        def work(conn: sqlite3.Connection) -> list[str]:
            # BINARY collation orders UTF-8 text by code point, the same order as sorted().
            # Bounded: an id longer than any the store writes comes back NULL, unread.
            rows = conn.execute(
                f"SELECT {bounded_select((('session_id', ID_CHARS),))} FROM sessions "  # noqa: S608
                "WHERE tenant_id = ? AND user_id = ? "
                "AND session_id > ? AND revision IS NOT NULL ORDER BY session_id LIMIT ?",
                (tenant, user, "" if after is None else after, bound),
            ).fetchall()
            for session, over in rows:
                if session is None:
                    what = f"{self.adapter_name}: a session row of tenant {tenant!r}, user {user!r}"
                    raise SnapshotCorruptError(oversize(what, over))
                # str() would make up an id ("b'...'") for a damaged row; an id no key holds (a NUL)
                # would be handed out, for no load, and no next page's ``after``, to take.
                if not isinstance(session, str) or not valid_ids((session,)):
                    raise SnapshotCorruptError(
                        f"{self.adapter_name}: a session of tenant {tenant!r}, user {user!r} in {self._path} "
                        f"has a session id no key holds ({type(session).__name__}); the row is damaged"
                    )
            return [r[0] for r in rows]

        return await self.run(ctx, "session listing", work)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
        scrub: bool = True,
    ) -> EraseReport:
        """Delete the snapshots of every covered session (at most ``max_items``), then empty the WAL.

        A groups target deletes nothing here; the erased sessions' decoded snapshots leave memory.
        A call is partial once the snapshots read for its report (damaged ones too) reach
        ``READ_BUDGET`` bytes (it reads less than twice that). The file's revision floor rises to
        the highest revision deleted, in the same transaction (see the class docstring); while it
        is damaged or missing, an erase that would delete a snapshot raises
        :class:`SQLiteRevisionFloorError` and changes nothing (a dry run answers as usual).

        ``scrub=False`` (the engine's erasure, for every SQLite store on one
        file) leaves the file's rebuild and log checkpoint to one
        :meth:`scrub_erased` call once every store on the file has erased.
        """
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "session store erase")
        checked_argument(scrub, bool, "scrub", "session store erase")
        bound = check_max_items(max_items)

        Found = tuple[list[ErasedSession], int, bool, PhysicalErasure, str]

        def work(conn: sqlite3.Connection) -> Found:
            with immediate_transaction(conn):
                taken, found, damaged, more, strays = covered_reports(conn, target, bound, READ_BUDGET)
                if not dry_run and (taken or strays):
                    ctx.raise_if_expired("session store erase")
                    # With the rows, or not at all: a writer holding one of these revisions must
                    # never meet it again on a session created under the same id. A damaged or
                    # missing floor stops the erasure here, before anything is deleted.
                    raise_revision_floor(conn, [session.revision for _, session in taken])
                    for _, session in taken:
                        drop_snapshot(conn, session)
                    conn.executemany("DELETE FROM groups WHERE id = ?", [(i,) for i in strays])
            physical, detail = (
                (PhysicalErasure.REMOVED, "")
                if dry_run or not scrub
                else scrub_log(conn, time_left=ctx.time_left())
            )
            return found, damaged, more, physical, detail

        if not dry_run:
            # Before the write, like a save: an erase that raised may still have committed, and
            # this connection's own commits leave its data_version as it is (see ``load``).
            self._forget_all()
        try:
            found, damaged, more, physical, detail = await self.run(ctx, "session store erase", work)
        finally:
            if not dry_run:
                self._forget_all()  # and after it, as a save does (see _forget)
        return EraseReport(
            count_items(snapshot=len(found), damaged=damaged),
            tuple(found),
            EraseStatus.PARTIAL if more else EraseStatus.COMPLETE,
            physical,
            detail,
        )

    async def health(self, ctx: OpContext) -> str:
        """Run constant-time probe statements; a database file not created yet is not created."""
        return await self.probe_health(ctx, "session store health", self._health_probe)
