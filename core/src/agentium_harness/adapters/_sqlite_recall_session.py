"""The SQLite recall store's session: bounded discovery, reads and validation in one scope.

Split from :mod:`agentium_harness.adapters.sqlite_recall`, whose docstring
describes the store as a whole; the session uses the store's connection and
helpers, and holds no state of its own beyond its scope, budgets and whether
it is closed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._codec import digest_of
from .._errors import AgentiumError, ArchiveCorruptError, InvalidArgumentError
from .._history import estimate_tokens
from .._ports import OpContext
from .._ports.archive import decode_archived_group
from .._ports.embedder import Vector
from .._ports.recall import (
    Candidate,
    Excerpt,
    RecallLimits,
    RecallSession,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    group_source_id,
    indexed_group_text,
    source_owner,
)
from .._ports.recall_args import checked_count, checked_ctx, checked_refs
from .._ports.recall_sources import source_kind_phrase as kind_of
from .._scope import Scope, SessionKey
from ._excerpts import content_terms, make_excerpt
from ._sqlite_bounds import DIGEST_CHARS, INT_CHARS, JSON_BYTES, bounded_select, oversize
from ._sqlite_recall_sql import ranked_sources
from ._sqlite_recall_vectors import hybrid_rows
from ._stopwords import ENGLISH_STOPWORDS

if TYPE_CHECKING:
    from .sqlite_recall import SQLiteRecallStore

#: Stop-word lists a store can drop from queries, by ``stopwords`` option value.
STOPWORD_LISTS: dict[str, frozenset[str]] = {"english": ENGLISH_STOPWORDS, "none": frozenset()}

__all__ = ["SQLiteRecallError", "SQLiteRecallSession"]


class SQLiteRecallError(AgentiumError):
    """The SQLite recall store could not complete an operation, or was used after closing.

    Causes include a lock held past the busy timeout, a full disk, a file that
    is not a SQLite database or holds newer recall tables, a damaged source
    row (left as it is), and calls on a closed store or session. Nothing was
    written by the failed call.

    The message never names a source's id (ids are content, shown only with
    capture); for a damaged source row, ``source_id`` holds it (else ``""``).
    """

    #: The id of the damaged source the error is about, or ``""``; never part of the message.
    source_id: str = ""


#: What a read takes of a source, each column bounded (:mod:`._sqlite_bounds`), then the over column.
_READ_SQL: Final = (
    "SELECT "  # noqa: S608 - constant text
    + bounded_select(
        (
            ("s.revision", DIGEST_CHARS),
            ("s.kind", len("document")),
            ("s.seq", INT_CHARS),
            ("s.receipt_digest", DIGEST_CHARS),
            ("t.title", JSON_BYTES),
            ("t.text", JSON_BYTES),
            ("t.data", JSON_BYTES),
        )
    )
    + " FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id WHERE s.source_id = ?"
)
#: A source's revision alone, bounded, then what is over its bound (or NULL).
_REVISION_SQL: Final = (
    f"SELECT {bounded_select((('revision', DIGEST_CHARS),))} FROM recall_sources WHERE source_id = ?"  # noqa: S608
)


def _oversized(path: str, source_id: object, over: object) -> SQLiteRecallError:
    return _damaged(path, source_id, f"it holds a {over}, longer than any the store writes (not read)")


def _damaged(path: str, source_id: object, why: str) -> SQLiteRecallError:
    # The id is content: kept on the error, out of its text (which reaches Evidence.problems and logs).
    error = SQLiteRecallError(
        f"sqlite recall store: {kind_of(source_id)} in {path} is damaged: {why}; nothing of it was "
        "returned and the row was left as it is (its id is the error's source_id; delete the row, or the "
        "file, and index again)"
    )
    error.source_id = source_id if isinstance(source_id, str) else repr(source_id)
    return error


def checked_candidate_row(row: Sequence[Any], owner: SourceOwner, path: str) -> None:
    """Raise :class:`SQLiteRecallError` unless a discovery row holds what the store writes.

    ``row`` is ``(source_id, revision, title, size_bytes, ...)``; ``owner``
    is the one its owner columns name. The source id must encode that same
    owner (ids are injective in their owner), the revision and title be
    text and the size a non-negative integer.
    """
    source_id, revision, title, size = row[:4]
    if not isinstance(source_id, str) or source_owner(source_id) != owner:
        raise _damaged(path, source_id, "its id does not encode the owner stored beside it")
    if not isinstance(revision, str) or not revision or not isinstance(title, str):
        raise _damaged(path, source_id, "its revision or title is not text")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _damaged(path, source_id, "its size is not a non-negative integer")


def verified_text(ref: SourceRef, owner: SourceOwner, row: Sequence[Any], path: str) -> str:
    """The stored text of ``ref`` once checked against its revision; raise on any doubt.

    ``row`` is ``(kind, seq, receipt_digest, title, text, data)`` of the
    source ``ref`` names, already found at ``ref.revision``. A document's
    revision is the digest of its title and text, so both are hashed again. A
    group's canonical bytes are decoded strictly and checked against the
    receipt digest (:func:`~agentium_harness._ports.archive.decode_archived_group`),
    and its text must be the one indexed for them: a mismatch raises
    :class:`~agentium_harness._errors.ArchiveCorruptError`, as
    ``seek_groups`` does. Anything else is :class:`SQLiteRecallError`.
    """
    kind, seq, receipt_digest, title, text, data = row
    source_id = ref.source_id
    if source_id.startswith("doc/") and kind == "document":
        if not isinstance(title, str) or not isinstance(text, str):
            raise _damaged(path, source_id, "its title or text is not text")
        if digest_of({"title": title, "text": text}) != ref.revision:
            raise _damaged(path, source_id, "its title and text do not match its revision")
        return text
    if source_id.startswith("group/") and kind == "group" and owner.user is not None and owner.session:
        key = SessionKey(owner.tenant, owner.user, owner.session)

        def where() -> str:
            # Not the session's key: it holds the ids the source id does (content, as in _damaged).
            return f"an indexed group source (seq {seq!r}) in {path}"

        group = decode_archived_group(key, seq, receipt_digest, data, where)
        if group.digest != ref.revision or group_source_id(key, group.seq) != source_id:
            raise ArchiveCorruptError(
                f"{where()} is filed under another source id or revision; the row is damaged"
            )
        if not isinstance(text, str) or indexed_group_text(group) != text:
            raise ArchiveCorruptError(
                f"{where()}: its indexed text does not match its archived bytes; the row is damaged"
            )
        return text
    raise _damaged(path, source_id, f"its kind {kind!r} does not match its id")


def _row_owner(values: Sequence[Any]) -> SourceOwner | None:
    """The owner stored in a row, or ``None`` for one no longer valid.

    A document indexed before owners naming a session had to name its user
    too is never discovered again (it was ambiguous across users).
    """
    try:
        return SourceOwner(*values)
    except InvalidArgumentError:
        return None


class SQLiteRecallSession(RecallSession):
    """A recall session of :class:`SQLiteRecallStore`, confined to one scope.

    Holds no connection of its own (calls run on the store's connection, one
    at a time); :meth:`close` marks it closed, after which calls are refused.
    :meth:`read` picks excerpt windows with the terms of this session's latest
    :meth:`discover` query.
    """

    def __init__(self, store: SQLiteRecallStore, scope: Scope, limits: RecallLimits) -> None:
        self._store = store
        self._scope = scope
        self._limits = limits
        self._terms: tuple[str, ...] = ()
        self._closed = False

    @property
    def scope(self) -> Scope:
        """The scope this session was opened for."""
        return self._scope

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def _begin(self, ctx: OpContext, operation: str) -> None:
        checked_ctx(ctx, operation).raise_if_expired(operation)
        if self._closed:
            raise SQLiteRecallError(f"sqlite recall store: {operation} refused: the recall session is closed")
        # A closed store refuses even a call that would not reach it (a query of stop words).
        self._store.refuse_if_closed(operation)

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Up to ``max_candidates`` visible sources for ``query``, best first, within ``ctx.remaining_bytes``.

        An empty query, or one of stop words and punctuation only, finds
        nothing; a source below the store's relevance floor is never
        returned. See the module docs for how matches are ranked.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        config = self._store.config
        terms = content_terms(query, STOPWORD_LISTS[config.stopwords])
        self._terms = terms
        limit = max(0, checked_count(max_candidates, "max_candidates", "recall discover"))
        if not terms or limit == 0:
            return []
        cap, floor = config.max_ranked_matches, config.min_relevance
        scope = self._scope
        budget = ctx.remaining_bytes

        def work(conn: sqlite3.Connection) -> list[Candidate]:
            rows = ranked_sources(
                conn, scope, terms, limit, cap, lambda: ctx.raise_if_expired("recall discover"), floor
            )
            # bm25 totals are negative, lower is better; candidates carry higher-is-better scores.
            return self._candidates(rows, budget, lambda total: -total)

        return await self._store.run(ctx, "recall discover", work)

    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        """Up to ``max_candidates`` sources by lexical and vector rank, fused (reciprocal rank fusion).

        Each candidate's ``score`` is its fused score (higher is better). See
        :mod:`agentium_harness.adapters._sqlite_recall_vectors` for the
        bounded candidate set, the two floors and the fusion. Raises
        :class:`~agentium_harness._errors.EmbeddingModelMismatchError` when the
        index holds vectors of another model than ``vector``'s.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        if not isinstance(vector, Vector):
            raise InvalidArgumentError(f"vector must be a Vector, got {type(vector).__name__}")
        config = self._store.config
        terms = content_terms(query, STOPWORD_LISTS[config.stopwords])
        self._terms = terms
        limit = max(0, checked_count(max_candidates, "max_candidates", "recall discover"))
        if limit == 0:
            return []
        scope = self._scope
        budget = ctx.remaining_bytes
        path = self._store.path

        def work(conn: sqlite3.Connection) -> list[Candidate]:
            rows = hybrid_rows(
                conn,
                scope,
                terms,
                vector,
                path=path,
                max_candidates=limit,
                max_ranked=config.max_ranked_matches,
                min_relevance=config.min_relevance,
                min_similarity=config.min_similarity,
                max_vector_scan=config.max_vector_scan,
                depth=max(limit, config.hybrid_depth),
                check=lambda: ctx.raise_if_expired("recall discover"),
                vector_weight=config.vector_weight,
                fusion_k=config.fusion_k,
            )
            return self._candidates([(*row, score) for row, score in rows], budget, lambda s: s)

        return await self._store.run(ctx, "recall discover", work)

    def _candidates(
        self, rows: Sequence[Sequence[Any]], budget: int | None, score_of: Callable[[float], float]
    ) -> list[Candidate]:
        """Candidates from ``(source_id, revision, title, size, <5 owner columns>, score)`` rows, in order.

        Rows whose stored owner is no longer valid or not visible are skipped
        (the SQL filter already holds; never trust one check); a damaged row
        raises :class:`SQLiteRecallError`; the list stops where the discovery
        byte budget would be passed.
        """
        found: list[Candidate] = []
        spent = 0
        for source_id, revision, title, size, *owner_and_score in rows:
            owner = _row_owner(owner_and_score[:5])
            if owner is None or not owner.visible_to(self._scope):
                continue
            checked_candidate_row((source_id, revision, title, size), owner, self._store.path)
            candidate = Candidate(
                ref=SourceRef(source_id, revision),
                owner=owner,
                score=score_of(float(owner_and_score[5])),
                size_bytes=int(size),
                title=title,
            )
            spent += candidate.discovery_bytes
            if budget is not None and spent > budget:
                break
            found.append(candidate)
        return found

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, in ref order, within the byte/token budgets."""
        self._begin(ctx, "recall read")
        wanted = [(ref, source_owner(ref.source_id)) for ref in checked_refs(refs, "recall read")]
        terms = self._terms
        cap = max(0, checked_count(max_excerpt_bytes, "max_excerpt_bytes", "recall read"))

        def work(conn: sqlite3.Connection) -> list[Excerpt]:
            out: list[Excerpt] = []
            spent_bytes = spent_tokens = 0
            for ref, owner in wanted:
                ctx.raise_if_expired("recall read")
                if owner is None or not owner.visible_to(self._scope):
                    continue
                row = conn.execute(_READ_SQL, (ref.source_id,)).fetchone()
                if row is not None and row[-1] is not None:
                    # A value over its bound was not read: a group's is archived data, as decode says.
                    if row[1] == "group":
                        raise ArchiveCorruptError(oversize("an indexed group source", row[-1]))
                    raise _oversized(self._store.path, ref.source_id, row[-1])
                if row is None or row[0] != ref.revision:
                    continue  # deleted or changed: validation reports it
                text = verified_text(ref, owner, row[1:-1], self._store.path)
                excerpt = make_excerpt(ref, owner, text, terms, cap)
                spent_bytes += len(excerpt.text.encode("utf-8"))
                spent_tokens += estimate_tokens(excerpt.text)
                if ctx.remaining_bytes is not None and spent_bytes > ctx.remaining_bytes:
                    break
                if ctx.remaining_tokens is not None and spent_tokens > ctx.remaining_tokens:
                    break
                out.append(excerpt)
            return out

        return await self._store.run(ctx, "recall read", work)

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """One validation per ref, in order, all read from one snapshot of the database."""
        return await self._validate(refs, ctx, "recall validate")

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """As :meth:`validate`: one bounded primary-key lookup per ref, in one read transaction."""
        return await self._validate(refs, ctx, "recall validate_current")

    async def _validate(self, refs: Sequence[SourceRef], ctx: OpContext, operation: str) -> list[Validation]:
        self._begin(ctx, operation)
        wanted = [(ref, source_owner(ref.source_id)) for ref in checked_refs(refs, operation)]

        def work(conn: sqlite3.Connection) -> list[Validation]:
            out: list[Validation] = []
            # One read transaction: every ref is judged against the same view.
            conn.execute("BEGIN")
            try:
                for ref, owner in wanted:
                    ctx.raise_if_expired(operation)
                    if owner is None:
                        out.append(Validation(ref, ValidationStatus.UNKNOWN))
                    elif not owner.visible_to(self._scope):
                        out.append(Validation(ref, ValidationStatus.FORBIDDEN))
                    else:
                        row = conn.execute(_REVISION_SQL, (ref.source_id,)).fetchone()
                        if row is not None and row[0] is None:  # NOT NULL: over its bound, not read
                            raise _oversized(self._store.path, ref.source_id, row[1])
                        if row is None:
                            out.append(Validation(ref, ValidationStatus.DELETED))
                        elif row[0] == ref.revision:
                            out.append(Validation(ref, ValidationStatus.CURRENT, row[0]))
                        else:
                            out.append(Validation(ref, ValidationStatus.CHANGED, row[0]))
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
            return out

        return await self._store.run(ctx, operation, work)

    async def close(self) -> None:
        """Mark the session closed. Always succeeds (also after a cancelled call); idempotent."""
        self._closed = True
        self._terms = ()
