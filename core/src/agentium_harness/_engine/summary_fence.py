"""Whether the task summary a run sends was forgotten since its load (the turn fence's summary check).

A ``forget`` erasure (``erase_sources=True``) empties a task summary covering
the groups it took: it may state the fact (:func:`.erased_groups.emptied`
knows the form). Retention (and an operator's groups erasure) keeps a
summary's text by design. The turn fence (:class:`~.turn_fence.TurnFence`)
reads the session's snapshot when the ledger moved, and asks here:

- the snapshot holds the summary emptied: forgotten;
- it holds the text (and notes) sent: kept;
- it holds other text (a summary update wrote it again since) and no group
  the sent summary's text may state (below its frontier, or given to its
  summarizer: :func:`~agentium_harness._ports.summary.text_reach`; any, for
  a state saved without ``given_until``) is marked erased at all: kept (a
  ``forget`` taking one of those groups would have marked it);
- else the two cannot be told apart from the snapshot: a ``forget``
  emptied it and an update refilled it, or retention took the groups and
  an update rewrote it. A ``forget`` may also take groups marked erased
  before the load (retention took them, the summary kept their text: it
  erases them again to empty the summary), and then no range grows. Only
  then is the erasure index read (:func:`forgotten_since`): the session's
  chains newest first, the kind of each finished groups erasure joined
  since the load, until a forget is found or an entry that joined the
  ledger before the load settles the walk
  (:func:`.erasure_index.joined_covering`: a few small reads, one join
  record per entry). A ``forget`` of a group the sent summary's text may
  state, or a seq newly marked erased that no entry accounts for (fail
  closed), means forgotten; retention or an operator's groups erasure
  alone, kept. Every entry joined since the load is read unless a forget
  is found first: retention names every seq below its cutoff (those an
  older forget took too), so a newer retention accounting for every seq
  settles nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from .._ports.erasure import EraseTarget, ErasureKind, ErasureRecord, SeqRange
from .._ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot
from .._ports.summary import SummaryState, TaskSummary, text_reach
from .._scope import SessionKey
from .erased_groups import emptied, merge_ranges
from .erasure_index import joined_covering
from .erasure_ledger import joined_since
from .lifecycle import Ticket

__all__ = ["FORGOTTEN", "KEPT", "forgotten_since", "summary_gone"]

#: :func:`summary_gone`'s answers (else: the seq ranges the index must account for).
FORGOTTEN, KEPT = True, False
#: The boundary :func:`text_reach` is given for the sent summary: the fence does not know the load's,
#: and a state saved without ``given_until`` may state any archived group (every erased one is).
_ANY: Final = sys.maxsize


def summary_gone(
    found: object, sent: SummaryState, erased: Sequence[SeqRange]
) -> bool | tuple[SeqRange, ...]:
    """Whether snapshot ``found`` (a store's answer, unchecked) shows summary ``sent`` forgotten since.

    :data:`FORGOTTEN`, :data:`KEPT`, or — the snapshot cannot tell — the
    seq ranges ``sent``'s text may state (:func:`text_reach`) erased beyond
    ``erased`` (the load's; maybe none), for :func:`forgotten_since` to account for.
    """
    snapshot = found.snapshot if isinstance(found, StoredSnapshot) else None
    if not isinstance(snapshot, SessionSnapshot):
        return KEPT
    state = snapshot.summary
    now = state.summary if isinstance(state, SummaryState) else None
    if isinstance(now, TaskSummary) and emptied(now):
        return FORGOTTEN
    # The words sent, text and notes (a summarizer writes both, the summarizer is handed both): the
    # same text with other notes (or none, both empty) may be a refill after a forget.
    if isinstance(now, TaskSummary) and (now.text, now.uncertainty) == (
        sent.summary.text,
        sent.summary.uncertainty,
    ):
        return KEPT
    ranges = snapshot.erased if isinstance(snapshot.erased, tuple) else ()
    reach = text_reach(sent, _ANY)
    below = [
        SeqRange(r.start, min(r.stop, reach))
        for r in ranges
        if isinstance(r, SeqRange) and r.start < min(r.stop, reach)
    ]
    if not below:
        return KEPT  # no group its text may state is erased: a forget of one would have marked it
    return _minus(merge_ranges(below), merge_ranges(erased))


async def forgotten_since(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    since: int | None,
    new: Sequence[SeqRange],
    sent: SummaryState,
) -> bool:
    """Whether a ``forget`` joined since the load at ``since`` took a group of ``key`` ``sent`` may state.

    ``sent``: the summary the request carries (its text may state the groups
    below :func:`text_reach`); ``new``: the seqs marked erased since the
    load. Read from the erasure index (the module's docstring): ``True``
    also when some seq of ``new`` is accounted for by no finished erasure read.
    """
    left = list(new)
    reach = text_reach(sent, _ANY)
    forget = [False]

    async def joined(record: ErasureRecord) -> bool | None:
        verdict = await joined_since(ticket, store, record, since)
        target = record.target
        if verdict is not False and target.groups and target.session_key == key:
            taken = merge_ranges(target.groups)
            # Against all the summary covers, not what is left: retention names every seq below its
            # cutoff (a newer one may account for the seqs an older forget took), and a forget erases
            # again groups marked before the load that the summary still covers (no range grows).
            if record.kind is ErasureKind.FORGET and any(r.start < reach for r in taken):
                forget[0] = True
            left[:] = _minus(merge_ranges(left), taken)
        return verdict

    def settled(_: EraseTarget) -> bool:
        # Only a forget settles the walk early. Every seq accounted for is not enough: an older entry
        # joined since the load may be a forget of the same seqs; the walk stops at the first entry
        # that joined before the load, as every chain walk does.
        return forget[0]

    await joined_covering(ticket, store, (key.tenant, key.user, (key.session,)), settled, joined)
    return forget[0] or bool(left)


def _minus(ranges: Sequence[SeqRange], taken: Sequence[SeqRange]) -> tuple[SeqRange, ...]:
    """The seqs of merged ``ranges`` in none of merged ``taken``, as ranges."""
    out: list[SeqRange] = []
    for r in ranges:
        start = r.start
        for t in taken:
            if t.stop <= start or t.start >= r.stop:
                continue
            if t.start > start:
                out.append(SeqRange(start, t.start))
            start = max(start, t.stop)
        if start < r.stop:
            out.append(SeqRange(start, r.stop))
    return tuple(out)
