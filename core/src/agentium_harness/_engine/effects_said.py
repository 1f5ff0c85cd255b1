"""What keeping what ran says (:mod:`.effects`): its WARNINGs, its diagnostic and its refusal.

Every WARNING here is on ``agentium.engine`` with no content and no id: not
the session's, not an erasure's, not a fact's (the errors carry those).
"""

from __future__ import annotations

import logging

from .._errors import AgentiumError, ErasureInProgressError
from .._text import error_text
from .progress import RunProgress
from .results import CommitState, Diagnostic, Severity

__all__ = ["commit_failed", "refused_by_groups", "warn_cancelled", "warn_not_kept", "warn_unchecked"]

_log = logging.getLogger("agentium.engine")


def warn_unchecked() -> None:
    """The WARNING for a look after a failed (or cancelled) model call that could not be made: no content."""
    _log.warning(
        "run: what ran before its failed model call could not be checked again against the memory "
        "facts or host documents its request carries; it is kept as usual",
        extra={"agentium_operation": "run"},
    )


def refused_by_groups(message: str, erasure_id: str) -> ErasureInProgressError:
    """The refusal of the commit of what ran: the look after the failed call found a groups erasure under way.

    ``message`` and ``erasure_id`` are the look's stop's (an erasure of archived groups of the session,
    retention or a forgotten fact's sources, began during that call: what the run recalled may be
    among them). The WARNING says the commit was refused, and why; no content, no id.
    """
    _log.warning(
        "run: the commit of what ran before its failed model call was refused: an erasure of archived "
        "groups of its session began during that call; its tool calls and results were not committed",
        extra={"agentium_operation": "run", "agentium_commit_state": CommitState.NOT_COMMITTED.value},
    )
    error = ErasureInProgressError(message, erasure_id)
    error.commit_state = CommitState.NOT_COMMITTED
    return error


def warn_not_kept(progress: RunProgress, how: str = "") -> None:
    """The WARNING for what ran after a cancellation, not committed (or cut off mid-save: ``unknown``)."""
    said = "were not" if progress.commit_state is CommitState.NOT_COMMITTED else "may or may not have been"
    warn_cancelled(
        f"run cancelled after a tool started; its tool calls and results {said} committed{how}", progress
    )


def warn_cancelled(what: str, progress: RunProgress) -> None:
    """The WARNING for a host's cancellation, which carries no result: ``what``, with the commit state."""
    state = progress.commit_state.value
    _log.warning(
        "%s (commit_state %s)",
        what,
        state,
        extra={"agentium_operation": "run", "agentium_commit_state": state},
    )


def commit_failed(failed: AgentiumError) -> Diagnostic:
    """The ``effects_commit_failed`` diagnostic for ``failed``, the error of a commit of what ran."""
    return Diagnostic(
        "effects_commit_failed",
        f"the tool calls and results that ran could not be committed: {error_text(failed)}",
        Severity.ERROR,
    )
