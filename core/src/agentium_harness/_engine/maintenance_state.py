"""What an error leaving a maintenance write says it committed: migrate, reconcile, close_session.

Every error raised out of these operations carries ``commit_state``, as one
out of ``run()`` or the history writes does: ``not_committed`` before their
save began (argument and admission refusals, a failed load, an archive read),
the settled state of a save that raised (:func:`save_settled`, the run
path's read-back: :func:`.settle.settle_save`), ``unknown`` while a save was
under way and could not be settled, ``committed`` once it stands. An
exception no stage typed (an engine bug) is typed on the way out
(:func:`.unexpected.typed_unexpected`) with the same state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import AgentiumError
from .._ports.sessions import SessionSnapshot, SessionStore
from .._scope import SessionKey
from .commit import check_revision
from .lifecycle import Ticket
from .results import CommitState
from .settle import mark_commit_state, settle_save
from .unexpected import Outcomes, WriteProgress, typed_unexpected

__all__ = ["MAINTENANCE", "MAINTENANCE_TOLD", "RECONCILE_TOLD", "maintenance_errors", "save_settled"]

#: What an unexpected error leaving a migration or a reconciliation (or a flush) says its state means.
MAINTENANCE: Outcomes = {
    CommitState.NOT_COMMITTED: (
        "it failed before its save began; the session was not changed (commit_state not_committed)"
    ),
    CommitState.UNKNOWN: (
        "it failed while its save was under way: whether the session was changed is unknown "
        "(commit_state unknown); inspect the session before calling it again"
    ),
    CommitState.COMMITTED: "it failed after its save: the session was changed (commit_state committed)",
}

#: What a typed error leaving a maintenance write adds to its message (a turn's words do not fit it).
MAINTENANCE_TOLD: Outcomes = {
    CommitState.NOT_COMMITTED: "the session was not changed (commit_state not_committed)",
    CommitState.UNKNOWN: (
        "whether the session was changed is unknown (commit_state unknown); inspect the session "
        "before calling it again"
    ),
    CommitState.COMMITTED: "the session was changed (commit_state committed); do not call it again blindly",
}


#: What a reconcile whose save raised says: it was saving the reconciled session, and no turn is
#: at stake (the run path's "the turn may be duplicated" would send a host looking for one).
RECONCILE_TOLD: Outcomes = {
    CommitState.NOT_COMMITTED: (
        "reconcile_session was saving the reconciled session and that save did not land: "
        "the session was not changed (commit_state not_committed)"
    ),
    CommitState.UNKNOWN: (
        "reconcile_session was saving the reconciled session (the archive's groups adopted, resident "
        "groups renumbered): whether that save landed is unknown (commit_state unknown); inspect the "
        "session before reconciling it again"
    ),
    CommitState.COMMITTED: (
        "reconcile_session saved the reconciled session (commit_state committed); do not reconcile it again"
    ),
}


@contextmanager
def maintenance_errors(operation: str, progress: WriteProgress) -> Iterator[WriteProgress]:
    """Run the block; every ``Exception`` leaving it is an :class:`AgentiumError` carrying ``commit_state``.

    A typed error that already says (a settled save) keeps its state; one
    that does not gets ``progress``'s, and its message says what that means.
    An untyped one leaves as :func:`.unexpected.unexpected_error`. A
    cancellation goes on as it is.
    """
    try:
        with typed_unexpected(operation, progress, MAINTENANCE):
            yield progress
    except AgentiumError as exc:
        if exc.commit_state is None:
            mark_commit_state(exc, progress.commit_state, told=MAINTENANCE_TOLD)  # the same error, marked
        raise


async def save_settled(
    ticket: Ticket, store: SessionStore, key: SessionKey, snapshot: SessionSnapshot, expected: int
) -> tuple[int, str]:
    """Save ``snapshot`` on revision ``expected``; a save that raises is read back before anything is said.

    Returns the revision, and how it was settled ("" when the save answered).
    A save found to have landed (the snapshot read back) returns its
    revision; otherwise its error is raised carrying ``not_committed`` (a
    compare-and-set refused: another revision, or the same one read twice)
    or ``unknown`` (nothing readable, or a save abandoned in flight).
    """
    try:
        answer = await ticket.call("session save", lambda ctx: store.save(key, snapshot, expected, ctx))
        return check_revision(answer, expected), ""
    except Exception as exc:
        # No new groups: a maintenance save only rewrites what the session holds.
        settled = await settle_save(ticket, store, key, snapshot, expected, (), exc)
        if settled.state is not CommitState.COMMITTED or settled.revision is None:
            raise mark_commit_state(exc, settled.state, settled.how, told=MAINTENANCE_TOLD)  # noqa: B904
        return settled.revision, settled.how
