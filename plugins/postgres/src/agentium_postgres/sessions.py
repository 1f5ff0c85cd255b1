"""The PostgreSQL session store: compare-and-set snapshots, and archive-and-boundary in one transaction.

- **Create** (``expected_revision=None``): ``INSERT ... ON CONFLICT DO NOTHING
  RETURNING revision``; no row back means the session exists. The new
  session's revision is one past the store's revision floor
  (``session_revision_floor``, raised by every erase to the highest revision
  it removed), so revisions of an erased session never repeat under its id.
- **Replace**: ``UPDATE ... SET revision = revision + 1 ... WHERE revision =
  expected RETURNING revision``. Two writers on one base serialize on the
  row lock; the second re-reads the row after the first commits, finds
  another revision and updates nothing: exactly one wins, across processes.
- **Joint commit** (``joint_archive_commit``): when the archive is a
  :class:`~agentium_postgres.archive.PostgresArchive` on the same database and
  schema, the evicted groups and the new snapshot are written in one
  transaction, so no crash can leave the boundary ahead of the archive (R3)
  and a turn costs one commit.

Snapshots are stored as their exact canonical bytes
(:func:`~agentium_harness.plugin_api.snapshot_bytes`) and loaded through
:func:`~agentium_harness.plugin_api.decode_snapshot` (strict, digest and
canonical form checked); a damaged row raises ``SnapshotCorruptError`` and is
left as it is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, LiteralString

from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    AgentiumError,
    ArchiveReceipt,
    EraseReport,
    EraseTarget,
    HistoryArchive,
    MessageGroup,
    OpContext,
    SessionConflictError,
    SessionKey,
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    SnapshotCorruptError,
    StoredSnapshot,
    check_max_items,
    check_snapshot_scope,
    check_target,
    decode_snapshot,
    encode_segment,
    snapshot_bytes,
    verify_snapshot,
)

from .archive import PostgresArchive, group_rows, health_probe, insert_groups
from .args import checked_argument, checked_count, checked_ctx, checked_expected_revision, checked_key
from .config import PostgresConfig
from .errors import PostgresRowTooLargeError, PostgresSessionStoreError
from .keys import q, session_keys

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .link import Conn, PgLink

__all__ = ["PostgresSessionStore"]

#: Bytes of a stored session id: at most 256 characters, at most 4 bytes each in UTF-8.
_ID_BYTES: Final = 4 * 256

#: Bytes of snapshot rows a store keeps decoded (most recently used first), so a load that finds
#: the bytes it last wrote or decoded skips decoding them again.
_RECENT_BYTES: Final = 8 * 1024 * 1024


async def _revision(written: Any) -> int:
    """The revision a committed compare-and-set returned."""
    row = await written.fetchone()
    if row is None or not isinstance(row[0], int):
        raise PostgresSessionStoreError(f"postgres session store: the server returned no revision ({row!r})")
    return int(row[0])


class PostgresSessionStore(SessionStore):
    """Revisioned session snapshots in PostgreSQL (``session_snapshots``), saved with compare-and-set.

    Build it from :class:`~agentium_postgres.config.PostgresConfig`, optionally
    lending it a pool (``pool=``) or a connection (``connection=``), which it
    then never closes. Building does no I/O.
    """

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True,
        durable=True,
        listing=True,
        health_check=True,
        joint_archive_commit=True,
        erasure=True,
    )

    def __init__(
        self,
        config: PostgresConfig,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Any = None,
    ) -> None:
        # Imported here, not at module level: listing the plugin must not load the client library.
        from .link import PgLink

        self._config = config
        self._link = PgLink(
            config,
            pool=pool,
            connection=connection,
            family=PostgresSessionStoreError,
            name="postgres session store",
            needs=("schema_meta", "session_snapshots", "session_revision_floor"),
        )
        self._recent: OrderedDict[SessionKey, tuple[int, bytes, SessionSnapshot]] = OrderedDict()
        self._recent_bytes = 0

    @property
    def config(self) -> PostgresConfig:
        """The options this store was built with."""
        return self._config

    @property
    def link(self) -> PgLink:
        """The connection link (owned or lent pool or connection)."""
        return self._link

    # -- load -----------------------------------------------------------------------------------

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """The snapshot and its revision, or ``None``; a damaged row raises ``SnapshotCorruptError``."""
        checked_ctx(ctx, "session load").raise_if_expired("session load")
        key = checked_key(key, "session load")
        t, u, s = session_keys(key)
        cap = self._config.max_row_bytes

        async def work(conn: Conn) -> Any:
            # Left unread: the SELECT travels with BEGIN and COMMIT in one round trip.
            return await conn.execute(
                q(
                    "SELECT revision, CASE WHEN octet_length(data) <= %s THEN data END, octet_length(data) "
                    "FROM {s}.session_snapshots WHERE tenant_key = %s AND user_key = %s AND session_key = %s",
                    self._config.schema,
                ),
                (cap, t, u, s),
            )

        cursor = await self._link.run(ctx, "session load", t, work, write=False)
        row = await cursor.fetchone()
        if row is None:
            self._forget(key)
            return None
        revision, data, size = row
        where = f"postgres session store: snapshot of session {key.key()}"
        if data is None:
            raise PostgresRowTooLargeError(
                f"{where} is {size} bytes, more than max_row_bytes={cap}; not loaded"
            )
        if not isinstance(revision, int) or revision < 1:
            raise SnapshotCorruptError(f"{where} has an invalid revision {revision!r}; nothing was changed")
        raw = bytes(data)
        recent = self._recent.get(key)
        if recent is not None and recent[0] == revision and recent[1] == raw:
            # Exactly the bytes this store last wrote or decoded for this revision: the same snapshot.
            self._recent.move_to_end(key)
            return StoredSnapshot(snapshot=recent[2], revision=revision)
        snapshot = decode_snapshot(key, raw, where)
        self._remember(key, revision, raw, snapshot)
        return StoredSnapshot(snapshot=snapshot, revision=revision)

    def _remember(self, key: SessionKey, revision: int, data: bytes, snapshot: SessionSnapshot) -> None:
        self._forget(key)
        if len(data) > _RECENT_BYTES:
            return
        self._recent[key] = (revision, data, snapshot)
        self._recent_bytes += len(data)
        while self._recent_bytes > _RECENT_BYTES:
            _, (_, dropped, _) = self._recent.popitem(last=False)
            self._recent_bytes -= len(dropped)

    def _forget(self, key: SessionKey) -> None:
        previous = self._recent.pop(key, None)
        if previous is not None:
            self._recent_bytes -= len(previous[1])

    # -- save -----------------------------------------------------------------------------------

    def _snapshot_data(self, key: SessionKey, snapshot: SessionSnapshot, operation: str) -> bytes:
        verify_snapshot(
            checked_key(key, operation), checked_argument(snapshot, SessionSnapshot, "snapshot", operation)
        )
        # Stored, another session's snapshot would only be refused by the engine's next load of the key.
        check_snapshot_scope(key, snapshot, "postgres session store")
        data = snapshot_bytes(snapshot)
        if len(data) > self._config.max_row_bytes:
            raise PostgresRowTooLargeError(
                f"postgres session store: the snapshot of session {key.key()} is {len(data)} bytes, more "
                f"than max_row_bytes={self._config.max_row_bytes}; nothing was written"
            )
        return data

    async def _queue_cas(self, conn: Conn, key: SessionKey, data: bytes, expected: int | None) -> Any:
        """Send the compare-and-set write; its cursor (unread) yields the new revision.

        The schema's ``check_revision`` raises SQLSTATE ``AG002`` when no row
        was written (another revision, or none, is stored), which aborts the
        transaction, its COMMIT included; the link turns it into
        :class:`~agentium_harness.plugin_api.SessionConflictError`. Creation is an insert that does
        nothing when the session exists; a replacement an update that does
        nothing unless the stored revision is ``expected``.
        """
        t, u, s = session_keys(key)
        if expected is None:
            # A new session starts past the revision floor (1 in a store nothing was erased from),
            # so no revision an erased session had under this id can be presented again. The floor's
            # row is locked FOR SHARE in this statement: an erase locks it FOR UPDATE after its reads,
            # before it deletes anything, and raises it before it commits (erase.py), so a create
            # racing an erase's DELETE either runs wholly before it (the session then exists and is
            # not one the erase deletes, or the erase listed and holds it and the insert does
            # nothing) or waits for its COMMIT, and then, under READ COMMITTED,
            # the lock returns the row's newest version: the raised floor, never the one the
            # statement's snapshot saw. Under REPEATABLE READ or SERIALIZABLE (a lent connection in
            # its own transaction mode) the same race fails with a serialization error instead.
            write: LiteralString = (
                "INSERT INTO {s}.session_snapshots "
                "(tenant_key, user_key, session_key, session_id, revision, data) "
                "SELECT %s, %s, %s, %s, f.revision + 1, %s FROM ("
                "SELECT revision FROM {s}.session_revision_floor WHERE singleton FOR SHARE) AS f "
                "ON CONFLICT DO NOTHING RETURNING revision"
            )
            args: tuple[Any, ...] = (t, u, s, key.session, data)
        else:
            write = (
                "UPDATE {s}.session_snapshots SET revision = revision + 1, data = %s, saved_at = now() "
                "WHERE tenant_key = %s AND user_key = %s AND session_key = %s AND revision = %s "
                "RETURNING revision"
            )
            args = (data, t, u, s, expected)
        return await conn.execute(
            q(
                # Only the constant text above is concatenated; every value is a parameter.
                "WITH w AS (" + write + ") "  # noqa: S608
                "SELECT {s}.check_revision((SELECT revision FROM w), %s, %s, %s, %s::bigint)",
                self._config.schema,
            ),
            (*args, t, u, s, expected),
        )

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Compare-and-set: store only over ``expected_revision`` (``None``: only if absent); new revision."""
        checked_ctx(ctx, "session save").raise_if_expired("session save")
        data = self._snapshot_data(key, snapshot, "session save")
        expected_revision = checked_expected_revision(expected_revision, "session save")

        async def work(conn: Conn) -> Any:
            # Left unread: the write travels with BEGIN and COMMIT in one round trip.
            return await self._queue_cas(conn, key, data, expected_revision)

        written = await self._cas(ctx, "session save", key, expected_revision, work)
        revision = await _revision(written)
        self._remember(key, revision, data, snapshot)
        return revision

    async def _cas(
        self, ctx: OpContext, operation: str, key: SessionKey, expected: int | None, work: Any
    ) -> Any:
        """Run a compare-and-set ``work``; a create refused for want of the revision floor's row says so.

        A create inserts nothing when the floor's row is missing (it selects
        floor + 1 from that row), and ``check_revision`` then reports a
        conflict with no snapshot on either side: "another writer committed
        first, reload and retry", which no retry would ever get past. Only on
        that refusal is the row looked for (one more read); a look that fails
        leaves the conflict as it was.
        """
        try:
            return await self._link.run(ctx, operation, key.key_segments()[0], work)
        except SessionConflictError as conflict:
            if expected is not None:
                raise
            try:
                present = await self._floor_present(ctx, operation)
            except AgentiumError:
                raise conflict from None
            if present:
                raise
            raise PostgresSessionStoreError(
                f"postgres session store: {operation} refused: the session revision floor's row is "
                "missing, so a session created now could repeat an erased session's revisions; nothing "
                "was written. Restore the row as the schema's owner, at a revision no lower than any "
                "session's ever was"
            ) from None

    async def _floor_present(self, ctx: OpContext, operation: str) -> bool:
        """Whether the revision floor's one row exists (it holds no tenant's data: no tenant is set)."""

        async def work(conn: Conn) -> Any:
            return await conn.execute(
                q("SELECT 1 FROM {s}.session_revision_floor WHERE singleton", self._config.schema)
            )

        cursor = await self._link.run(ctx, operation, None, work, write=False)
        return await cursor.fetchone() is not None

    # -- joint commit ---------------------------------------------------------------------------

    def shares_transactions_with(self, archive: object) -> bool:
        """True when ``archive`` is an open PostgreSQL archive on this store's database and schema.

        Not when the archive requires row-level security and this store does not: the joint
        commit runs on this store's connections, whose first use checks only this store's options,
        and wrote the archive's groups as a role the archive itself refuses.
        """
        return (
            isinstance(archive, PostgresArchive)
            and self._link.shares_database_with(archive.link)
            and (self._config.require_row_security or not archive.config.require_row_security)
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
        """Insert ``groups`` into the archive's table and save ``snapshot`` in ONE transaction.

        Both commit or neither does. Conflicts raise what the separate calls
        raise (``ArchiveConflictError`` first, then ``SessionConflictError``)
        and write nothing; so does a group over the archive's ``max_row_bytes``
        (``PostgresRowTooLargeError``), as its append would.
        """
        checked_ctx(ctx, "session commit with archive").raise_if_expired("session commit with archive")
        if not self.shares_transactions_with(archive):
            raise PostgresSessionStoreError(
                "postgres session store: commit_with_archive needs an open PostgresArchive on the same "
                "database and schema; nothing was written"
            )
        assert isinstance(archive, PostgresArchive)
        # The archive's own bound, as its append applies: a group past it, written here, was
        # committed behind the boundary and then refused by every archive read.
        rows = group_rows(key, groups, archive.config.max_row_bytes, archive.link.name)
        data = self._snapshot_data(key, snapshot, "session commit with archive")
        expected_revision = checked_expected_revision(expected_revision, "session commit with archive")
        schema = self._config.schema

        async def work(conn: Conn) -> Any:
            # The groups, their check, the snapshot and its check travel with BEGIN and COMMIT in
            # one round trip (pipeline mode); the archive's check runs first, so conflicts surface
            # as the separate calls would raise them, and either aborts the COMMIT.
            await insert_groups(conn, schema, key, rows)
            return await self._queue_cas(conn, key, data, expected_revision)

        written = await self._cas(ctx, "session commit with archive", key, expected_revision, work)
        revision = await _revision(written)
        self._remember(key, revision, data, snapshot)
        return revision, [ArchiveReceipt(g.seq, g.digest, archive.location(key, g.seq)) for g in groups]

    # -- listing, health, lifecycle -------------------------------------------------------------

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids of one user after ``after`` (when given), sorted by code point.

        Ids are ordered ``COLLATE "C"`` on UTF-8, the same order as ``sorted()``. A row whose
        id is longer than an id or does not match its key raises ``SnapshotCorruptError``.
        """
        checked_ctx(ctx, "session listing").raise_if_expired("session listing")
        # The ids as a key would have them (InvalidIdError, nothing sent): a lone surrogate or a NUL
        # reached the driver or the server as an untyped error.
        SessionKey(tenant, user, "-" if after is None else after)
        limit = checked_count(limit, "limit", "session listing")
        if limit <= 0:
            return []
        t, u = encode_segment(tenant), encode_segment(user)

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            # The id capped (no id is longer than 256 characters, 4 bytes each): one grown behind the
            # store's back comes back NULL, unread. Its key comes along to check the id against.
            cursor = await conn.execute(
                q(
                    "SELECT CASE WHEN octet_length(session_id) <= %s THEN session_id END, "
                    "octet_length(session_id), session_key FROM {s}.session_snapshots "
                    "WHERE tenant_key = %s AND user_key = %s "
                    "AND session_id > %s ORDER BY session_id LIMIT %s",
                    self._config.schema,
                ),
                (_ID_BYTES, t, u, "" if after is None else after, limit),
            )
            return [tuple(r) for r in await cursor.fetchall()]

        rows = await self._link.run(ctx, "session listing", t, work, write=False)
        where = f"postgres session store: a session row of tenant {tenant!r}, user {user!r}"
        for session, size, key in rows:
            if session is None:
                raise SnapshotCorruptError(
                    f"{where} has a session id of {size} bytes (at most {_ID_BYTES}); the row is "
                    "damaged and was not transferred"
                )
            # The id the listing returns must be the one its key encodes (the key is what loads,
            # saves and erasures use): one changed alone would list a session that does not load.
            if not isinstance(session, str) or encode_segment(session) != key:
                raise SnapshotCorruptError(
                    f"{where} has a session id that does not match its key; the row is damaged"
                )
        return [str(r[0]) for r in rows]

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete up to ``max_items`` snapshots of ``target`` in one transaction (docs/erasure.md).

        A groups target removes nothing here. The decoded copies this store
        keeps of the erased sessions are dropped too. Needs ``DELETE`` on
        ``session_snapshots``; PostgreSQL keeps dead row versions until
        ``VACUUM`` (the report says ``unreferenced``).
        """
        checked_ctx(ctx, "session store erase").raise_if_expired("session store erase")
        check_target(target)
        # Exactly a bool: 0 erased for real, "no" ran a dry run (the core's adapters refuse both).
        checked_argument(dry_run, bool, "dry_run", "session store erase")
        bound = check_max_items(max_items)
        schema = self._config.schema

        from .erase import erase_snapshots

        async def work(conn: Conn) -> tuple[EraseReport, list[SessionKey]]:
            return await erase_snapshots(conn, schema, target, bound, dry_run, self._config.max_row_bytes)

        tenant = encode_segment(target.tenant_id)
        if not dry_run:
            # Before the write, like a save: an erase that raised may still have committed.
            for key in [k for k in self._recent if target.covers_session(k)]:
                self._forget(key)
        report, _ = await self._link.run(ctx, "session store erase", tenant, work, write=not dry_run)
        return report

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed, check the schema and privileges, and describe the server."""
        return await health_probe(self._link, ctx, "session store health")

    async def aclose(self) -> None:
        """Close the pool this store created; a lent pool or connection is left open. Idempotent."""
        await self._link.aclose()
