"""The PostgreSQL history archive: one immutable row per group, a batch in one transaction (R3).

Append inserts the whole batch with one ``INSERT ... SELECT FROM unnest(...)
ON CONFLICT DO NOTHING RETURNING seq``; the seqs it did not insert were
already stored, and one ``SELECT`` compares their digests: equal is the
idempotent success a retry or a second writer gets, different is an
:class:`~agentium_harness.plugin_api.ArchiveConflictError` that rolls the
whole batch back. Rows are never updated (a trigger refuses it, and the
application role is granted no ``UPDATE``) and never deleted except by
erasure (:meth:`PostgresArchive.erase`, :mod:`agentium_postgres.erase`).

Reads fetch whole rows by ``seq`` range under a ``LIMIT``, refuse a row over
``max_row_bytes`` (or whose digest is longer than a digest) before
transferring it, and re-check each group: its bytes against the stored
digest, strict decoding, and
:func:`~agentium_harness.plugin_api.check_archived_group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveCapabilities,
    ArchiveConflictError,
    ArchiveReceipt,
    EraseReport,
    EraseTarget,
    HistoryArchive,
    MessageGroup,
    OpContext,
    SessionKey,
    check_archived_group,
    check_max_items,
    check_target,
    decode_archived_group,
    encode_segment,
)

from .args import checked_argument, checked_count, checked_ctx, checked_groups, checked_key
from .config import PostgresConfig
from .errors import PostgresArchiveError, PostgresRowTooLargeError
from .keys import q, session_keys

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .link import Conn, PgLink

__all__ = ["GroupRow", "PostgresArchive", "group_rows", "insert_groups"]

#: Bytes of a group's digest: ``sha256:`` and 64 hex digits.
_DIGEST_BYTES: Final = len("sha256:") + 64

#: (seq, digest, canonical bytes) of one group to store.
GroupRow = tuple[int, str, bytes]


def group_rows(key: SessionKey, groups: Sequence[MessageGroup], max_bytes: int, who: str) -> list[GroupRow]:
    """Check and encode a batch before any statement; a seq repeated with equal content is one row.

    Raises :class:`ArchiveConflictError` for a seq repeated with different
    content, :class:`PostgresRowTooLargeError` for a group over ``max_bytes``,
    and :class:`ArchiveCorruptError` for a group of another session (its
    retained scope).
    """
    rows: dict[int, GroupRow] = {}
    key = checked_key(key, who)
    for group in checked_groups(groups, who):
        check_archived_group(key, group)
        data = group.canonical_bytes()
        if len(data) > max_bytes:
            raise PostgresRowTooLargeError(
                f"{who}: group {group.seq} of session {key.key()} is {len(data)} bytes, more than "
                f"max_row_bytes={max_bytes}; nothing of the batch was written"
            )
        found = rows.get(group.seq)
        if found is not None:
            if found[1] != group.digest:
                raise ArchiveConflictError(
                    f"{who}: the batch carries seq {group.seq} of session {key.key()} twice with different "
                    "content; nothing of the batch was written"
                )
            continue
        rows[group.seq] = (group.seq, group.digest, data)
    return sorted(rows.values())


async def insert_groups(conn: Conn, schema: str, key: SessionKey, rows: Sequence[GroupRow]) -> None:
    """Send the batch's insert and its conflict check inside the caller's transaction (nothing is read).

    ``INSERT ... ON CONFLICT DO NOTHING`` stores the new groups; then the
    schema's ``check_archived`` compares every group of the batch with the
    stored row (a fresh snapshot: it sees a row a concurrent writer committed
    while the insert waited) and raises SQLSTATE ``AG001`` if a digest
    differs, which aborts the transaction, its COMMIT included; the link turns
    it into :class:`ArchiveConflictError`. In pipeline mode both statements
    travel with the transaction's BEGIN and COMMIT: one round trip.
    """
    if not rows:
        return
    t, u, s = session_keys(key)
    seqs, digests = [r[0] for r in rows], [r[1] for r in rows]
    await conn.execute(
        q(
            "INSERT INTO {s}.archive_groups (tenant_key, user_key, session_key, seq, digest, data) "
            "SELECT %s, %s, %s, g.seq, g.digest, g.data "
            "FROM unnest(%s::bigint[], %s::text[], %s::bytea[]) AS g(seq, digest, data) "
            "ON CONFLICT DO NOTHING",
            schema,
        ),
        (t, u, s, seqs, digests, [r[2] for r in rows]),
    )
    await conn.execute(
        q("SELECT {s}.check_archived(%s, %s, %s, %s::bigint[], %s::text[])", schema),
        (t, u, s, seqs, digests),
    )


async def read_groups(
    conn: Conn,
    schema: str,
    key: SessionKey,
    start_seq: int,
    limit: int,
    max_bytes: int,
    where: str,
    budget: int | None = None,
) -> list[MessageGroup]:
    """Up to ``limit`` whole groups with ``seq >= start_seq``, ascending, each re-checked.

    ``budget``: the page ends before the group that would take the bytes it returns past it (the
    first group always comes back, within ``max_bytes``); the archive's reads pass
    ``max_row_bytes``. ``octet_length`` of a value TOAST compressed is its full size, read from
    its header: a table of tiny compressed rows cannot make one read transfer many times that.
    """
    if limit <= 0:
        return []
    t, u, s = session_keys(key)
    cursor = await conn.execute(
        q(
            # The digest is capped too (a digest is 71 bytes): one grown behind the archive's back
            # was transferred whole before the check below refused it.
            "SELECT seq, CASE WHEN octet_length(digest) <= %s THEN digest END, octet_length(digest), "
            "CASE WHEN octet_length(data) <= %s THEN data END, octet_length(data) "
            "FROM (SELECT seq, digest, data, row_number() OVER w AS n, "
            "sum(octet_length(data)) OVER w AS running "
            "FROM {s}.archive_groups "
            "WHERE tenant_key = %s AND user_key = %s AND session_key = %s AND seq >= %s "
            "WINDOW w AS (ORDER BY seq) ORDER BY seq LIMIT %s) AS page "
            "WHERE n = 1 OR %s::bigint IS NULL OR running <= %s::bigint ORDER BY seq",
            schema,
        ),
        (_DIGEST_BYTES, max_bytes, t, u, s, max(0, start_seq), limit, budget, budget),
    )
    out = []
    session = key.key()
    for seq, digest, digest_size, data, size in await cursor.fetchall():
        if digest is None:
            raise PostgresRowTooLargeError(
                f"{where}: group {seq} of session {key.key()} has a stored digest of {digest_size} bytes "
                f"(a digest is {_DIGEST_BYTES}); the row is damaged and was not read"
            )
        if data is None:
            raise PostgresRowTooLargeError(
                f"{where}: group {seq} of session {key.key()} is {size} bytes, more than "
                f"max_row_bytes={max_bytes}; not read"
            )
        out.append(
            decode_archived_group(
                key, seq, digest, bytes(data), f"{where}: group {seq!r} of session {session}"
            )
        )
    return out


class PostgresArchive(HistoryArchive):
    """An append-only history archive in PostgreSQL (``archive_groups``), one transaction per batch.

    Build it from :class:`~agentium_postgres.config.PostgresConfig`, optionally
    lending it a ``psycopg_pool.AsyncConnectionPool`` (``pool=``) or an
    ``AsyncConnection`` (``connection=``), which it then never closes.
    Building does no I/O.
    """

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        durable=True, idempotent_append=True, bounded_reads=True, health_check=True, erasure=True
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
            family=PostgresArchiveError,
            name="postgres archive",
            needs=("schema_meta", "archive_groups"),
        )

    @property
    def config(self) -> PostgresConfig:
        """The options this archive was built with."""
        return self._config

    @property
    def link(self) -> PgLink:
        """The connection link (owned or lent pool or connection)."""
        return self._link

    def location(self, key: SessionKey, seq: int) -> str:
        """Where group ``seq`` of ``key`` is stored, for its receipt (no password)."""
        return f"{self._config.server()}#{self._config.schema}.archive_groups/{key.key()}/{seq}"

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Append the batch in one transaction: all of it stored (or already stored equal), or nothing."""
        checked_ctx(ctx, "archive append").raise_if_expired("archive append")
        rows = group_rows(key, groups, self._config.max_row_bytes, self._link.name)
        if rows:
            schema = self._config.schema

            async def work(conn: Conn) -> None:
                await insert_groups(conn, schema, key, rows)

            await self._link.run(ctx, "archive append", key.key_segments()[0], work)
        return [ArchiveReceipt(g.seq, g.digest, self.location(key, g.seq)) for g in groups]

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` whole groups with ``seq >= start_seq``, ascending, each re-checked.

        A page returns at most ``max_row_bytes`` of group bytes (its first group whatever its
        size): it may be shorter than asked, never empty while a later group is stored. Read on
        from the last group's seq + 1; only an empty page means there is nothing more.
        """
        checked_ctx(ctx, "archive read").raise_if_expired("archive read")
        key = checked_key(key, "archive read")
        start_seq = checked_count(start_seq, "start_seq", "archive read")
        max_groups = checked_count(max_groups, "max_groups", "archive read")
        schema, cap = self._config.schema, self._config.max_row_bytes

        async def work(conn: Conn) -> list[MessageGroup]:
            return await read_groups(conn, schema, key, start_seq, max_groups, cap, self._link.name, cap)

        return await self._link.run(ctx, "archive read", key.key_segments()[0], work, write=False)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete up to ``max_items`` archived groups of ``target`` in one transaction (docs/erasure.md).

        The rows leave every read at once; PostgreSQL keeps their dead
        versions until ``VACUUM`` and in its write-ahead log, which the report
        says (``unreferenced``). Needs ``DELETE`` on ``archive_groups``.
        """
        checked_ctx(ctx, "archive erase").raise_if_expired("archive erase")
        check_target(target)
        # Exactly a bool: 0 erased for real, "no" ran a dry run (the core's adapters refuse both).
        checked_argument(dry_run, bool, "dry_run", "archive erase")
        bound = check_max_items(max_items)
        schema = self._config.schema

        from .erase import erase_archive

        async def work(conn: Conn) -> EraseReport:
            return await erase_archive(conn, schema, target, bound, dry_run)

        tenant = encode_segment(target.tenant_id)
        return await self._link.run(ctx, "archive erase", tenant, work, write=not dry_run)

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed, check the schema and privileges, and describe the server."""
        return await health_probe(self._link, ctx, "archive health")

    async def aclose(self) -> None:
        """Close the pool this archive created; a lent pool or connection is left open. Idempotent."""
        await self._link.aclose()


async def health_probe(link: PgLink, ctx: OpContext, operation: str) -> str:
    """A bounded probe (``SELECT 1`` after the first-use checks) and what the link learnt."""

    async def work(conn: Conn) -> None:
        await conn.execute("SELECT 1")

    await link.run(ctx, operation, None, work, write=False)
    facts = link.facts
    assert facts is not None
    rls = "bypasses row-level security" if facts.bypasses_row_security else "row-level security enforced"
    return (
        f"{link.name} ok: {link.config.server()}, PostgreSQL {facts.server_version}, schema "
        f"{link.config.schema!r} v{facts.schema_version}, role {facts.role!r} ({rls}), "
        f"{'lent' if link.lent else 'owned'} connections"
    )
