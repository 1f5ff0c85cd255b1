"""The embedded SQLite memory store (plugin name ``sqlite``): durable, revisioned, forgettable facts.

:class:`SQLiteMemoryStore` declares every memory capability and implements
each one. Its tables are prefixed ``memory_`` (``memory_meta``,
``memory_facts``), so by default it shares ``agentium.db`` with the SQLite
archive, session store and recall store. Connections, WAL mode, worker
threads, the busy timeout, cancellation and closing work as in
:mod:`agentium_harness.adapters.sqlite` (the same base class).

One row per revision, keyed by (fact id, revision). ``remember`` writes
revision 1 under a fresh random id, unless a current fact of the same scope
has the same text and validity: a duplicate, acknowledged with nothing
written, unless it cites groups the current revision does not (those are
kept as the fact's next revision: ``merged_provenance``).
``correct`` marks the latest revision superseded and writes the next one, in
one transaction (at most ``MAX_FACT_REVISIONS`` per fact). ``forget`` rewrites every revision with its text,
provenance and validity removed, and adds a tombstone revision that keeps
only the ids of the sessions the provenance named (so a session erasure
still finds it). Ownership is
tenant and user: a fact of another tenant or user reads exactly like a
missing one. Lookups filter by scope, status and validity inside the SQL
statement, before its ``LIMIT``, so a foreign, expired or forgotten fact
can neither be returned nor take a place. Query words are matched with
``instr`` on the lower-cased text, each bound as a parameter (at most
32 words), so no query text is ever SQL or a pattern. Every read is bounded
before it transfers a value: a row holding one longer than any this store
writes (changed behind its back; SQLite holds up to 1 GB a value) is refused
as damage unread (:data:`~._sqlite_memory_sql.COLUMNS`).
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ClassVar, Final

import attrs

from .._codec import decode_json
from .._errors import AgentiumError, InvalidArgumentError
from .._errors_memory import MemoryFactForgottenError, MemoryFactNotFoundError
from .._ports import OpContext
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    PhysicalErasure,
    check_max_items,
    check_target,
    count_items,
)
from .._ports.memory import (
    MAX_LOOKUP_LIMIT,
    AckStatus,
    FactStatus,
    MemoryAck,
    MemoryCapabilities,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    StoredFact,
    check_at,
    check_fact,
    check_limit,
    check_revision,
    iso_utc,
)
from .._ports.memory_provenance import merged_provenance
from .._ports.recall_args import checked_argument, checked_ctx
from .._scope import validate_id
from ._excerpts import query_terms
from ._sqlite_base import SQLiteAdapterBase, SQLiteConfig
from ._sqlite_memory_sql import (
    COLUMNS,
    FACT_ID,
    INSERT,
    SCHEMA,
    SQLiteMemoryError,
    content_digest,
    decode_row,
    encode_row,
    oversize_error,
    rewrite_row,
    tombstone_fits,
    verified_row,
)
from ._sqlite_sql import immediate_transaction, schema_current, scrub_log

__all__ = ["MEMORY_SCHEMA_VERSION", "SQLiteMemoryError", "SQLiteMemoryStore", "new_fact_id"]

#: Version of the ``memory_`` tables, kept in ``memory_meta``.
MEMORY_SCHEMA_VERSION: Final = 1
#: The longest stored version read back (the digits of a 64-bit integer and a sign).
_VERSION_CHARS: Final = 20


def new_fact_id() -> str:
    """A fresh fact id: ``m-`` and 32 random hex digits (never derived from content or scope)."""
    return "m-" + secrets.token_hex(16)


def not_found(fact_id: str) -> MemoryFactNotFoundError:
    """The refusal of ``fact_id``, missing or another tenant's: one message either way, naming no id.

    A refusal reveals nothing; and hosts log error texts while an id is content, named only with
    content capture, which a store cannot see: the id is the error's ``fact_id`` instead.
    """
    return MemoryFactNotFoundError(
        "no fact with this id in this tenant and user; nothing was changed", fact_id
    )


def forgotten(fact_id: str) -> MemoryFactForgottenError:
    """The refusal to correct the forgotten fact ``fact_id``; its id is ``fact_id``, not in the text."""
    return MemoryFactForgottenError(
        "the fact was forgotten; it cannot be corrected (remember a new fact instead)", fact_id
    )


def _scope_args(scope: MemoryScope) -> tuple[str, str]:
    return (scope.tenant, scope.user)


class SQLiteMemoryStore(SQLiteAdapterBase, MemoryStore):
    """Durable memory in one SQLite file (WAL): revisions, tombstones, bounded scoped lookups."""

    capabilities: ClassVar[MemoryCapabilities] = MemoryCapabilities(
        acknowledged_writes=True,
        durable=True,
        correction=True,
        forgetting=True,
        listing=True,
        history=True,
        erasure=True,
    )
    storage_error: ClassVar[type[AgentiumError]] = SQLiteMemoryError
    adapter_name: ClassVar[str] = "sqlite memory store"

    def __init__(self, config: SQLiteConfig | None = None) -> None:
        super().__init__(config)

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        if schema_current(conn, "memory_meta", MEMORY_SCHEMA_VERSION, SCHEMA):
            return  # read without the write lock
        with immediate_transaction(conn):
            for statement in SCHEMA:
                conn.execute(statement)
            # Bounded as every read of stored data: a value changed behind the store's back may be
            # as long as SQLite allows (1 GB), and it is not read, nor put into the message.
            row = conn.execute(
                # The bytes as well: length() stops at a NUL, so it alone passed a huge value behind one.
                f"SELECT CASE WHEN length(value) <= {_VERSION_CHARS} AND length(CAST(value AS BLOB)) <= "  # noqa: S608
                f"{_VERSION_CHARS} THEN value END, length(value), length(CAST(value AS BLOB)) "
                "FROM memory_meta WHERE key = 'schema_version'"
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO memory_meta (key, value) VALUES ('schema_version', ?)",
                    (str(MEMORY_SCHEMA_VERSION),),
                )
            elif row[0] is None:
                raise SQLiteMemoryError(
                    f"{self.adapter_name}: {self._path} has a memory schema version of {row[1]} characters "
                    f"({row[2]} bytes), "
                    "not one any version of agentium-harness writes: the file is damaged; nothing was changed"
                )
            elif str(row[0]) != str(MEMORY_SCHEMA_VERSION):
                raise SQLiteMemoryError(
                    f"{self.adapter_name}: {self._path} has memory schema version {row[0]}, this version of "
                    f"agentium-harness understands {MEMORY_SCHEMA_VERSION}; upgrade or use another file"
                )

    # -- helpers (worker thread) --------------------------------------------------------------

    @staticmethod
    def _latest(conn: sqlite3.Connection, scope: MemoryScope, fact_id: str) -> StoredFact:
        row = conn.execute(
            f"SELECT {COLUMNS} FROM memory_facts WHERE fact_id = ? ORDER BY revision DESC LIMIT 1",  # noqa: S608
            (fact_id,),
        ).fetchone()
        if row is None:
            raise not_found(fact_id)
        # Ownership is checked on the raw columns before decoding, so another
        # tenant's damaged row is refused the same way as a missing one.
        if (row[2], row[3]) != _scope_args(scope):
            raise not_found(fact_id)
        return decode_row(row)

    @staticmethod
    def _all(
        conn: sqlite3.Connection, fact_id: str, limit: int | None = MAX_LOOKUP_LIMIT
    ) -> list[StoredFact]:
        # ``limit=None`` for forget: a fact written before the revision cap may hold more
        # revisions than one read returns, and every one of them must lose its text.
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM memory_facts WHERE fact_id = ? ORDER BY revision LIMIT ?",  # noqa: S608
            (fact_id, -1 if limit is None else limit),
        ).fetchall()
        return [decode_row(r) for r in rows]

    # -- writes -------------------------------------------------------------------------------

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Write ``fact`` as revision 1 of a new id, or acknowledge the current duplicate.

        A duplicate citing groups the current revision does not is written as
        its next revision with them, in the same transaction (:func:`merged_provenance`).
        """
        checked_ctx(ctx, "memory remember").raise_if_expired("memory remember")
        check_fact(fact)
        digest = content_digest(fact)
        fact_id = new_fact_id()
        now = datetime.now(UTC)
        values = encode_row(fact_id, 1, FactStatus.CURRENT, fact, now)
        s = fact.scope

        def work(conn: sqlite3.Connection) -> MemoryAck:
            with immediate_transaction(conn):
                row = conn.execute(
                    f"SELECT {COLUMNS} FROM memory_facts WHERE tenant_id = ? AND user_id = ? "  # noqa: S608
                    "AND project_id IS ? AND repository_id IS ? AND status = 'current' "
                    "AND content_digest = ? LIMIT 1",
                    (s.tenant, s.user, s.project, s.repository, digest),
                ).fetchone()
                if row is not None:
                    # Decoded, not only found by its digest column: a damaged row is refused
                    # (SQLiteMemoryError), never acknowledged as holding the fact.
                    return _duplicate(conn, decode_row(row), fact, now)
                conn.execute(INSERT, values)
            return MemoryAck(AckStatus.STORED, fact_id, 1, durable=True)

        return await self.run(ctx, "memory remember", work)

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        """Supersede the latest revision of ``fact_id`` with ``replacement`` (one transaction)."""
        checked_ctx(ctx, "memory correct").raise_if_expired("memory correct")
        checked_argument(scope, MemoryScope, "scope", "memory correct")
        fact_id = validate_id(fact_id, "fact id")
        check_fact(replacement)
        if not scope.owns(replacement.scope):
            raise not_found(fact_id)
        digest = content_digest(replacement)
        now = datetime.now(UTC)

        def work(conn: sqlite3.Connection) -> MemoryAck:
            with immediate_transaction(conn):
                latest = self._latest(conn, scope, fact_id)
                if latest.status is FactStatus.FORGOTTEN:
                    raise forgotten(fact_id)
                if content_digest(latest.fact) == digest:
                    return _duplicate(conn, latest, replacement, now)  # its new groups kept
                check_revision(latest.revision)
                rewrite_row(conn, latest, FactStatus.SUPERSEDED)
                conn.execute(
                    INSERT, encode_row(fact_id, latest.revision + 1, FactStatus.CURRENT, replacement, now)
                )
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1, durable=True)

        return await self.run(ctx, "memory correct", work)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        """Remove the content of every revision of ``fact_id`` and add a tombstone revision."""
        checked_ctx(ctx, "memory forget").raise_if_expired("memory forget")
        checked_argument(scope, MemoryScope, "scope", "memory forget")
        fact_id = validate_id(fact_id, "fact id")
        now = datetime.now(UTC)

        def work(conn: sqlite3.Connection) -> MemoryAck:
            with immediate_transaction(conn):
                latest = self._latest(conn, scope, fact_id)
                if latest.status is FactStatus.FORGOTTEN:
                    return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
                revisions = self._all(conn, fact_id, None)
                sessions = [ref.session for old in revisions for ref in old.fact.provenance]
                for old in revisions:
                    rewrite_row(conn, old, FactStatus.FORGOTTEN)
                # The tombstone keeps the session ids (only): erasing one of them removes it too.
                tombstone = encode_row(
                    fact_id, latest.revision + 1, FactStatus.FORGOTTEN, latest.fact, now, sessions
                )
                if not tombstone_fits(tombstone):
                    # A row no read would accept (see MAX_TOMBSTONE_CHARS): raised before the
                    # transaction commits, so every revision keeps its text.
                    raise SQLiteMemoryError(
                        # The id is the caller's own, and content (named only with capture): not here.
                        f"sqlite memory store: the fact has {len(revisions)} revisions naming "
                        f"{len(set(sessions))} sessions, more than a tombstone may hold; nothing was "
                        "forgotten (erase its user, or its sessions, instead)"
                    )
                conn.execute(INSERT, tombstone)
            # The rewritten pages are in the log and the old ones (with the text) in the file until
            # a checkpoint: run it now, as an erase does, so the forgotten text leaves both. A reader
            # keeping it from finishing leaves that to the next checkpoint; the fact is forgotten.
            scrub_log(conn, time_left=ctx.time_left())
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1, durable=True)

        return await self.run(ctx, "memory forget", work)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
        scrub: bool = True,
    ) -> EraseReport:
        """Delete every revision of each covered fact (at most ``max_items`` facts), then empty the WAL.

        A session target takes the facts of its user whose provenance (in any
        revision) names the session. With ``secure_delete`` on the rows are
        zeroed in place; the WAL is checkpointed and truncated.

        ``scrub=False`` (the engine's erasure, for every SQLite store on one
        file) leaves the file's rebuild and log checkpoint to one
        :meth:`scrub_erased` call once every store on the file has erased.
        """
        checked_ctx(ctx, "memory erase")
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "memory erase")
        checked_argument(scrub, bool, "scrub", "memory erase")
        bound = check_max_items(max_items)
        if target.groups:
            return EraseReport()
        owner = "tenant_id = ?" + ("" if target.user_id is None else " AND user_id = ?")
        params: tuple[object, ...] = (target.tenant_id,) + (
            () if target.user_id is None else (target.user_id,)
        )

        def covered(conn: sqlite3.Connection) -> list[str]:
            if target.session_id is None:
                # Only the ids are read, each bounded (FACT_ID): a text, however long, is deleted unread.
                rows = conn.execute(
                    f"SELECT {FACT_ID} FROM (SELECT DISTINCT fact_id FROM memory_facts "  # noqa: S608
                    f"WHERE {owner} ORDER BY fact_id LIMIT ?) ORDER BY fact_id",
                    (*params, bound + 1),
                ).fetchall()
                for r in rows:
                    if r[0] is None:
                        raise oversize_error(r[1])
                return [str(r[0]) for r in rows]
            # The provenance is JSON text: matched here, row by row, never as a SQL pattern.
            found: set[str] = set()
            # Each row is checked against its digest first: a provenance changed to name another
            # session would otherwise leave this session's fact behind, the erasure reported complete.
            query = f"SELECT {COLUMNS} FROM memory_facts WHERE {owner} ORDER BY fact_id"  # noqa: S608
            for row in conn.execute(query, params):
                fact_id, provenance = verified_row(row)[0], row[10]
                if fact_id not in found and _names_session(provenance, target.session_id):
                    found.add(str(fact_id))
                    if len(found) > bound:
                        break
            return sorted(found)

        def work(conn: sqlite3.Connection) -> EraseReport:
            with immediate_transaction(conn):
                ids = covered(conn)
                taken = ids[:bound]
                revisions = 0
                for fact_id in taken:
                    if not dry_run:
                        ctx.raise_if_expired("memory erase")
                        revisions += conn.execute(
                            "DELETE FROM memory_facts WHERE fact_id = ?", (fact_id,)
                        ).rowcount
                    else:
                        revisions += conn.execute(
                            "SELECT count(*) FROM memory_facts WHERE fact_id = ?", (fact_id,)
                        ).fetchone()[0]
            physical, detail = (
                (PhysicalErasure.REMOVED, "")
                if dry_run or not taken or not scrub
                else scrub_log(conn, time_left=ctx.time_left())
            )
            return EraseReport(
                count_items(fact=len(taken), revision=revisions),
                (),
                EraseStatus.PARTIAL if len(ids) > bound else EraseStatus.COMPLETE,
                physical,
                detail,
            )

        return await self.run(ctx, "memory erase", work)

    # -- reads --------------------------------------------------------------------------------

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        """Current facts ``scope`` sees, valid at ``at``: most query words matched first, then newest."""
        checked_ctx(ctx, "memory lookup").raise_if_expired("memory lookup")
        checked_argument(scope, MemoryScope, "scope", "memory lookup")
        check_limit(limit)
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        checked = check_at(at)
        when = iso_utc(checked if checked is not None else datetime.now(UTC))
        terms = query_terms(query)
        # Without terms, order by recency alone (a constant ORDER BY term would read as a column number).
        score = " + ".join("(instr(text_lower, ?) > 0)" for _ in terms)
        order = f"({score}) DESC, rowid DESC" if terms else "rowid DESC"
        sql = (
            f"SELECT {COLUMNS} FROM memory_facts "  # noqa: S608 - only placeholders are interpolated
            "WHERE tenant_id = ? AND user_id = ? AND status = 'current' "
            "AND (project_id IS NULL OR project_id = ?) AND (repository_id IS NULL OR repository_id = ?) "
            "AND (valid_from IS NULL OR valid_from <= ?) AND (valid_until IS NULL OR valid_until > ?) "
            f"ORDER BY {order} LIMIT ?"
        )
        params = (scope.tenant, scope.user, scope.project, scope.repository, when, when, *terms, limit)

        def work(conn: sqlite3.Connection) -> list[StoredFact]:
            return [decode_row(r) for r in conn.execute(sql, params).fetchall()]

        return await self.run(ctx, "memory lookup", work)

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        """Current facts of ``scope``'s tenant and user (any project), newest first; expired ones too."""
        checked_ctx(ctx, "memory list").raise_if_expired("memory list")
        checked_argument(scope, MemoryScope, "scope", "memory list")
        check_limit(limit)
        sql = (
            f"SELECT {COLUMNS} FROM memory_facts WHERE tenant_id = ? AND user_id = ? "  # noqa: S608
            "AND status = 'current' ORDER BY rowid DESC LIMIT ?"
        )

        def work(conn: sqlite3.Connection) -> list[StoredFact]:
            return [decode_row(r) for r in conn.execute(sql, (scope.tenant, scope.user, limit)).fetchall()]

        return await self.run(ctx, "memory list", work)

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        """Every revision of ``fact_id``, oldest first."""
        checked_ctx(ctx, "memory history").raise_if_expired("memory history")
        checked_argument(scope, MemoryScope, "scope", "memory history")
        fact_id = validate_id(fact_id, "fact id")

        def work(conn: sqlite3.Connection) -> list[StoredFact]:
            self._latest(conn, scope, fact_id)  # ownership, with the not-found refusal
            return self._all(conn, fact_id)

        return await self.run(ctx, "memory history", work)


def _duplicate(conn: sqlite3.Connection, current: StoredFact, fact: MemoryFact, now: datetime) -> MemoryAck:
    """``fact`` duplicates ``current`` (same content): its new groups as the next revision, or nothing.

    Inside the caller's transaction. The groups a duplicate adds are kept (``merged_provenance``):
    dropped, erasing a session only they name would leave the fact (docs/erasure.md). Past the
    revision cap or ``MAX_PROVENANCE`` it raises :class:`MemoryRejectedError`: nothing is written.
    """
    merged = merged_provenance(current.fact.provenance, fact.provenance)
    if merged is None:
        return MemoryAck(AckStatus.DUPLICATE, current.fact_id, current.revision, durable=True)
    check_revision(current.revision)
    rewrite_row(conn, current, FactStatus.SUPERSEDED)
    kept = attrs.evolve(current.fact, provenance=merged)
    conn.execute(INSERT, encode_row(current.fact_id, current.revision + 1, FactStatus.CURRENT, kept, now))
    return MemoryAck(AckStatus.STORED, current.fact_id, current.revision + 1, durable=True)


def _names_session(provenance: object, session: str | None) -> bool:
    """True if a stored provenance (``[[session, seq, digest], …]`` JSON) names ``session``.

    A provenance that cannot be read raises :class:`SQLiteMemoryError`: whether
    the fact came from the session cannot be told, and passing over it would
    report a session erasure complete that may have left the session's text
    behind (erasing the user takes the fact whatever its provenance).
    """
    try:
        refs = decode_json(provenance) if isinstance(provenance, str) else None
    except Exception:  # any decoding failure is damage, reported below
        refs = None
    if not isinstance(refs, list) or not all(
        isinstance(r, list) and r and isinstance(r[0], str) for r in refs
    ):
        raise SQLiteMemoryError(
            # Not the fact's id: it is content, named only with capture, which a store cannot see.
            "sqlite memory store: memory erase: a stored fact has a damaged provenance, so whether it "
            "came from the session cannot be told; nothing was erased (erase its user, or delete the row)"
        )
    return any(r[0] == session for r in refs)
