"""Which facts are injected into a request: a host-replaceable selection, checked by the engine (R36, R38).

A :data:`MemorySelection` receives a :class:`SelectionRequest` and returns
stored facts, best first. The default, :func:`recent_and_relevant`, asks the
store's ``lookup`` (facts matching more of the query's words first, then
the most recent) for the request's ``candidates``: up to
:data:`CANDIDATES_PER_FACT` times its ``limit`` (at most ``MAX_LOOKUP_LIMIT``).
Whatever a selection returns, :func:`checked_selection` examines it in rank
order and keeps only facts that may be injected — current, valid at the
request's time, visible to its scope, not forgotten through this manager,
acceptable to every store (:func:`rejection_reason`: within
``MAX_FACT_BYTES``, not empty, valid text), not drawn from a group the run's
view hides — reporting every refused one with why, until ``limit`` facts
are kept or ``candidates`` facts were examined. So a refused fact does not
take an eligible one's place, and however many facts are refused, no more
than ``candidates`` are examined.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from datetime import datetime

import attrs

from ..._errors import ContractViolationError
from ..._ports._base import OpContext
from ..._ports.memory import (
    MAX_LOOKUP_LIMIT,
    MemoryScope,
    MemoryStore,
    StoredFact,
    check_limit,
    rejection_reason,
)
from ..._validators import require_instance
from ..adapter_lists import listed

__all__ = [
    "CANDIDATES_PER_FACT",
    "MAX_FORGOTTEN_IDS",
    "MemorySelection",
    "RecentIds",
    "SelectionRequest",
    "candidate_bound",
    "checked_selection",
    "recent_and_relevant",
]

#: How many fact ids forgotten through one manager it remembers itself (the most recent ones). A
#: manager serving a tenant for weeks must not grow with every forget; an older forgotten fact is
#: kept out by the store's own tombstone (its status is not ``current``), which every answer is checked for.
MAX_FORGOTTEN_IDS = 10_000

#: How many candidates a selection is asked for per fact it may inject: refused facts (drawn from
#: a group the session's view hides, say) must not take the places of eligible ones ranked below
#: them, yet a store holding any number of refused facts must not make a turn read without end.
CANDIDATES_PER_FACT = 4


def candidate_bound(limit: int) -> int:
    """How many facts are examined to inject ``limit``.

    :data:`CANDIDATES_PER_FACT` per place, at most ``MAX_LOOKUP_LIMIT`` (what one lookup returns).
    """
    return min(check_limit(limit) * CANDIDATES_PER_FACT, MAX_LOOKUP_LIMIT)


class RecentIds(Collection[str]):
    """The most recent :data:`MAX_FORGOTTEN_IDS` ids added, oldest dropped first (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a manager is used from several loops' threads
        self._ids: dict[str, None] = {}  # insertion-ordered: the first key is the oldest

    def add(self, item: str) -> None:
        """Add ``item`` as the most recent, dropping the oldest past the bound."""
        with self._lock:
            self._ids.pop(item, None)
            self._ids[item] = None
            while len(self._ids) > max(1, MAX_FORGOTTEN_IDS):
                del self._ids[next(iter(self._ids))]

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._ids))

    def __len__(self) -> int:
        return len(self._ids)


@attrs.frozen(slots=True)
class SelectionRequest:
    """What a selection is asked: the store, the request's scope, query text, the most facts, and when.

    ``limit`` is the most facts injected; ``candidates`` (``limit`` unless given; the engine
    asks :func:`candidate_bound` of it) the most a selection should return, best first. The
    engine examines them in that order and injects the first ``limit`` that may be injected,
    so a refused fact leaves its place to the next one.
    """

    store: MemoryStore
    scope: MemoryScope
    query: str
    limit: int
    at: datetime
    ctx: OpContext
    # Last and defaulted, so that a host's positional construction keeps its meaning.
    candidates: int = attrs.field(default=attrs.Factory(lambda self: self.limit, takes_self=True))


#: A host-replaceable selection: the facts to inject, best first.
MemorySelection = Callable[[SelectionRequest], Awaitable[Sequence[StoredFact]]]


async def recent_and_relevant(request: SelectionRequest) -> Sequence[StoredFact]:
    """The default selection: the store's ``lookup`` for the query, bounded by ``request.candidates``.

    :raises InvalidArgumentError: ``request`` is not a :class:`SelectionRequest` (a host's own
        selection may call this one; given a ``dict`` it raised ``AttributeError``).
    """
    request = require_instance(request, SelectionRequest, "request")
    return await request.store.lookup(
        request.scope, request.query, request.candidates, request.ctx, at=request.at
    )


def checked_selection(
    raw: object,
    scope: MemoryScope,
    limit: int,
    at: datetime,
    forgotten: Collection[str] = (),
    hidden: Callable[[str, int], bool] | None = None,
    *,
    candidates: int | None = None,
) -> tuple[list[StoredFact], list[tuple[str, str]]]:
    """Keep the facts of ``raw`` that may be injected; ``(kept, [(fact id, why dropped)])``.

    ``raw`` is examined in rank order until ``limit`` facts are kept or ``candidates``
    (default :func:`candidate_bound` of ``limit``) were examined: a refused fact is reported
    and the next eligible one takes its place; the facts after the last one examined are not
    read. ``hidden(session, seq)`` names the groups the run's session view hides.
    """
    check_limit(limit)
    examined = candidate_bound(limit) if candidates is None else check_limit(candidates)
    kept: list[StoredFact] = []
    dropped: list[tuple[str, str]] = []
    seen: set[str] = set()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        return [], [("?", f"the selection returned {type(raw).__name__}, not a sequence of StoredFact")]
    # At most ``examined`` facts are looked at (one past it tells there were more): a store full of
    # refused facts, or a sequence whose iterator does not end (a list subclass, say), would hold
    # the run and list every extra fact as a refusal, one diagnostic each.
    try:
        given = listed(raw, examined, "the selection", "facts")
    except ContractViolationError as exc:  # its iteration raised: nothing of it is injected
        return [], [("?", str(exc))]
    if len(given) > examined:
        del given[examined:]
        dropped.append(("?", f"the selection returned more than {examined} facts; the rest was not read"))
    for fact in given:
        if len(kept) >= limit:
            # The places are filled: the rest are spare candidates, neither injected nor reported
            # (the default selection asks for them only to stand in for refused ones).
            break
        if not isinstance(fact, StoredFact):
            dropped.append(("?", f"the selection returned a {type(fact).__name__}, not a StoredFact"))
            continue
        why = None
        if fact.fact_id in seen:
            why = "returned twice"
        elif not scope.sees(fact.scope):
            why = "outside the request's scope"
        elif fact.fact_id in forgotten:
            why = "forgotten"
        elif not fact.current_at(at):
            why = fact.status.value if fact.status.value != "current" else "not valid at the request's time"
        elif (malformed := rejection_reason(fact.fact)) is not None:
            # No store accepts such a fact (over MAX_FACT_BYTES, empty, NUL, not valid Unicode, over
            # MAX_PROVENANCE): whatever the selection or store returned, it is not put into a request.
            why = f"malformed: {malformed}"
        elif hidden is not None and (gone := _hidden_source(fact, hidden)) is not None:
            why = f"its provenance names group {gone}, retracted or cleared from this session's view"
        if why is not None:
            dropped.append((fact.fact_id, why))
            continue
        seen.add(fact.fact_id)
        kept.append(fact)
    return kept, dropped


def _hidden_source(fact: StoredFact, hidden: Callable[[str, int], bool]) -> str | None:
    """The first group of ``fact``'s provenance the run's session view hides, labelled; else ``None``.

    A fact whose provenance names a group of this session that a retraction
    touched or a reset cleared could restate the retracted message, as that
    group's recall excerpt could, so it is left out whole, as recall leaves
    the group out. Provenance in other sessions is not this view's to judge.
    """
    for ref in fact.fact.provenance:
        if hidden(ref.session, ref.seq):
            return ref.label()
    return None
