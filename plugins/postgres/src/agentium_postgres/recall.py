"""The PostgreSQL recall store: full-text search (``tsvector``, GIN) over archived groups and documents.

:class:`PostgresRecallStore` declares every recall capability. Sources live
in ``recall_sources``: owner key segments (NULL: absent, does not narrow),
the source id (:func:`~agentium_harness.plugin_api.document_source_id` or
:func:`~agentium_harness.plugin_api.group_source_id`), a revision (a
document's digest of its title and text, a group's archive digest), the
title, the text and its ``tsvector`` (``'simple'`` configuration: no
stemming, no stop words, as the other built-in stores match words; the
first 256 Ki characters of a source are indexed). Discovery and its bounds
are described in :mod:`agentium_postgres.recall_sql`.

``canonical_archive_reads``: :meth:`PostgresRecallStore.seek_groups` reads
the archive's own table (``archive_groups``), re-checking every group as the
archive does; :meth:`~PostgresRecallStore.index_groups` stores a group there
too when the archive is another backend, so one copy of each group's
canonical bytes serves both (an equal row is left as it is, a different one
is an :class:`~agentium_harness.plugin_api.ArchiveConflictError`).

Reads and validations decide visibility from the source id alone (ids are
injective in their owner), so a foreign id is ``forbidden`` whether or not
it exists; every statement also runs under the tenant's row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from psycopg_pool import AsyncConnectionPool

from agentium_harness import AgentiumError, InvalidArgumentError
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveReceipt,
    Candidate,
    EraseReport,
    EraseTarget,
    Excerpt,
    MessageGroup,
    OpContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    check_max_items,
    check_target,
    digest_of,
    document_source_id,
    encode_segment,
    estimate_tokens,
    group_source_id,
    make_excerpt,
    query_terms,
    source_owner,
)

from .archive import group_rows, health_probe, insert_groups, read_groups
from .config import PostgresConfig
from .erase import erase_recall
from .errors import PostgresRecallError, PostgresRowTooLargeError
from .keys import q
from .link import Conn, PgLink
from .recall_sql import SourceRow, insert_sources, scope_params, term_query

__all__ = ["PostgresRecallSession", "PostgresRecallStore"]


def _segment(value: str | None) -> str | None:
    return None if value is None else encode_segment(value)


def _text(value: object, what: str) -> str:
    """``value`` if it is text PostgreSQL can store; else ``InvalidArgumentError`` (nothing written)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}; nothing was written")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid Unicode text ({exc}); nothing was written") from exc
    if "\x00" in value:
        raise InvalidArgumentError(
            f"{what} contains NUL, which PostgreSQL text cannot hold; nothing was written"
        )
    return value


def _group_text(group: MessageGroup) -> str:
    """The indexed text of a group: one ``"<role>: <content>"`` line per message (NUL shown as U+FFFD)."""
    return "\n".join(f"{m.role.value}: {m.content}" for m in group.messages).replace("\x00", "\ufffd")


class PostgresRecallSession(RecallSession):
    """A recall session of :class:`PostgresRecallStore`, confined to one scope.

    Holds no connection (each call takes one from the store's pool);
    :meth:`close` marks it closed, after which calls are refused. :meth:`read`
    picks excerpt windows with the terms of the session's latest discovery.
    """

    def __init__(self, store: PostgresRecallStore, scope: Scope, limits: RecallLimits) -> None:
        self._store = store
        self._scope = scope
        self._limits = limits
        self._terms: tuple[str, ...] = ()
        self._closed = False

    @property
    def scope(self) -> Scope:
        """The scope this session was opened for."""
        return self._scope

    def _begin(self, ctx: OpContext, operation: str) -> None:
        ctx.raise_if_expired(operation)
        if self._closed:
            raise PostgresRecallError(
                f"postgres recall store: {operation} refused: the recall session is closed"
            )

    def _owner(self, source_id: str) -> SourceOwner | None:
        """The owner the id encodes, when this scope may see it."""
        owner = source_owner(source_id)
        return owner if owner is not None and owner.visible_to(self._scope) else None

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Up to ``max_candidates`` visible sources for ``query``, best first, within the byte budget."""
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        terms = query_terms(query)
        self._terms = terms
        limit = max(0, max_candidates)
        if not terms or limit == 0:
            return []
        config = self._store.config
        keys = scope_params(self._scope)

        async def work(conn: Conn) -> Any:
            # Left unread: one round trip. Never prepared: the function plans each search itself.
            return await conn.execute(
                q("SELECT * FROM {s}.recall_discover(%s::text[], %s, %s, %s, %s, %s, %s)", config.schema),
                (
                    [term_query(t) for t in terms],
                    keys["user"],
                    keys["session"],
                    keys["project"],
                    keys["repository"],
                    config.max_ranked_matches,
                    limit,
                ),
                prepare=False,
            )

        cursor = await self._store.link.run(ctx, "recall discover", keys["tenant"], work, write=False)
        rows = await cursor.fetchall()
        budget = ctx.remaining_bytes
        spent = 0
        out: list[Candidate] = []
        for source_id, revision, title, size, score in rows:
            owner = self._owner(source_id)
            if owner is None:  # the SQL filter already holds; never trust one check
                continue
            candidate = Candidate(
                ref=SourceRef(source_id, revision),
                owner=owner,
                score=float(score),
                size_bytes=int(size),
                title=title,
            )
            spent += candidate.discovery_bytes
            if budget is not None and spent > budget:
                break
            out.append(candidate)
        return out

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, in ref order, within the byte/token budgets."""
        self._begin(ctx, "recall read")
        wanted = [(ref, self._owner(ref.source_id)) for ref in refs]
        ids = sorted({ref.source_id for ref, owner in wanted if owner is not None})
        if not ids:
            return []
        tenant = encode_segment(self._scope.tenant)
        schema = self._store.config.schema

        async def work(conn: Conn) -> dict[str, tuple[str, str]]:
            cursor = await conn.execute(
                q(
                    "SELECT source_id, revision, body FROM {s}.recall_sources "
                    "WHERE tenant_key = %s AND source_id = ANY(%s::text[])",
                    schema,
                ),
                (tenant, ids),
            )
            return {str(r[0]): (str(r[1]), str(r[2])) for r in await cursor.fetchall()}

        found = await self._store.link.run(ctx, "recall read", tenant, work, write=False)
        cap = max(0, max_excerpt_bytes)
        out: list[Excerpt] = []
        spent_bytes = spent_tokens = 0
        for ref, owner in wanted:
            ctx.raise_if_expired("recall read")
            row = found.get(ref.source_id)
            if owner is None or row is None or row[0] != ref.revision:
                continue  # foreign, deleted or changed: validation reports it
            excerpt = make_excerpt(ref, owner, row[1], self._terms, cap)
            spent_bytes += len(excerpt.text.encode("utf-8"))
            spent_tokens += estimate_tokens(excerpt.text)
            if ctx.remaining_bytes is not None and spent_bytes > ctx.remaining_bytes:
                break
            if ctx.remaining_tokens is not None and spent_tokens > ctx.remaining_tokens:
                break
            out.append(excerpt)
        return out

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """One validation per ref, in order, all read by one statement (one view of the table)."""
        return await self._validate(refs, ctx, "recall validate")

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """As :meth:`validate`: one bounded primary-key lookup per ref, in one statement."""
        return await self._validate(refs, ctx, "recall validate_current")

    async def _validate(self, refs: Sequence[SourceRef], ctx: OpContext, operation: str) -> list[Validation]:
        self._begin(ctx, operation)
        visible = [ref.source_id for ref in refs if self._owner(ref.source_id) is not None]
        tenant = encode_segment(self._scope.tenant)
        schema = self._store.config.schema

        async def work(conn: Conn) -> dict[str, str]:
            cursor = await conn.execute(
                q(
                    "SELECT source_id, revision FROM {s}.recall_sources "
                    "WHERE tenant_key = %s AND source_id = ANY(%s::text[])",
                    schema,
                ),
                (tenant, sorted(set(visible))),
            )
            return {str(r[0]): str(r[1]) for r in await cursor.fetchall()}

        current = await self._store.link.run(ctx, operation, tenant, work, write=False) if visible else {}
        out: list[Validation] = []
        for ref in refs:
            if source_owner(ref.source_id) is None:
                out.append(Validation(ref, ValidationStatus.UNKNOWN))
            elif self._owner(ref.source_id) is None:
                out.append(Validation(ref, ValidationStatus.FORBIDDEN))
            elif ref.source_id not in current:
                out.append(Validation(ref, ValidationStatus.DELETED))
            elif current[ref.source_id] == ref.revision:
                out.append(Validation(ref, ValidationStatus.CURRENT, current[ref.source_id]))
            else:
                out.append(Validation(ref, ValidationStatus.CHANGED, current[ref.source_id]))
        return out

    async def close(self) -> None:
        """Mark the session closed. Always succeeds (also after a cancelled call); idempotent."""
        self._closed = True
        self._terms = ()


class PostgresRecallStore(RecallStore):
    """Full-text recall in PostgreSQL over archived groups and host documents, every bound enforced.

    Build it from :class:`~agentium_postgres.config.PostgresConfig`, optionally
    lending it a pool (``pool=``) or a connection (``connection=``), which it
    then never closes. Building does no I/O.
    """

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True,
        bounded_reads=True,
        revision_validation=True,
        bounded_current_validation=True,
        canonical_archive_reads=True,
        document_indexing=True,
        archive_indexing=True,
        health_check=True,
        erasure=True,
    )
    session_class: ClassVar[type[RecallSession]] = PostgresRecallSession

    def __init__(
        self,
        config: PostgresConfig,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Any = None,
    ) -> None:
        self._config = config
        self._link = PgLink(
            config,
            pool=pool,
            connection=connection,
            family=PostgresRecallError,
            name="postgres recall store",
            needs=("schema_meta", "recall_sources", "archive_groups"),
        )

    @property
    def config(self) -> PostgresConfig:
        """The options this store was built with."""
        return self._config

    @property
    def link(self) -> PgLink:
        """The connection link (owned or lent pool or connection)."""
        return self._link

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> PostgresRecallSession:
        """A session confined to ``scope``. Acquires nothing: each call takes a pooled connection."""
        ctx.raise_if_expired("recall open")
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"scope must be a Scope, got {type(scope).__name__}")
        if not isinstance(limits, RecallLimits):
            raise InvalidArgumentError(f"limits must be RecallLimits, got {type(limits).__name__}")
        if self._link.closed:
            raise PostgresRecallError("postgres recall store: recall open refused: the store is closed")
        return PostgresRecallSession(self, scope, limits)

    # -- documents ------------------------------------------------------------------------------

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace document ``doc_id`` of ``owner``; identical content writes nothing."""
        ctx.raise_if_expired("recall index")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:  # InvalidIdError: the port promises InvalidArgumentError
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        _text(text, "text")
        _text(title, "title")
        size = len(text.encode("utf-8")) + len(title.encode("utf-8"))
        if size > self._config.max_row_bytes:
            raise PostgresRowTooLargeError(
                f"postgres recall store: document {doc_id!r} is {size} bytes, more than "
                f"max_row_bytes={self._config.max_row_bytes}; nothing was written"
            )
        revision = digest_of({"title": title, "text": text})
        row = SourceRow(
            source_id=source_id,
            kind="document",
            tenant_key=encode_segment(owner.tenant),
            user_key=_segment(owner.user),
            session_key=_segment(owner.session),
            project_key=_segment(owner.project),
            repository_key=_segment(owner.repository),
            revision=revision,
            title=title,
            body=text,
        )

        async def work(conn: Conn) -> None:
            await insert_sources(conn, self._config.schema, [row])

        await self._link.run(ctx, "recall index", row.tenant_key, work)
        return SourceRef(source_id, revision)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove document ``doc_id`` of ``owner``; True if it was indexed."""
        ctx.raise_if_expired("recall delete")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        tenant = encode_segment(owner.tenant)

        async def work(conn: Conn) -> bool:
            cursor = await conn.execute(
                q(
                    "DELETE FROM {s}.recall_sources WHERE tenant_key = %s AND source_id = %s "
                    "AND kind = 'document' RETURNING id",
                    self._config.schema,
                ),
                (tenant, source_id),
            )
            return bool(await cursor.fetchall())

        return await self._link.run(ctx, "recall delete", tenant, work)

    # -- archived groups ------------------------------------------------------------------------

    def _checked_groups(
        self, key: SessionKey, groups: Sequence[MessageGroup], receipts: Sequence[ArchiveReceipt]
    ) -> None:
        """Every group matches its receipt and belongs to ``key``; else ``InvalidArgumentError``."""
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        if len(groups) != len(receipts):
            raise InvalidArgumentError(
                f"{len(groups)} groups but {len(receipts)} receipts for session {key.key()}; "
                "nothing was written"
            )
        for group, receipt in zip(groups, receipts, strict=True):
            if not isinstance(group, MessageGroup) or not isinstance(receipt, ArchiveReceipt):
                raise InvalidArgumentError("index_groups takes MessageGroup and ArchiveReceipt items")
            if receipt.seq != group.seq or receipt.digest != group.digest:
                raise InvalidArgumentError(
                    f"group {group.seq} of session {key.key()}: its receipt (seq {receipt.seq}, digest "
                    f"{receipt.digest}) does not match the group (digest {group.digest}); nothing was written"
                )
            if group.retained is not None and group.retained.scope.session_key != key:
                raise InvalidArgumentError(
                    f"group {group.seq} belongs to session {group.retained.scope.session_key.key()} by its "
                    f"retained scope, not {key.key()}; nothing was written"
                )

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups of ``key`` (and keep their bytes in ``archive_groups``), one transaction.

        Every group is checked against its receipt before anything is
        written. Returns how many groups were newly indexed.
        """
        ctx.raise_if_expired("recall index")
        self._checked_groups(key, groups, receipts)
        try:
            archived = group_rows(key, groups, self._config.max_row_bytes, self._link.name)
        except AgentiumError as exc:
            if isinstance(exc, PostgresRowTooLargeError):
                raise
            raise InvalidArgumentError(f"{exc}") from exc
        t, u, s = key.key_segments()
        unique = {g.seq: g for g in groups}
        rows = [
            SourceRow(
                source_id=group_source_id(key, seq),
                kind="group",
                tenant_key=t,
                user_key=u,
                session_key=s,
                project_key=None,
                repository_key=None,
                revision=group.digest,
                title="",
                body=_group_text(group),
                seq=seq,
            )
            for seq, group in sorted(unique.items())
        ]
        schema = self._config.schema

        async def work(conn: Conn) -> int:
            await insert_groups(conn, schema, key, archived)
            return await insert_sources(conn, schema, rows)

        return await self._link.run(ctx, "recall index", t, work)

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` archived groups of ``key`` from ``start_seq`` on, from the archive table."""
        ctx.raise_if_expired("recall seek")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        schema, cap = self._config.schema, self._config.max_row_bytes

        async def work(conn: Conn) -> list[MessageGroup]:
            return await read_groups(conn, schema, key, start_seq, max_groups, cap, self._link.name)

        return await self._link.run(ctx, "recall seek", key.key_segments()[0], work, write=False)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete up to ``max_items`` sources of ``target`` in one transaction (docs/erasure.md).

        Group entries and the documents the target owns go with their text,
        search terms and vectors, and each erased group's canonical copy in
        ``archive_groups``. Needs ``DELETE`` on ``recall_sources`` and
        ``archive_groups``; dead row versions stay until ``VACUUM``.
        """
        ctx.raise_if_expired("recall erase")
        check_target(target)
        bound = check_max_items(max_items)
        schema = self._config.schema

        async def work(conn: Conn) -> EraseReport:
            return await erase_recall(conn, schema, target, bound, dry_run)

        tenant = encode_segment(target.tenant_id)
        return await self._link.run(ctx, "recall erase", tenant, work, write=not dry_run)

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed, check the schema and privileges, and describe the server."""
        return await health_probe(self._link, ctx, "recall health")

    async def aclose(self) -> None:
        """Close the pool this store created; a lent pool or connection is left open. Idempotent."""
        await self._link.aclose()
