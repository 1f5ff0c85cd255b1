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
from typing import ClassVar

import attrs

from .._history import MessageGroup
from .._scope import Scope, SessionKey
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "Candidate",
    "Completeness",
    "Excerpt",
    "OmittedContext",
    "RecallCapabilities",
    "RecallLimits",
    "RecallSession",
    "RecallStore",
    "SourceRef",
    "Validation",
    "ValidationStatus",
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
    together with task summaries.
    """

    METHODS: ClassVar[dict[str, str]] = {
        "bounded_discovery": "session:discover",
        "bounded_reads": "session:read",
        "revision_validation": "session:validate",
        "bounded_current_validation": "session:validate_current",
        "canonical_archive_reads": "seek_groups",
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


@attrs.frozen(slots=True)
class RecallLimits:
    """Recall budgets (R17). Every field is a hard ceiling for one run."""

    max_queries: int = 1
    max_candidates: int = 8
    max_discovery_bytes: int = 16_384
    max_source_bytes: int = 65_536
    max_excerpt_bytes: int = 2_048
    max_evidence_tokens: int = 1_024
    max_latency_s: float = 2.0
    max_validations: int = 16


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


@attrs.frozen(slots=True)
class SourceRef:
    """A source and the revision of it that was seen."""

    source_id: str
    revision: str


@attrs.frozen(slots=True)
class Candidate:
    """A discovered source, with its rank score and size, before it is read."""

    ref: SourceRef
    score: float
    size_bytes: int
    title: str = ""


@attrs.frozen(slots=True)
class Excerpt:
    """Text read from a source, with its completeness and what context it omitted."""

    ref: SourceRef
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
        discovery reads stay within ``ctx.remaining_bytes``.

        Call ``ctx.raise_if_expired("recall discover")`` before starting and
        between backend pages; stop backend work when ``ctx.signal`` is cancelled.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "discover")

    @port_stub
    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """Read whole excerpts of ``refs`` (each at most ``max_excerpt_bytes``).

        An excerpt is never cut: one that does not fit is left out and its
        omission reported through its ``completeness`` and ``omitted`` fields.

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

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
