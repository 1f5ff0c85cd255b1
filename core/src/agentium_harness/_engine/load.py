"""Step 2 of a turn: load the revisioned snapshot and check it (R2, R15).

The store's answer is not trusted: its type, the snapshot's shape (resident
seqs exactly ``boundary..next_seq``), its digest and its memory scope are all
checked here, whatever the adapter already checked.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from datetime import datetime
from typing import Final

from .._errors import (
    ContractViolationError,
    LegacySnapshotError,
    ScopeMismatchError,
    SnapshotCorruptError,
)
from .._history import ControlKind
from .._observe import spans as observe
from .._ports import OpContext
from .._ports.sessions import (
    MAX_ARCHIVE_MARKS,
    ArchiveMark,
    SessionSnapshot,
    SessionStore,
    StoredSnapshot,
    verify_snapshot,
)
from .._scope import Scope, SessionKey
from .._validators import exact_int, shown_number
from .erasure_ledger import pending_key, refuse_if_erasing
from .lifecycle import Ticket

__all__ = [
    "known_fence_and_session",
    "load_in_call",
    "load_in_call_fenced",
    "load_session",
    "note_well_formed",
]

# The snapshot last found well formed (``check_snapshot_shape``) for each key, or last saved by a
# joint commit (both :func:`note_well_formed`), weakly. A store that hands back that snapshot object (the
# SQLite store does for an unchanged row, and for the row it just saved) gets the same
# answer without the check: a snapshot is frozen, so its shape cannot have changed. It is
# compared by identity with the live object the reference holds, so a dead snapshot's reused id
# can never match (a weak reference costs a fraction of a finalizer per snapshot). Bounded.
_SHAPED: dict[SessionKey, weakref.ref[SessionSnapshot]] = {}
_MAX_SHAPED: Final = 4096


def note_well_formed(key: SessionKey, snapshot: SessionSnapshot) -> None:
    """Note ``snapshot`` as well formed for ``key``'s next load: checked by it, or saved by a commit.

    A commit builds the snapshot it saves from the one its load checked, the
    groups it keeps and the one it adds; a store that hands this very object
    back (the SQLite store does, until anyone else commits to the file) gets
    the answer without :func:`check_snapshot_shape`, as a snapshot already
    checked does. Any other object (decoded again, or another store's
    answer) is checked as before: the note is by identity, with the live
    object its weak reference holds.
    """
    if len(_SHAPED) >= _MAX_SHAPED:
        _SHAPED.clear()
    _SHAPED[key] = weakref.ref(snapshot)


async def load_session(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    scope: Scope | None,
    *,
    attest_legacy: bool,
    fence: bool = True,
) -> tuple[StoredSnapshot | None, SessionSnapshot]:
    """Load and check the snapshot of ``key``; an absent session gives an empty snapshot.

    ``scope=None`` (inspection and maintenance) checks only that the stored
    scope belongs to ``key``. With a scope, a mismatch is always refused and a
    legacy snapshot loads only with ``attest_legacy`` (R15). ``fence`` (every
    caller but inspection and erasure itself) first refuses a session an
    erasure under way covers (:class:`~agentium_harness._errors.ErasureInProgressError`).
    """
    with observe.stage("load") as span:
        # The tenant's erasures under way (with ``fence``) and ``key``'s snapshot are both read
        # from the store, fence first, under one deadline: one bounded call (a task and a timer)
        # for the two, each read keeping its span (``agentium.erasure.fence``,
        # ``agentium.session.load``). Written out here, not in helpers: a coroutine a layer.
        known = known_fence_and_session(ticket, store, key) if fence else None
        if known is not None:
            pending, found = known
        elif fence:
            # Two loads (and their spans, opened on this thread): a store whose loads wait only for
            # their thread hop makes them in this task (``hops_only``), both under the one deadline.
            pending, found = await ticket.call(
                "session load",
                lambda ctx: _fence_and_session(ctx, store, key),
                traced=False,
                hops_only=(store, "load"),
            )
        else:
            pending, found = (
                None,
                await ticket.call(
                    "session load", lambda ctx: store.load(key, ctx), hops_only=(store, "load")
                ),
            )
        stored, snap = _checked(key, scope, pending, found, attest_legacy=attest_legacy, fence=fence)
        # What the fence saw, for the commit's second look (.commit_fence; checked by _checked). The
        # latest load decides: an unfenced one (erasure's own rewrites) leaves nothing to look at.
        ticket.fence_seen = (
            (exact_int(pending.revision) if isinstance(pending, StoredSnapshot) else None,) if fence else None
        )
        span.set("agentium.snapshot.revision", stored.revision if stored is not None else 0)
        span.set("agentium.resident.groups", len(snap.resident))
        return stored, snap


def known_fence_and_session(
    ticket: Ticket, store: SessionStore, key: SessionKey
) -> tuple[object, object] | None:
    """The fence and ``key``'s snapshot when the store knows both unchanged, at once; else ``None``.

    The built-in SQLite store answers a load of a row it wrote or read last,
    with no commit by anyone since, on the calling thread and without
    waiting (``SQLiteSessionStore._agentium_load_known``, both rows as of one
    look at the file): the bounded call around such loads (a task, a cancel
    scope, a loop iteration: about 30 µs of a turn's engine CPU) guards
    nothing. Taken only with nothing recording (the reads' spans stay as
    they were otherwise), and only when both answers are known; what it
    answers is checked by ``_checked`` as a load's answer is. Anything else
    (another store, a row to read, an expired or cancelled context, a
    failure) leaves it to the bounded call.
    """
    known_load = getattr(store, "_agentium_load_known", None)
    if known_load is None or observe.current() is not None:
        return None
    try:
        known = known_load((pending_key(key.tenant), key), ticket.context())
    except Exception:  # the bounded load meets it again and raises it as a load's
        return None
    if type(known) is not tuple or len(known) != 2:
        return None
    return known[0], known[1]


async def _fence_and_session(ctx: OpContext, store: SessionStore, key: SessionKey) -> tuple[object, object]:
    """The tenant's erasures under way, then ``key``'s snapshot, as the store returns them (in one call)."""
    with observe.adapter_call("erasure fence"):
        pending = await store.load(pending_key(key.tenant), ctx)
    with observe.adapter_call("session load"):
        return pending, await store.load(key, ctx)


async def load_in_call(
    ctx: OpContext, store: SessionStore, key: SessionKey
) -> tuple[StoredSnapshot | None, SessionSnapshot]:
    """:func:`load_session` (fenced, no scope: a read) inside a bounded call the caller already runs.

    For an operation that makes several adapter calls under one deadline
    (``read_history``: the load, then the archive read it decides): one
    task and timer for all of them. The reads and checks are the same.
    """
    stored, snap, _ = await load_in_call_fenced(ctx, store, key)
    return stored, snap


async def load_in_call_fenced(
    ctx: OpContext, store: SessionStore, key: SessionKey
) -> tuple[StoredSnapshot | None, SessionSnapshot, tuple[int | None]]:
    """:func:`load_in_call`, with the fence point it read (what ``Ticket.fence_seen`` holds after a load).

    ``read_history`` hands it to the host in its page (``HistoryPage.read_fence``), so that a
    later ``append(after_read=...)`` can tell whether an erasure began or ended since.
    """
    with observe.stage("load") as span:
        pending, stored = await _fence_and_session(ctx, store, key)
        loaded = _checked(key, None, pending, stored, attest_legacy=False, fence=True)
        span.set("agentium.snapshot.revision", loaded[0].revision if loaded[0] is not None else 0)
        span.set("agentium.resident.groups", len(loaded[1].resident))
        # Checked by _checked (a ledger, an exact revision): the same point a fenced load_session keeps.
        point = exact_int(pending.revision) if isinstance(pending, StoredSnapshot) else None
        return loaded[0], loaded[1], (point,)


def _checked(
    key: SessionKey,
    scope: Scope | None,
    pending: object,
    stored: object,
    *,
    attest_legacy: bool,
    fence: bool,
) -> tuple[StoredSnapshot | None, SessionSnapshot]:
    """The store's answers for the fence and ``key`` checked (see :func:`load_session`)."""
    if fence and pending is not None:
        # Refused before the snapshot is even looked at, as when the fence was read on its own.
        # No ledger at all (nearly every operation) is no erasure under way: nothing to check.
        refuse_if_erasing(key, pending)
    if stored is None:
        return None, SessionSnapshot(memory_scope=scope)
    if not isinstance(stored, StoredSnapshot) or not isinstance(stored.snapshot, SessionSnapshot):
        raise ContractViolationError(
            f"session store returned {type(stored).__name__}, not a StoredSnapshot or None"
        )
    revision = stored.revision
    if type(revision) is not int:
        # A subclass is read as the int it holds (its own ``__lt__`` or ``__index__`` could pass the
        # bound and then compare otherwise in the save's compare-and-set); the answer keeps that int.
        exact = exact_int(revision)
        if exact is None or exact < 1:
            raise ContractViolationError(f"session store returned revision {shown_number(revision)}")
        stored = StoredSnapshot(stored.snapshot, exact)
    elif revision < 1:
        raise ContractViolationError(f"session store returned revision {revision}")
    snap = stored.snapshot
    verify_snapshot(key, snap)
    shaped = _SHAPED.get(key)
    if shaped is None or shaped() is not snap:
        check_snapshot_shape(key, snap)
        note_well_formed(key, snap)
    if snap.memory_scope is None:
        if scope is not None and not attest_legacy:
            raise LegacySnapshotError(
                f"session {key.session!r} is a legacy snapshot without a memory scope; verify its "
                "exact scope, then pass attest_legacy_memory_scope=True"
            )
    # The same object first: a run's scope is kept per ids (``run_scope``), and so is the one its
    # last commit stored; attrs' ``!=`` is two Python calls, and a scope is equal to itself.
    elif scope is not None and snap.memory_scope is not scope and snap.memory_scope != scope:
        raise ScopeMismatchError(
            f"session {key.session!r} belongs to a different memory scope; refused "
            "(attestation cannot override a mismatched scope)"
        )
    elif (snap.memory_scope.tenant, snap.memory_scope.user, snap.memory_scope.session) != (
        key.tenant,
        key.user,
        key.session,
    ):  # field by field: ``memory_scope.session_key`` would build a key, validating each id again
        raise ScopeMismatchError(f"session {key.session!r} is stored under a different identity")
    return stored, snap


def check_snapshot_shape(key: SessionKey, snap: SessionSnapshot) -> None:
    """The snapshot must be one the engine could have saved, or :class:`SnapshotCorruptError`.

    Resident seqs are exactly ``boundary..next_seq-1``, each group's scope is
    the session's, and the summary state and receipts are possible for the
    boundary (see :func:`_impossible_summary_state`).
    """
    boundary, next_seq = snap.boundary, snap.next_seq
    if type(boundary) is not int or type(next_seq) is not int:
        # Every store decodes exact ints; an adapter's subclass would be compared by its own
        # ``__lt__`` here and wherever the engine numbers the next group.
        raise SnapshotCorruptError(
            f"snapshot of session {key.session!r} holds a boundary or next_seq that is not an int "
            f"({type(boundary).__name__}, {type(next_seq).__name__}); it was left as it is"
        )
    seqs = [g.seq for g in snap.resident]
    if not 0 <= boundary <= next_seq or seqs != list(range(boundary, next_seq)):
        raise SnapshotCorruptError(
            f"snapshot of session {key.session!r} is inconsistent: boundary {snap.boundary}, "
            f"next_seq {snap.next_seq}, resident seqs {seqs[:5]}{'…' if len(seqs) > 5 else ''}"
        )
    want = (key.tenant, key.user, key.session)
    for group in snap.resident:
        scope = group.retained.scope if group.retained is not None else None
        # Compared field by field: building a SessionKey per group re-validates ids.
        if scope is not None and (scope.tenant, scope.user, scope.session) != want:
            raise SnapshotCorruptError(
                f"snapshot of session {key.session!r} holds group {group.seq} retained under another scope"
            )
    if snap.ledger is not None:
        raise SnapshotCorruptError(
            f"snapshot of session {key.session!r} holds erasure records, which only the reserved keys may; "
            "the stored data is damaged and was left as it is"
        )
    impossible = _impossible_summary_state(snap) or _impossible_view(snap) or _impossible_erased(snap, key)
    if impossible is not None:
        # The summary would be shown to the model as coverage it does not have:
        # refused like any other damage, never repaired or shown.
        raise SnapshotCorruptError(
            f"snapshot of session {key.session!r} holds a summary state impossible for it ({impossible}); "
            "the stored data is damaged and was left as it is"
        )


def _impossible_erased(snap: SessionSnapshot, key: SessionKey) -> str | None:
    """Why the snapshot's erased ranges or archive marks cannot have been written by the engine.

    Only archived groups are erased, in ascending ranges; archive marks
    ascend, stay at or below the boundary, and are at most ``MAX_ARCHIVE_MARKS``.
    """
    below = 0
    for span in snap.erased or ():
        if span.start < below or span.stop > snap.boundary:
            return f"erased groups {span.start}..{span.stop - 1} out of order or not archived"
        below = span.stop
    marks = snap.archived or ()
    if _marks_follow_checked(key, marks, snap.boundary):
        return None
    if len(marks) > MAX_ARCHIVE_MARKS or any(not 0 < m.below <= snap.boundary for m in marks):
        return "archive marks past the boundary, or too many"
    if any(a.below >= b.below or a.at > b.at for a, b in itertools.pairwise(marks)):
        return "archive marks out of order"
    if (
        type(marks) is tuple
        and type(snap.boundary) is int
        and all(type(m) is ArchiveMark and type(m.below) is int and type(m.at) is datetime for m in marks)
    ):
        _remember_marks(key, marks, snap.boundary)
    return None


# The archive marks last found in order for each key, with the boundary they were checked against:
# a tuple of frozen marks whose fields are exact ``int`` and ``datetime`` (immutable), held
# strongly, so the objects cannot change or be replaced by others at the same address. Each
# commit that archives carries the marks over and adds one (dropping one past the limit), so
# the next snapshot's marks are checked against these by identity and only the new
# neighbours are compared (see ``_marks_follow_checked``). Bounded: cleared when full.
_MARKS_IN_ORDER: dict[SessionKey, tuple[tuple[ArchiveMark, ...], int]] = {}
_MAX_MARKS_IN_ORDER: Final = 1024  # at most 32 marks each: a few MiB at worst


def _remember_marks(key: SessionKey, marks: tuple[ArchiveMark, ...], boundary: int) -> None:
    if len(_MARKS_IN_ORDER) >= _MAX_MARKS_IN_ORDER:
        _MARKS_IN_ORDER.clear()
    _MARKS_IN_ORDER[key] = (marks, boundary)


def _marks_follow_checked(key: SessionKey, marks: tuple[ArchiveMark, ...], boundary: int) -> bool:
    """True only if the full check of ``marks`` would pass, known from the ones last found in order.

    That is: ``marks`` are those of ``key`` (the same objects) with at most one of them dropped
    and one added at the end, the boundary has not moved back, and the new neighbours are in
    order. Every pair of neighbours but the new ones was a pair of neighbours there, every carried
    mark was above 0 and at most the old boundary; the new last mark is checked in full. Anything
    else answers False, and the caller checks every mark as before.
    """
    known = _MARKS_IN_ORDER.get(key)
    if known is None or type(marks) is not tuple or type(boundary) is not int:
        return False
    prior, prior_boundary = known
    if boundary < prior_boundary:
        return False
    if marks is prior:
        return True
    if not 0 < len(marks) <= MAX_ARCHIVE_MARKS:
        return False
    body, last = marks[:-1], marks[-1]
    if len(body) > len(prior):
        return False
    same = list(map(operator.is_, body, prior))
    if False in same:
        # One of the earlier marks was dropped at ``at``: the rest are the ones after it.
        at = same.index(False)
        if len(prior) <= len(body) or not all(map(operator.is_, body[at:], prior[at + 1 :])):
            return False
        if at > 0 and not _in_order(body[at - 1], body[at]):
            return False
    if type(last) is not ArchiveMark or type(last.below) is not int or type(last.at) is not datetime:
        return False
    if not 0 < last.below <= boundary or (body and not _in_order(body[-1], last)):
        return False
    _remember_marks(key, marks, boundary)
    return True


def _in_order(first: ArchiveMark, then: ArchiveMark) -> bool:
    """``then`` may follow ``first`` (what the full check asks of neighbours); False if not comparable."""
    try:
        return first.below < then.below and not first.at > then.at
    except TypeError:  # a naive and an aware time: the full check raises it as before
        return False


def _impossible_view(snap: SessionSnapshot) -> str | None:
    """Why the snapshot's view state cannot have been written by the engine, if it cannot.

    The view starts after a reset at or below ``next_seq``; its spans are
    ascending, disjoint, inside the view, each ending at a retraction's
    control group, and the retracted count is 0 exactly when there are none.
    Resident groups are checked too: a span's first message exists, its last
    group is a retraction, and the group before the start is a reset.
    """
    view = snap.view
    if view is None:
        return None
    if view.start > snap.next_seq:
        return f"a view starting at group {view.start}, past next_seq {snap.next_seq}"
    if (view.retracted == 0) != (not view.spans) or view.retracted < len(view.spans):
        return f"{view.retracted} retracted message(s) in {len(view.spans)} span(s)"
    resident = {g.seq: g for g in snap.resident}
    below = view.start - 1
    reset = resident.get(view.start - 1)
    if reset is not None and (reset.control is None or reset.control.kind is not ControlKind.RESET_VIEW):
        return f"a view starting after group {view.start - 1}, which is not a view reset"
    for span in view.spans:
        if not below < span.first_seq <= span.last_seq < snap.next_seq:
            return f"a retracted span {span.first_seq}..{span.last_seq} out of order or outside the view"
        below = span.last_seq
        first, last = resident.get(span.first_seq), resident.get(span.last_seq)
        if first is not None and span.first_index >= max(1, len(first.messages)):
            return (
                f"a retracted span from message {span.first_index} of group {span.first_seq}, which it lacks"
            )
        if last is not None and (last.control is None or last.control.kind is not ControlKind.RETRACT):
            return f"a retracted span ending at group {span.last_seq}, which is not a retraction"
    return None


def _impossible_summary_state(snap: SessionSnapshot) -> str | None:
    """Why the snapshot's summary state or receipts cannot have been written by the engine, if they cannot.

    The frontier only passes archived groups (``frontier <= boundary``), a
    summary cites only groups below its frontier, a gap is the group the
    frontier stopped at, and a receipt names an archived group, once. A
    summarizer is given archived groups only (``given_until <= boundary``).
    """
    seen: set[int] = set()
    for receipt in snap.receipts:
        if not 0 <= receipt.seq < snap.boundary or receipt.seq in seen:
            return f"a receipt for group {receipt.seq}: not archived (boundary {snap.boundary}), or twice"
        seen.add(receipt.seq)
    if snap.summary is None:
        return None
    frontier = snap.summary.summary.frontier
    if not 0 <= frontier <= snap.boundary:
        return f"frontier {frontier} outside the archived groups 0..{snap.boundary}"
    for citation in snap.summary.summary.citations:
        if not 0 <= citation.seq < frontier:
            return f"a citation of group {citation.seq}, not below the frontier {frontier}"
    given = snap.summary.given_until
    if given is not None and given > snap.boundary:
        return f"groups up to {given} given to its summarizer, past the archived groups 0..{snap.boundary}"
    gaps = snap.summary.gaps
    if len(gaps) > 1 or any(gap.seq != frontier for gap in gaps):
        return f"coverage gaps at {[gap.seq for gap in gaps]}, not the one group at the frontier {frontier}"
    return None
