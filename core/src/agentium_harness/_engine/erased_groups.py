"""A session's snapshot after some of its archived groups were erased (retention, a forgotten fact's sources).

The session lives on, so its snapshot says which groups are gone
(``SessionSnapshot.erased``): summary updates pass over them, the recall
index's catch-up does not look for them, and ``inspect_session`` shows them.
The task summary is handled as the erasure asks:

- **keep its text** (retention): citations of erased groups stay and say
  ``erased`` (``SummaryState.erased_citations``); the text was written from
  the groups while they existed and is the host's record of them;
- **drop its text** (the sources of a forgotten fact): a summary whose text
  may state an erased group (below its frontier, cited or not, or below
  the groups a summarizer was given for it: ``SummaryState.given_until``,
  :func:`~agentium_harness._ports.summary.text_reach`) may state the
  forgotten fact, so its text, citations and uncertainty notes go; the
  frontier stays and one uncertainty note says why the summary is empty.
  Covering, not only citing: a summarizer need not cite
  (``SummarizerCapabilities.citations``), and a model folding its previous
  summary may restate a line under a newer group's tag. Given, not only
  covered: a summarizer may answer a frontier below the groups it was
  given (it folded fewer) while its text states them. A state saved
  before ``given_until`` existed may state any archived group.

Receipts of erased groups are dropped (nothing will be read back to match
them), and so are coverage gaps at them. Saved with compare-and-set, retried
on a conflict; marking what is already marked writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from .._errors import SessionConflictError
from .._ports.erasure import SeqRange
from .._ports.sessions import SessionSnapshot, SessionStore, seal_snapshot
from .._ports.summary import SummaryState, TaskSummary, text_reach
from .._scope import SessionKey
from .lifecycle import Ticket
from .load import load_session

__all__ = ["emptied", "emptied_before", "mark_erased", "may_state", "merge_ranges"]

_ATTEMPTS: Final = 8
_DROPPED_TEXT: Final = (
    "the summary's text was removed: it covered groups erased as a forgotten fact's sources"
)


def may_state(summary: TaskSummary) -> bool:
    """True if ``summary`` holds words its summarizer wrote: text, or uncertainty notes.

    Both may state what the groups below its frontier said. The note a
    forget erasure leaves in the summary it emptied is the engine's own.
    """
    return bool(summary.text) or any(note != _DROPPED_TEXT for note in summary.uncertainty)


def emptied(summary: TaskSummary) -> bool:
    """True if ``summary`` is one a forget erasure emptied (no text, only the note saying why)."""
    return not summary.text and summary.uncertainty == (_DROPPED_TEXT,)


def merge_ranges(*groups: Sequence[SeqRange]) -> tuple[SeqRange, ...]:
    """The union of every range given, merged where they touch, ascending."""
    spans = sorted((r.start, r.stop) for ranges in groups for r in ranges)
    merged: list[list[int]] = []
    for start, stop in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return tuple(SeqRange(a, b) for a, b in merged)


def _inside(seq: int, ranges: Sequence[SeqRange]) -> bool:
    return any(seq in r for r in ranges)


def _summary_after(
    state: SummaryState | None,
    erased: Sequence[SeqRange],
    keep_text: bool,
    fresh: Sequence[SeqRange],
    boundary: int,
) -> SummaryState | None:
    """``state`` once ``erased`` (every erased range, ``fresh`` the ones erased now) are gone.

    ``boundary``: the session's (what a state saved without ``given_until`` may state below).
    """
    if state is None:
        return None
    gaps = tuple(g for g in state.gaps if not _inside(g.seq, erased))
    cited = [c.seq for c in state.summary.citations if _inside(c.seq, erased)]
    if keep_text:
        if not cited:
            return attrs.evolve(state, gaps=gaps)
        return attrs.evolve(state, gaps=gaps, erased_citations=(*(state.erased_citations or ()), *cited))
    # The text was written from every group it was given, below its frontier or past it (it folded
    # fewer than given): one erased now may be stated in it whether or not a citation names it (a
    # summarizer need not cite).
    reach = text_reach(state, boundary)
    covered = may_state(state.summary) and any(r.start < reach for r in fresh)
    # Only citations of the groups erased now: one of a group retention erased before is the text
    # that erasure chose to keep, and a forget of other groups (past the frontier) must not take it.
    cited = [seq for seq in cited if _inside(seq, fresh)]
    if not cited and not covered:
        return attrs.evolve(state, gaps=gaps)
    old = state.summary
    # No text, so nothing to cite: the citations go with it (and marking again changes nothing).
    # The uncertainty notes go too: the summarizer wrote them with the text, and they may state
    # the fact as well ("not sure the code is ..."); the one left says why the summary is empty.
    emptied = TaskSummary(
        text="",
        frontier=old.frontier,
        policy=old.policy,
        version=old.version,
        uncertainty=(_DROPPED_TEXT,),
    )
    # ``given_until`` stays: how far the emptied text reached, for a resumed erasure (:func:`emptied_before`).
    return SummaryState(emptied, gaps, given_until=state.given_until)


async def _save(
    ticket: Ticket, store: SessionStore, key: SessionKey, snapshot: SessionSnapshot, revision: int
) -> None:
    await ticket.call("session save", lambda ctx: store.save(key, snapshot, revision, ctx))


async def mark_erased(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    ranges: Sequence[SeqRange],
    *,
    keep_summary_text: bool,
) -> bool:
    """Record ``ranges`` (archived groups of ``key``) as erased in its snapshot; ``True`` if it wrote.

    Ranges at or past the boundary are left out: only archived groups are
    erased this way. An absent session has nothing to mark.
    """
    for _ in range(_ATTEMPTS):
        stored, snap = await load_session(ticket, store, key, None, attest_legacy=False, fence=False)
        if stored is None:
            return False
        below = [SeqRange(r.start, min(r.stop, snap.boundary)) for r in ranges if r.start < snap.boundary]
        erased = merge_ranges(snap.erased or (), below)
        summary = _summary_after(snap.summary, erased, keep_summary_text, below, snap.boundary)
        receipts = tuple(r for r in snap.receipts if not _inside(r.seq, erased))
        changed = attrs.evolve(snap, erased=erased, summary=summary, receipts=receipts)
        if changed == snap:
            return False
        try:
            await _save(ticket, store, key, seal_snapshot(changed), stored.revision)
        except SessionConflictError:
            continue  # the session moved on meanwhile: mark what is stored now
        return True
    raise SessionConflictError(
        f"session {key.session!r} kept changing under {_ATTEMPTS} attempts to record its erased groups; "
        "resume the erasure"
    )


async def emptied_before(
    ticket: Ticket, store: SessionStore, key: SessionKey, ranges: Sequence[SeqRange]
) -> bool:
    """True if ``key``'s summary is one a forget erasure emptied, whose text reached past one of ``ranges``.

    Read when a forget erasure's marking writes nothing: a call of the same
    erasure that stopped after its marking (a resume finds it marked) may
    have stopped before the file's clean-up, so the former text may still
    be in the file. The fence has kept the session unwritten since.
    """
    stored, snap = await load_session(ticket, store, key, None, attest_legacy=False, fence=False)
    if stored is None or snap.summary is None:
        return False
    reach = text_reach(snap.summary, snap.boundary)
    return emptied(snap.summary.summary) and any(r.start < reach for r in ranges)
