"""The completion verifier port: completion checked against current evidence (R27–R31)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import ClassVar

import attrs

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
]

#: Hard ceilings on verification evidence (R30); a context may narrow them.
MAX_EVIDENCE_ENTRIES = 32
MAX_EVIDENCE_BYTES = 8192


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


@attrs.frozen(slots=True)
class VerifyContext:
    """Scope, operation context and evidence budget for one verification."""

    scope: Scope
    op: OpContext
    max_entries: int = MAX_EVIDENCE_ENTRIES
    max_bytes: int = MAX_EVIDENCE_BYTES


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
