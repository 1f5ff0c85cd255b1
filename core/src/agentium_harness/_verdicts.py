"""Verdicts and evidence: the records completion verification keeps (R27–R30).

They live apart from the verifier port because a committed group's
:class:`~agentium_harness._history.RetainedRecord` carries them too, and the
history module must not import the ports.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from ._codec import canonical_json
from ._errors import InvalidArgumentError
from ._tuples import tuple_of_evidence, tuple_of_verification_attempts
from ._validators import (
    MAX_COUNT,
    bounded_count,
    check_count,
    non_negative_int,
    require_instance,
    unicode_text,
)

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_ENTRIES",
    "MAX_REASON_BYTES",
    "EvidenceEntry",
    "EvidenceLimits",
    "Verdict",
    "VerificationAttempt",
    "VerificationRecord",
    "evidence_size",
    "fit_evidence",
]

#: Hard ceilings on verification evidence (R30); configuration may narrow them, never widen them.
MAX_EVIDENCE_ENTRIES = 32
MAX_EVIDENCE_BYTES = 8192
#: A verifier's free-text reason (or its error) is cut to this many UTF-8 bytes, marker included:
#: it is kept in the retained record and shown to the model in a revision, like evidence.
MAX_REASON_BYTES = 1024


class Verdict(enum.StrEnum):
    """A verifier's verdict. ``UNKNOWN`` always stops (R28)."""

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


def _plain_str(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    # Evidence is kept in the committed record and shown to the model: it must be storable text.
    unicode_text(value, f"evidence {attribute.name}")


@attrs.frozen(slots=True)
class EvidenceEntry:
    """One piece of current host evidence (an artifact digest, a test record…)."""

    kind: str = attrs.field(validator=_plain_str)
    ref: str = attrs.field(validator=_plain_str)
    detail: str = attrs.field(validator=_plain_str)


def evidence_size(entry: EvidenceEntry) -> int:
    """Bytes of ``entry`` as canonical JSON: what the evidence budget counts (R30)."""
    entry = require_instance(entry, EvidenceEntry, "entry")
    return len(canonical_json({"kind": entry.kind, "ref": entry.ref, "detail": entry.detail}))


def fit_evidence(
    entries: Iterable[EvidenceEntry], max_entries: int, max_bytes: int
) -> tuple[tuple[EvidenceEntry, ...], int]:
    """Keep whole entries in order while they fit; return ``(kept, omitted_count)``.

    Nothing is cut inside an entry: the first entry that would pass either
    limit, and every entry after it, is omitted and counted (R30). Raises
    :class:`~agentium_harness._errors.InvalidArgumentError` for a negative or
    non-integer limit, or an item that is not an :class:`EvidenceEntry`.
    """
    check_count(max_entries, "max_entries", minimum=0, ceiling=MAX_COUNT)
    check_count(max_bytes, "max_bytes", minimum=0, ceiling=MAX_COUNT)
    if isinstance(entries, str | bytes | EvidenceEntry) or not isinstance(entries, Iterable):
        raise InvalidArgumentError(
            f"entries must be a sequence of EvidenceEntry, got {type(entries).__name__}"
        )
    items = list(entries)
    for index, item in enumerate(items):
        if not isinstance(item, EvidenceEntry):
            raise InvalidArgumentError(f"entry {index} must be an EvidenceEntry, got {type(item).__name__}")
    kept: list[EvidenceEntry] = []
    used = 0
    for index, entry in enumerate(items):
        size = evidence_size(entry)
        if len(kept) >= max_entries or used + size > max_bytes:
            return tuple(kept), len(items) - index
        kept.append(entry)
        used += size
    return tuple(kept), 0


@attrs.frozen(slots=True)
class EvidenceLimits:
    """The evidence budget of one turn's verification, shared by its revisions (R30).

    At most :data:`MAX_EVIDENCE_ENTRIES` entries and :data:`MAX_EVIDENCE_BYTES`
    bytes of canonical JSON; a larger value is refused, not clamped: config may
    narrow the budget, never widen it.
    """

    max_entries: int = attrs.field(
        default=MAX_EVIDENCE_ENTRIES, validator=bounded_count(ceiling=MAX_EVIDENCE_ENTRIES)
    )
    max_bytes: int = attrs.field(
        default=MAX_EVIDENCE_BYTES, validator=bounded_count(ceiling=MAX_EVIDENCE_BYTES)
    )


@attrs.frozen(slots=True)
class VerificationAttempt:
    """One call of the verifier: which revision it judged, its verdict and what it kept."""

    revision: int = attrs.field(validator=non_negative_int)
    verdict: Verdict
    reason: str = ""
    evidence: tuple[EvidenceEntry, ...] = attrs.field(default=(), converter=tuple_of_evidence)
    #: Entries the verifier returned that did not fit the remaining budget whole.
    omitted: int = attrs.field(default=0, validator=non_negative_int)


@attrs.frozen(slots=True)
class VerificationRecord:
    """How a turn's completion was judged; kept in the run result and the retained record.

    ``verdict`` is the last attempt's; ``revisions`` counts the revisions the
    model was asked for; ``policy`` names the policy (``stop`` or
    ``revise(max=2, effects=no)``); ``attempts`` lists every verification in
    order, with the evidence each kept. ``accepted`` is true only for ``pass``.
    """

    verdict: Verdict
    revisions: int = attrs.field(validator=non_negative_int)
    policy: str
    attempts: tuple[VerificationAttempt, ...] = attrs.field(converter=tuple_of_verification_attempts)

    @property
    def accepted(self) -> bool:
        """True when the completion was verified (``pass``)."""
        return self.verdict is Verdict.PASS

    @property
    def evidence(self) -> tuple[EvidenceEntry, ...]:
        """Every evidence entry kept, across attempts, in order."""
        return tuple(e for a in self.attempts for e in a.evidence)

    @property
    def omitted(self) -> int:
        """Evidence entries left out for the budget, across attempts."""
        return sum(a.omitted for a in self.attempts)

    @property
    def reason(self) -> str:
        """The last attempt's reason."""
        return self.attempts[-1].reason if self.attempts else ""
