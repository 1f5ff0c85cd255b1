"""A write that follows a read: ``append(after_read=...)`` refused when an erasure came between them.

A host under an agent loop reads a session (``read_history``: the model's
input), waits on the model, then appends the turn (the user's message and
the answer, both made from what it read). The append loads the session
again, and its own fenced load and commit fence only cover the time from
that load on: an erasure of the session (or of its user or tenant) that
began *and* finished while the model ran leaves the append nothing to see —
the session is simply empty, and the turn, derived from the erased history,
would be written into the freshly erased id.

So the page a read returns carries the fence point of the tenant's
erasure ledger at that read (:class:`~.history_records.ReadFence`), and an
append given it compares it with its own load's, through the same check a
run's load again uses (:func:`.commit_fence.refuse_if_erased_since`): if the
ledger moved and a finished erasure of the whole session joined it after
the read, the append is refused (:class:`ErasedSinceReadError`, a WARNING
logged by the check, no content). A covering erasure still under way is
refused by the append's own load (``ErasureInProgressError``). An erasure
with no join record (run by an earlier version) refuses conservatively; the
host reads again and the write then goes through.
"""

from __future__ import annotations

from .._errors import ErasedSinceReadError, InvalidArgumentError, SessionConflictError
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from .commit_fence import refuse_if_erased_since
from .history_records import HistoryPage, ReadFence
from .lifecycle import Ticket
from .results import CommitState

__all__ = ["check_after_read", "refuse_if_erased_since_read"]


def check_after_read(after_read: object, key: SessionKey) -> tuple[int | None] | None:
    """The fence point ``after_read`` (a page or its :class:`ReadFence`) holds for ``key``, checked.

    ``None`` gives ``None`` (no read to follow). Anything else than a
    :class:`HistoryPage` or a :class:`ReadFence` (a subclass of either
    included), a page with no fence (one the host made itself), or the read
    of another session (another tenant, user or session id, or ids that are
    not exactly ``str``) is refused with :class:`InvalidArgumentError`,
    before anything is admitted.
    """
    if after_read is None:
        return None
    # Exact types: a subclass's own code (its read_fence, its ids' __eq__) would run here and could
    # raise anything, or say the read of another session is this one's.
    fence = after_read.read_fence if type(after_read) is HistoryPage else after_read
    if type(fence) is not ReadFence:
        what = "a page with no read_fence" if type(after_read) is HistoryPage else type(after_read).__name__
        raise InvalidArgumentError(
            "after_read must be a HistoryPage returned by read_history, or its read_fence, "
            f"not {what}; nothing was written"
        )
    ids = fence.session_ids
    if any(type(i) is not str for i in ids) or ids != (key.tenant, key.user, key.session):
        raise InvalidArgumentError(
            f"after_read is the read of another session than {key.session!r} of this identity; "
            "pass the page read_history returned for this session; nothing was written"
        )
    point = fence.point
    if type(point) is not tuple or len(point) != 1 or not (point[0] is None or type(point[0]) is int):
        raise InvalidArgumentError("after_read holds no fence point read_history made; nothing was written")
    return point


async def refuse_if_erased_since_read(
    ticket: Ticket, store: SessionStore, key: SessionKey, point: tuple[int | None]
) -> None:
    """After the append's own fenced load: refuse it if an erasure of ``key`` may have run since ``point``.

    :func:`.commit_fence.refuse_if_erased_since` decides (and logs its
    WARNING, with no content); its refusal is raised as
    :class:`ErasedSinceReadError`, so a caller can tell it from a lost
    compare-and-set, which a retry may win: this one no retry of the same
    content should.
    """
    try:
        await refuse_if_erased_since(ticket, store, key, point)
    except SessionConflictError as exc:
        refused = ErasedSinceReadError(
            f"session {key.session!r} may have been erased since the read this append follows "
            f"({exc}); read the session again (read_history) rather than retry this append"
        )
        refused.commit_state = CommitState.NOT_COMMITTED
        raise refused from exc
