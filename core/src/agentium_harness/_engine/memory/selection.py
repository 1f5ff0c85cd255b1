"""Which facts are injected into a request: a host-replaceable selection, checked by the engine (R36, R38).

A :data:`MemorySelection` receives a :class:`SelectionRequest` and returns
stored facts, best first. The default, :func:`recent_and_relevant`, asks the
store's ``lookup`` (facts matching more of the query's words first, then
the most recent), bounded by the request's ``limit``. Whatever a selection
returns, :func:`checked_selection` keeps only facts that may be injected —
current, valid at the request's time, visible to its scope, not forgotten
through this manager, acceptable to every store (:func:`rejection_reason`:
within ``MAX_FACT_BYTES``, not empty, valid text), within the limit — and
reports every other one with why.
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
    "MAX_FORGOTTEN_IDS",
    "MemorySelection",
    "RecentIds",
    "SelectionRequest",
    "checked_selection",
    "recent_and_relevant",
]

#: How many fact ids forgotten through one manager it remembers itself (the most recent ones). A
#: manager serving a tenant for weeks must not grow with every forget; an older forgotten fact is
#: kept out by the store's own tombstone (its status is not ``current``), which every answer is checked for.
MAX_FORGOTTEN_IDS = 10_000


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
    """What a selection is asked: the store, the request's scope, query text, the most facts, and when."""

    store: MemoryStore
    scope: MemoryScope
    query: str
    limit: int
    at: datetime
    ctx: OpContext


#: A host-replaceable selection: the facts to inject, best first.
MemorySelection = Callable[[SelectionRequest], Awaitable[Sequence[StoredFact]]]


async def recent_and_relevant(request: SelectionRequest) -> Sequence[StoredFact]:
    """The default selection: the store's ``lookup`` for the query, bounded by ``request.limit``.

    :raises InvalidArgumentError: ``request`` is not a :class:`SelectionRequest` (a host's own
        selection may call this one; given a ``dict`` it raised ``AttributeError``).
    """
    request = require_instance(request, SelectionRequest, "request")
    return await request.store.lookup(request.scope, request.query, request.limit, request.ctx, at=request.at)


def checked_selection(
    raw: object, scope: MemoryScope, limit: int, at: datetime, forgotten: Collection[str] = ()
) -> tuple[list[StoredFact], list[tuple[str, str]]]:
    """Keep the facts of ``raw`` that may be injected; ``(kept, [(fact id, why dropped)])``."""
    check_limit(limit)
    kept: list[StoredFact] = []
    dropped: list[tuple[str, str]] = []
    seen: set[str] = set()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        return [], [("?", f"the selection returned {type(raw).__name__}, not a sequence of StoredFact")]
    # At most MAX_LOOKUP_LIMIT facts are looked at (one past it tells there were more): a sequence
    # whose iterator does not end (a list subclass, say) would hold the run and list every extra
    # fact as a refusal, one diagnostic each.
    try:
        given = listed(raw, MAX_LOOKUP_LIMIT, "the selection", "facts")
    except ContractViolationError as exc:  # its iteration raised: nothing of it is injected
        return [], [("?", str(exc))]
    if len(given) > MAX_LOOKUP_LIMIT:
        del given[MAX_LOOKUP_LIMIT:]
        dropped.append(
            ("?", f"the selection returned more than {MAX_LOOKUP_LIMIT} facts; the rest was not read")
        )
    for fact in given:
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
        elif len(kept) >= limit:
            why = f"over the selection limit of {limit}"
        if why is not None:
            dropped.append((fact.fact_id, why))
            continue
        seen.add(fact.fact_id)
        kept.append(fact)
    return kept, dropped
