"""What a run and a session close report back: statuses, diagnostics, usage."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from .._history import RetainedRecord
from .._ports.archive import ArchiveReceipt
from .._ports.provider import Usage
from .._ports.summary import SummaryState
from .._verdicts import VerificationRecord
from .sources import SourceStatus
from .tools import ToolOutcome

if TYPE_CHECKING:  # recall_turn imports this module for Diagnostic
    from .recall_turn import RecallOutcome

__all__ = [
    "CleanupReport",
    "CleanupStatus",
    "CommitState",
    "Diagnostic",
    "EvictionStatus",
    "RunResult",
    "RunStatus",
    "Severity",
]


class Severity(enum.StrEnum):
    """How much a diagnostic matters."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@attrs.frozen(slots=True)
class Diagnostic:
    """One thing worth knowing about a run or a cleanup: a stable ``code`` and a message."""

    code: str
    message: str
    severity: Severity = Severity.INFO


class RunStatus(enum.StrEnum):
    """How the model turn ended."""

    COMPLETED = "completed"
    STEP_LIMIT = "step_limit"
    #: The recall policy stopped the run (``diagnostics`` say why; ``recall_assembly_omitted`` among them
    #: when a clarification could not help). Nothing was committed, unless the commit fence stopped a
    #: turn whose tools had already run: its tool calls and results are then committed without the
    #: answer (``commit_state`` ``committed``, ``retained.interruption`` says why).
    STOPPED = "stopped"
    #: The recall policy asks a clarification and no clarifier was given; ``output`` is the question.
    #: Nothing was committed.
    NEEDS_CLARIFICATION = "needs_clarification"
    #: The turn completed, but its completion was verified and not accepted (verdict ``fail`` or
    #: ``unknown``; ``verification`` says why). The turn is committed, with the verdict in its record.
    NOT_ACCEPTED = "not_accepted"
    #: The run raised an error after it had started. Seen only on the ``run_result`` attached to that
    #: error: ``commit_state`` says whether what ran was committed, ``tool_outcomes`` and ``usage`` what ran.
    INTERRUPTED = "interrupted"


class CommitState(enum.StrEnum):
    """Whether a run's turn is in the session, on ``RunResult`` and on every error ``run()`` raises.

    ``unknown`` is said only when a save failed and reading the session back
    (bounded) could not settle it: inspect the session before retrying, or the
    turn may be duplicated.
    """

    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    UNKNOWN = "unknown"


class EvictionStatus(enum.StrEnum):
    """What happened to resident history at commit."""

    NOT_NEEDED = "not_needed"
    ARCHIVED = "archived"
    DEFERRED = "deferred"
    DIVERGED = "diverged"


@attrs.frozen(slots=True)
class RunResult:
    """The outcome of one committed run.

    ``group_seq`` is the new group's number; ``boundary`` the first resident
    ``seq`` after commit; ``archived`` the receipts the archive returned for
    groups evicted by this commit; ``retained`` the record stored with the
    group (R26); ``recall`` what recall did (``None`` without recall);
    ``verification`` the verdict, evidence and revision count when the run
    was verified (also kept in ``retained``).

    A run the recall policy ended early (status ``stopped`` or
    ``needs_clarification``) has ``commit_state=not_committed`` and
    ``group_seq=None``; the other fields then describe the session as it was
    loaded. A turn stopped at the commit fence after its tools had run is
    committed without its answer (``retained.interruption`` says why).
    ``tool_outcomes`` and ``usage`` always report every tool call and model
    call the run made, committed or not.
    """

    output: str
    status: RunStatus
    eviction: EvictionStatus
    sources: SourceStatus
    group_seq: int | None
    boundary: int
    resident_groups: int
    snapshot_revision: int
    archived: tuple[ArchiveReceipt, ...]
    tool_outcomes: tuple[ToolOutcome, ...]
    usage: Usage
    retained: RetainedRecord
    diagnostics: tuple[Diagnostic, ...] = ()
    recall: RecallOutcome | None = None
    #: Whether the turn is in the session (see :class:`CommitState`).
    commit_state: CommitState = CommitState.COMMITTED
    #: ``commit_state is CommitState.COMMITTED``, kept for hosts and the ``--json`` form.
    committed: bool = attrs.field(init=False)
    #: The session's task summary after this run (``None`` without summaries or before the first one).
    summary: SummaryState | None = None
    #: How the completion was judged (``None`` when the run did not ask for verification).
    verification: VerificationRecord | None = None

    @committed.default
    def _committed(self) -> bool:
        return self.commit_state is CommitState.COMMITTED

    def has(self, code: str) -> bool:
        """True if a diagnostic with ``code`` was recorded."""
        return any(d.code == code for d in self.diagnostics)


class CleanupStatus(enum.StrEnum):
    """Overall outcome of ``close_session``."""

    CLEAN = "clean"
    INCOMPLETE = "incomplete"


@attrs.frozen(slots=True)
class CleanupReport:
    """What ``resources.close_session`` did: what it flushed, what failed, what remains."""

    status: CleanupStatus
    settled_runs: int
    unsettled_runs: int
    flushed_groups: int
    remaining_resident: int
    closed_resources: tuple[str, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
