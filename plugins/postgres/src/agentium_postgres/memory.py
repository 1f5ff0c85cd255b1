"""The PostgreSQL memory store: durable, revisioned, forgettable facts (``memory_facts``).

One row per revision, keyed by (tenant, fact id, revision); owner key
segments (tenant, user, optional project and repository), status, text, the
validity window (``timestamptz``), provenance (canonical JSON), when it was
recorded, and a digest of what makes two facts duplicates (scope, text,
validity), checked on every row read back (a scope, text or validity
changed behind the store's back raises ``PostgresMemoryError``; provenance,
status, revision and ``recorded_at`` are not digested, so a change to them
goes unseen). Every write is one transaction:

- ``remember`` writes revision 1 under a fresh random id, unless a current
  fact of the same scope has the same content (a duplicate: nothing is
  written); a transaction-level advisory lock on (tenant, user, content)
  keeps two concurrent identical writes from both storing;
- ``correct`` locks the latest revision, marks it superseded and writes the
  next one (at most ``MAX_FACT_REVISIONS`` per fact); corrections and
  forgets of one fact serialize on an advisory lock, so each applies to the
  revision the previous one left;
- ``forget`` removes the text, validity and provenance of every revision (one
  ``UPDATE``, however many revisions an older fact holds) and adds a
  tombstone revision that keeps only the ids of the sessions the provenance
  named, so a session erasure still removes it.

A fact of another tenant or user reads exactly like a missing one. Lookups
filter scope, status and validity in SQL before their ``LIMIT``, so a
foreign, expired or forgotten fact can neither be returned nor take a place;
query words (at most 32, each bound) are matched with ``strpos`` on the
lower-cased text, never as patterns. Row-level security binds every
statement to the scope's tenant.

Erasure (:meth:`PostgresMemoryStore.erase`, docs/erasure.md) deletes every
revision of each covered fact, tombstones included, under the same tenant
setting (:mod:`agentium_postgres.erase`); the engine keeps the tombstone of
the erasure itself.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, LiteralString

from agentium_harness import (
    InvalidArgumentError,
    InvalidIdError,
    MemoryFactForgottenError,
    MemoryFactNotFoundError,
)
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    MAX_FACT_BYTES,
    MAX_LOOKUP_LIMIT,
    AckStatus,
    EraseReport,
    EraseTarget,
    FactStatus,
    GroupRef,
    InvalidJSONError,
    MemoryAck,
    MemoryCapabilities,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    OpContext,
    StoredFact,
    canonical_json,
    check_at,
    check_fact,
    check_limit,
    check_max_items,
    check_revision,
    check_target,
    decode_json,
    decode_segment,
    digest_of,
    encode_segment,
    query_terms,
)

from .archive import health_probe
from .args import checked_argument as checked_arg
from .args import checked_ctx
from .config import PostgresConfig
from .errors import PostgresMemoryError, PostgresRowTooLargeError

if TYPE_CHECKING:
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool

    from .link import Conn, PgLink

__all__ = ["PostgresMemoryStore", "new_fact_id"]

#: Columns read back, in :func:`_decode` order. A text over ``MAX_FACT_BYTES`` or a provenance over
#: ``max_row_bytes`` (no fact this store wrote has either) comes back NULL, with its size: a row
#: changed behind the store's back is refused before it is transferred ({fact_cap}, {row_cap}: the
#: two bounds as literals, see ``PostgresMemoryStore._q``).
_COLUMNS: Final[LiteralString] = (
    "fact_id, revision, tenant_key, user_key, project_key, repository_key, status, "
    "CASE WHEN octet_length(text) <= {fact_cap} THEN text END, valid_from, valid_until, "
    "CASE WHEN octet_length(provenance) <= {row_cap} THEN provenance END, recorded_at, "
    "octet_length(text), octet_length(provenance), content_digest"
)
#: A provenance read alone, capped as in :data:`_COLUMNS`.
_PROVENANCE: Final[LiteralString] = "CASE WHEN octet_length(provenance) <= {row_cap} THEN provenance END"

_INSERT: Final[LiteralString] = (
    "INSERT INTO {s}.memory_facts (tenant_key, fact_id, revision, user_key, project_key, repository_key, "
    "status, text, text_lower, valid_from, valid_until, provenance, recorded_at, content_digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


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
    # One message whether the id is missing or another tenant's: a refusal reveals nothing.
    return MemoryFactNotFoundError(f"no fact {fact_id!r} in this tenant and user; nothing was changed")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat(timespec="microseconds")


def _segment(value: str | None) -> str | None:
    return None if value is None else encode_segment(value)


def content_digest(fact: MemoryFact) -> str:
    """What makes two facts duplicates: scope, text and validity (not provenance)."""
    s = fact.scope
    return digest_of(
        [s.tenant, s.user, s.project, s.repository, fact.text, _iso(fact.valid_from), _iso(fact.valid_until)]
    )


def _values(
    fact_id: str,
    revision: int,
    status: FactStatus,
    fact: MemoryFact,
    recorded_at: datetime,
    sessions: Sequence[str] = (),
) -> tuple[Any, ...]:
    s = fact.scope
    forgotten = status is FactStatus.FORGOTTEN
    text = "" if forgotten else fact.text
    # A tombstone keeps only the session ids its provenance named (``[[session], ...]``): erasing
    # one of those sessions still removes it.
    provenance = (
        [[session] for session in sorted(set(sessions))]
        if forgotten
        else [[r.session, r.seq, r.digest] for r in fact.provenance]
    )
    return (
        encode_segment(s.tenant),
        fact_id,
        revision,
        encode_segment(s.user),
        _segment(s.project),
        _segment(s.repository),
        status.value,
        text,
        text.lower(),
        None if forgotten else fact.valid_from,
        None if forgotten else fact.valid_until,
        canonical_json(provenance).decode("utf-8"),
        recorded_at,
        "" if forgotten else content_digest(fact),
    )


@functools.cache
def _statement(template: LiteralString, schema: str, row_cap: int) -> sql.Composed:
    """``template`` with the quoted schema and the two read bounds (integers) as literals."""
    from psycopg import sql  # not at module level: listing the plugin must not load the client

    return sql.SQL(template).format(
        s=sql.Identifier(schema), fact_cap=sql.Literal(MAX_FACT_BYTES), row_cap=sql.Literal(int(row_cap))
    )


def _refs(raw: object) -> list[list[Any]]:
    """A stored provenance as its list of references; :class:`PostgresMemoryError` if damaged."""
    try:
        if not isinstance(raw, str):  # NULL: larger than max_row_bytes (see _PROVENANCE)
            raise ValueError("provenance is missing or larger than max_row_bytes")
        refs = decode_json(raw.encode("utf-8"))
        if not isinstance(refs, list) or not all(
            isinstance(r, list) and r and isinstance(r[0], str) for r in refs
        ):
            raise ValueError("provenance is not a list of references")
    except (ValueError, InvalidJSONError) as exc:
        raise PostgresMemoryError(
            f"postgres memory store: a stored fact's provenance is damaged ({type(exc).__name__}); "
            "nothing was changed"
        ) from exc
    return refs


def _ref(raw: object) -> tuple[Any, Any, Any]:
    """One stored provenance reference, exactly ``[session, seq, digest]`` (GroupRef checks each)."""
    if not isinstance(raw, list) or len(raw) != 3:
        raise ValueError("a provenance reference is not [session, seq, digest]")
    return raw[0], raw[1], raw[2]


def _decode(row: Sequence[Any]) -> StoredFact:
    """A row as a :class:`StoredFact`, strictly; :class:`PostgresMemoryError` if it is damaged."""
    if row[7] is None or row[10] is None:
        raise PostgresRowTooLargeError(
            f"postgres memory store: a stored fact row holds a text of {row[12]} bytes (at most "
            f"{MAX_FACT_BYTES}) or a provenance of {row[13]} bytes (at most max_row_bytes); no fact "
            "this store wrote does: the row is damaged and was not transferred"
        )
    try:
        scope = MemoryScope(
            decode_segment(row[2]),
            decode_segment(row[3]),
            None if row[4] is None else decode_segment(row[4]),
            None if row[5] is None else decode_segment(row[5]),
        )
        refs = decode_json(str(row[10]).encode("utf-8"))
        if not isinstance(refs, list):
            raise ValueError("provenance is not a list")
        status = FactStatus(row[6])
        forgotten = status is FactStatus.FORGOTTEN
        # A tombstone's provenance holds only session ids (for erasure), never returned as provenance.
        provenance = () if forgotten else tuple(GroupRef(*_ref(r)) for r in refs)
        fact = MemoryFact(scope, str(row[7]), row[8], row[9], provenance)
        # The stored content digest is checked, not only used to find duplicates: a text, scope or
        # validity changed behind the store's back is refused rather than returned as the fact.
        # A forgotten revision keeps no content (and an empty digest).
        if row[14] != ("" if forgotten else content_digest(fact)) or (forgotten and fact.text):
            raise ValueError("the fact does not match its stored content digest")
        return StoredFact(str(row[0]), int(row[1]), status, fact, row[11])
    except (ValueError, TypeError, IndexError, KeyError, InvalidJSONError) as exc:
        raise PostgresMemoryError(
            f"postgres memory store: a stored fact row is damaged ({exc}); not returned"
        ) from exc


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

    async def _latest(self, conn: Conn, scope: MemoryScope, fact_id: str, *, lock: bool) -> StoredFact:
        """The latest revision of ``fact_id`` if ``scope``'s tenant and user own it; else not found.

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
                "SELECT " + _COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s AND fact_id = %s "  # noqa: S608
                "ORDER BY revision DESC LIMIT 1" + (" FOR UPDATE" if lock else "")
            ),
            (encode_segment(scope.tenant), fact_id),
        )
        row = await cursor.fetchone()
        # Ownership is checked on the raw key before decoding: another user's row, damaged or
        # not, is refused exactly like a missing one.
        if row is None or row[3] != encode_segment(scope.user):
            raise _not_found(fact_id)
        return _decode(row)

    # -- writes -------------------------------------------------------------------------------

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Write ``fact`` as revision 1 of a new id, or acknowledge the current duplicate."""
        checked_ctx(ctx, "memory remember").raise_if_expired("memory remember")
        check_fact(fact)
        digest = content_digest(fact)
        fact_id = new_fact_id()
        values = _values(fact_id, 1, FactStatus.CURRENT, fact, datetime.now(UTC))
        t, u = values[0], values[3]

        async def work(conn: Conn) -> MemoryAck:
            # Two identical remembers in flight serialize here, so only one stores.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memory {t} {u} {digest}",))
            cursor = await conn.execute(
                self._q(
                    "SELECT " + _COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s "  # noqa: S608
                    "AND user_key = %s AND status = 'current' AND content_digest = %s LIMIT 1"
                ),
                (t, u, digest),
            )
            row = await cursor.fetchone()
            if row is not None:
                # Decoded, not only found by its digest column: a row whose content was changed
                # behind the store's back is refused, never acknowledged as holding the fact.
                dup = _decode(row)
                return MemoryAck(AckStatus.DUPLICATE, dup.fact_id, dup.revision, durable=True)
            await conn.execute(self._q(_INSERT), values)
            return MemoryAck(AckStatus.STORED, fact_id, 1, durable=True)

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
            latest = await self._latest(conn, scope, fact_id, lock=True)
            if latest.status is FactStatus.FORGOTTEN:
                raise MemoryFactForgottenError(
                    f"fact {fact_id!r} was forgotten; it cannot be corrected (remember a new fact instead)"
                )
            if content_digest(latest.fact) == digest:
                return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
            check_revision(latest.revision)  # raised inside the transaction: it rolls back, nothing written
            await conn.execute(
                self._q(
                    "UPDATE {s}.memory_facts SET status = 'superseded' "
                    "WHERE tenant_key = %s AND fact_id = %s AND revision = %s"
                ),
                (encode_segment(scope.tenant), fact_id, latest.revision),
            )
            await conn.execute(
                self._q(_INSERT), _values(fact_id, latest.revision + 1, FactStatus.CURRENT, replacement, now)
            )
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1, durable=True)

        return await self._link.run(ctx, "memory correct", encode_segment(scope.tenant), work)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        """Remove the content of every revision of ``fact_id`` and add a tombstone revision."""
        checked_ctx(ctx, "memory forget").raise_if_expired("memory forget")
        scope = checked_arg(scope, MemoryScope, "scope", "memory forget")
        _fact_id(fact_id)
        now = datetime.now(UTC)
        tenant = encode_segment(scope.tenant)

        async def work(conn: Conn) -> MemoryAck:
            latest = await self._latest(conn, scope, fact_id, lock=True)
            if latest.status is FactStatus.FORGOTTEN:
                return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
            cursor = await conn.execute(
                self._q(
                    "SELECT " + _PROVENANCE + " FROM {s}.memory_facts "  # noqa: S608
                    "WHERE tenant_key = %s AND fact_id = %s"
                ),
                (tenant, fact_id),
            )
            sessions = [str(r[0]) for (raw,) in await cursor.fetchall() for r in _refs(raw)]
            await conn.execute(
                self._q(
                    "UPDATE {s}.memory_facts SET status = 'forgotten', text = '', text_lower = '', "
                    "valid_from = NULL, valid_until = NULL, provenance = '[]', content_digest = '' "
                    "WHERE tenant_key = %s AND fact_id = %s"
                ),
                (tenant, fact_id),
            )
            tombstone = MemoryFact(latest.fact.scope, "")
            await conn.execute(
                self._q(_INSERT),
                _values(fact_id, latest.revision + 1, FactStatus.FORGOTTEN, tombstone, now, sessions),
            )
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
            "SELECT " + _COLUMNS + " FROM {s}.memory_facts "  # noqa: S608
            "WHERE tenant_key = %s AND user_key = %s AND status = 'current' "
            "AND (project_key IS NULL OR project_key = %s) "
            "AND (repository_key IS NULL OR repository_key = %s) "
            "AND (valid_from IS NULL OR valid_from <= %s) AND (valid_until IS NULL OR valid_until > %s) "
            "ORDER BY (SELECT count(*) FROM unnest(%s::text[]) AS w(term) "
            "WHERE strpos(text_lower, w.term) > 0) DESC, ord DESC LIMIT %s"
        )
        params = (t, u, _segment(scope.project), _segment(scope.repository), when, when, terms, limit)

        async def work(conn: Conn) -> list[StoredFact]:
            return [_decode(r) for r in await (await conn.execute(statement, params)).fetchall()]

        return await self._link.run(ctx, "memory lookup", t, work, write=False)

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        """Current facts of ``scope``'s tenant and user (any project), newest first; expired ones too."""
        checked_ctx(ctx, "memory list").raise_if_expired("memory list")
        scope = checked_arg(scope, MemoryScope, "scope", "memory list")
        check_limit(limit)
        t, u = encode_segment(scope.tenant), encode_segment(scope.user)
        statement = self._q(
            "SELECT " + _COLUMNS + " FROM {s}.memory_facts WHERE tenant_key = %s AND user_key = %s "  # noqa: S608
            "AND status = 'current' ORDER BY ord DESC LIMIT %s"
        )

        async def work(conn: Conn) -> list[StoredFact]:
            return [_decode(r) for r in await (await conn.execute(statement, (t, u, limit))).fetchall()]

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
                    "SELECT " + _COLUMNS + " FROM {s}.memory_facts "  # noqa: S608
                    "WHERE tenant_key = %s AND fact_id = %s ORDER BY revision LIMIT %s"
                ),
                (t, fact_id, MAX_LOOKUP_LIMIT),
            )
            return [_decode(r) for r in await cursor.fetchall()]

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
