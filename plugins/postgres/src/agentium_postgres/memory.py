"""The PostgreSQL memory store: durable, revisioned, forgettable facts (``memory_facts``).

One row per revision, keyed by (tenant, fact id, revision); owner key
segments (tenant, user, optional project and repository), status, text, the
validity window (``timestamptz``), provenance (canonical JSON), when it was
recorded, a digest of what makes two facts duplicates (scope, text,
validity) and a row digest over every stored field that means something
(:mod:`agentium_postgres.memory_rows`, schema version 4). Both are checked
on every row read back, the duplicate ``remember`` finds, the revisions
``forget`` rewrites and the rows a session erasure matches included, before
the row is acted on: a column changed behind the store's back (a provenance
naming another session, a status, revision or ``recorded_at`` rewritten)
raises ``PostgresMemoryError`` and nothing is changed. Every write is one
transaction:

- ``remember`` writes revision 1 under a fresh random id, unless a current
  fact of the same scope has the same content: a duplicate, nothing
  written, unless it cites groups the current revision does not, which are
  kept as the fact's next revision (``merged_provenance``; under the fact's
  lock, as a correction). A transaction-level advisory lock on (tenant,
  user, content) keeps two concurrent identical writes from both storing;
- ``correct`` locks the latest revision, marks it superseded and writes the
  next one (at most ``MAX_FACT_REVISIONS`` per fact); corrections and
  forgets of one fact serialize on an advisory lock, so each applies to the
  revision the previous one left;
- ``forget`` removes the text, validity and provenance of every revision (one
  bounded read, one ``UPDATE``) and adds a tombstone revision that keeps only
  the ids of the sessions the provenance named, so a session erasure still
  removes it. A fact holding more than ``MAX_FACT_REVISIONS`` revisions
  (damage, or written before the cap) is refused with ``PostgresMemoryError``
  and nothing changes: erase its user or sessions instead.

A fact of another tenant or user reads exactly like a missing one. Lookups
filter scope, status and validity in SQL before their ``LIMIT``, so a
foreign, expired or forgotten fact can neither be returned nor take a place;
query words (at most 32, each bound) are matched with ``strpos`` on the
lower-cased text, never as patterns. Row-level security binds every
statement to the scope's tenant.

Erasure (:meth:`PostgresMemoryStore.erase`, docs/erasure.md) deletes every
revision of each covered fact, tombstones included, under the same tenant
setting (:mod:`agentium_postgres.erase`); the engine keeps the tombstone of
the erasure itself. A session erasure takes a damaged fact whose provenance
names the session, and stops, typed, at a damaged fact naming none (it may
have been edited away from the session): see ``erase._SessionScan``.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, LiteralString

from agentium_harness import (
    InvalidArgumentError,
    InvalidIdError,
    MemoryFactForgottenError,
    MemoryFactNotFoundError,
    MemoryRejectedError,
)
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    MAX_FACT_REVISIONS,
    MAX_LOOKUP_LIMIT,
    AckStatus,
    EraseReport,
    EraseTarget,
    FactStatus,
    GroupRef,
    MemoryAck,
    MemoryCapabilities,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    OpContext,
    StoredFact,
    check_at,
    check_fact,
    check_limit,
    check_max_items,
    check_revision,
    check_target,
    encode_segment,
    merged_provenance,
    query_terms,
)

from .archive import health_probe
from .args import checked_argument as checked_arg
from .args import checked_ctx
from .config import PostgresConfig
from .errors import PostgresMemoryError
from .memory_rows import (
    COLUMNS,
    INSERT,
    content_digest,
    decode,
    provenance_refs,
    read_bounds,
    rewritten_row_digest,
    row_values,
)

if TYPE_CHECKING:
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool

    from .link import Conn, PgLink

__all__ = ["PostgresMemoryStore", "new_fact_id"]

#: How often ``remember`` looks again for the duplicate it merges into when a correction, a
#: forget or an erasure of that fact committed between its read and the fact's lock (each try
#: then finds the fact changed: another current duplicate, or none).
_MERGE_TRIES = 4


def new_fact_id() -> str:
    """A fresh fact id: ``m-`` and 32 random hex digits (never derived from content or scope)."""
    return "m-" + secrets.token_hex(16)


def _fact_id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 256:
        raise InvalidIdError("fact id", "must be a non-empty string of at most 256 characters")
    if any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise InvalidIdError("fact id", "contains a control character or a lone surrogate")
    return value


def _not_found(fact_id: str) -> MemoryFactNotFoundError:
    # One message whether the id is missing or another tenant's: a refusal reveals nothing. Nor does
    # it name the id (hosts log error texts; an id is content, named only with capture, which a store
    # cannot see): the error's fact_id holds it.
    return MemoryFactNotFoundError(
        "no fact with this id in this tenant and user; nothing was changed", fact_id
    )


def _segment(value: str | None) -> str | None:
    return None if value is None else encode_segment(value)


@functools.cache
def _statement(template: LiteralString, schema: str, row_cap: int) -> sql.Composed:
    """``template`` with the quoted schema and the read bounds of ``COLUMNS`` (integers) as literals."""
    from psycopg import sql  # not at module level: listing the plugin must not load the client

    return sql.SQL(template).format(s=sql.Identifier(schema), **read_bounds(row_cap))


class PostgresMemoryStore(MemoryStore):
    """Durable memory in PostgreSQL: revisions, tombstones, bounded scoped lookups, one transaction per write.

    Build it from :class:`~agentium_postgres.config.PostgresConfig`, optionally
    lending it a pool (``pool=``) or a connection (``connection=``), which it
    then never closes. Building does no I/O.
    """

    capabilities: ClassVar[MemoryCapabilities] = MemoryCapabilities(
        acknowledged_writes=True,
        durable=True,
        correction=True,
        forgetting=True,
        listing=True,
        history=True,
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
            family=PostgresMemoryError,
            name="postgres memory store",
            needs=("schema_meta", "memory_facts"),
        )

    @property
    def config(self) -> PostgresConfig:
        """The options this store was built with."""
        return self._config

    @property
    def link(self) -> PgLink:
        """The connection link (owned or lent pool or connection)."""
        return self._link

    def _q(self, template: LiteralString) -> Any:
        return _statement(template, self._config.schema, self._config.max_row_bytes)

    def _over_cap(self, values: Sequence[Any]) -> str | None:
        """Why no read would take the row of ``values`` (:func:`row_values`), or ``None``.

        Reads refuse a provenance over ``max_row_bytes`` (see ``COLUMNS``), which may be as
        small as 1 KiB: a row written past it could never be read, corrected or forgotten.
        """
        size = len(str(values[11]).encode("utf-8"))
        cap = self._config.max_row_bytes
        if size <= cap:
            return None
        return f"its provenance takes {size} bytes stored, over max_row_bytes ({cap})"

    async def _latest(
        self, conn: Conn, scope: MemoryScope, fact_id: str, *, lock: bool
    ) -> tuple[StoredFact, Sequence[Any]]:
        """The latest revision of ``fact_id`` (decoded, and its verified row) if ``scope`` owns it.

        Another tenant's or user's fact, or none, raises the not-found refusal.

        ``lock``: for a write. Writers of one fact first serialize on a
        transaction-level advisory lock, so the read below (a fresh snapshot,
        taken once the lock is held) finds the revision a concurrent writer
        just committed. Locking the latest row alone did not: the second of two
        corrections (or a correction and a forget) re-read the revision the
        first had superseded, wrote the same next revision, and failed with a
        bare "duplicate key" error.
        """
        if lock:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"memory fact {encode_segment(scope.tenant)} {fact_id}",),
            )
        cursor = await conn.execute(
            self._q(
                "SELECT " + COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s AND fact_id = %s "  # noqa: S608
                "ORDER BY revision DESC LIMIT 1" + (" FOR UPDATE" if lock else "")
            ),
            (encode_segment(scope.tenant), fact_id),
        )
        row = await cursor.fetchone()
        # Ownership is checked on the raw key before decoding: another user's row, damaged or
        # not, is refused exactly like a missing one.
        if row is None or row[3] != encode_segment(scope.user):
            raise _not_found(fact_id)
        return decode(row), row

    # -- writes -------------------------------------------------------------------------------

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Write ``fact`` as revision 1 of a new id, or acknowledge the current duplicate."""
        checked_ctx(ctx, "memory remember").raise_if_expired("memory remember")
        check_fact(fact)
        digest = content_digest(fact)
        fact_id = new_fact_id()
        now = datetime.now(UTC)
        values = row_values(fact_id, 1, FactStatus.CURRENT, fact, now)
        if (why := self._over_cap(values)) is not None:
            raise MemoryRejectedError(f"the fact cannot be stored: {why}; nothing was written")
        t, u = values[0], values[3]

        async def work(conn: Conn) -> MemoryAck:
            # Two identical remembers in flight serialize here, so only one stores (or merges).
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memory {t} {u} {digest}",))
            for _ in range(_MERGE_TRIES):
                cursor = await conn.execute(
                    self._q(
                        "SELECT " + COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s "  # noqa: S608
                        "AND user_key = %s AND status = 'current' AND content_digest = %s LIMIT 1"
                    ),
                    (t, u, digest),
                )
                row = await cursor.fetchone()
                if row is None:
                    await conn.execute(self._q(INSERT), values)
                    return MemoryAck(AckStatus.STORED, fact_id, 1, durable=True)
                # Decoded, not only found by its digest column: a row whose content was changed
                # behind the store's back is refused, never acknowledged as holding the fact.
                dup = decode(row)
                merged = merged_provenance(dup.fact.provenance, fact.provenance)
                if merged is None:
                    return MemoryAck(AckStatus.DUPLICATE, dup.fact_id, dup.revision, durable=True)
                # The groups this remember adds are kept as the fact's next revision (dropped, erasing
                # a session only they name would leave the fact). A correction or forget of the fact
                # holds its lock, not this one: once it is held, the fact is read again.
                try:
                    latest, latest_row = await self._latest(conn, dup.fact.scope, dup.fact_id, lock=True)
                except MemoryFactNotFoundError:
                    continue  # erased meanwhile: no longer a duplicate of anything
                if (latest.revision, latest.status) == (dup.revision, FactStatus.CURRENT):
                    return await self._merge(conn, latest, latest_row, merged, now)
            raise PostgresMemoryError(
                f"memory remember: the duplicate fact changed under each of {_MERGE_TRIES} tries; "
                "nothing was written (try again)"
            )

        return await self._link.run(ctx, "memory remember", t, work)

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        """Supersede the latest revision of ``fact_id`` with ``replacement`` (one transaction)."""
        checked_ctx(ctx, "memory correct").raise_if_expired("memory correct")
        scope = checked_arg(scope, MemoryScope, "scope", "memory correct")
        _fact_id(fact_id)
        check_fact(replacement)
        if not scope.owns(replacement.scope):
            raise _not_found(fact_id)
        digest = content_digest(replacement)
        now = datetime.now(UTC)

        async def work(conn: Conn) -> MemoryAck:
            latest, row = await self._latest(conn, scope, fact_id, lock=True)
            if latest.status is FactStatus.FORGOTTEN:
                raise MemoryFactForgottenError(
                    "the fact was forgotten; it cannot be corrected (remember a new fact instead)", fact_id
                )
            if content_digest(latest.fact) == digest:
                # A duplicate, as a remember's: the groups it adds are kept as the next revision.
                merged = merged_provenance(latest.fact.provenance, replacement.provenance)
                if merged is None:
                    return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
                return await self._merge(conn, latest, row, merged, now)
            return await self._supersede(conn, latest, row, replacement, now, "replacement")

        return await self._link.run(ctx, "memory correct", encode_segment(scope.tenant), work)

    async def _supersede(
        self, conn: Conn, latest: StoredFact, row: Sequence[Any], fact: MemoryFact, now: datetime, what: str
    ) -> MemoryAck:
        """Write ``fact`` as the revision after ``latest`` (its verified ``row``), which becomes superseded.

        Inside the caller's transaction, with the fact's lock held. Past the revision cap or
        ``max_row_bytes`` it raises :class:`MemoryRejectedError`: the transaction rolls back, nothing written.
        """
        check_revision(latest.revision)
        values = row_values(latest.fact_id, latest.revision + 1, FactStatus.CURRENT, fact, now)
        if (why := self._over_cap(values)) is not None:
            raise MemoryRejectedError(f"the {what} cannot be stored: {why}")
        await conn.execute(
            self._q(
                "UPDATE {s}.memory_facts SET status = 'superseded', row_digest = %s "
                "WHERE tenant_key = %s AND fact_id = %s AND revision = %s"
            ),
            (
                rewritten_row_digest(row, FactStatus.SUPERSEDED),
                encode_segment(latest.scope.tenant),
                latest.fact_id,
                latest.revision,
            ),
        )
        await conn.execute(self._q(INSERT), values)
        return MemoryAck(AckStatus.STORED, latest.fact_id, latest.revision + 1, durable=True)

    async def _merge(
        self, conn: Conn, latest: StoredFact, row: Sequence[Any], merged: tuple[GroupRef, ...], now: datetime
    ) -> MemoryAck:
        """A duplicate's new groups: the current revision again, citing ``merged``, as the next one."""
        kept = MemoryFact(
            latest.fact.scope, latest.fact.text, latest.fact.valid_from, latest.fact.valid_until, merged
        )
        return await self._supersede(conn, latest, row, kept, now, "merged provenance")

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        """Remove the content of every revision of ``fact_id`` and add a tombstone revision."""
        checked_ctx(ctx, "memory forget").raise_if_expired("memory forget")
        scope = checked_arg(scope, MemoryScope, "scope", "memory forget")
        _fact_id(fact_id)
        now = datetime.now(UTC)
        tenant = encode_segment(scope.tenant)

        async def work(conn: Conn) -> MemoryAck:
            latest, _ = await self._latest(conn, scope, fact_id, lock=True)
            if latest.status is FactStatus.FORGOTTEN:
                return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
            cursor = await conn.execute(
                self._q(
                    "SELECT " + COLUMNS + " FROM {s}.memory_facts "  # noqa: S608
                    "WHERE tenant_key = %s AND fact_id = %s ORDER BY revision LIMIT %s"
                ),
                (tenant, fact_id, MAX_FACT_REVISIONS + 1),
            )
            rows = await cursor.fetchall()
            if len(rows) > MAX_FACT_REVISIONS:
                # Bounded read: a fact within the cap has at most MAX_FACT_REVISIONS rows before its
                # tombstone. More (damage, or written before the cap) cannot all be seen, and
                # forgetting only those read would leave the text of the rest: refused, unchanged.
                raise PostgresMemoryError(
                    f"the fact cannot be forgotten: it holds more than {MAX_FACT_REVISIONS} "
                    "revisions, the most one fact may hold; nothing was forgotten (erase its user or "
                    "its sessions instead)"
                )
            # Every revision is checked against its digests before its provenance is trusted: one
            # edited to name another session would leave the tombstone without the session it cited.
            for row in rows:
                decode(row)
            sessions = [str(r[0]) for row in rows for r in provenance_refs(row[10])]
            empty = MemoryFact(latest.fact.scope, "")
            tombstone = row_values(fact_id, latest.revision + 1, FactStatus.FORGOTTEN, empty, now, sessions)
            if (why := self._over_cap(tombstone)) is not None:
                # Checked before any revision is rewritten: a tombstone no read takes would leave
                # the fact unreadable, its history included.
                raise PostgresMemoryError(
                    f"the fact cannot be forgotten: the tombstone naming the {len(set(sessions))} "
                    f"sessions its revisions cite: {why}; nothing was forgotten (erase its user or its "
                    "sessions instead, or raise max_row_bytes)"
                )
            # One UPDATE however many revisions; each row's new digest is computed from its verified
            # keys, revision and recorded_at (all kept), with the content gone.
            await conn.execute(
                self._q(
                    "UPDATE {s}.memory_facts AS m SET status = 'forgotten', text = '', text_lower = '', "
                    "valid_from = NULL, valid_until = NULL, provenance = '[]', content_digest = '', "
                    "row_digest = d.digest FROM unnest(%s::integer[], %s::text[]) AS d(revision, digest) "
                    "WHERE m.tenant_key = %s AND m.fact_id = %s AND m.revision = d.revision"
                ),
                (
                    [row[1] for row in rows],
                    [rewritten_row_digest(row, FactStatus.FORGOTTEN) for row in rows],
                    tenant,
                    fact_id,
                ),
            )
            await conn.execute(self._q(INSERT), tombstone)
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1, durable=True)

        return await self._link.run(ctx, "memory forget", tenant, work)

    # -- reads --------------------------------------------------------------------------------

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        """Current facts ``scope`` sees, valid at ``at``: most query words matched first, then newest."""
        checked_ctx(ctx, "memory lookup").raise_if_expired("memory lookup")
        scope = checked_arg(scope, MemoryScope, "scope", "memory lookup")
        check_limit(limit)
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        checked = check_at(at)
        when = checked if checked is not None else datetime.now(UTC)
        terms = list(query_terms(query))
        t, u = encode_segment(scope.tenant), encode_segment(scope.user)
        statement = self._q(
            "SELECT " + COLUMNS + " FROM {s}.memory_facts "  # noqa: S608
            "WHERE tenant_key = %s AND user_key = %s AND status = 'current' "
            "AND (project_key IS NULL OR project_key = %s) "
            "AND (repository_key IS NULL OR repository_key = %s) "
            "AND (valid_from IS NULL OR valid_from <= %s) AND (valid_until IS NULL OR valid_until > %s) "
            "ORDER BY (SELECT count(*) FROM unnest(%s::text[]) AS w(term) "
            "WHERE strpos(text_lower, w.term) > 0) DESC, ord DESC LIMIT %s"
        )
        params = (t, u, _segment(scope.project), _segment(scope.repository), when, when, terms, limit)

        async def work(conn: Conn) -> list[StoredFact]:
            return [decode(r) for r in await (await conn.execute(statement, params)).fetchall()]

        return await self._link.run(ctx, "memory lookup", t, work, write=False)

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        """Current facts of ``scope``'s tenant and user (any project), newest first; expired ones too."""
        checked_ctx(ctx, "memory list").raise_if_expired("memory list")
        scope = checked_arg(scope, MemoryScope, "scope", "memory list")
        check_limit(limit)
        t, u = encode_segment(scope.tenant), encode_segment(scope.user)
        statement = self._q(
            "SELECT " + COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s AND user_key = %s "  # noqa: S608
            "AND status = 'current' ORDER BY ord DESC LIMIT %s"
        )

        async def work(conn: Conn) -> list[StoredFact]:
            return [decode(r) for r in await (await conn.execute(statement, (t, u, limit))).fetchall()]

        return await self._link.run(ctx, "memory list", t, work, write=False)

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        """Every revision of ``fact_id``, oldest first (at most ``MAX_LOOKUP_LIMIT``)."""
        checked_ctx(ctx, "memory history").raise_if_expired("memory history")
        scope = checked_arg(scope, MemoryScope, "scope", "memory history")
        _fact_id(fact_id)
        t = encode_segment(scope.tenant)

        async def work(conn: Conn) -> list[StoredFact]:
            await self._latest(conn, scope, fact_id, lock=False)  # ownership, with the not-found refusal
            cursor = await conn.execute(
                self._q(
                    "SELECT " + COLUMNS + " FROM {s}.memory_facts "  # noqa: S608
                    "WHERE tenant_key = %s AND fact_id = %s ORDER BY revision LIMIT %s"
                ),
                (t, fact_id, MAX_LOOKUP_LIMIT),
            )
            return [decode(r) for r in await cursor.fetchall()]

        return await self._link.run(ctx, "memory history", t, work, write=False)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete every revision of up to ``max_items`` covered facts in one transaction (docs/erasure.md).

        A session target takes the facts of its user whose provenance, in any
        revision, names the session; a groups target none. Needs ``DELETE``
        on ``memory_facts``; dead row versions stay until ``VACUUM``.
        """
        checked_ctx(ctx, "memory erase").raise_if_expired("memory erase")
        check_target(target)
        # Exactly a bool: 0 erased for real, "no" ran a dry run (the core's adapters refuse both).
        checked_arg(dry_run, bool, "dry_run", "memory erase")
        bound = check_max_items(max_items)
        schema = self._config.schema

        from .erase import erase_memory

        async def work(conn: Conn) -> EraseReport:
            return await erase_memory(conn, schema, target, bound, dry_run, self._config.max_row_bytes)

        tenant = encode_segment(target.tenant_id)
        return await self._link.run(ctx, "memory erase", tenant, work, write=not dry_run)

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed, check the schema and privileges, and describe the server."""
        return await health_probe(self._link, ctx, "memory health")

    async def aclose(self) -> None:
        """Close the pool this store created; a lent pool or connection is left open. Idempotent."""
        await self._link.aclose()
