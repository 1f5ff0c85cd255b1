"""The recall store port: bounded discovery, reads and validation of past evidence (R9–R13, R17, R18).

``RecallStore.open(scope, limits, ctx)`` returns a scoped :class:`RecallSession`
whose ``discover``, ``read``, ``validate`` and ``close`` each receive an
:class:`~agentium_harness._ports._base.OpContext` (cancel signal, deadline,
remaining bytes, remaining estimated tokens). Adapters enforce authorization
and physical I/O bounds, stop backend work on abort, return truthful
revisions, and close what they acquired even after cancellation. The runtime
still checks every bound on what they return.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._history import MessageGroup
from .._scope import Scope, SessionKey
from .._validators import bounded_count, bounded_duration, exact_int, shown_number
from ._base import Capabilities, OpContext, port_stub, unsupported
from .archive import ArchiveReceipt
from .embedder import Vector
from .erasure import DEFAULT_ERASE_BATCH, EraseReport, EraseTarget
from .recall_sources import (
    SourceOwner,
    document_source_id,
    group_source_id,
    indexed_group_text,
    source_owner,
)

__all__ = [
    "Candidate",
    "Completeness",
    "Excerpt",
    "OmittedContext",
    "RecallCapabilities",
    "RecallLimits",
    "RecallSession",
    "RecallStore",
    "SourceOwner",
    "SourceRef",
    "SourceVector",
    "Validation",
    "ValidationStatus",
    "document_source_id",
    "group_source_id",
    "indexed_group_text",
    "reciprocal_rank_fusion",
    "source_owner",
]


def _frozenset_of_omitted(value: Iterable[OmittedContext]) -> frozenset[OmittedContext]:
    """Typed frozenset converter."""
    return frozenset(value)


@attrs.frozen(slots=True)
class RecallCapabilities(Capabilities):
    """What a recall store declares (R9).

    The first four are required for any recall store. ``canonical_archive_reads``
    (direct bounded seeks of complete canonical archive groups through
    :meth:`RecallStore.seek_groups`) is additionally required to use recall
    together with task summaries. ``document_indexing`` (host documents through
    :meth:`RecallStore.index_document` and :meth:`RecallStore.delete_document`)
    and ``archive_indexing`` (following the archive through
    :meth:`RecallStore.index_groups`, which the engine calls after each
    eviction commits) are optional, and so is ``health_check``
    (:meth:`RecallStore.health`, a bounded probe that ``agentium check
    --probe`` shows). ``erasure`` (:meth:`RecallStore.erase`) removes the
    index entries, documents and vectors of a tenant, user, session or given
    groups (docs/erasure.md).

    Hybrid recall (an ``[embedder]`` beside the store) needs both
    ``vector_indexing`` (:meth:`RecallStore.index_vectors`: the store keeps one
    vector per source, at the source's revision, of one embedding model) and
    ``hybrid_discovery`` (:meth:`RecallSession.discover_hybrid`: lexical and
    vector candidates fused into one ranked list under the same budgets).
    """

    METHODS: ClassVar[dict[str, str]] = {
        "bounded_discovery": "session:discover",
        "bounded_reads": "session:read",
        "revision_validation": "session:validate",
        "bounded_current_validation": "session:validate_current",
        "canonical_archive_reads": "seek_groups",
        "document_indexing": "index_document",
        "archive_indexing": "index_groups",
        "health_check": "health",
        "vector_indexing": "index_vectors",
        "hybrid_discovery": "session:discover_hybrid",
        "erasure": "erase",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "bounded_discovery",
        "bounded_reads",
        "revision_validation",
        "bounded_current_validation",
    )

    bounded_discovery: bool = False
    bounded_reads: bool = False
    revision_validation: bool = False
    bounded_current_validation: bool = False
    canonical_archive_reads: bool = False
    document_indexing: bool = False
    archive_indexing: bool = False
    health_check: bool = False
    vector_indexing: bool = False
    hybrid_discovery: bool = False
    erasure: bool = False

    @property
    def hybrid(self) -> bool:
        """True when the store declares everything hybrid recall needs (vectors and fused discovery)."""
        return self.vector_indexing and self.hybrid_discovery


@attrs.frozen(slots=True)
class RecallLimits:
    """Recall budgets (R17). Every field is a hard ceiling for one run; the engine enforces each one.

    A run's rounds share them: the round after a clarification and the
    commit fence get what the earlier rounds left. ``max_evidence_tokens``
    bounds the evidence of the one request sent; ``max_latency_s`` the time
    spent in recall calls (not a clarifier's wait for the user);
    ``max_readback_bytes`` what the engine reads back from the archive to
    render recalled groups (docs/recall.md, "Render recalled groups").
    """

    max_queries: int = attrs.field(default=1, validator=bounded_count())
    max_candidates: int = attrs.field(default=8, validator=bounded_count())
    max_discovery_bytes: int = attrs.field(default=16_384, validator=bounded_count())
    max_source_bytes: int = attrs.field(default=65_536, validator=bounded_count())
    max_excerpt_bytes: int = attrs.field(default=2_048, validator=bounded_count())
    max_evidence_tokens: int = attrs.field(default=1_024, validator=bounded_count())
    max_latency_s: float = attrs.field(default=2.0, validator=bounded_duration())
    max_validations: int = attrs.field(default=16, validator=bounded_count(minimum=2))
    #: The query sent to discovery is cut to this many UTF-8 bytes (a pasted 1 MB input stays a normal run).
    max_query_bytes: int = attrs.field(default=2_048, validator=bounded_count())
    #: Bytes of archived groups read back to render recalled excerpts by role (a group is read whole,
    #: up to 32 MiB, for an excerpt of ``max_excerpt_bytes``): 16 times the default ``max_source_bytes``.
    #: No read starts past it and each read asks for one group, so at most one group more is read.
    max_readback_bytes: int = attrs.field(default=1_048_576, validator=bounded_count())


class Completeness(enum.StrEnum):
    """How much of its source an excerpt carries (R18)."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    TRUNCATED = "truncated"


class OmittedContext(enum.StrEnum):
    """Kinds of surrounding context an excerpt may have left out (R18)."""

    SOURCE = "source"
    CORRECTION = "correction"
    NEGATION = "negation"


#: The ``k`` of reciprocal rank fusion: 60, as in Cormack, Clarke and Büttcher (SIGIR 2009).
RRF_K: Final = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], *, k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Fuse ranked lists of source ids into one: ``[(source_id, score)]``, best first.

    Each list adds ``weight / (k + rank)`` (rank from 1) to the score of every
    id in it; an id found by several lists sums its parts, so agreement
    between the lexical and the vector ranking lifts a source above one that
    only one of them found. Ties keep the order of first appearance (the
    first list's order first). A repeated id within one list counts once,
    at its best rank. Deterministic, no I/O: stores call it inside
    :meth:`RecallSession.discover_hybrid`.
    """
    plain_k = exact_int(k)  # an int subclass as its number: its own comparisons are not trusted
    if plain_k is None or plain_k < 0:
        raise InvalidArgumentError(f"k must be an integer >= 0, got {shown_number(k)}")
    k = plain_k
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InvalidArgumentError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        seen: set[str] = set()
        for rank, source_id in enumerate(ranking, start=1):
            if source_id in seen:
                continue
            seen.add(source_id)
            scores[source_id] = scores.get(source_id, 0.0) + float(weight) / (k + rank)
    order = {sid: i for i, sid in enumerate(scores)}
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))


@attrs.frozen(slots=True)
class SourceRef:
    """A source and the revision of it that was seen."""

    source_id: str
    revision: str


@attrs.frozen(slots=True)
class SourceVector:
    """The vector of one source at one revision, as :meth:`RecallStore.index_vectors` receives it."""

    ref: SourceRef
    vector: Vector


@attrs.frozen(slots=True)
class Candidate:
    """A discovered source, with its owner, rank score and size in bytes, before it is read."""

    ref: SourceRef
    owner: SourceOwner
    score: float
    size_bytes: int
    title: str = ""

    @property
    def discovery_bytes(self) -> int:
        """What this candidate costs of the discovery byte budget: its id, revision and title (UTF-8)."""
        return (
            len(self.ref.source_id.encode("utf-8", "surrogatepass"))
            + len(self.ref.revision.encode("utf-8", "surrogatepass"))
            + len(self.title.encode("utf-8", "surrogatepass"))
        )


@attrs.frozen(slots=True)
class Excerpt:
    """Text read from a source, with its owner, its completeness and what context it omitted."""

    ref: SourceRef
    owner: SourceOwner
    text: str
    completeness: Completeness = Completeness.COMPLETE
    omitted: frozenset[OmittedContext] = attrs.field(default=frozenset(), converter=_frozenset_of_omitted)


class ValidationStatus(enum.StrEnum):
    """Whether a source is still valid at the revision that was read."""

    CURRENT = "current"
    CHANGED = "changed"
    DELETED = "deleted"
    FORBIDDEN = "forbidden"
    UNKNOWN = "unknown"


@attrs.frozen(slots=True)
class Validation:
    """The outcome of validating one :class:`SourceRef`."""

    ref: SourceRef
    status: ValidationStatus
    current_revision: str | None = None


class RecallSession:
    """A recall session opened for one scope under one set of limits."""

    @port_stub
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Return at most ``max_candidates`` candidates for ``query`` in rank order.

        Only sources the session's scope may see are discovered (R13); the
        discovery reads stay within ``ctx.remaining_bytes``. Source ids are
        :func:`document_source_id` or :func:`group_source_id`, and each
        candidate's ``owner`` is the one its id encodes (:func:`source_owner`);
        the engine drops any other candidate as a contract violation.

        Call ``ctx.raise_if_expired("recall discover")`` before starting and
        between backend pages; stop backend work when ``ctx.signal`` is cancelled.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "discover")

    @port_stub
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        """As :meth:`discover`, with lexical and vector candidates fused. Declared by ``hybrid_discovery``.

        ``vector`` is the query's embedding (unit length, checked by the
        engine). The store ranks sources by ``query``'s words as in
        :meth:`discover` and by cosine similarity to ``vector``, and fuses the
        two rankings (reciprocal rank fusion, :func:`reciprocal_rank_fusion`,
        or better) into at most ``max_candidates`` candidates in rank order,
        under the same rules as :meth:`discover`: only sources the scope may
        see, within ``ctx.remaining_bytes``, ids and owners as there. A source
        may be found by its vector alone (it shares no word with the query).

        Call ``ctx.raise_if_expired("recall discover")`` before starting and
        between backend pages; stop backend work when ``ctx.signal`` is cancelled.

        Raises: ``EmbeddingModelMismatchError`` when the index holds vectors of
        another model than ``vector.model`` (vectors of two models are never
        compared); ``OperationCancelledError`` when cancelled or past the
        deadline; ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "discover_hybrid", "hybrid_discovery")

    @port_stub
    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """Read whole excerpts of ``refs`` (each at most ``max_excerpt_bytes``).

        An excerpt is never cut: one that does not fit is left out and its
        omission reported through its ``completeness`` and ``omitted`` fields.
        An excerpt of an archived group is one contiguous piece of the group's
        :func:`indexed_group_text` as it is (NUL may be shown as U+FFFD), at
        the group's digest: the engine finds it there to render it one line
        per message (docs/recall.md); a rewritten one is a contract violation.

        Call ``ctx.raise_if_expired("recall read")`` before starting and before
        each ref; stop when ``ctx.signal`` is cancelled.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "read")

    @port_stub
    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """Check that each ref is still at its revision (revision validation).

        Call ``ctx.raise_if_expired("recall validate")`` before starting.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "validate")

    @port_stub
    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """Bounded current-view validation before dispatch and commit (R24).

        Declared by ``bounded_current_validation``. Call
        ``ctx.raise_if_expired("recall validate_current")`` before starting.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "validate_current", "bounded_current_validation")

    async def close(self) -> None:
        """Release what the session acquired; must succeed after cancellation too."""


class RecallStore:
    """Port for a recall backend. ``session_class`` names the class ``open`` returns."""

    capabilities: ClassVar[RecallCapabilities]
    session_class: ClassVar[type[RecallSession]] = RecallSession

    @port_stub
    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """Open a recall session confined to ``scope`` and ``limits``.

        Authorization is enforced here and in every session call (R13). Call
        ``ctx.raise_if_expired("recall open")`` before acquiring anything, and
        release what was acquired if a later step fails.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "open")

    @port_stub
    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Directly seek complete canonical archive groups. Declared by ``canonical_archive_reads``.

        Returns at most ``max_groups`` whole groups with ``seq >= start_seq``,
        ascending. Call ``ctx.raise_if_expired("recall seek")`` before starting.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "seek_groups", "canonical_archive_reads")

    @port_stub
    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace host document ``doc_id`` of ``owner``. Declared by ``document_indexing``.

        Returns the document's ref; its revision changes whenever its text or
        title does, so a ref read earlier no longer validates as current. The
        source id is :func:`document_source_id`. Call
        ``ctx.raise_if_expired("recall index")`` before writing anything.
        Hosts index through ``HarnessRuntime.index_document``, which checks the
        arguments and fences the call against erasures under way; a direct
        call is not fenced (docs/erasure.md).

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``InvalidArgumentError`` for a bad id or non-string text (nothing written);
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "index_document", "document_indexing")

    @port_stub
    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove host document ``doc_id`` of ``owner``; ``True`` if it existed (``document_indexing``).

        Call ``ctx.raise_if_expired("recall delete")`` before writing anything.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "delete_document", "document_indexing")

    @port_stub
    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups of ``key`` with the archive's receipts. Declared by ``archive_indexing``.

        The engine calls this after an eviction committed (the groups-archived
        step) and from ``agentium recall rebuild``. Indexing a group again is
        idempotent. Keep each receipt's digest: ``seek_groups`` checks the
        stored bytes against it. Returns how many groups were newly indexed.
        Call ``ctx.raise_if_expired("recall index")`` before writing anything.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``InvalidArgumentError`` when a receipt does not match its group
        (nothing written); ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "index_groups", "archive_indexing")

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int] | None:
        """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``: ascending, bounded.

        Optional, for ``archive_indexing`` stores. Archived groups hold every
        seq from 0 up to the session's boundary, so a seq missing here is an
        archived group the index lacks: archived while the store was down, or
        lost when its server restarted without persistence. After each
        successful ``index_groups`` the engine asks, with ``end_seq`` the
        first seq it just indexed, and indexes up to ``max_groups`` of the
        missing groups from the archive (docs/recall.md, "Catching up").
        ``start_seq`` (keyword, default 0) is where the archive's groups
        begin: the engine passes the end of the session's leading erased
        range after retention, so the lowest gaps are groups lost, not
        groups erased. Never report a seq below it. Keep the work bounded
        (``max_groups``, not the index size). Call
        ``ctx.raise_if_expired("recall index")`` before reading.

        The default returns ``None``: the store cannot tell, and nothing is
        caught up automatically (``agentium recall rebuild`` still is).

        Raises: ``OperationCancelledError`` when cancelled or past the
        deadline; the store's backend errors when it cannot read its index
        (the engine reports them and tries again at the next commit).
        """
        return None

    @port_stub
    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        """Keep each source's vector beside its index entry. Declared by ``vector_indexing``.

        A vector is stored only if its source is indexed at exactly
        ``ref.revision`` (one computed from an older revision is skipped), and
        replaces the source's previous vector; a source that changes or is
        deleted loses its vector with its old revision. The store keeps the
        :class:`~agentium_harness._ports.embedder.EmbeddingModel` of its
        vectors (model id and dimension) and refuses vectors of another one.
        All or nothing: a refused batch writes nothing. Returns how many
        vectors were stored. Call ``ctx.raise_if_expired("recall index")``
        before writing anything.

        Raises: ``EmbeddingModelMismatchError`` when the store already holds
        vectors of another model, or the batch mixes models (nothing
        written); ``OperationCancelledError`` when cancelled or past the
        deadline; ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "index_vectors", "vector_indexing")

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe and describe the backend. Declared by ``health_check``.

        Call ``ctx.raise_if_expired("recall health")`` before probing.

        Raises: the store's backend errors when unhealthy; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError`` when
        not declared.
        """
        raise unsupported(self, "health", "health_check")

    @port_stub
    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Remove what this store holds of ``target``, at most ``max_items`` per call (``erasure``).

        Recall store: the index entries of covered groups
        (:meth:`EraseTarget.covers_group`, counted as ``group``, reported
        with seq and revision) and the host documents of covered owners
        (:meth:`EraseTarget.covers_owner`, counted as ``document``), with
        every posting and derived field that holds their text — a
        neighbouring group's indexed context included.

        Nothing outside the target changes: a neighbouring session, user or
        tenant keeps its stored bytes exactly. ``dry_run=True`` removes
        nothing and reports what would go. When the call stops at
        ``max_items`` the report's status is ``partial`` and the engine calls
        again; erasing what is already gone is a success reporting nothing.
        Report how physical the removal was (``physical`` and ``detail``:
        free pages, earlier object versions) truthfully.

        Call ``ctx.raise_if_expired("recall erase")`` before removing anything; a
        call stopped part way may have removed part of the target (calling
        again continues).

        Raises: ``InvalidArgumentError`` for a target that is not an
        ``EraseTarget``; the store's backend errors; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError``
        when not declared.
        """
        raise unsupported(self, "erase", "erasure")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
