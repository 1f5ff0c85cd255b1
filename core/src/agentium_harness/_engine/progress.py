"""What a run has done so far, so that every way out of ``run()`` reports it truthfully.

A run fills a :class:`RunProgress` as it goes: the session it loaded, the
turn (tool outcomes, usage) once the model ran, the recall outcome, its
diagnostics, and where the commit stands. When an error leaves ``run()``,
:func:`failed_run` marks it with ``commit_state`` and attaches a
``run_result`` (status ``interrupted``) built from that record, so the
calls and the usage are never lost with the error. An exception no stage
turned into a typed error (an engine bug) becomes one first
(:func:`unexpected_error`), its commit state read from the record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._errors import AgentiumError
from .._history import MessageGroup, RetainedRecord
from .._ports.provider import Usage
from .._ports.sessions import SessionSnapshot, StoredSnapshot
from .._scope import Scope
from .._text import clean_text, error_text
from .results import CommitState, Diagnostic, EvictionStatus, RunResult, RunStatus
from .settle import mark_commit_state
from .sources import SourceStatus
from .turn import TurnOutcome

if TYPE_CHECKING:
    from .commit import CommitOutcome
    from .effects import EffectsKeeper
    from .recall_turn import RecallOutcome

__all__ = ["RunProgress", "failed_run", "unexpected_error", "with_result"]

_log = logging.getLogger("agentium.engine")

#: Where an operation was when an unexpected exception left it, by the commit state that implies.
_WHERE = {
    CommitState.NOT_COMMITTED: "it failed before its commit's save began",
    CommitState.UNKNOWN: "it failed while its commit's save was under way",
    CommitState.COMMITTED: "it failed after its commit",
}


class RunProgress:
    """The run so far (filled by the orchestrator as each step ends)."""

    __slots__ = (
        "commit_state",
        "diagnostics",
        "group",
        "keeper",
        "note",
        "outcome",
        "recall",
        "scope",
        "snap",
        "stored",
        "turn",
    )

    def __init__(self) -> None:
        self.scope: Scope | None = None
        self.stored: StoredSnapshot | None = None
        self.snap: SessionSnapshot | None = None
        self.turn: TurnOutcome | None = None
        self.recall: RecallOutcome | None = None
        self.diagnostics: list[Diagnostic] = []
        #: ``unknown`` from the moment a save may be in flight until its outcome is known.
        self.commit_state = CommitState.NOT_COMMITTED
        #: The group the run is committing, once built; ``outcome`` once committed.
        self.group: MessageGroup | None = None
        self.outcome: CommitOutcome | None = None
        #: What commits the turn, and what ran of it when the turn stops; set once the turn is ready.
        self.keeper: EffectsKeeper | None = None
        #: What the error leaving ``run()`` should add about what was committed (after a cancellation).
        self.note = ""

    def saving(self) -> None:
        """The snapshot save starts: until it settles, a cancellation cannot tell whether it landed."""
        self.commit_state = CommitState.UNKNOWN

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


def unexpected_error(exc: Exception, progress: RunProgress, operation: str) -> AgentiumError:
    """``exc``, an exception no stage turned into a typed one, as an :class:`AgentiumError` caused by it.

    Its ``commit_state`` is where the operation was (``progress``): before the
    save of its commit ``not_committed``, during it ``unknown``, after it
    ``committed``. A run's tool calls so far are kept in ``progress.turn``, so
    its ``run_result`` reports them. Logged as a WARNING naming the operation,
    the exception's type and the state: never its text, which may quote content.
    """
    state = progress.commit_state
    keeper = progress.keeper
    if progress.turn is None and keeper is not None:
        progress.turn = keeper.trace.partial("failed")
    kind = clean_text(type(exc).__name__)
    _log.warning(
        "%s failed with an unexpected %s; commit_state %s",
        operation,
        kind,
        state.value,
        extra={
            "agentium_operation": operation,
            "agentium_error_type": kind,
            "agentium_commit_state": state.value,
        },
    )
    error = AgentiumError(
        f"{operation} failed with an unexpected error, {error_text(exc)} (a bug in the engine or in code "
        "it called unguarded)"
    )
    error.__cause__ = exc  # as ``raise error from exc``: the original and its traceback stay reachable
    error.__suppress_context__ = True
    return mark_commit_state(error, state, _WHERE[state])
