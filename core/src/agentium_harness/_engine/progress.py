"""What a run has done so far, so that every way out of ``run()`` reports it truthfully.

A run fills a :class:`RunProgress` as it goes: the session it loaded, the
turn (tool outcomes, usage) once the model ran, the recall outcome, its
diagnostics, and where the commit stands. When an error leaves ``run()``,
:func:`failed_run` marks it with ``commit_state`` and attaches a
``run_result`` (status ``interrupted``) built from that record, so the
calls and the usage are never lost with the error. An exception no stage
turned into a typed error (an engine bug) becomes one first
(:func:`.unexpected.unexpected_error`), its commit state read from the record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import AgentiumError
from .._history import MessageGroup, RetainedRecord
from .._ports.provider import Usage
from .._ports.sessions import SessionSnapshot, StoredSnapshot
from .._scope import Scope
from .results import CommitState, Diagnostic, EvictionStatus, RunResult, RunStatus
from .settle import mark_commit_state
from .sources import SourceStatus
from .turn import TurnOutcome
from .unexpected import WriteProgress, unexpected_error

if TYPE_CHECKING:
    from .commit import CommitOutcome
    from .effects import EffectsKeeper
    from .recall_turn import RecallOutcome

__all__ = ["RunProgress", "failed_run", "unexpected_error", "with_result"]


class RunProgress(WriteProgress):
    """The run so far (filled by the orchestrator as each step ends)."""

    __slots__ = (
        "diagnostics",
        "group",
        "keeper",
        "note",
        "outcome",
        "recall",
        "recall_said",
        "scope",
        "snap",
        "stored",
        "turn",
    )

    def __init__(self) -> None:
        super().__init__()
        self.scope: Scope | None = None
        self.stored: StoredSnapshot | None = None
        self.snap: SessionSnapshot | None = None
        self.turn: TurnOutcome | None = None
        self.recall: RecallOutcome | None = None
        #: The key of every recall contract violation the run met, listed or counted (.recall_findings).
        self.recall_said: set[tuple[str, str]] = set()
        self.diagnostics: list[Diagnostic] = []
        #: The group the run is committing, once built; ``outcome`` once committed.
        self.group: MessageGroup | None = None
        self.outcome: CommitOutcome | None = None
        #: What commits the turn, and what ran of it when the turn stops; set once the turn is ready.
        self.keeper: EffectsKeeper | None = None
        #: What the error leaving ``run()`` should add about what was committed (after a cancellation).
        self.note = ""

    def failing(self) -> None:
        """An unexpected exception leaves the run: keep its tool calls so far, for ``run_result``."""
        if self.turn is None and self.keeper is not None:
            self.turn = self.keeper.trace.partial("failed")

    def result(self, state: CommitState, status: RunStatus = RunStatus.INTERRUPTED) -> RunResult | None:
        """A result describing the run so far, or ``None`` before the session was loaded."""
        if self.scope is None or self.snap is None:
            return None
        turn, outcome, group = self.turn, self.outcome, self.group
        committed = state is CommitState.COMMITTED and group is not None
        return RunResult(
            output="",
            status=status,
            eviction=outcome.eviction if outcome is not None else EvictionStatus.NOT_NEEDED,
            sources=SourceStatus.NONE,
            group_seq=group.seq if committed and group is not None else None,
            boundary=outcome.boundary if outcome is not None else self.snap.boundary,
            resident_groups=len(outcome.resident) if outcome is not None else len(self.snap.resident),
            snapshot_revision=(
                outcome.revision
                if outcome is not None
                else self.saved_revision
                if self.saved_revision is not None and committed
                else (self.stored.revision if self.stored is not None else 0)
            ),
            archived=outcome.archived if outcome is not None else (),
            tool_outcomes=turn.tool_outcomes if turn is not None else (),
            usage=turn.usage if turn is not None else Usage(input_tokens=0, output_tokens=0),
            retained=(
                group.retained
                if group is not None and group.retained is not None
                else RetainedRecord(self.scope)
            ),
            diagnostics=tuple(self.diagnostics),
            recall=self.recall,
            commit_state=state,
        )


def with_result(error: AgentiumError, result: RunResult) -> AgentiumError:
    """``error`` marked with ``result``'s commit state and carrying it as ``run_result``."""
    marked = mark_commit_state(error, result.commit_state)
    marked.run_result = result
    return marked


def failed_run(error: AgentiumError, progress: RunProgress) -> AgentiumError:
    """``error`` leaving ``run()``, marked with its commit state and the run so far."""
    state = error.commit_state if error.commit_state is not None else progress.commit_state
    marked = mark_commit_state(error, state, progress.note)
    if marked.run_result is None:
        marked.run_result = progress.result(state)
    return marked
