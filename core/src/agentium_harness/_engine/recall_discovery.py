"""Discovery past what the session's view hides: asked again, bounded (R17).

Split from :mod:`.recall`. The store cannot see the session's view, so the
groups a reset cleared or a retraction touched come back among its best
matches; :func:`discover_visible` asks again for as many more as were
hidden, within fixed bounds, and says so when the bound stopped it.
"""

from __future__ import annotations

from .._ports.embedder import Vector
from .._ports.recall import Candidate, RecallSession
from .._scope import Scope
from .lifecycle import Ticket
from .recall_checks import Failed, checked_candidates
from .recall_round import Round, adapter_call

__all__ = ["HIDDEN_ASK_FACTOR", "HIDDEN_EXTRA_CALLS", "discover_visible"]

#: How many more times discovery asks the store when the session's view hid candidates.
HIDDEN_EXTRA_CALLS = 2
#: A discovery call never asks for more than this many times the candidates the round wants.
HIDDEN_ASK_FACTOR = 4


async def discover_visible(
    ticket: Ticket,
    state: Round,
    session: RecallSession,
    scope: Scope,
    query: str,
    vector: Vector | None,
    wanted: int,
) -> list[Candidate]:
    """Up to ``wanted`` candidates the session's view does not hide, in the store's order.

    The store cannot see the view, so groups a reset cleared or a retraction
    touched come back among the best matches and would crowd out visible
    evidence. When the view hid some and the store's answer was full, the
    store is asked again for that many more, at most
    :data:`HIDDEN_EXTRA_CALLS` times and never for more than
    :data:`HIDDEN_ASK_FACTOR` times ``wanted`` (each call under what is left
    of the latency and discovery byte budgets). Stopping at that bound with
    fewer than ``wanted`` found makes the round ``partial``, and says why.
    """
    limits = state.limits
    ceiling = wanted * HIDDEN_ASK_FACTOR
    handled: set[str] = set()
    kept: list[Candidate] = []
    hidden = 0
    ask = wanted
    for call in range(1 + HIDDEN_EXTRA_CALLS):
        discovery_left = limits.max_discovery_bytes - state.discovery_bytes
        if call and (state.left(ticket) <= 0 or discovery_left <= 0):
            _crowded(state, hidden, len(kept), wanted, "the recall latency or discovery byte budget is spent")
            break
        try:
            raw = await _discover_call(ticket, state, session, query, vector, ask, discovery_left)
        except Failed as exc:
            if not call:
                raise
            _crowded(state, hidden, len(kept), wanted, f"asking for more failed ({exc})", exc.shown)
            break
        got, hid, answered = checked_candidates(raw, state, scope, ask, earlier=handled)
        kept += got
        hidden += hid
        exhausted = answered < ask  # the store has no more matches
        if not hid or len(kept) >= wanted or exhausted:
            break
        if call == HIDDEN_EXTRA_CALLS or ask >= ceiling:
            _crowded(state, hidden, len(kept), wanted, f"{ask} candidates were asked, the most it asks")
            break
        ask = min(ceiling, ask + wanted - len(kept))
    return kept


def _crowded(state: Round, hidden: int, found: int, wanted: int, why: str, shown: str | None = None) -> None:
    """Record that hidden candidates may have crowded visible ones out (the round is ``partial``).

    ``shown``: ``why`` as the model is told it, when ``why`` quotes the store's error (``Round.problem``).
    """

    def said(reason: str) -> str:
        return (
            f"discovery stopped with {found} of {wanted} candidates: {hidden} it was given are hidden by "
            f"the session's view (retracted or cleared) and {reason}; visible evidence may have been missed"
        )

    what = said(why)
    state.problem(what, None if shown is None else said(shown))
    state.crowded = what


async def _discover_call(
    ticket: Ticket,
    state: Round,
    session: RecallSession,
    query: str,
    vector: Vector | None,
    count: int,
    discovery_left: int,
) -> object:
    """One ``discover`` (or ``discover_hybrid``, with a query vector) call for ``count`` candidates."""
    if vector is not None:
        return await adapter_call(
            ticket,
            state,
            "recall discover_hybrid",
            lambda ctx: session.discover_hybrid(query, vector, count, ctx),
            remaining_bytes=discovery_left,
        )
    return await adapter_call(
        ticket,
        state,
        "recall discover",
        lambda ctx: session.discover(query, count, ctx),
        remaining_bytes=discovery_left,
    )
