"""The completion verifier port: completion checked against current evidence (R27–R31)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import attrs

from .._errors import InvalidArgumentError
from .._scope import Scope
from .._validators import (
    MAX_COUNT,
    bounded_count,
    enum_member,
    exact_number,
    keep_exact,
    shown_number,
    unicode_text,
)
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


def _sequence(value: object, what: str) -> tuple[object, ...]:
    # A lone string (or entry) would be split or refused deep inside: name it here instead.
    if isinstance(value, str | bytes | EvidenceEntry) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} must be a sequence, got {type(value).__name__}")
    return tuple(value)


def _check_text(value: object, what: str) -> None:
    # Candidate and result text is stored and sent to the model: it must be encodable.
    unicode_text(value, what)


def _text(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    _check_text(value, attribute.name)


def _entries(value: Iterable[EvidenceEntry]) -> tuple[EvidenceEntry, ...]:
    items = _sequence(value, "evidence")
    for index, item in enumerate(items):
        if not isinstance(item, EvidenceEntry):
            raise InvalidArgumentError(
                f"evidence item {index} must be an EvidenceEntry, got {type(item).__name__}"
            )
    return items  # type: ignore[return-value]  # every item checked above


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    items = _sequence(value, "artifacts")
    for index, item in enumerate(items):
        _check_text(item, f"artifacts item {index}")
    return items  # type: ignore[return-value]  # every item checked above


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for index, item in enumerate(_sequence(value, "claimed_digests")):
        if isinstance(item, str | bytes) or not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidArgumentError(
                f"claimed_digests item {index} must be a (path, sha256) pair, got {item!r:.80}"
            )
        path, digest = item
        _check_text(path, f"claimed_digests item {index} path")
        _check_text(digest, f"claimed_digests item {index} digest")
        pairs.append((path, digest))
    return tuple(pairs)


def _verdict(value: Verdict | str) -> Verdict:
    """A :class:`Verdict`, or its value as a string (``"pass"``); anything else is refused."""
    return enum_member(Verdict, value, "verdict")


def _instance_of(kind: type) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, kind):
            raise InvalidArgumentError(
                f"{attribute.name} must be a {kind.__name__}, got {type(value).__name__}"
            )

    return check


def _started_at(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    started = exact_number(value)  # a subclass as its number: its own comparisons are not trusted
    if started is None or not 0 <= started < math.inf:
        raise InvalidArgumentError(
            f"run_started_at must be a finite time.time() value, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, started)


@attrs.frozen(slots=True)
class VerifierCapabilities(Capabilities):
    """What a verifier declares: the kinds of current evidence it reads."""

    artifact_digests: bool = False
    test_records: bool = False


@attrs.frozen(slots=True)
class CompletionCandidate:
    """What the model claims is done. A claim is never proof (R29).

    ``claim`` and each artifact path are text; ``claimed_digests`` are
    ``(path, sha256)`` string pairs. Anything else raises
    :class:`~agentium_harness._errors.InvalidArgumentError`.
    """

    claim: str = attrs.field(validator=_text)
    artifacts: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    #: Digests the candidate itself asserts, as ``(path, sha256)`` pairs. They are
    #: the model's words: a verifier must never treat them as expected values (R29).
    claimed_digests: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)


@attrs.frozen(slots=True)
class VerifyContext:
    """Scope, operation context and evidence budget for one verification."""

    scope: Scope = attrs.field(validator=_instance_of(Scope))
    op: OpContext = attrs.field(validator=_instance_of(OpContext))
    max_entries: int = attrs.field(
        default=MAX_EVIDENCE_ENTRIES, validator=bounded_count(minimum=0, ceiling=MAX_EVIDENCE_ENTRIES)
    )
    max_bytes: int = attrs.field(
        default=MAX_EVIDENCE_BYTES, validator=bounded_count(minimum=0, ceiling=MAX_EVIDENCE_BYTES)
    )
    #: Wall-clock time (``time.time()``) when the run began: evidence written
    #: before it (a stale test record, say) does not describe this run.
    run_started_at: float = attrs.field(default=0.0, validator=_started_at)
    #: 0 for the first verification of a turn, then 1, 2, … for each revision.
    revision: int = attrs.field(default=0, validator=bounded_count(minimum=0, ceiling=MAX_COUNT))

    def raise_if_expired(self, what: str) -> None:
        """Raise ``OperationCancelledError`` when cancelled or past the deadline (see :class:`OpContext`)."""
        self.op.raise_if_expired(what)


@attrs.frozen(slots=True)
class VerificationResult:
    """The verdict with the evidence it rests on.

    ``verdict`` is a :class:`Verdict` or its value (``"pass"``); ``evidence``
    a sequence of :class:`EvidenceEntry`; ``reason`` text. Anything else, or
    text holding a lone surrogate, raises
    :class:`~agentium_harness._errors.InvalidArgumentError`.
    """

    verdict: Verdict = attrs.field(converter=_verdict)
    evidence: tuple[EvidenceEntry, ...] = attrs.field(default=(), converter=_entries)
    reason: str = attrs.field(default="", validator=_text)


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
