"""The completion verifier port: completion checked against current evidence (R27–R31)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import attrs

from .._scope import Scope
from .._validators import str_tuple
from .._verdicts import (
    MAX_EVIDENCE_BYTES,
    MAX_EVIDENCE_ENTRIES,
    MAX_REASON_BYTES,
    EvidenceEntry,
    EvidenceLimits,
    Verdict,
    evidence_size,
    fit_evidence,
)
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_ENTRIES",
    "MAX_REASON_BYTES",
    "CompletionCandidate",
    "CompletionVerifier",
    "EvidenceEntry",
    "EvidenceLimits",
    "Verdict",
    "VerificationResult",
    "VerifierCapabilities",
    "VerifyContext",
    "evidence_size",
    "fit_evidence",
]


def _entries(value: Iterable[EvidenceEntry]) -> tuple[EvidenceEntry, ...]:
    return tuple(value)


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(a), str(b)) for a, b in value)


@attrs.frozen(slots=True)
class VerifierCapabilities(Capabilities):
    """What a verifier declares: the kinds of current evidence it reads."""

    artifact_digests: bool = False
    test_records: bool = False


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

    def raise_if_expired(self, what: str) -> None:
        """Raise ``OperationCancelledError`` when cancelled or past the deadline (see :class:`OpContext`)."""
        self.op.raise_if_expired(what)


@attrs.frozen(slots=True)
class VerificationResult:
    """The verdict with the evidence it rests on."""

    verdict: Verdict
    evidence: tuple[EvidenceEntry, ...] = attrs.field(default=(), converter=_entries)
    reason: str = ""


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
