"""An exception no stage typed (an engine bug) leaves a writing operation typed, saying what it wrote.

Adapter calls and tool handlers are wrapped where they are made; an
exception raised by the engine's own code is not. Every writing operation
(``run()``, the history writes, maintenance, erasure, memory writes) keeps a
:class:`WriteProgress` — ``not_committed`` until its write may be in
flight, ``unknown`` from then, ``committed`` once the write is known to
stand — and :func:`unexpected_error` (or the :func:`typed_unexpected`
context) turns such an exception into an :class:`AgentiumError` caused by
it, with that ``commit_state``, logging one WARNING that never carries the
exception's text (it may quote content).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from .._errors import AgentiumError
from .._observe.logs import one_line
from .._text import clean_text, error_text
from .results import CommitState
from .settle import mark_commit_state

__all__ = [
    "Outcomes",
    "WriteProgress",
    "typed_unexpected",
    "unexpected_error",
    "unexpected_kind",
    "warn_unexpected",
]

_log = logging.getLogger("agentium.engine")

#: What each commit state means for an operation, in the error's message (after "; ").
Outcomes = Mapping[CommitState, str]

#: Where a run or a history write was when an unexpected exception left it (``mark_commit_state`` adds
#: what that means for the turn).
_WHERE = {
    CommitState.NOT_COMMITTED: "it failed before its commit's save began",
    CommitState.UNKNOWN: "it failed while its commit's save was under way",
    CommitState.COMMITTED: "it failed after its commit",
}


class WriteProgress:
    """Where a writing operation's write stands: what an error leaving it must say was committed."""

    __slots__ = ("commit_state", "saved_revision")

    def __init__(self) -> None:
        #: ``unknown`` from the moment a write may be in flight until its outcome is known.
        self.commit_state = CommitState.NOT_COMMITTED
        #: The revision the write saved, once it is known to stand (``None`` before).
        self.saved_revision: int | None = None

    def saving(self) -> None:
        """A write starts: until it is known to stand, an error cannot tell whether it landed."""
        self.commit_state = CommitState.UNKNOWN

    def committed(self) -> None:
        """The write is known to stand."""
        self.commit_state = CommitState.COMMITTED

    def settled(self, state: CommitState, revision: int | None = None) -> None:
        """The write in flight is known to stand (``committed``, at ``revision``) or not to have landed."""
        self.commit_state = state
        self.saved_revision = revision if state is CommitState.COMMITTED else None

    def failing(self) -> None:
        """Called once when an unexpected exception leaves the operation (a run keeps its turn so far)."""


def unexpected_kind(exc: BaseException | type[BaseException]) -> str:
    """The class name of an unexpected exception (or the class) as a WARNING quotes it: escaped, one line.

    Whoever raised it chose the name (``type()`` takes any string): a line
    break in it would start what reads as a record of its own, an ANSI
    escape would reach the terminal (docs/observability.md: one record, one line).
    """
    return one_line(clean_text((exc if isinstance(exc, type) else type(exc)).__name__))


def warn_unexpected(operation: str, exc: BaseException | type[BaseException], state: CommitState) -> None:
    """The WARNING for an unexpected exception (or its class) leaving ``operation`` in ``state``.

    Never its text: it may quote content.
    """
    kind = unexpected_kind(exc)
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


def unexpected_error(
    exc: Exception,
    progress: WriteProgress,
    operation: str,
    outcomes: Outcomes | None = None,
    *,
    warn: bool = True,
) -> AgentiumError:
    """``exc``, an exception no stage turned into a typed one, as an :class:`AgentiumError` caused by it.

    Its ``commit_state`` is where the operation was (``progress``). Its
    message names the exception and says what that state means: for a run
    or a history write the turn's wording (:func:`.settle.mark_commit_state`),
    for another operation its own ``outcomes``. Logged as a WARNING naming the
    operation, the exception's type and the state: never its text. With
    ``warn=False`` the caller logs it (:func:`warn_unexpected`) once the state
    is final: a run commits what ran first (:mod:`.effects`).
    """
    state = progress.commit_state
    progress.failing()
    if warn:
        warn_unexpected(operation, exc, state)
    message = (
        f"{operation} failed with an unexpected error, {error_text(exc)} (a bug in the engine or in code "
        "it called unguarded)"
    )
    error = AgentiumError(message if outcomes is None else f"{message}; {outcomes[state]}")
    # Committed with what ran (``step_failed``) by its class alone: the exception may be an adapter's
    # (a store's text naming another tenant's rows); the message, whole, is the host's
    # (turn_commit.committed_text).
    error.committed_detail = (
        f"AgentiumError: {operation} failed with an unexpected error, {clean_text(type(exc).__name__)} "
        "(a bug in the engine or in code it called unguarded)"
    )
    error.__cause__ = exc  # as ``raise error from exc``: the original and its traceback stay reachable
    error.__suppress_context__ = True
    if outcomes is not None:
        error.commit_state = state
        return error
    return mark_commit_state(error, state, _WHERE[state])


@contextmanager
def typed_unexpected(
    operation: str, progress: WriteProgress, outcomes: Outcomes | None = None
) -> Iterator[WriteProgress]:
    """Run the block; an exception no stage typed leaves it as :func:`unexpected_error`.

    Typed errors and ``BaseException`` s that are not ``Exception`` s
    (cancellation, ``KeyboardInterrupt``) go on as they are.
    """
    try:
        yield progress
    except AgentiumError:
        raise
    except Exception as exc:
        raise unexpected_error(exc, progress, operation, outcomes) from exc
