"""The completion verifier port: completion checked against current evidence (R27–R31)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import ClassVar

import attrs

from .._codec import canonical_json
from .._scope import Scope
from .._validators import str_tuple
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_ENTRIES",
    "CompletionCandidate",
    "CompletionVerifier",
    "EvidenceEntry",
    "Verdict",
    "VerificationResult",
    "VerifierCapabilities",
    "VerifyContext",
    "evidence_size",
    "fit_evidence",
]

#: Hard ceilings on verification evidence (R30); a context may narrow them.
MAX_EVIDENCE_ENTRIES = 32
MAX_EVIDENCE_BYTES = 8192


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(a), str(b)) for a, b in value)


def _tuple_of_evidenceentry(value: Iterable[EvidenceEntry]) -> tuple[EvidenceEntry, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


@attrs.frozen(slots=True)
class VerifierCapabilities(Capabilities):
    """What a verifier declares: the kinds of current evidence it reads."""

    artifact_digests: bool = False
    test_records: bool = False


class Verdict(enum.StrEnum):
    """A verifier's verdict. ``UNKNOWN`` always stops (R28)."""

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


@attrs.frozen(slots=True)
class CompletionCandidate:
    """What the model claims is done. A claim is never proof (R29)."""

    claim: str
    artifacts: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)
    #: Digests the candidate itself asserts, as ``(path, sha256)`` pairs. They are
    #: the model's words: a verifier must never treat them as expected values (R29).
    claimed_digests: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)


@attrs.frozen(slots=True)
class VerifyContext:
    """Scope, operation context and evidence budget for one verification."""

    scope: Scope
    op: OpContext
    max_entries: int = MAX_EVIDENCE_ENTRIES
    max_bytes: int = MAX_EVIDENCE_BYTES
    #: Wall-clock time (``time.time()``) when the run began: evidence written
    #: before it (a stale test record, say) does not describe this run.
    run_started_at: float = 0.0
    #: 0 for the first verification of a turn, then 1, 2, … for each revision.
    revision: int = 0


@attrs.frozen(slots=True)
class EvidenceEntry:
    """One piece of current host evidence (an artifact digest, a test record…)."""

    kind: str
    ref: str
    detail: str


@attrs.frozen(slots=True)
class VerificationResult:
    """The verdict with the evidence it rests on."""

    verdict: Verdict
    evidence: tuple[EvidenceEntry, ...] = attrs.field(default=(), converter=_tuple_of_evidenceentry)
    reason: str = ""


def evidence_size(entry: EvidenceEntry) -> int:
    """Bytes of ``entry`` as canonical JSON: what the evidence budget counts (R30)."""
    return len(canonical_json({"kind": entry.kind, "ref": entry.ref, "detail": entry.detail}))


def fit_evidence(
    entries: Iterable[EvidenceEntry], max_entries: int, max_bytes: int
) -> tuple[tuple[EvidenceEntry, ...], int]:
    """Keep whole entries in order while they fit; return ``(kept, omitted_count)``.

    Nothing is cut inside an entry: the first entry that would pass either
    limit, and every entry after it, is omitted and counted (R30).
    """
    kept: list[EvidenceEntry] = []
    used = 0
    items = list(entries)
    for index, entry in enumerate(items):
        size = evidence_size(entry)
        if len(kept) >= max_entries or used + size > max_bytes:
            return tuple(kept), len(items) - index
        kept.append(entry)
        used += size
    return tuple(kept), 0


class CompletionVerifier:
    """Port for a completion verifier."""

    capabilities: ClassVar[VerifierCapabilities]

    @port_stub
    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        """Read current host evidence and judge ``candidate``; stay within the evidence budget.

        Evidence is at most 32 entries and 8192 serialized bytes (R30). Call
        ``ctx.raise_if_expired("verify")`` before reading evidence and between
        reads.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "verify")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself."""
