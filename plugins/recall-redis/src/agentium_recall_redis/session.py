"""The Redis recall store's session: discovery, reads and validations confined to one scope.

:class:`RedisRecallSession` is what :meth:`RedisRecallStore.open
<agentium_recall_redis.store.RedisRecallStore.open>` returns. It holds no
connection: each call is one round trip on the store's link (ranking and
round trips are described in :mod:`agentium_recall_redis.store`).

Scope: the scope filter is the choice of buckets, applied before any limit,
so a foreign source can neither be returned nor take a place. Reads and
validations decide visibility from the source id alone (ids are injective in
their owner): a foreign id is ``FORBIDDEN`` and never looked up.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    Candidate,
    Completeness,
    Excerpt,
    MessageGroup,
    OmittedContext,
    OpContext,
    RecallLimits,
    RecallSession,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    Vector,
    cosine_scores,
    decode_archived_group,
    estimate_tokens,
    make_excerpt,
    reciprocal_rank_fusion,
)
from agentium_harness.plugin_api import (
    source_kind_phrase as kind_of,
)

from .errors import RedisRecallError, RedisRecallValueTooLargeError
from .keys import (
    encode_term,
    owner_from_key,
    owner_of_source_id,
    stored_seq,
    tenant_prefix,
    visible_owner_keys,
)
from .link import as_text
from .scripts import DISCOVER, HYBRID, READ, REVISION_CAP, VALIDATE
from .server import Arg
from .terms import STOPWORD_LISTS, query_stems
from .text_blocks import checked_text, read_span

if TYPE_CHECKING:
    from .link import Command, Reply
    from .lua import Script
    from .server import ServerErrors
    from .store import RedisRecallStore

__all__ = ["MAX_SCRIPT_INT", "MAX_UNINDEXED", "RedisRecallSession", "StoreReads", "check_count", "seek_rows"]


@attrs.frozen(slots=True)
class StoreReads:
    """The reads a session makes through its store: the store's bounded calls and its error mapping.

    The store hands them over when it opens a session, so the session never
    reaches into the store's private attributes.
    """

    #: One round trip of read-only commands (the store's ``_call``).
    call: Callable[[Sequence[Command], OpContext, str], Awaitable[list[Reply]]]
    #: A read-only script, re-sent if the server lost its script cache (the store's ``_script``).
    script: Callable[[Script, Sequence[str], Sequence[Arg], OpContext, str], Awaitable[Reply]]
    #: Turns a server's refusal into the store's typed error.
    errors: ServerErrors


#: Titles up to this many bytes come back with hybrid discovery's candidates; a longer one is read for
#: the winners only.
TITLE_CAP: Final = 1024

#: The lexical pool of hybrid discovery: this many times ``hybrid_depth`` of the ranking's best rows.
POOL_PER_DEPTH: Final = 4

# What an excerpt of a text read only in part may have left out: anything, since the rest is unread.
_UNREAD: Final = frozenset({OmittedContext.SOURCE, OmittedContext.CORRECTION, OmittedContext.NEGATION})


#: The largest magnitude an int argument reaches a script with: every integer up to it is exact in a
#: Lua number and a Redis sorted-set score (doubles), so a seq or count past it is clamped, never rounded.
MAX_SCRIPT_INT: Final = 2**53 - 1

#: Most seqs one ``unindexed_groups`` reports (a larger ``max_groups`` is lowered to it): its script
#: scans ``4 x`` that many seqs while every other client of the server waits.
MAX_UNINDEXED: Final = 4096


#: A row's ``size`` field as the store writes it: a canonical non-negative decimal.
_SIZE: Final = re.compile(r"0|[1-9][0-9]{0,17}")


def _row_size(value: object) -> int | None:
    """A row's stored size, or ``None`` when the field was changed into something the store never writes."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return int(text) if _SIZE.fullmatch(text) else None


def _is_utf8(value: object) -> bool:
    """True for a ``str`` that came from valid UTF-8 (no surrogate escapes)."""
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(text: str) -> str:
    """``text`` with every surrogate (undecodable bytes, a lone surrogate escaped in JSON) as U+FFFD."""
    if _is_utf8(text):
        return text
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _row_text(value: bytes) -> str | None:
    """A row's id or revision field as text, or ``None`` when it is not UTF-8 (damaged outside the store)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check_count(value: object, what: str) -> int:
    """An int argument ``what``, clamped to ±:data:`MAX_SCRIPT_INT`; a bool or a non-int is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    return max(-MAX_SCRIPT_INT, min(MAX_SCRIPT_INT, value))


def seek_rows(key: SessionKey, rows: Any, cap: int, where: str) -> list[MessageGroup]:
    """The groups of a ``SEEK`` reply for session ``key``, each decoded strictly; raise on any doubt.

    A seq the store never writes, or a row filed under another owner (size
    ``-1``), is ``ArchiveCorruptError``; a group over ``cap`` (its bytes left
    out) :class:`RedisRecallValueTooLargeError`; bytes that do not match
    their digest, decoded strictly, ``ArchiveCorruptError``.
    """
    out: list[MessageGroup] = []
    for row in rows or ():
        seq, digest, size = stored_seq(row[0]), as_text(row[1]), int(row[2])
        if seq is None:  # a score the store never writes (0.5, inf): the group set was changed
            raise ArchiveCorruptError(f"an indexed group of session {key.key()} has a damaged seq")
        if size < 0:  # the set names another owner's row: its bytes may not name their session
            raise ArchiveCorruptError(
                f"indexed group {seq} of session {key.key()} is filed under another owner's row; "
                "it was not read"
            )
        if len(row) < 4:
            raise RedisRecallValueTooLargeError(
                f"indexed group {seq} of session {key.key()} is {size} bytes, more than max_value_bytes "
                f"({cap}); it was not read. Raise max_value_bytes to read it"
            )
        out.append(
            decode_archived_group(
                key,
                seq,
                digest,
                bytes(row[3]),
                # Called at once, if at all (the message of an error it raises): seq is this row's.
                lambda: f"indexed group {seq} of session {key.key()} at {where}",  # noqa: B023
            )
        )
    return out


def _unread_rest(excerpt: Excerpt) -> Excerpt:
    """An excerpt of a text read only up to the read cap: never complete, and anything may be left out."""
    completeness = (
        Completeness.PARTIAL if excerpt.completeness is Completeness.COMPLETE else excerpt.completeness
    )
    return attrs.evolve(excerpt, completeness=completeness, omitted=excerpt.omitted | _UNREAD)


@attrs.frozen(slots=True)
class _HybridRow:
    """One row of the ``HYBRID`` script's reply (see its description in :mod:`.scripts`)."""

    n: str
    sid: str
    rev: str
    size: int
    owner_key: str
    title_bytes: int
    title: str  # empty when longer than TITLE_CAP (read for the winners only)
    vector: bytes | None
    passes: bool  # passes the relevance floor
    lexical: bool  # in the lexical pool (else found by the vector scan only)


def _hybrid_rows(reply: Any) -> list[_HybridRow]:
    """The ``HYBRID`` reply's rows, each with its slice of the concatenated vectors.

    A reply that does not add up (a vector length past the end of the
    vectors) is the server's bug or damage: ``RedisRecallError``, nothing
    returned.
    """
    if not reply:
        return []
    header, blob = reply
    # Undecodable bytes (a field damaged outside the store) stay surrogates, so the row can be told apart.
    raw = bytes(header) if isinstance(header, bytes | bytearray) else str(header).encode()
    decoded = json.loads(raw.decode("utf-8", "surrogateescape"))
    rows: list[_HybridRow] = []
    offset = 0
    for item in decoded if isinstance(decoded, list) else []:
        n, sid, rev, size, okey, tlen, title, vlen, _score, passes, lexical = item
        vector = None
        if int(vlen) > 0:
            vector = bytes(blob[offset : offset + int(vlen)])
            offset += int(vlen)
        stored_size = _row_size(size)
        if stored_size is None or not (_is_utf8(sid) and _is_utf8(rev) and _is_utf8(okey)):
            continue  # a row changed outside the store: never returned (its vector was skipped above)
        rows.append(
            _HybridRow(
                str(n),
                str(sid),
                str(rev),
                stored_size,
                str(okey),
                int(tlen),
                # A title is shown, not matched: undecodable bytes read as U+FFFD, as in discover.
                _shown(str(title)),
                vector,
                int(passes) == 1,
                int(lexical) == 1,
            )
        )
    if offset != len(blob):
        raise RedisRecallError("recall discover: the hybrid script's reply does not add up; nothing returned")
    return rows


class RedisRecallSession(RecallSession):
    """A recall session of :class:`RedisRecallStore`, confined to one scope.

    Holds no connection of its own (calls borrow one from the store's pool
    for one round trip); :meth:`close` marks it closed, after which calls are
    refused. :meth:`read` picks excerpt windows with the terms of this
    session's latest :meth:`discover` query.
    """

    def __init__(
        self, store: RedisRecallStore, scope: Scope, limits: RecallLimits, reads: StoreReads
    ) -> None:
        self._store = store
        self._reads = reads
        self._scope = scope
        self._limits = limits
        self._prefix = tenant_prefix(store.config.key_prefix, scope.tenant)
        self._owner_keys = visible_owner_keys(scope)
        self._owners: dict[bytes, SourceOwner | None] = {}
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
        ctx.raise_if_expired(operation)
        if self._closed:
            raise RedisRecallError(f"redis recall store: {operation} refused: the recall session is closed")

    def _owner(self, key: bytes) -> SourceOwner | None:
        """The owner an owner key names (cached per session: a scope sees at most 16)."""
        if key not in self._owners:
            try:
                self._owners[key] = owner_from_key(self._scope.tenant, key.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                self._owners[key] = None
        return self._owners[key]

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Up to ``max_candidates`` visible sources for ``query``, best first, within ``ctx.remaining_bytes``.

        One round trip (see the module docs for the ranking). An empty or
        all-punctuation query finds nothing and makes no call.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        config = self._store.config
        words, terms = query_stems(query, STOPWORD_LISTS[config.stopwords])
        self._terms = words  # excerpts are cut around the query's own words
        limit = max(0, check_count(max_candidates, "max_candidates"))
        if not terms or limit == 0:
            return []
        per_term = max(limit, -(-config.max_ranked_matches // len(terms)))
        budget = -1 if ctx.remaining_bytes is None else max(0, ctx.remaining_bytes)
        args: list[Arg] = [
            self._prefix,
            limit,
            per_term,
            budget,
            len(terms),
            len(self._owner_keys),
            config.min_relevance,
            # A title is written within max_value_bytes: a longer one was changed outside the store.
            config.max_value_bytes,
        ]
        args.extend(encode_term(t) for t in terms)
        args.extend(self._owner_keys)
        rows = await self._reads.script(DISCOVER, [f"{self._prefix}:bk"], args, ctx, "recall discover")
        found: list[Candidate] = []
        spent = 0
        for sid, revision, title, size, okey, score in rows or ():
            owner = self._owner(okey)
            source_id, rev, stored_size = _row_text(sid), _row_text(revision), _row_size(size)
            # The buckets already hold; never trust one check: the row's owner field must be the
            # owner its source id names (a row changed outside the store could claim another's),
            # and a field the store never writes that way marks the row as changed outside it too.
            if source_id is None or rev is None or stored_size is None:
                continue
            if owner is None or owner_of_source_id(source_id) != owner or not owner.visible_to(self._scope):
                continue
            candidate = Candidate(
                SourceRef(source_id, rev),
                owner,
                float(score),
                stored_size,
                title.decode("utf-8", "replace"),
            )
            spent += candidate.discovery_bytes
            if budget >= 0 and spent > budget:
                break
            found.append(candidate)
        return found

    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        """Up to ``max_candidates`` sources by lexical and vector rank, fused (reciprocal rank fusion).

        One round trip in the common case (the ``HYBRID`` script returns the
        lexical pool and the newest vectors of the scope, each row with its
        vector); a second only when a winner's title is longer than 1 KiB.
        Vectors are scored here (:func:`cosine_scores`: NumPy when installed),
        each ranking keeps what passes its own floor (``min_relevance``,
        ``min_similarity``), cut to ``hybrid_depth``, and the two are fused
        with ``k = fusion_k``, the vector ranking weighted ``vector_weight``.
        Each candidate's ``score`` is its fused score. Raises
        ``EmbeddingModelMismatchError`` when the tenant's vectors are of
        another model than ``vector``'s.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        if not isinstance(vector, Vector):
            raise InvalidArgumentError(f"vector must be a Vector, got {type(vector).__name__}")
        config = self._store.config
        words, terms = query_stems(query, STOPWORD_LISTS[config.stopwords])
        self._terms = words
        limit = max(0, check_count(max_candidates, "max_candidates"))
        if limit == 0:
            return []
        depth = max(limit, config.hybrid_depth)
        pool = max(limit, POOL_PER_DEPTH * depth)
        per_term = max(pool, -(-config.max_ranked_matches // max(1, len(terms))))
        args: list[Arg] = [
            self._prefix,
            pool,
            per_term,
            len(terms),
            len(self._owner_keys),
            config.min_relevance,
            vector.model.key(),
            config.max_vector_scan,
            TITLE_CAP,
            # The tenant's vectors are of the query's model (the script checks): 4 bytes a dimension.
            4 * vector.model.dimension,
            config.max_value_bytes,
        ]
        args.extend(encode_term(t) for t in terms)
        args.extend(self._owner_keys)
        reply = await self._reads.script(HYBRID, [f"{self._prefix}:bk"], args, ctx, "recall discover")
        rows = _hybrid_rows(reply)
        blobs = [row.vector for row in rows if row.vector is not None]
        scores = iter(cosine_scores(vector, blobs))
        sims = {row.n: next(scores) for row in rows if row.vector is not None}
        # Most similar first; the newer row first among equals.
        similar = sorted((n for n in sims if math.isfinite(sims[n])), key=lambda n: (-sims[n], -int(n)))
        rankings = [
            [row.n for row in rows if row.lexical and row.passes][:depth],
            [n for n in similar if sims[n] >= config.min_similarity][:depth],
        ]
        fused = reciprocal_rank_fusion(rankings, k=config.fusion_k, weights=(1.0, config.vector_weight))
        by_n = {row.n: row for row in rows}
        return await self._fused_candidates([(by_n[n], score) for n, score in fused[:limit]], ctx)

    async def _fused_candidates(
        self, winners: Sequence[tuple[_HybridRow, float]], ctx: OpContext
    ) -> list[Candidate]:
        """Candidates of the fused winners, in order, within the discovery byte budget.

        A title longer than :data:`TITLE_CAP` was left out of the script's
        reply: the ones that fit the budget are read in one more round trip.
        """
        budget = ctx.remaining_bytes
        chosen: list[tuple[_HybridRow, float, SourceOwner]] = []
        spent = 0
        for row, score in winners:
            owner = self._owner(row.owner_key.encode())
            if owner is None or owner_of_source_id(row.sid) != owner or not owner.visible_to(self._scope):
                continue  # the buckets already hold; never trust one check (see discover)
            spent += len(row.sid.encode()) + len(row.rev.encode()) + row.title_bytes
            if budget is not None and spent > budget:
                break
            chosen.append((row, score, owner))
        long_titles = [row for row, _, _ in chosen if row.title_bytes > TITLE_CAP]
        titles: dict[str, str] = {}
        if long_titles:
            from redis.exceptions import ResponseError

            commands: list[Sequence[Arg]] = [
                ("HGET", f"{self._prefix}:m:{row.n}", "title") for row in long_titles
            ]
            replies = await self._reads.call(commands, ctx, "recall discover")
            for row, value in zip(long_titles, replies, strict=True):
                if isinstance(value, ResponseError):
                    self._reads.errors.refused(value, "recall discover")
                titles[row.sid] = (value or b"").decode("utf-8", "replace")
        return [
            Candidate(SourceRef(row.sid, row.rev), owner, score, row.size, titles.get(row.sid, row.title))
            for row, score, owner in chosen
        ]

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, in ref order, within the byte/token budgets.

        One round trip. A text whose excerpt can still take bytes (a
        ``max_excerpt_bytes`` above 0, ``ctx.remaining_bytes`` not spent) is
        fetched with ``GETRANGE`` up to ``max_read_bytes`` (rounded up to
        whole blocks), so its excerpt is cut around the query's words
        wherever they are in that much of it; any other text costs one block.
        Every block read
        is checked against the row's block digests (:mod:`~agentium_recall_redis.text_blocks`):
        a text edited behind the store's back raises :class:`RedisRecallError`,
        a row without digests (an earlier layout) :class:`RedisRecallLayoutError`;
        nothing of it is returned. An excerpt of a longer text is marked
        partial, with source, correction and negation context possibly left out.
        """
        self._begin(ctx, "recall read")
        cap = max(0, check_count(max_excerpt_bytes, "max_excerpt_bytes"))
        wanted: list[tuple[SourceRef, SourceOwner]] = []
        for ref in refs:
            owner = owner_of_source_id(getattr(ref, "source_id", None))
            if owner is not None and owner.visible_to(self._scope) and isinstance(ref.revision, str):
                wanted.append((ref, owner))
        if not wanted:
            return []
        read_cap = self._store.config.max_read_bytes
        # The script fetches up to max_read_bytes only the texts whose excerpts the budgets leave room
        # for (the excerpt is cut around the query's words, wherever they are), one block of the rest.
        budget = -1 if ctx.remaining_bytes is None else max(0, min(MAX_SCRIPT_INT, ctx.remaining_bytes))
        args: list[Arg] = [self._prefix, read_span(read_cap), cap, budget]
        for ref, _ in wanted:
            args.extend((ref.source_id, ref.revision))
        rows = await self._reads.script(READ, [f"{self._prefix}:ids"], args, ctx, "recall read")
        out: list[Excerpt] = []
        spent_bytes = spent_tokens = 0
        for (ref, owner), row in zip(wanted, rows or (), strict=False):
            if row is None:
                continue  # deleted, changed or never indexed: validation reports it
            data = checked_text(ref, row)[:read_cap]
            size = int(row[0])
            cut = size > len(data)
            # A cut can split the last character; the stored text itself is valid UTF-8.
            text = data.decode("utf-8", "ignore" if cut else "replace")
            excerpt = make_excerpt(ref, owner, text, self._terms, cap)
            if cut:
                excerpt = _unread_rest(excerpt)
            spent_bytes += len(excerpt.text.encode("utf-8", "surrogatepass"))
            spent_tokens += estimate_tokens(excerpt.text)
            if ctx.remaining_bytes is not None and spent_bytes > ctx.remaining_bytes:
                break
            if ctx.remaining_tokens is not None and spent_tokens > ctx.remaining_tokens:
                break
            out.append(excerpt)
        return out

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """One validation per ref, in order, all read by one script call (one consistent view).

        A revision field longer than any the store writes (changed behind its
        back) is not read: :class:`RedisRecallError` says the source is damaged.
        """
        return await self._validate(refs, ctx, "recall validate")

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """As :meth:`validate`: one bounded script call reading the current revisions, one round trip."""
        return await self._validate(refs, ctx, "recall validate_current")

    async def _validate(self, refs: Sequence[SourceRef], ctx: OpContext, operation: str) -> list[Validation]:
        self._begin(ctx, operation)
        out: list[Validation | None] = []
        lookups: list[int] = []
        for i, ref in enumerate(refs):
            owner = owner_of_source_id(getattr(ref, "source_id", None))
            if owner is None:
                out.append(Validation(ref, ValidationStatus.UNKNOWN))
            elif not owner.visible_to(self._scope):
                out.append(Validation(ref, ValidationStatus.FORBIDDEN))
            else:
                out.append(None)
                lookups.append(i)
        if lookups:
            # One script reads every revision (one consistent view), each only once its length is known
            # to be one the store writes: a value grown behind its back is never transferred.
            args: list[Arg] = [REVISION_CAP, *(refs[i].source_id for i in lookups)]
            reply = await self._reads.script(VALIDATE, [f"{self._prefix}:rev"], args, ctx, operation)
            for i, value in zip(lookups, reply, strict=True):
                ref = refs[i]
                if isinstance(value, int):
                    # The id and the tenant's prefix are content: the id is kept on the error, not in it.
                    error = RedisRecallError(
                        f"{operation}: {kind_of(ref.source_id)} is damaged: its revision holds {value} "
                        "bytes, longer than any the store writes (not read); nothing was returned and the "
                        "keys were left as they are (its id is the error's source_id; delete the source, "
                        "or rebuild the index)"
                    )
                    error.source_id = ref.source_id
                    raise error
                current = None if value is None else as_text(value)
                if current is None or current.startswith("-"):
                    out[i] = Validation(ref, ValidationStatus.DELETED)
                elif current == ref.revision:
                    out[i] = Validation(ref, ValidationStatus.CURRENT, current)
                else:
                    out[i] = Validation(ref, ValidationStatus.CHANGED, current)
        return [v for v in out if v is not None]

    async def close(self) -> None:
        """Mark the session closed. Always succeeds (also after a cancelled call); idempotent."""
        self._closed = True
        self._terms = ()
