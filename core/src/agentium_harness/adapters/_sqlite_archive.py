"""The built-in SQLite history archive (``SQLiteArchive``); hosts import it from :mod:`.sqlite`.

Kept apart from the session store, which shares its file, schema and base (see that
module's docstring for the layout and the joint commit).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import ClassVar, Final

from .._errors import (
    AgentiumError,
    ArchiveCorruptError,
    ArchiveError,
    InvalidArgumentError,
)
from .._history import MessageGroup
from .._ports import OpContext
from .._ports.archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive, decode_archived_group
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    PhysicalErasure,
    check_max_items,
    check_target,
    count_items,
    group_sessions,
)
from .._ports.recall_args import checked_argument, checked_count, checked_ctx, checked_key, checked_sequence
from .._scope import SessionKey
from ._sqlite_base import (
    SQLiteAdapterBase,
    SQLiteConfig,
    data_version,
)
from ._sqlite_bounds import JSON_BYTES
from ._sqlite_pack import PackedRowError, PackedRowOverBound, is_packed, unpack
from ._sqlite_rows import (
    append_groups,
    drop_if_empty,
    group_rows,
    read_archived,
)
from ._sqlite_rows_erase import archived_rows_covered
from ._sqlite_sql import immediate_transaction, read_transaction, scrub_log

#: Bytes of canonical JSON an adapter keeps decoded, most recently used first: the session
#: store's snapshots (``SQLiteSessionStore.load``) and the archive's groups alike (a deflated
#: row counts what it inflates to); the decoded records cost about as much again. Bounded in
#: bytes, not rows, because one may be large.
RECENT_BYTES: Final = 8 * 1024 * 1024

#: How many archive reads an archive remembers the seqs of (see ``SQLiteArchive.read_groups``).
_REMEMBERED_READS: Final = 1024

#: Canonical bytes one ``read_groups`` call returns at most (and so inflates: a deflated row may be a
#: thousandth of its group): a page stops before the group that would pass it, but holds the first
#: group whatever its size (at most ``MAX_JSON_BYTES``, the same). Without it a file of N tiny,
#: highly compressed rows made one call inflate N times the per-row bound; before rows were
#: deflated that needed a file that large. A shorter page is allowed by the port: callers read on
#: from the last group's seq + 1 until a page comes back empty.
READ_BUDGET: Final = JSON_BYTES


class SQLiteArchive(SQLiteAdapterBase, HistoryArchive):
    """A durable, append-only history archive in a SQLite file.

    A batch is appended in one transaction: either every group of it is stored
    (or was already stored identically) or nothing is. Groups are kept as
    canonical JSON with their digest, keyed by (tenant, user, session, seq).
    """

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        durable=True, idempotent_append=True, bounded_reads=True, health_check=True, erasure=True
    )
    storage_error: ClassVar[type[AgentiumError]] = ArchiveError
    adapter_name: ClassVar[str] = "sqlite archive"
    # Methods whose only wait is their thread hop (``run``): the engine may run them in its own task,
    # under the same deadline (``Ticket.call``'s ``hops_only``). Keep every await out of them but ``run``.
    _agentium_hops_only: ClassVar[frozenset[str]] = frozenset({"append"})

    def __init__(self, config: SQLiteConfig | None = None) -> None:
        super().__init__(config)
        # Groups this archive decoded, by session and seq, with the exact row bytes they came
        # from: a read that finds the same bytes again (an agent loop reads the same history
        # every turn) hands back that group instead of decoding and re-checking it. Rows never
        # change once written, and a row whose bytes differ in any way is decoded and checked
        # afresh. Bounded in bytes, least recently used first out; reads may run in several
        # worker threads at once (one per event loop), hence the lock. Each entry counts the larger
        # of its stored and canonical bytes: a deflated row (_sqlite_pack) may be a thousandth of
        # the group it decodes to, and the bound is on what is kept in memory.
        self._decoded: OrderedDict[tuple[SessionKey, int], tuple[bytes, MessageGroup, int]] = OrderedDict()
        self._decoded_bytes = 0
        self._decoded_lock = threading.Lock()
        # Reads answered in a worker thread, by (session, start, limit): the seqs they found and
        # the connection's data_version in the same read transaction. The same read finding that
        # version unchanged (no commit by any other connection, in any process, since) and its
        # groups still decoded above is answered on the calling thread, without a worker thread:
        # the rows are exactly the ones read then. This archive's own writes (append, erase) do
        # not change its data_version, so each bumps the epoch and forgets every read first, and a
        # read is remembered only if no write began since it started (as in the session store).
        self._reads: OrderedDict[tuple[SessionKey, int, int], tuple[int, tuple[int, ...]]] = OrderedDict()
        self._epoch = 0

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Append ``groups`` in one transaction; identical re-appends are no-ops, differing ones conflict."""
        checked_ctx(ctx, "archive append")
        key = checked_key(key, "archive append")
        for group in checked_sequence(groups, "groups", "archive append"):
            checked_argument(group, MessageGroup, "each of groups", "archive append")
        for group in groups:
            if group.size_bytes > JSON_BYTES:
                # Every read refuses a longer row as damage unread (_sqlite_bounds), and the strict
                # decoder could not read it back either: stored, the group would be lost for good.
                raise InvalidArgumentError(
                    f"archive append: group {group.seq} is {group.size_bytes} bytes, over the {JSON_BYTES} "
                    "an archived group may take (MAX_JSON_BYTES); nothing was written"
                )
        rows = group_rows(groups)
        prefix = f"{self._location_prefix()}#{key.key()}"

        def work(conn: sqlite3.Connection) -> list[ArchiveReceipt]:
            with immediate_transaction(conn):
                return append_groups(conn, key, rows, prefix)

        self._forget_reads()
        try:
            return await self.run(ctx, "archive append", work)
        finally:
            # Again once the write is over: a read that started while it was under way may
            # have read the rows before it and remembered them under the epoch it began with.
            self._forget_reads()

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` whole groups with ``seq >= start_seq``, ascending, within :data:`READ_BUDGET`.

        The page stops early (shorter, still in order, never empty while a
        group at or past ``start_seq`` exists) before the group that would
        take its canonical bytes past :data:`READ_BUDGET`; a deflated row is
        inflated no further than what is left of it. Read on from the last
        group's seq + 1: only an empty page means there is nothing more.
        """
        checked_ctx(ctx, "archive read")
        key = checked_key(key, "archive read")
        start_seq = checked_count(start_seq, "start_seq", "archive read")  # clamped to SQLite's integers
        # SQLite treats a negative LIMIT as "no limit"; a bound must never widen.
        limit = max(0, checked_count(max_groups, "max_groups", "archive read"))
        query = (key, start_seq, limit)
        with self._decoded_lock:
            seen = self._reads.get(query)
            epoch = self._epoch
        if seen is not None:
            ctx.raise_if_expired("archive read")
            unchanged = self._unchanged_read(query, seen, epoch, self._peek_data_version())
            if unchanged is not None:
                return unchanged

        def work(conn: sqlite3.Connection) -> tuple[int, list[MessageGroup]]:
            # The version and the rows as of the same commit (one read transaction).
            with read_transaction(conn):
                version = data_version(conn)
                rows = read_archived(conn, key, start_seq, limit)
            groups: list[MessageGroup] = []
            left: int = READ_BUDGET
            for seq, digest, data in rows:
                # The first group within the per-row bound (the same), every later one within what
                # the page has left: past it the page ends there, the group unread (the next page's first).
                group = self._cached_group(key, seq, digest, data, left if groups else JSON_BYTES)
                if group is None:
                    break
                left -= group.size_bytes
                groups.append(group)
            return version, groups

        version, groups = await self.run(ctx, "archive read", work)
        with self._decoded_lock:
            if self._epoch == epoch:
                self._reads[query] = (version, tuple(g.seq for g in groups))
                self._reads.move_to_end(query)
                if len(self._reads) > _REMEMBERED_READS:
                    self._reads.popitem(last=False)
        return groups

    def _unchanged_read(
        self,
        query: tuple[SessionKey, int, int],
        seen: tuple[int, tuple[int, ...]],
        epoch: int,
        peeked: int | None,
    ) -> list[MessageGroup] | None:
        """The remembered read's groups when nothing changed since (``peeked``), else ``None``."""
        if peeked is None or peeked != seen[0]:
            return None
        key = query[0]
        with self._decoded_lock:
            if self._epoch != epoch or self._reads.get(query) is not seen:
                return None
            found = [self._decoded.get((key, seq)) for seq in seen[1]]
            if any(entry is None for entry in found):
                return None  # a group left the decoded cache: read the rows again
            self._reads.move_to_end(query)
            for seq in seen[1]:
                self._decoded.move_to_end((key, seq))
        return [entry[1] for entry in found if entry is not None]

    def _forget_reads(self) -> None:
        """Before a write of this archive's own: no remembered read may answer after it began."""
        with self._decoded_lock:
            self._epoch += 1
            self._reads.clear()

    def _cached_group(
        self, key: SessionKey, seq: object, digest: object, data: object, room: int = JSON_BYTES
    ) -> MessageGroup | None:
        """The group of this row: the one decoded from exactly these bytes before, else decoded now.

        ``None`` (nothing decoded, at most ``room + 1`` bytes inflated) when ``room`` is less than
        the per-row bound and the group's canonical bytes would be more than ``room``.
        """
        if isinstance(seq, int) and isinstance(data, bytes):
            with self._decoded_lock:
                hit = self._decoded.get((key, seq))
                if hit is not None and hit[0] == data and isinstance(digest, str) and hit[1].digest == digest:
                    # Counted as if read: a page holds the same groups whatever this cache holds.
                    if hit[1].size_bytes > room:
                        return None
                    self._decoded.move_to_end((key, seq))
                    return hit[1]
        if room < JSON_BYTES and isinstance(data, bytes) and not is_packed(data) and len(data) > room:
            return None  # stored as it is: its bytes are its canonical bytes
        try:
            group = self._decode_group(key, seq, digest, data, room)
        except PackedRowOverBound:
            if room >= JSON_BYTES:
                raise  # _decode_group reports it as damage at the per-row bound
            return None
        assert isinstance(data, bytes) and isinstance(seq, int)  # _decode_group refused anything else
        cost = max(len(data), group.size_bytes)
        if cost <= RECENT_BYTES:
            with self._decoded_lock:
                previous = self._decoded.pop((key, seq), None)
                if previous is not None:
                    self._decoded_bytes -= previous[2]
                self._decoded[(key, seq)] = (data, group, cost)
                self._decoded_bytes += cost
                while self._decoded_bytes > RECENT_BYTES:
                    _, (_, _, dropped) = self._decoded.popitem(last=False)
                    self._decoded_bytes -= dropped
        return group

    def _decode_group(
        self, key: SessionKey, seq: object, digest: object, data: object, room: int = JSON_BYTES
    ) -> MessageGroup:
        """Decode one row strictly and re-check it; any doubt is an ``ArchiveCorruptError``.

        The stored digest must match the stored bytes, the bytes must decode
        without coercion, and the group must be the one filed under this key
        (its ``seq``, its retained scope, and the digest of its canonical bytes).
        A deflated row is inflated first, within the decoder's bound (``_sqlite_pack``), or
        within ``room`` when that is less: then a row over it raises ``PackedRowOverBound``
        (the caller's page ends before it; it is not damage at that bound).
        """

        def where() -> str:
            return f"group {seq!r} of session {key.key()} in {self._path}"

        if isinstance(data, bytes):  # a row stored as it is comes back unchanged
            try:
                data = unpack(data, min(room, JSON_BYTES))
            except PackedRowError as exc:
                if room < JSON_BYTES and isinstance(exc, PackedRowOverBound):
                    raise  # over the page's room, not the row's bound: for the caller to stop at
                raise ArchiveCorruptError(f"{where()} is damaged: {exc}") from None
        return decode_archived_group(key, seq, digest, data, where)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
        scrub: bool = True,
    ) -> EraseReport:
        """Delete the target's groups (at most ``max_items``) in one transaction, then empty the WAL.

        With ``secure_delete`` the deleted rows are zeroed in place; the WAL
        checkpoint then writes those pages into the file and truncates the
        log, so no copy of an erased group is left in either.

        ``scrub=False`` (the engine's erasure, for every SQLite store on one
        file) leaves the file's rebuild and log checkpoint to one
        :meth:`scrub_erased` call once every store on the file has erased.
        """
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "archive erase")
        checked_argument(scrub, bool, "scrub", "archive erase")
        bound = check_max_items(max_items)

        def work(conn: sqlite3.Connection) -> EraseReport:
            with immediate_transaction(conn):
                # The archive's rows and the store's rows it adopted (see _sqlite_rows).
                copies: list[int] = []  # stale store copies of the groups found (damage): deleted too
                taken, more = archived_rows_covered(conn, target, bound, copies)
                if not dry_run and (taken or copies):
                    ctx.raise_if_expired("archive erase")
                    conn.executemany("DELETE FROM groups WHERE id = ?", [(row[3],) for row in taken])
                    conn.executemany("DELETE FROM groups WHERE id = ?", [(i,) for i in copies])
                    for sid in sorted({row[4] for row in taken}):
                        drop_if_empty(conn, sid)
            physical, detail = (
                (PhysicalErasure.REMOVED, "")
                if dry_run or not scrub
                else scrub_log(conn, time_left=ctx.time_left())
            )
            # A session whose id is over its bound (key None) cannot be named: its groups are
            # counted as damaged, erased all the same; so is each stale copy of a group (a store
            # row beside the archive's own row of it), which may hold other content than the group.
            named = [(key, seq, digest) for key, seq, digest, _, _ in taken if key is not None]
            return EraseReport(
                count_items(group=len(named), damaged=len(taken) - len(named) + len(copies)),
                group_sessions(named),
                EraseStatus.PARTIAL if more else EraseStatus.COMPLETE,
                physical,
                detail,
            )

        if not dry_run:
            self._forget_reads()
        try:
            report = await self.run(ctx, "archive erase", work)
        finally:
            if not dry_run:
                self._forget_reads()  # as in append
        if not dry_run:
            # Decoded copies of erased groups leave the process too.
            with self._decoded_lock:
                for entry in report.sessions:
                    for seq, _ in entry.groups:
                        dropped = self._decoded.pop((entry.session, seq), None)
                        if dropped is not None:
                            self._decoded_bytes -= dropped[2]
        return report

    async def health(self, ctx: OpContext) -> str:
        """Run constant-time probe statements; a database file not created yet is not created."""
        return await self.probe_health(ctx, "archive health", self._health_probe)
