"""Whether a stored task summary may be shown with the session's view, and restarting one that may not.

A retraction or a view reset that takes away something the summary's text
may state restarts it in the same save (:mod:`.history_write`); a summary
left by a writer that did not is found stale here and restarted before a
request or the summarizer is given it (docs/summaries.md).
"""

from __future__ import annotations

from .._history import ViewState
from .._ports.summary import SummaryState, TaskSummary
from .erased_groups import may_state
from .history_view import ViewIndex

__all__ = ["restarted", "visible_summary"]


def restarted(state: SummaryState | None, frontier: int) -> SummaryState | None:
    """The summary started again empty at ``frontier`` (policy kept), or ``None`` when there is none.

    Used when a retraction or a view reset takes away something the summary
    covers: its text may state it, so it is never shown again; the next
    updates fold what the view shows from ``frontier`` on.
    """
    if state is None:
        return None
    old = state.summary
    return SummaryState(TaskSummary(text="", frontier=frontier, policy=old.policy, version=old.version))


def visible_summary(
    state: SummaryState | None, view: ViewState | None, boundary: int
) -> tuple[SummaryState | None, bool]:
    """``(state, False)``, or ``(state restarted empty, True)`` if it is stale.

    Stale: it cites a group the view shows nothing of. A summary only ever
    cites groups it was offered, which the view showed, and a retraction or
    reset that takes one away restarts it; one citing such a group was left
    by a writer that did not (an earlier version, through a runtime without
    a summarizer). Or, saved without ``given_until`` (an earlier version
    restarted it only below its frontier), its words may state a group of
    ``frontier..boundary`` (the session's) the view does not show whole: a
    summarizer may state groups it was given past its frontier, uncited.
    Its text may state what left the view, so neither a turn's request nor
    the summarizer is given it again.
    """
    if state is None or view is None:
        return state, False
    cited, frontier = state.summary.citations, state.summary.frontier
    # No index built for a summary citing nothing (the common case on a turn's path).
    stale = bool(cited) and any(ViewIndex(view).shown(c.seq) == 0 for c in cited)
    if not stale and state.given_until is None and frontier < boundary and may_state(state.summary):
        stale = frontier < view.start or any(
            s.first_seq < boundary and s.last_seq >= frontier for s in view.spans
        )
    if not stale:
        return state, False
    # Never past the stored frontier, which the archive is known to reach.
    return restarted(state, min(view.start, frontier)), True
