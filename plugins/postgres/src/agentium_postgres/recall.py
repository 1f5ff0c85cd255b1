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
from typing import TYPE_CHECKING, Any, ClassVar

from agentium_harness import AgentiumError, InvalidArgumentError
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveReceipt,
    EraseReport,
    EraseTarget,
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
    SourceVector,
    check_max_items,
    check_target,
    checked_index_batch,
    digest_of,
    document_source_id,
    encode_segment,
    group_source_id,
    indexed_group_text,
)

from .archive import group_rows, health_probe, insert_groups, read_groups
from .args import checked_argument, checked_count, checked_ctx, checked_sequence
from .config import PostgresConfig
from .errors import PostgresRecallError, PostgresRowTooLargeError
from .keys import q
from .recall_session import PostgresRecallSession
from .recall_sql import SourceRow, insert_sources, unindexed_sql
from .recall_vectors import vector_batches, vector_scoring, write_vectors
from .schema import VectorFacts

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .link import Conn, PgLink

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
    """``indexed_group_text``, NUL shown as U+FFFD: PostgreSQL text holds no NUL."""
    return indexed_group_text(group).replace("\x00", "\ufffd")


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
        vector_indexing=True,
        hybrid_discovery=True,
    )
    session_class: ClassVar[type[RecallSession]] = PostgresRecallSession

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
            family=PostgresRecallError,
            name="postgres recall store",
            needs=(
                "schema_meta",
                "recall_sources",
                "archive_groups",
                "recall_vectors",
                "recall_vector_model",
            ),
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
        checked_ctx(ctx, "recall open").raise_if_expired("recall open")
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
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
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
            # The id is content: on the error (source_id), out of its text.
            too_large = PostgresRowTooLargeError(
                f"postgres recall store: the document is {size} bytes, more than "
                f"max_row_bytes={self._config.max_row_bytes}; nothing was written (its id is the error's "
                "source_id)"
            )
            too_large.source_id = source_id
            raise too_large
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
            # Writers of one document serialize here: the statements below then read with a fresh
            # snapshot and replace what the previous writer committed. Without it, the second of
            # two concurrent writes found the first's new row outside its snapshot, left it, had its
            # own insert skipped by the conflict, and still returned its revision as indexed.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"recall source {row.tenant_key} {source_id}",)
            )
            await insert_sources(conn, self._config.schema, [row])

        await self._link.run(ctx, "recall index", row.tenant_key, work)
        return SourceRef(source_id, revision)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove document ``doc_id`` of ``owner``; True if it was indexed."""
        checked_ctx(ctx, "recall delete").raise_if_expired("recall delete")
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
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        checked_sequence(groups, "groups", "recall index")
        checked_sequence(receipts, "receipts", "recall index")
        checked = [group for group, _ in checked_index_batch(key, groups, receipts)]
        try:
            archived = group_rows(key, checked, self._config.max_row_bytes, self._link.name)
        except AgentiumError as exc:
            if isinstance(exc, PostgresRowTooLargeError):
                raise
            raise InvalidArgumentError(f"{exc}") from exc
        t, u, s = key.key_segments()
        unique = {g.seq: g for g in checked}
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

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int]:
        """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``: ascending, bounded.

        One statement, bounded by :data:`~agentium_postgres.recall_sql.UNINDEXED_WINDOW`
        whatever the session holds: it reads the session's newest indexed
        seqs below ``end_seq`` (at most that many, through the
        ``recall_sources_groups`` index) and returns the lowest gaps among
        them, from seq 0 when the window reaches it. A gap older than the
        window is not reported (``agentium recall rebuild`` indexes it); the
        engine asks after every archiving commit, so a gap is reported while
        it is recent.
        """
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        end_seq = checked_count(end_seq, "end_seq", "recall index")
        max_groups = checked_count(max_groups, "max_groups", "recall index")
        start = max(0, checked_count(start_seq, "start_seq", "recall index"))
        if end_seq <= start or max_groups <= 0:
            return []
        t, u, s = key.key_segments()

        async def work(conn: Conn) -> Any:
            return await conn.execute(
                unindexed_sql(self._config.schema),
                {"t": t, "u": u, "s": s, "start": start, "end": end_seq, "max": max_groups},
            )

        cursor = await self._link.run(ctx, "recall index", t, work, write=False)
        return [int(row[0]) for row in await cursor.fetchall()]

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        """Store each source's vector beside its row, in one transaction; how many were stored.

        A vector whose source is not indexed at its ref's revision is skipped.
        Every vector is of one model, the schema's: a batch that mixes models,
        or is of another model than the one recorded, raises
        :class:`~agentium_harness.plugin_api.EmbeddingModelMismatchError` and
        writes nothing.
        """
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        checked_sequence(vectors, "vectors", "recall index")
        model, by_tenant = vector_batches(vectors)
        if model is None:
            return 0
        schema = self._config.schema
        first = next(iter(sorted(by_tenant)), None)

        async def work(conn: Conn) -> list[Any]:
            facts = self._link.facts
            return await write_vectors(
                conn, schema, model, by_tenant, VectorFacts() if facts is None else facts.vectors
            )

        cursors = await self._link.run(ctx, "recall index", first, work)
        stored = 0
        for cursor in cursors:
            stored += len(await cursor.fetchall())
        return stored

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` archived groups of ``key`` from ``start_seq`` on, from the archive table."""
        checked_ctx(ctx, "recall seek").raise_if_expired("recall seek")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        start_seq = checked_count(start_seq, "start_seq", "recall seek")
        max_groups = checked_count(max_groups, "max_groups", "recall seek")
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
        checked_ctx(ctx, "recall erase").raise_if_expired("recall erase")
        check_target(target)
        # Exactly a bool: 0 erased for real, "no" ran a dry run (the core's adapters refuse both).
        checked_argument(dry_run, bool, "dry_run", "recall erase")
        bound = check_max_items(max_items)
        schema = self._config.schema

        from .erase import erase_recall

        async def work(conn: Conn) -> EraseReport:
            return await erase_recall(conn, schema, target, bound, dry_run)

        tenant = encode_segment(target.tenant_id)
        return await self._link.run(ctx, "recall erase", tenant, work, write=not dry_run)

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed, check the schema and privileges, and describe the server and vector scoring."""
        described = await health_probe(self._link, ctx, "recall health")
        facts = self._link.facts
        return f"{described}; {vector_scoring(VectorFacts() if facts is None else facts.vectors)}"

    async def aclose(self) -> None:
        """Close the pool this store created; a lent pool or connection is left open. Idempotent."""
        await self._link.aclose()
