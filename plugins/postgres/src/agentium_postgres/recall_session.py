"""The PostgreSQL recall store's session: discovery (lexical and hybrid), reads and validation.

A :class:`PostgresRecallSession` holds no connection: each call takes one
from its store's pool, in one transaction under the scope's tenant. See
:mod:`agentium_postgres.recall` for the store and
:mod:`agentium_postgres.recall_sql` / :mod:`agentium_postgres.recall_vectors`
for how discovery ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    Candidate,
    EmbeddingModelMismatchError,
    Excerpt,
    OpContext,
    RecallLimits,
    RecallSession,
    Scope,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    encode_segment,
    estimate_tokens,
    make_excerpt,
    query_terms,
    source_owner,
)
from agentium_harness.plugin_api import Vector as _Vector
from agentium_harness.plugin_api import (
    source_kind_phrase as kind_of,
)

from .args import checked_count, checked_ctx, checked_refs
from .errors import PostgresRecallError, PostgresRowTooLargeError
from .keys import q
from .recall_sql import scope_params, term_query
from .recall_vectors import POOL_PER_DEPTH, fuse
from .recall_verify import verified_text

if TYPE_CHECKING:
    from .link import Conn
    from .recall import PostgresRecallStore

__all__ = ["PostgresRecallSession"]

#: The largest ``integer`` (int4): what the discovery functions' counts may be.
_MAX_INT4: Final = 2**31 - 1

#: Bytes of a source's revision (a document's digest of its title and text, a group's archive
#: digest) and of an archived group's digest: ``sha256:`` and 64 hex digits.
_DIGEST_BYTES: Final = len("sha256:") + 64


def _too_large(source_id: object, message: str) -> PostgresRowTooLargeError:
    # The id is content: kept on the error, out of its text (which reaches Evidence.problems and logs).
    error = PostgresRowTooLargeError(message)
    error.source_id = str(source_id)
    return error


def _oversized(source_id: object, what: str, size: object, cap: int) -> PostgresRowTooLargeError:
    return _too_large(
        source_id,
        f"postgres recall store: {kind_of(source_id)} holds a {what} of {size} bytes (at most {cap}); "
        "no source this store wrote does: the row is damaged and was not transferred (its id is the "
        "error's source_id)",
    )


def _bounded(rows: Sequence[Sequence[Any]], id_at: int, title_cap: int) -> list[tuple[Any, ...]]:
    """Discovery rows without their last two columns, once neither names a value over its bound.

    Each row ends with the stored sizes of its revision and its title (see :data:`_SIZES`): a value
    over its bound came back NULL, unread. ``id_at``: the column of the row's source id.
    """
    out = []
    for row in rows:
        for what, size, cap in (("revision", row[-2], _DIGEST_BYTES), ("title", row[-1], title_cap)):
            if size is not None and size > cap:
                raise _oversized(row[id_at], what, size, cap)
        out.append(tuple(row[:-2]))
    return out


#: A discovery row's revision and title as read, each capped on the server (%s: the title's bound).
_CAPPED: Final = (
    "CASE WHEN octet_length(d.revision) <= 71 THEN d.revision END, "
    "CASE WHEN octet_length(d.title) <= %s THEN d.title END"
)
#: The stored sizes of a discovery row's revision and title, last in its row (see :func:`_bounded`).
_SIZES: Final = "octet_length(d.revision), octet_length(d.title)"


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
        checked_ctx(ctx, operation).raise_if_expired(operation)
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
        # The discovery functions take an integer: a larger count would name no function at all.
        limit = min(_MAX_INT4, max(0, checked_count(max_candidates, "max_candidates", "recall discover")))
        if not terms or limit == 0:
            return []
        config = self._store.config
        keys = scope_params(self._scope)

        async def work(conn: Conn) -> Any:
            # Left unread: one round trip. Never prepared: the function plans each search itself.
            return await conn.execute(
                # The function's rows in its order, the revision and title capped: one grown behind
                # the store's back is not transferred (_bounded refuses the row).
                q(
                    "SELECT d.source_id, " + _CAPPED + ", d.size_bytes, d.score, " + _SIZES + " "
                    "FROM {s}.recall_discover(%s::text[], %s, %s, %s, %s, %s, %s) WITH ORDINALITY "
                    "AS d(source_id, revision, title, size_bytes, score, ord) ORDER BY d.ord",
                    config.schema,
                ),
                (
                    config.max_row_bytes,
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
        rows = _bounded(await cursor.fetchall(), 0, config.max_row_bytes)
        return self._candidates(rows, ctx.remaining_bytes)

    def _candidates(self, rows: Sequence[Sequence[Any]], budget: int | None) -> list[Candidate]:
        """``(source_id, revision, title, size, score)`` rows as candidates, within the byte budget."""
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

    async def discover_hybrid(
        self, query: str, vector: _Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        """Lexical and vector candidates fused (reciprocal rank fusion), best first, in one round trip.

        Raises :class:`~agentium_harness.plugin_api.EmbeddingModelMismatchError`
        when the schema holds vectors of another model than ``vector``'s.
        See :mod:`agentium_postgres.recall_vectors`.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        if not isinstance(vector, _Vector):
            raise InvalidArgumentError(f"vector must be a Vector, got {type(vector).__name__}")
        terms = query_terms(query)
        self._terms = terms
        # The discovery functions take an integer: a larger count would name no function at all.
        limit = min(_MAX_INT4, max(0, checked_count(max_candidates, "max_candidates", "recall discover")))
        if limit == 0:
            return []
        config = self._store.config
        keys = scope_params(self._scope)
        pool = max(limit, POOL_PER_DEPTH * config.hybrid_depth)
        facts = self._store.link.facts
        in_database = facts is None or facts.vectors.scored_in_database  # None: learnt on this call

        async def work(conn: Conn) -> tuple[Any, Any]:
            # Both left unread: the model row and the candidates travel in one round trip.
            model = await conn.execute(
                q("SELECT model, dimension FROM {s}.recall_vector_model", config.schema)
            )
            found = await conn.execute(
                q(
                    # The query vector goes to pgvector only if it is of the schema's model: one of
                    # another dimension failed there as a bare "different vector dimensions" error
                    # before the model check below could say EmbeddingModelMismatchError.
                    # The revision and title capped, as in discover (only constant text is joined).
                    "SELECT d.id, d.source_id, " + _CAPPED + ", d.size_bytes, d.lexical_rank, "  # noqa: S608
                    "d.embedding, d.similarity, " + _SIZES + " FROM {s}.recall_discover_hybrid("
                    "%s::text[], %s, %s, %s, %s, %s, %s, %s, CASE WHEN (SELECT m.model = %s AND "
                    "m.dimension = %s FROM {s}.recall_vector_model AS m) THEN %s::real[] END) "
                    "WITH ORDINALITY AS d(id, source_id, revision, title, size_bytes, lexical_rank, "
                    "embedding, similarity, ord) ORDER BY d.ord",
                    config.schema,
                ),
                (
                    config.max_row_bytes,
                    [term_query(t) for t in terms],
                    keys["user"],
                    keys["session"],
                    keys["project"],
                    keys["repository"],
                    config.max_ranked_matches,
                    pool,
                    config.max_vector_scan,
                    vector.model.model,
                    vector.model.dimension,
                    # Scored in the database where pgvector is (the function decides), else ignored.
                    list(vector.values) if in_database else None,
                ),
                prepare=False,
                binary=True,
            )
            return model, found

        model_cursor, found = await self._store.link.run(
            ctx, "recall discover", keys["tenant"], work, write=False
        )
        stored = await model_cursor.fetchone()
        if stored is not None and (str(stored[0]), int(stored[1])) != (
            vector.model.model,
            vector.model.dimension,
        ):
            raise EmbeddingModelMismatchError(
                f"postgres recall store: schema {config.schema!r} holds vectors of {stored[0]}/{stored[1]}, "
                f"not of {vector.model.key()}; vectors of two models are never compared: configure the "
                "embedder the index was built with, or use a new schema and run `agentium recall rebuild`"
            )
        rows = _bounded(await found.fetchall(), 1, config.max_row_bytes)
        if stored is None:
            rows = [(*r[:6], None, None) for r in rows]  # no vector of any model: lexical only
        ranked = fuse(
            rows,
            vector,
            depth=config.hybrid_depth,
            min_similarity=config.min_similarity,
            vector_weight=config.vector_weight,
            fusion_k=config.fusion_k,
        )
        return self._candidates(
            [(r[1], r[2], r[3], r[4], score) for r, score in ranked[:limit]], ctx.remaining_bytes
        )

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, in ref order, within the byte/token budgets."""
        self._begin(ctx, "recall read")
        wanted = [(ref, self._owner(ref.source_id)) for ref in checked_refs(refs, "recall read")]
        cap = max(0, checked_count(max_excerpt_bytes, "max_excerpt_bytes", "recall read"))
        ids = sorted({ref.source_id for ref, owner in wanted if owner is not None})
        if not ids:
            return []
        tenant = encode_segment(self._scope.tenant)
        schema, row_cap = self._store.config.schema, self._store.config.max_row_bytes

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            # A body (or a group's canonical copy) over max_row_bytes (no source this store wrote has
            # one) is not transferred. A group's canonical copy comes along: its text is checked
            # against it (recall_verify), so an edited body is never returned as evidence.
            cursor = await conn.execute(
                q(
                    "SELECT s.source_id, CASE WHEN octet_length(s.revision) <= 71 THEN s.revision END, "
                    "CASE WHEN octet_length(s.body) <= %s THEN s.body END, "
                    "octet_length(s.body), s.kind, s.seq, "
                    "CASE WHEN octet_length(s.title) <= %s THEN s.title END, "
                    "CASE WHEN octet_length(a.digest) <= 71 THEN a.digest END, "
                    "CASE WHEN octet_length(a.data) <= %s THEN a.data END, octet_length(a.data), "
                    "octet_length(s.revision), octet_length(s.title), octet_length(a.digest) "
                    "FROM {s}.recall_sources AS s LEFT JOIN {s}.archive_groups AS a "
                    "ON s.kind = 'group' AND a.tenant_key = s.tenant_key AND a.user_key = s.user_key "
                    "AND a.session_key = s.session_key AND a.seq = s.seq "
                    "WHERE s.tenant_key = %s AND s.source_id = ANY(%s::text[])",
                    schema,
                ),
                (row_cap, row_cap, row_cap, tenant, ids),
            )
            return [tuple(r) for r in await cursor.fetchall()]

        rows = await self._store.link.run(ctx, "recall read", tenant, work, write=False)
        for source_id, _, body, size, *_, data, data_size, revision_size, title_size, digest_size in rows:
            if body is None or (data is None and data_size is not None):
                raise _too_large(
                    source_id,
                    f"postgres recall store: {kind_of(source_id)} holds {max(size, data_size or 0)} "
                    f"bytes, more than max_row_bytes={row_cap}; no source this store wrote does: the row "
                    "is damaged and was not transferred (its id is the error's source_id)",
                )
            for what, stored, bound in (
                ("revision", revision_size, _DIGEST_BYTES),
                ("title", title_size, row_cap),
                ("group digest", digest_size, _DIGEST_BYTES),
            ):
                if stored is not None and stored > bound:
                    raise _oversized(source_id, what, stored, bound)
        found = {str(r[0]): (str(r[1]), (r[4], r[5], r[6], r[2], r[7], r[8])) for r in rows}
        out: list[Excerpt] = []
        spent_bytes = spent_tokens = 0
        for ref, owner in wanted:
            ctx.raise_if_expired("recall read")
            row = found.get(ref.source_id)
            if owner is None or row is None or row[0] != ref.revision:
                continue  # foreign, deleted or changed: validation reports it
            text = verified_text(ref, owner, row[1])
            if text is None:
                continue  # its archived group was erased first: nothing left to check it against
            excerpt = make_excerpt(ref, owner, text, self._terms, cap)
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
        refs = checked_refs(refs, operation)
        visible = [ref.source_id for ref in refs if self._owner(ref.source_id) is not None]
        tenant = encode_segment(self._scope.tenant)
        schema = self._store.config.schema

        async def work(conn: Conn) -> dict[str, str]:
            cursor = await conn.execute(
                q(
                    "SELECT source_id, CASE WHEN octet_length(revision) <= 71 THEN revision END, "
                    "octet_length(revision) FROM {s}.recall_sources "
                    "WHERE tenant_key = %s AND source_id = ANY(%s::text[])",
                    schema,
                ),
                (tenant, sorted(set(visible))),
            )
            found = {}
            for source_id, revision, size in await cursor.fetchall():
                if revision is None:  # NOT NULL: over its bound, not transferred
                    raise _oversized(source_id, "revision", size, _DIGEST_BYTES)
                found[str(source_id)] = str(revision)
            return found

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
