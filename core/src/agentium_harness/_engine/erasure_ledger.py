"""Where the erasure records live: the session store, under keys no identity can address.

Every runtime has a session store, so the records need no new port: each is
a snapshot whose ``ledger`` field holds them, saved with the store's own
compare-and-set, digest and durability. The keys are
``SessionKey(ERASURE_RECORDS_TENANT, <tenant id>, <name>)``:
:data:`~agentium_harness._scope.ERASURE_RECORDS_TENANT` begins with U+FFFF
and no :class:`~agentium_harness._scope.VerifiedIdentity` may name it, the
tenant's own id fills the user slot exactly (so the mapping is injective),
and a tenant erasure of any real tenant never reaches them. Per tenant:

- ``pending``: the headers of its erasures under way. Every run, append and
  maintenance operation reads it first and is refused on a covered session
  (:func:`refuse_if_erasing`), in any process sharing the store, so no run
  ever sees half-erased history; it is usually absent (one cheap read).
- ``e-<erasure id>``: one erasure's full record, progress and all; once
  complete, its tombstone.
- ``j-<erasure id>``: its header and the revision of ``pending`` it joined
  (:func:`save_joined`, :func:`joined_after`, :func:`joined_since`), for the
  commit fence and the erasure fence around other writes. A key
  of its own: earlier versions, which decode every record strictly, never
  read it, so the records they do read keep the bytes they wrote.
- ``index``, ``index-<n>``, ``by-<scope>``, ``by-<scope>-<n>``: the
  tenant's finished erasures, in bounded pages, and ``by-<scope>-w<n>``,
  the mark of a scope's pages 1..n (see :mod:`.erasure_index`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Final

from .._errors import (
    ContractViolationError,
    ErasureInProgressError,
    SessionConflictError,
    SnapshotCorruptError,
)
from .._observe.spans import current_span_event
from .._ports.erasure import ErasureLedger, ErasureRecord
from .._ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot, seal_snapshot, verify_snapshot
from .._scope import ERASURE_RECORDS_TENANT, Scope, SessionKey
from .._validators import exact_int, shown_number
from .lifecycle import Ticket, covers

__all__ = [
    "as_they_ran",
    "index_key",
    "joined_after",
    "joined_key",
    "joined_since",
    "ledger_of",
    "load_ledger",
    "pending_key",
    "pending_records",
    "record_key",
    "refuse_if_erasing",
    "save_joined",
    "save_ledger",
    "update_ledger",
    "update_ledger_from",
]

_log = logging.getLogger("agentium.engine")

#: Compare-and-set attempts of one ledger update before it gives up (another erasure kept winning).
_ATTEMPTS = 16


def _key(tenant: str, name: str) -> SessionKey:
    return SessionKey(ERASURE_RECORDS_TENANT, tenant, name)


@functools.lru_cache(maxsize=1024)
def pending_key(tenant: str) -> SessionKey:
    """The key of the tenant's erasures under way (every operation's fence reads it: made once)."""
    return _key(tenant, "pending")


def index_key(tenant: str, name: str = "index") -> SessionKey:
    """The key of the tenant's index of finished erasures (or of another of its pages, by ``name``)."""
    return _key(tenant, name)


def record_key(tenant: str, erasure_id: str) -> SessionKey:
    """The key of one erasure's full record."""
    return _key(tenant, f"e-{erasure_id}")


def joined_key(tenant: str, erasure_id: str) -> SessionKey:
    """The key of one erasure's join record (its header, and the ``pending`` revision it joined after)."""
    return _key(tenant, f"j-{erasure_id}")


async def save_joined(
    ticket: Ticket, store: SessionStore, record: ErasureRecord, revision: int | None
) -> None:
    """Keep where ``record``'s header joined ``pending``: after ``revision`` (``None``: none was stored)."""
    key = joined_key(record.target.tenant_id, record.erasure_id)
    joined = ErasureLedger((header(record),), joined_after=0 if revision is None else revision)
    await update_ledger(ticket, store, key, lambda _: joined)


async def joined_after(ticket: Ticket, store: SessionStore, record: ErasureRecord) -> int | None:
    """The ``pending`` revision ``record``'s erasure joined after; ``None`` when not known.

    Not known: an erasure an earlier version started, or one that stopped
    between joining and keeping it (its resume cannot tell any more), or
    one whose join record is damaged — it does not decode, or holds another
    erasure's header or not exactly one (a WARNING names it; the record is
    left as it is). Damaged, it is read as absent rather than raised: the
    fences then assume the worst of that erasure alone, where an error
    would leave a fact or document written meanwhile standing unchecked.
    """
    key = joined_key(record.target.tenant_id, record.erasure_id)
    try:
        revision, joined = await load_ledger(ticket, store, key)
    except SnapshotCorruptError:
        _damaged(record)
        return None
    if revision is None:
        return None  # absent: what the caller assumes then is the worst
    if len(joined.records) != 1 or joined.records[0].erasure_id != record.erasure_id:
        # The join wrote exactly this erasure's header there: anything else is damage, said as such.
        _damaged(record)
        return None
    return joined.joined_after


def _damaged(record: ErasureRecord) -> None:
    _log.warning(
        "the join record of erasure %s is damaged (it was left as it is); the erasure is taken to "
        "have joined the ledger at any time",
        record.erasure_id,
    )
    # Read by the fences inside a turn's, an append's or a memory write's span (no erasure span): the
    # event goes on the span current there, with no id (the WARNING names the erasure).
    current_span_event("agentium.erasure.join_record_damaged")


async def joined_since(
    ticket: Ticket, store: SessionStore, record: ErasureRecord, seen: int | None
) -> bool | None:
    """Whether finished ``record``'s erasure joined ``pending`` after a read that saw it at ``seen``.

    ``seen`` is the revision of ``pending`` the read saw (``None``: absent),
    a read that found no erasure covering what it guards (else it refused).
    ``None`` when not known (:func:`joined_after`): the caller decides what
    an erasure that may have joined at any time means.

    Exact otherwise. The erasure kept the revision its header was added to,
    R (0 for a ledger not yet written), and the join, a compare-and-set on
    R, made the ledger's very next revision. The ledger's revisions only
    rise (a save returns one above the revision it replaced, and the row is
    never removed: a finished erasure leaves it empty; no erasure reaches
    the reserved tenant), so no read ever saw a revision between R and the
    join: ``seen`` <= R means the read came before the join; ``seen`` > R
    that it came after, and then the erasure, covering and no longer pending
    (the read would have refused), had finished. No clock is read: the
    revisions are the store's.
    """
    joined = await joined_after(ticket, store, record)
    if joined is None:
        return None
    # An absent ledger (None) is before every revision, and a join on an absent ledger (0) the first.
    return joined >= (0 if seen is None else seen)


async def load_ledger(
    ticket: Ticket, store: SessionStore, key: SessionKey, operation: str = "session load"
) -> tuple[int | None, ErasureLedger]:
    """The ledger at ``key`` and its revision (``None`` and empty when absent), checked like a snapshot."""
    return ledger_of(key, await ticket.call(operation, lambda ctx: store.load(key, ctx)))


#: What an absent ledger reads as (frozen: one for every fence that finds none, built once).
_NO_LEDGER: Final = ErasureLedger()


def ledger_of(key: SessionKey, stored: object) -> tuple[int | None, ErasureLedger]:
    """What the store answered for the ledger at ``key``, checked: its revision and the ledger."""
    if stored is None:
        return None, _NO_LEDGER
    if not isinstance(stored, StoredSnapshot) or not isinstance(stored.snapshot, SessionSnapshot):
        raise ContractViolationError(
            f"session store returned {type(stored).__name__}, not a StoredSnapshot or None"
        )
    verify_snapshot(key, stored.snapshot)
    ledger = stored.snapshot.ledger
    if ledger is None or stored.snapshot.resident:
        raise SnapshotCorruptError(
            f"the erasure records at {key.session!r} of tenant {key.user!r} are not an erasure ledger; "
            "the stored data is damaged and was left as it is"
        )
    revision = stored.revision if type(stored.revision) is int else exact_int(stored.revision)
    if revision is None or revision < 1:
        # Exact: the commit fence compares it with the one seen at load, and a subclass's own
        # ``__eq__`` could say no erasure began or ended meanwhile.
        raise ContractViolationError(
            f"session store returned revision {shown_number(stored.revision)} for the erasure records"
        )
    return revision, ledger


async def update_ledger(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    change: Callable[[ErasureLedger], ErasureLedger],
) -> ErasureLedger:
    """Apply ``change`` to the ledger at ``key`` with compare-and-set, retrying on a conflict; the result.

    ``change`` gets the current ledger and returns the new one; returning it
    unchanged writes nothing.
    """
    return (await update_ledger_from(ticket, store, key, change))[1]


async def update_ledger_from(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    change: Callable[[ErasureLedger], ErasureLedger],
) -> tuple[int | None, ErasureLedger]:
    """:func:`update_ledger`, also returning the revision the written ledger replaced (``None``: absent).

    The revision is the one the successful compare-and-set was made on, so the
    ledger's next revision is the write's: an erasure's join keeps it
    (:func:`save_joined`). Unchanged, nothing written: the revision read.
    """
    for _ in range(_ATTEMPTS):
        revision, ledger = await load_ledger(ticket, store, key)
        new = change(ledger)
        if new == ledger and revision is not None:
            return revision, ledger
        try:
            await save_ledger(ticket, store, key, new, revision)
        except SessionConflictError:
            continue  # another erasure of the tenant wrote first: apply the change to what it wrote
        return revision, new
    raise SessionConflictError(
        f"the erasure records of tenant {key.user!r} kept changing under {_ATTEMPTS} attempts to update "
        f"{key.session!r}; try again"
    )


async def save_ledger(
    ticket: Ticket, store: SessionStore, key: SessionKey, ledger: ErasureLedger, revision: int | None
) -> None:
    """Save ``ledger`` at ``key`` if it is still at ``revision``, else :class:`SessionConflictError`."""
    scope = Scope(key.tenant, key.user, key.session)
    snapshot = seal_snapshot(SessionSnapshot(memory_scope=scope, ledger=ledger))
    await ticket.call("session save", lambda ctx: store.save(key, snapshot, revision, ctx))


async def pending_records(
    ticket: Ticket, store: SessionStore, tenant: str, operation: str = "session load"
) -> tuple[ErasureRecord, ...]:
    """The headers of the tenant's erasures under way (``operation`` names the read in spans)."""
    _, ledger = await load_ledger(ticket, store, pending_key(tenant), operation)
    return ledger.records


def refuse_if_erasing(key: SessionKey, pending: object) -> None:
    """Raise :class:`ErasureInProgressError` if ``pending`` holds an erasure covering session ``key``.

    ``pending`` is what the store answered, just now, for the tenant's
    erasures under way (:func:`pending_key`); it is checked like any ledger.
    It is read from the store on every operation (see :mod:`.load`), never
    from this process's memory, so an erasure that another process
    (``agentium erase``) started, or that stopped part way before a restart,
    refuses the operation just the same.
    """
    _, ledger = ledger_of(pending_key(key.tenant), pending)
    for record in ledger.records:
        if covers(record.target, key):
            raise ErasureInProgressError(
                f"session {key.session!r} is being erased ({record.target.describe()}, erasure "
                f"{record.erasure_id}); it is refused until the erasure completes "
                "(agentium erase --resume); nothing was done",
                record.erasure_id,
            )


def header(record: ErasureRecord) -> ErasureRecord:
    """The record without its per-store and per-session detail (what ``pending`` and ``index`` keep)."""
    return ErasureRecord(
        erasure_id=record.erasure_id,
        kind=record.kind,
        target=record.target,
        reason=record.reason,
        operator=record.operator,
        state=record.state,
        started_at=record.started_at,
        completed_at=record.completed_at,
        statement=record.statement,
        stores=record.stores,
        notes=record.notes,
    )


async def as_they_ran(
    ticket: Ticket, store: SessionStore, records: tuple[ErasureRecord, ...]
) -> tuple[ErasureRecord, ...]:
    """``records`` (erasures covering one session: they ran one after another) in the order they ran.

    By the ``pending`` revision each joined after (its join record, one
    small read each): the store's, exact whatever the clocks of the
    processes that completed them said. When one has none (an earlier
    version's erasure, or a damaged record), by their clocks, as before.
    """
    by_clock = tuple(sorted(records, key=lambda r: r.completed_at or r.started_at))
    if len(records) < 2:
        return by_clock
    joined = {r.erasure_id: await joined_after(ticket, store, r) for r in records}
    if any(revision is None for revision in joined.values()):
        return by_clock
    return tuple(sorted(records, key=lambda r: joined[r.erasure_id] or 0))
