"""What an eval target captures from the runtime for one case: the record graders read.

Everything here comes from the runtime's own work during the probe turn:
the candidates its recall store returned to it, the excerpts it read, the
labeled source blocks in every model request it sent, and its
:class:`~agentium_harness.RunResult` (answer, statuses, verdict, retained record).
"""

from __future__ import annotations

from typing import Any

import attrs

from .._ports.recall import SourceOwner
from .._scope import Scope

__all__ = [
    "BlockSeen",
    "CandidateSeen",
    "CaseTrace",
    "ExcerptSeen",
    "LabelInfo",
    "RequestSeen",
    "StepOutcome",
]


@attrs.frozen(slots=True)
class LabelInfo:
    """A setup label resolved to the source id it stands for, and who owns that source.

    ``source_id`` is ``None`` when the step produced no source (a turn that
    did not commit, a document on a runtime without recall).
    """

    source_id: str | None
    owner: SourceOwner | None
    note: str = ""


@attrs.frozen(slots=True)
class StepOutcome:
    """What one setup step did: ``status`` is the run status, ``indexed``, ``deleted`` or ``skipped``."""

    index: int
    kind: str
    status: str
    note: str = ""


@attrs.frozen(slots=True)
class CandidateSeen:
    """A candidate the recall store returned to the runtime during the probe."""

    source_id: str
    revision: str
    owner: SourceOwner | None


@attrs.frozen(slots=True)
class ExcerptSeen:
    """An excerpt the recall store returned for a read the runtime asked for."""

    source_id: str
    owner: SourceOwner | None
    text: str
    completeness: str
    omitted: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        """True when the excerpt is complete and no context around it was omitted."""
        return self.completeness == "complete" and not self.omitted


@attrs.frozen(slots=True)
class BlockSeen:
    """A labeled source block as it was in a model request."""

    kind: str
    source_id: str
    content: str
    attributes: tuple[tuple[str, str], ...] = ()

    def attribute(self, name: str) -> str | None:
        """The value of attribute ``name``, if the block carries it."""
        return next((v for k, v in self.attributes if k == name), None)


@attrs.frozen(slots=True)
class RequestSeen:
    """One model request of the probe turn: its source blocks and the history length it carried."""

    sources: tuple[BlockSeen, ...]
    history_messages: int = 0


@attrs.frozen(slots=True)
class CaseTrace:
    """Everything graders need about one case's probe turn.

    ``answer`` is the run's output; ``status`` its :class:`~agentium_harness.RunStatus`
    value; ``recall_status`` and ``recall_decision`` the recall outcome
    (``None`` without recall); ``has_recall`` whether the runtime had a
    recall store at all. ``candidates``, ``excerpts`` and ``requests`` are
    the probe turn's recall and model traffic in order. ``verdict`` is the
    verification verdict value when the run was verified. ``retained`` is
    the committed group's retained record as plain data.
    """

    case_id: str
    scope: Scope
    answer: str
    status: str
    committed: bool
    has_recall: bool
    labels: dict[str, LabelInfo] = attrs.field(factory=dict)
    setup: tuple[StepOutcome, ...] = ()
    recall_status: str | None = None
    recall_decision: str | None = None
    recall_included: tuple[str, ...] = ()
    recall_omitted: tuple[str, ...] = ()
    candidates: tuple[CandidateSeen, ...] = ()
    excerpts: tuple[ExcerptSeen, ...] = ()
    requests: tuple[RequestSeen, ...] = ()
    verdict: str | None = None
    verification_reason: str | None = None
    retained: Any = None
    diagnostics: tuple[str, ...] = ()
    #: Source ids the engine dropped from what the store's discover and read returned, as contract
    #: violations (out of scope, over a budget, not asked for …), from the run's diagnostics.
    dropped_candidates: tuple[str, ...] = ()
    dropped_excerpts: tuple[str, ...] = ()

    def request_blocks(self) -> tuple[BlockSeen, ...]:
        """Every source block of every model request, in order."""
        return tuple(b for r in self.requests for b in r.sources)

    def summary(self) -> dict[str, Any]:
        """A compact plain-data view for reports: statuses and the source ids seen at each step."""
        return {
            "status": self.status,
            "committed": self.committed,
            "recall_status": self.recall_status,
            "recall_decision": self.recall_decision,
            "candidates": [c.source_id for c in self.candidates],
            "read": [e.source_id for e in self.excerpts],
            "in_request": sorted({b.source_id for b in self.request_blocks()}),
            "model_requests": len(self.requests),
            "verdict": self.verdict,
            "diagnostics": list(self.diagnostics),
            "dropped_candidates": list(self.dropped_candidates),
            "dropped_excerpts": list(self.dropped_excerpts),
        }
