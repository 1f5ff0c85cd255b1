"""Two calls resuming one erasure at once: the one that finds it completed elsewhere stops.

Calling ``erase`` again with a pending erasure's target resumes it, so two
processes (or an operator's ``--resume`` while the first call still runs)
can carry out the same erasure together. Once one completes it the fence is
down and writes of the scope are acknowledged again; the other must neither
erase them nor save its progress over the tombstone. :func:`finished_elsewhere`
is read before each store call that deletes; :func:`save_progress` saves
progress by compare-and-set, never over the tombstone.
"""

from __future__ import annotations

from .._ports.erasure import ErasureLedger, ErasureRecord, ErasureState
from .._ports.sessions import SessionStore
from .erasure_ledger import load_ledger, pending_records, record_key, update_ledger
from .lifecycle import Ticket

__all__ = ["finished_elsewhere", "save_progress"]


class _CompletedMeanwhile(Exception):
    """Raised inside a ledger update: the stored record is this erasure's tombstone already."""

    def __init__(self, record: ErasureRecord) -> None:
        super().__init__(record.erasure_id)
        self.record = record


async def save_progress(ticket: Ticket, store: SessionStore, record: ErasureRecord) -> ErasureRecord | None:
    """Save ``record``'s progress unless another process completed it: then its tombstone, kept as it is.

    Compare-and-set on the record's key: progress saved over the tombstone
    made a completed erasure read ``pending`` while out of the pending ledger.
    """

    def put(ledger: ErasureLedger) -> ErasureLedger:
        for saved in ledger.records:
            if saved.erasure_id == record.erasure_id and saved.state is ErasureState.COMPLETE:
                raise _CompletedMeanwhile(saved)
        return ErasureLedger((record,))

    try:
        await update_ledger(ticket, store, record_key(record.target.tenant_id, record.erasure_id), put)
    except _CompletedMeanwhile as done:
        return done.record
    return None


async def finished_elsewhere(
    ticket: Ticket, store: SessionStore, record: ErasureRecord
) -> ErasureRecord | None:
    """The tombstone when another process (a concurrent resume) completed this erasure, else ``None``.

    Its completion lifted the fence, so writes of the scope may have landed
    since: acknowledged after the erasure said ``complete``, they are not its
    to remove. Read before every store call that deletes, so a call that
    resumed the same erasure stops instead of erasing them (and of saying the
    erasure stays pending); :func:`save_progress` keeps its tombstone.
    """
    pending = await pending_records(ticket, store, record.target.tenant_id, "erasure progress")
    if any(r.erasure_id == record.erasure_id for r in pending):
        return None
    _, ledger = await load_ledger(ticket, store, record_key(record.target.tenant_id, record.erasure_id))
    saved = ledger.records[0] if ledger.records else None
    return saved if saved is not None and saved.state is ErasureState.COMPLETE else None
