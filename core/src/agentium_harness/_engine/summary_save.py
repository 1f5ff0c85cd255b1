"""Saving a task-summary update into the snapshot its commit made, and settling a save that raised.

The update is saved after the turn committed, with compare-and-set on the
commit's revision. A save that raises is read back like a turn's
(:func:`.settle.settle_save`): a store may lose the reply to a write that
landed, or see its own retried first attempt as a conflict. What it finds
is reported, never raised over the committed turn: landed → the new
revision (``save_settled``); another writer's revision → the update is
dropped (``summary_conflict``); anything else → ``summary_failed``, saying
whether the summary was saved (``not_committed``) or may have been
(``unknown``). See docs/summaries.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._errors import SessionConflictError
from .._ports.sessions import SessionStore, seal_snapshot, verify_snapshot
from .._ports.summary import SummaryState
from .._scope import SessionKey
from .._text import error_text
from .commit import CommitOutcome
from .lifecycle import Ticket
from .results import CommitState, Diagnostic, Severity
from .settle import settle_save

if TYPE_CHECKING:
    from .parts import SummaryRevisions

__all__ = ["save_summary"]

_CONFLICT = "another writer saved the session first; the summary update was dropped"


async def save_summary(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    revision: int,
    state: SummaryState,
    revisions: SummaryRevisions | None = None,
    made_for: CommitOutcome | None = None,
) -> tuple[int | None, list[Diagnostic]]:
    """Save ``state`` into the session snapshot at ``revision`` with compare-and-set.

    Returns the new revision, or ``None`` when the snapshot moved on since
    (another runtime committed or advanced the summary first: its state
    stands, and this update is dropped whole, never merged) or the save
    failed, or the session could not be read before it (``summary_failed``).
    A save that raises is read back first: one that landed returns its
    revision (``save_settled``). It never raises but a cancellation. A save is
    recorded in ``revisions``, with the digests of the snapshot it was made
    on and of the one it saved (``expected_revision`` looks past it).

    ``made_for`` (the commit the update was made after) must also be what
    is stored at ``revision``: its boundary and resident groups. The
    revision alone does not say so: another process may have erased the
    session while the summarizer ran and used the id again up to that
    revision (with a store that breaks the port's rule that revisions never
    repeat across an erasure: defence in depth), and the summary of the
    erased groups would then be saved into the new session.
    """
    try:
        stored = await ticket.call("session load", lambda ctx: store.load(key, ctx))
        if stored is not None:
            verify_snapshot(key, stored.snapshot)
    except Exception as exc:  # nothing was saved: reported, never raised over the committed turn
        return None, [
            Diagnostic(
                "summary_failed",
                f"the session could not be read before the summary's save ({error_text(exc)}); the summary "
                "was not saved (commit_state not_committed); the turn stands",
                Severity.ERROR,
            )
        ]
    if stored is None or stored.revision != revision:
        return None, [
            Diagnostic(
                "summary_conflict",
                "the session changed before the summary was saved; the update was dropped",
                Severity.WARNING,
            )
        ]
    if made_for is not None and (
        stored.snapshot.boundary != made_for.boundary
        or tuple(g.digest for g in stored.snapshot.resident) != tuple(g.digest for g in made_for.resident)
    ):
        return None, [
            Diagnostic(
                "summary_conflict",
                "the session stored at that revision is not the one the summary was made for (it was "
                "replaced meanwhile, e.g. erased and started again); the update was dropped",
                Severity.WARNING,
            )
        ]
    # Receipts the new frontier has passed are no longer needed: the snapshot
    # keeps only those of archived groups the summary has yet to fold.
    receipts = tuple(r for r in stored.snapshot.receipts if r.seq >= state.summary.frontier)
    sealed = seal_snapshot(attrs.evolve(stored.snapshot, summary=state, receipts=receipts))
    notes: list[Diagnostic] = []
    try:
        new_revision = await ticket.call("session save", lambda ctx: store.save(key, sealed, revision, ctx))
    except Exception as exc:
        # The turn stands whatever this save did: what it did is read back and reported, never raised.
        settled = await settle_save(ticket, store, key, sealed, revision, (), exc)
        if settled.state is not CommitState.COMMITTED or settled.revision is None:
            return None, [_unsaved(exc, settled.state, settled.how)]
        new_revision = settled.revision
        notes.append(
            Diagnostic(
                "save_settled",
                f"the summary save raised {error_text(exc)}; {settled.how}, so the summary is saved",
                Severity.WARNING,
            )
        )
    if revisions is not None:
        revisions.record(
            key, revision, new_revision, base_digest=stored.snapshot.digest, made_digest=sealed.digest
        )
    return new_revision, notes


def _unsaved(exc: Exception, state: CommitState, how: str) -> Diagnostic:
    """What a summary save that raised and did not land (or may have) is reported as."""
    if state is CommitState.NOT_COMMITTED and isinstance(exc, SessionConflictError):
        return Diagnostic("summary_conflict", _CONFLICT, Severity.WARNING)
    said = (
        "the summary was not saved (commit_state not_committed)"
        if state is CommitState.NOT_COMMITTED
        else "whether the summary was saved is unknown (commit_state unknown)"
    )
    return Diagnostic(
        "summary_failed",
        f"the summary update's save raised {error_text(exc)}; {how}; {said}; the turn stands",
        Severity.ERROR,
    )
