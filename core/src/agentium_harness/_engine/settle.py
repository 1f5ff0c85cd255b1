"""Settling a save whose outcome is unknown: read the session back before saying what happened.

A session save that raises has not necessarily failed: a store may lose the
reply to a write the backend accepted (a timeout, a dropped connection, a
retried conditional write that then sees its own first attempt as a
conflict). Reporting "nothing was committed" then makes a host retry a turn
that is already there. So every failed save is settled here, bounded, before
the run reports: the session is read back and

- holds the snapshot that was saved (its digest), or a later one that still
  holds the new groups → ``committed``;
- holds another revision than the one the save expected, without the new
  groups → ``not_committed`` (the compare-and-set save can never land now);
  for a save without new groups (a flush, a migration) only when that
  revision lacks what a write on top of it keeps (the boundary it moved, the
  scope it stamped), else ``unknown``: it may have been built upon;
- still holds the revision the save expected, seen twice a moment apart →
  ``not_committed`` (a store must not commit after its call returned, see
  the port's ``save``) — unless the engine had to abandon the save in a
  worker thread, which may still land: then ``unknown``;
- holds another revision whose boundary is past some of the new groups (they
  would be archived by now): those seqs are read from the archive, when
  the caller names it — every one holding the new group's digest →
  ``committed``, any holding another group → ``not_committed`` (a seq is
  one group's, so the save cannot have landed), else ``unknown``;
- cannot be read, or answers nonsense, within :data:`READS` reads → ``unknown``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import anyio
import attrs

from .._errors import AgentiumError, OperationTimeoutError, SessionStoreError
from .._history import MessageGroup
from .._ports.archive import HistoryArchive
from .._ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot, verify_snapshot
from .._scope import SessionKey
from .._text import clean_text, error_text
from .._validators import exact_int, shown_number
from .lifecycle import Ticket
from .results import CommitState
from .said_claims import claims_of, without_claims

__all__ = ["READS", "Settled", "mark_commit_state", "settle_save"]

#: Pauses before each read-back: at most this many reads, each under the operation deadline.
READS: tuple[float, ...] = (0.0, 0.05, 0.25)


@attrs.frozen(slots=True)
class Settled:
    """What a read-back found: the state, the stored revision when committed, and how it was decided."""

    state: CommitState
    revision: int | None
    how: str
    #: ``unknown`` because the stored revision's boundary is past some of the new groups.
    archived_past: bool = False


async def settle_save(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    saved: SessionSnapshot,
    expected: int | None,
    new_groups: Sequence[MessageGroup],
    error: BaseException | None = None,
    archive: HistoryArchive | None = None,
) -> Settled:
    """Read ``key`` back after a save of ``saved`` on revision ``expected`` raised ``error``; never raises.

    ``new_groups`` are the groups the save added (none for a maintenance
    flush): a later revision written on top of the save still holds them.
    A save the engine had to abandon (blocked in a worker thread past its
    cancellation) may still land after any read, so an unchanged session
    then settles nothing: it is ``unknown``.
    """
    in_flight = isinstance(error, OperationTimeoutError) and error.abandoned
    problems: list[str] = []
    unchanged = 0
    for pause in READS:
        if pause:
            await anyio.sleep(pause)
        try:
            stored = await ticket.call("session read-back", lambda ctx: store.load(key, ctx))
            if stored is not None:
                if not isinstance(stored, StoredSnapshot) or not isinstance(stored.snapshot, SessionSnapshot):
                    raise TypeError(f"the store returned {type(stored).__name__}, not a StoredSnapshot")
                verify_snapshot(key, stored.snapshot)
        except Exception as exc:  # a failed read settles nothing; the next one may
            problems.append(error_text(exc))
            continue
        found = _judge(stored, saved, expected, new_groups)
        if found is not None and found.archived_past and archive is not None and stored is not None:
            found = await _archived(ticket, archive, key, stored, new_groups, found)
        if found is not None:
            return found
        unchanged += 1
        if in_flight:
            problems.append(f"the abandoned save may still land; the session is at revision {expected}")
        elif unchanged >= 2:
            return Settled(
                CommitState.NOT_COMMITTED,
                None,
                f"read back twice: the session is still at revision {expected}, the save did not land",
            )
    why = "; ".join(list(dict.fromkeys(problems))[-2:]) or "the session was read only once"
    return Settled(CommitState.UNKNOWN, None, f"{len(READS)} read-backs could not settle it ({why})")


def _judge(
    stored: StoredSnapshot | None,
    saved: SessionSnapshot,
    expected: int | None,
    new_groups: Sequence[MessageGroup],
) -> Settled | None:
    """The state one read shows, or ``None`` when it shows the session unchanged (read again)."""
    if stored is None:
        if expected is None:
            return None
        # The session existed at ``expected`` and is gone now: not ours, and no CAS on it can land.
        return Settled(CommitState.NOT_COMMITTED, None, "the session is gone; the save did not land")
    # The int the answer holds (``None``: not an int): a subclass's own comparisons could
    # settle a save as landed, or the session as unchanged, whatever it holds.
    revision = stored.revision if type(stored.revision) is int else exact_int(stored.revision)
    if revision is None:
        return Settled(
            CommitState.UNKNOWN,
            None,
            f"read back: the store answered revision {shown_number(stored.revision)}, not an integer",
        )
    if stored.snapshot.digest == saved.digest:
        if expected is None or revision > expected:
            return Settled(
                CommitState.COMMITTED, revision, f"read back: the saved snapshot is at revision {revision}"
            )
        return Settled(
            CommitState.UNKNOWN, None, f"read back: the saved snapshot, under revision {revision!r}"
        )
    if revision == expected:
        return None
    # Another revision: the save's compare-and-set on ``expected`` can never land any more. It may
    # have landed first and been built upon: then the new groups are still there, or archived.
    snap = stored.snapshot
    held = {g.seq: g.digest for g in snap.resident}
    if new_groups and all(held.get(g.seq) == g.digest for g in new_groups):
        return Settled(
            CommitState.COMMITTED,
            revision,
            f"read back: revision {revision}, written on top of the save, holds its group(s)",
        )
    if new_groups and any(g.seq < snap.boundary for g in new_groups):
        return Settled(
            CommitState.UNKNOWN,
            None,
            f"read back: revision {revision} has already archived past the saved group(s)",
            archived_past=True,
        )
    if not new_groups and not _cannot_hold(saved, snap):
        # A maintenance save (a flush, a migration) holds no group of its own to find: a later revision
        # may be another writer's, or written on top of this save after it landed.
        return Settled(
            CommitState.UNKNOWN,
            None,
            f"read back: revision {revision}, which may be another writer's or written on top of the save "
            "(it saved no group of its own to tell them apart)",
        )
    return Settled(
        CommitState.NOT_COMMITTED,
        None,
        f"read back: another writer's revision {revision}; the save did not land",
    )


def _cannot_hold(saved: SessionSnapshot, snap: SessionSnapshot) -> bool:
    """True when ``snap`` lacks what every revision written on top of ``saved`` keeps of it.

    A boundary never moves back, and a memory scope once stamped is never
    taken off: a revision below the boundary ``saved`` moved to, or without
    the scope it stamped, was not written on top of it.
    """
    scope_lost = saved.memory_scope is not None and snap.memory_scope is None
    return snap.boundary < saved.boundary or scope_lost


async def _archived(
    ticket: Ticket,
    archive: HistoryArchive,
    key: SessionKey,
    stored: StoredSnapshot,
    new_groups: Sequence[MessageGroup],
    unsettled: Settled,
) -> Settled:
    """Settle a revision that archived past the new groups by reading those seqs from the archive."""
    snap, revision = stored.snapshot, exact_int(stored.revision)  # an int: ``_judge`` found one
    held = {g.seq: g.digest for g in snap.resident}
    found: dict[int, str] = {}
    try:
        for group in new_groups:
            if group.seq < snap.boundary:
                read = await ticket.call("archive read-back", partial(archive.read_groups, key, group.seq, 1))
                # Exact types only: a subclass's own ``__eq__`` could match another writer's group.
                if read and type(read[0].seq) is int and read[0].seq == group.seq:
                    digest = read[0].digest
                    if isinstance(digest, str):  # else it settles nothing: left unsettled
                        found[group.seq] = str.__str__(digest)
            elif group.seq in held:
                found[group.seq] = held[group.seq]
    except Exception as exc:  # an archive that cannot answer settles nothing
        why = f"{unsettled.how}; the archive could not say ({type(exc).__name__})"
        return attrs.evolve(unsettled, how=why)
    if any(g.seq in found and found[g.seq] != g.digest for g in new_groups):
        return Settled(
            CommitState.NOT_COMMITTED,
            None,
            f"read back: revision {revision} and the archive hold another writer's group at a seq of the "
            "save's; the save did not land",
        )
    if all(found.get(g.seq) == g.digest for g in new_groups):
        return Settled(
            CommitState.COMMITTED,
            revision,
            f"read back: revision {revision} archived the saved group(s), the archive holds them",
        )
    return unsettled


#: What each state tells the host at the end of an error message.
_TOLD = {
    CommitState.COMMITTED: "the turn was committed (commit_state committed); do not retry it",
    CommitState.NOT_COMMITTED: "nothing was committed",
    CommitState.UNKNOWN: (
        "whether it was committed is unknown (commit_state unknown); inspect the session "
        "before retrying, or the turn may be duplicated"
    ),
}

# Phrases raise sites use for the common case; removed whole (never out of a quoted cause, with the
# "(commit_state not_committed)" that marked them) when the state turned out otherwise.
_CLAIMS = claims_of("the session was not changed", "nothing was committed", joined=True)


def mark_commit_state(
    exc: BaseException,
    state: CommitState,
    how: str = "",
    *,
    told: Mapping[CommitState, str] | None = None,
) -> AgentiumError:
    """``exc`` as a typed error carrying ``state``, its message saying so truthfully.

    An error that is not an :class:`AgentiumError` (an adapter's own) becomes
    a :class:`SessionStoreError` caused by it. A message that claimed nothing
    was changed loses the claim when something was, or may have been.
    ``told`` words what each state means for an operation that is not a turn.
    """
    error = exc if isinstance(exc, AgentiumError) else SessionStoreError(error_text(exc))
    if error is not exc:
        error.__cause__ = exc
        # Committed with what ran by its class alone (turn_commit.committed_text): the store's text
        # may name another tenant's rows. The message, the host's, keeps it whole.
        error.committed_detail = f"SessionStoreError: {clean_text(type(exc).__name__)}"
    if error.commit_state is state:
        return error  # already said
    error.commit_state = state
    if len(error.args) == 1 and isinstance(error.args[0], str):
        message = error.args[0]
        message = without_claims(message, _CLAIMS)  # said again below, as the state is
        said = (_TOLD if told is None else told)[state]
        if state is not CommitState.NOT_COMMITTED or how or message != error.args[0]:
            message = f"{message}; {how + '; ' if how else ''}{said}"
        error.args = (message,)
    return error
