"""``erasure_status`` in bounded pages (docs/erasure.md, "Erasure records").

A listing is the tenant's finished erasures in the order they completed (its
index: :mod:`.erasure_index`), then its pending ones in the order they
started. One call reads the ``pending`` ledger, at most
:data:`_SCAN_READS` slots of the index (a page or its head) holding at most
:data:`_SCAN_ENTRIES` headers in all, and the full record of each pending
erasure it returns: never the tenant's whole history.

The cursor (``next_after``) is a position, not a record: ``f<slot>.<offset>``
in the index (slot ``n`` is page ``n``, or the head while it has moved to
no page yet: a head that moves keeps its order, so a position in it carries
over to the pages it moved to), then, once the listing reached the pending
ones, ``~<started>.<id hex>``: the last pending one listed. It is opaque to
callers: anything else is refused with :class:`InvalidArgumentError`
(malformed, before anything is read; past the index's end, once read).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs

from .._errors import InvalidArgumentError
from .._ports.erasure import EraseTarget, ErasureRecord, ErasureState
from .._ports.sessions import SessionStore
from .._validators import check_count
from .erasure import load_record
from .erasure_index import tenant_index_head, tenant_index_page
from .erasure_ledger import pending_records
from .lifecycle import Ticket, overlaps

__all__ = [
    "DEFAULT_STATUS_LIMIT",
    "MAX_STATUS_LIMIT",
    "ErasureStatusPage",
    "as_pending",
    "check_status_args",
    "status_page",
]

#: Records one ``erasure_status`` page holds when the caller gives no ``limit``.
DEFAULT_STATUS_LIMIT: Final = 100
#: Records one ``erasure_status`` page may hold (its ``limit`` ceiling).
MAX_STATUS_LIMIT: Final = 1_000
#: Index headers one call examines at most (a target's filter may match few of them).
_SCAN_ENTRIES: Final = 1_024
#: Index slots (pages or the head) one call reads at most.
_SCAN_READS: Final = 32
#: Longest cursor accepted (a pending one holds an erasure id, hex-encoded).
_MAX_CURSOR: Final = 600
_CURSOR: Final = re.compile(
    r"f([1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})(?:~(-?[0-9]{1,20})\.((?:[0-9a-f]{2}){1,256}))?"
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class ErasureStatusPage(tuple[ErasureRecord, ...]):
    """One page of :meth:`HarnessRuntime.erasure_status`: its records, and where the next page starts.

    A tuple of :class:`ErasureRecord` (iterated, indexed and compared as
    one, so code written when ``erasure_status`` returned a plain tuple
    keeps working); ``next_after`` is what to pass as ``after`` for the
    next page, or ``None`` when this page was the last.
    """

    next_after: str | None

    def __new__(
        cls, records: Iterable[ErasureRecord] = (), next_after: str | None = None
    ) -> ErasureStatusPage:
        """A page of ``records`` whose listing continues at ``next_after`` (``None``: the last)."""
        page = super().__new__(cls, records)
        # Set once here; __setattr__ refuses later changes (a page is a value, like the tuple it is).
        page.__dict__["next_after"] = next_after
        return page

    @property
    def records(self) -> tuple[ErasureRecord, ...]:
        """The page's records as a plain tuple."""
        return tuple(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise attrs.exceptions.FrozenInstanceError()

    def __repr__(self) -> str:
        return f"ErasureStatusPage(records={tuple(self)!r}, next_after={self.next_after!r})"


@attrs.frozen(slots=True)
class _Cursor:
    """A parsed cursor: a position in the index (``slot``, ``offset``) and the last pending one listed.

    ``pending_after`` is the (start, id) key of the last pending erasure a
    page listed; ``None`` before the listing reached the pending ones.
    """

    slot: int = 1
    offset: int = 0
    pending_after: tuple[int, str] | None = None


def _micros(record: ErasureRecord) -> int:
    started = record.started_at
    # A time without a zone (never written by the engine) is read as UTC rather than fail the listing.
    started = started if started.tzinfo is not None else started.replace(tzinfo=UTC)
    return (started - _EPOCH) // timedelta(microseconds=1)


#: What a pending erasure whose tombstone is saved says (it stopped before leaving ``pending``). Not
#: "indexed": the index may be the step that failed.
_NOT_LEFT: Final = (
    "its tombstone is saved, but it has not left the pending erasures: its scope is refused until a "
    "resume (agentium erase --resume) takes it out"
)


def as_pending(record: ErasureRecord) -> ErasureRecord:
    """The full record of an erasure still in ``pending``: pending, even once its tombstone is saved.

    It stopped between its tombstone's save and its leaving ``pending``: its
    scope is still refused, so "complete" would tell the operator the fence
    is down when it is not. An erasure's error carrying such a record
    (:func:`.erasure_run.finish`) carries it so too, as this listing shows it.
    """
    if record.state is not ErasureState.COMPLETE:
        return record
    return attrs.evolve(record, state=ErasureState.PENDING, notes=(*record.notes, _NOT_LEFT))


def _pending_key(record: ErasureRecord) -> tuple[int, str]:
    return (_micros(record), record.erasure_id)


def _cursor_text(position: tuple[int, int], pending_after: tuple[int, str] | None) -> str:
    slot, offset = position
    if pending_after is None:
        return f"f{slot}.{offset}"
    started, erasure_id = pending_after
    return f"f{slot}.{offset}~{started}.{erasure_id.encode('utf-8', 'surrogatepass').hex()}"


def check_status_args(after: object, limit: object) -> tuple[_Cursor, int]:
    """The checked cursor and limit of an ``erasure_status`` call; a typed error, nothing read, otherwise."""
    count = check_count(limit, "limit", ceiling=MAX_STATUS_LIMIT)
    if after is None:
        return _Cursor(), count
    bad = InvalidArgumentError(
        "after must be the next_after of an earlier erasure_status page (or None for the first page)"
    )
    if not isinstance(after, str) or len(after) > _MAX_CURSOR:
        raise bad
    parts = _CURSOR.fullmatch(after)
    if parts is None:
        raise bad
    if parts[3] is None:
        return _Cursor(int(parts[1]), int(parts[2])), count
    try:
        erasure_id = bytes.fromhex(parts[4]).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise bad from None
    return _Cursor(int(parts[1]), int(parts[2]), (int(parts[3]), erasure_id)), count


async def status_page(
    ticket: Ticket,
    store: SessionStore,
    tenant: str,
    target: EraseTarget | None,
    cursor: _Cursor,
    limit: int,
) -> ErasureStatusPage:
    """One page of the tenant's erasures (those overlapping ``target``, when given) from ``cursor``.

    The index from the cursor's position first, then the pending erasures
    after the last one listed. An erasure pending when an earlier page listed
    it and finished since is at the index's end by now: passed over there
    (its key is not after the last pending one listed), so none is listed
    twice; one that finished before the listing reached the pending ones is
    listed where it now is, in the index, so none is lost.
    """
    pending = sorted(await pending_records(ticket, store, tenant), key=_pending_key)
    # An erasure that stopped between its tombstone's indexing and its leaving ``pending`` is in
    # both: listed once, among the pending ones (resuming it finishes the removal).
    pending_ids = {r.erasure_id for r in pending}
    last = cursor.pending_after

    def listed_elsewhere(record: ErasureRecord) -> bool:
        return record.erasure_id in pending_ids or (last is not None and _pending_key(record) <= last)

    found: list[ErasureRecord] = []
    position, at_end = await _scan_index(
        ticket, store, tenant, target, cursor, limit, listed_elsewhere, found
    )
    if not at_end:
        return ErasureStatusPage(found, _cursor_text(position, last))
    later = [
        r
        for r in pending
        if (target is None or overlaps(r.target, target)) and (last is None or _pending_key(r) > last)
    ]
    taken = later[: limit - len(found)]
    for header in taken:
        found.append(as_pending(await load_record(ticket, store, header)))
    if len(taken) == len(later):
        return ErasureStatusPage(found, None)
    return ErasureStatusPage(found, _cursor_text(position, _pending_key(taken[-1]) if taken else last))


async def _scan_index(
    ticket: Ticket,
    store: SessionStore,
    tenant: str,
    target: EraseTarget | None,
    cursor: _Cursor,
    limit: int,
    listed_elsewhere: Callable[[ErasureRecord], bool],
    found: list[ErasureRecord],
) -> tuple[tuple[int, int], bool]:
    """Add the index's headers from ``cursor`` to ``found``: where it stopped, and whether at the index's end.

    Stops when the page is full, at the index's end, or when its read or
    header budget is spent.
    """
    head = await tenant_index_head(ticket, store, tenant)
    pages = head.pages or 0
    slot, offset = cursor.slot, cursor.offset
    if slot > pages + 1 or (slot == pages + 1 and offset > len(head.records)):
        raise InvalidArgumentError(
            "after is not a position erasure_status gave for this tenant (past the end of its index)"
        )
    seen: set[str] = set()
    examined, reads = 0, 1
    while slot <= pages:
        if reads >= _SCAN_READS or examined >= _SCAN_ENTRIES:
            return (slot, offset), False
        reads += 1
        entries = (await tenant_index_page(ticket, store, tenant, slot)).records
        if offset >= len(entries):
            # A position in a head that has since moved to pages carries over to the next one.
            examined += len(entries)
            slot, offset = slot + 1, offset - len(entries)
            continue
        stop = _take(entries, offset, target, limit, _SCAN_ENTRIES - examined, listed_elsewhere, seen, found)
        examined += stop - offset
        if stop < len(entries):
            return (slot, stop), False
        slot, offset = slot + 1, 0
        if len(found) >= limit:
            return (slot, 0), slot > pages and not head.records
    entries = head.records
    if len(found) < limit and examined < _SCAN_ENTRIES:
        offset = _take(
            entries, offset, target, limit, _SCAN_ENTRIES - examined, listed_elsewhere, seen, found
        )
    return (slot, offset), offset >= len(entries)


def _take(
    entries: Sequence[ErasureRecord],
    start: int,
    target: EraseTarget | None,
    limit: int,
    budget: int,
    listed_elsewhere: Callable[[ErasureRecord], bool],
    seen: set[str],
    found: list[ErasureRecord],
) -> int:
    """Add the wanted ``entries`` from ``start`` to ``found`` until it holds ``limit``; where it stopped."""
    i = start
    while i < len(entries) and len(found) < limit and i - start < budget:
        record = entries[i]
        i += 1
        if record.erasure_id in seen or listed_elsewhere(record):
            continue
        if target is None or overlaps(record.target, target):
            seen.add(record.erasure_id)
            found.append(record)
    return i
