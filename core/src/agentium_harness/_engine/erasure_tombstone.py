"""An erasure's last step: its record becomes the tombstone, joins the index and leaves ``pending``.

Step 6 of :mod:`.erasure` (docs/erasure.md), apart so that module stays
short: the tombstone is saved (never over another call's, :func:`.erasure_resume.save_progress`),
indexed (:mod:`.erasure_index`), and only then taken out of the tenant's
``pending`` ledger, which lifts the fence.
"""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

from .._errors import ErasureIncompleteError
from .._ports.erasure import ErasureLedger, ErasureRecord, ErasureState
from .._ports.sessions import SessionStore
from .._text import error_text
from .erasure_index_add import add_finished
from .erasure_ledger import pending_key, pending_records, update_ledger
from .erasure_resume import Saved, Tried, save_progress
from .lifecycle import Ticket

__all__ = ["complete"]


def _nothing_there(done: ErasureRecord) -> ErasureRecord:
    """``done`` with a note when nothing of the target was stored (said of the tombstone as written)."""
    if any(s.count for s in done.sessions) or any(e.counts for e in done.stores):
        return done
    return attrs.evolve(
        done,
        notes=(*done.notes, "nothing of the target was stored: the tombstone records that nothing was there"),
    )


async def complete(
    ticket: Ticket,
    store: SessionStore,
    record: ErasureRecord,
    base: ErasureRecord | None = None,
    tried: Tried | None = None,
) -> Saved:
    """Make ``record`` the tombstone: saved complete, in the index, out of ``pending`` (in that order).

    ``base`` is the record as stored when this call last saved or loaded
    it (:func:`.erasure_resume.save_progress` adds what another call saved since).
    The result says when the tombstone is another call's, found saved
    (``elsewhere``): that call's completion lifted the fence before this
    one's end, so the caller checks what the target holds since. ``tried``
    is the calling call's (its progress saves'): the tombstone drops its note.
    """
    done, elsewhere = record, False
    if record.state is not ErasureState.COMPLETE:
        # Never over another call's tombstone: a resume that loaded the record pending (every store
        # done: no store call looked again) may come after another completed it. That one stands.
        saved = await save_progress(
            ticket,
            store,
            attrs.evolve(record, state=ErasureState.COMPLETE, completed_at=datetime.now(UTC)),
            record if base is None else base,
            _nothing_there,
            tried=tried,
        )
        done, elsewhere = saved.record, saved.elsewhere

    def remove(ledger: ErasureLedger) -> ErasureLedger:
        return ErasureLedger(tuple(r for r in ledger.records if r.erasure_id != done.erasure_id))

    # The tombstone is saved and indexed before the fence goes: a crash in between leaves the
    # erasure pending (and its scope fenced) until a resume finishes the removal.
    await add_finished(ticket, store, done)
    try:
        await update_ledger(ticket, store, pending_key(record.target.tenant_id), remove)
    except Exception as exc:
        if await _still_pending(ticket, done, store, exc):
            raise  # it did not land: the erasure stays pending, as the caller says
    return Saved(done, elsewhere)


async def _still_pending(ticket: Ticket, done: ErasureRecord, store: SessionStore, exc: Exception) -> bool:
    """Whether ``done``'s erasure is still in ``pending`` after its removal raised ``exc``, read back once.

    The removal's write may have landed though it raised (a reply lost on
    the way back): out of ``pending``, the erasure is complete. When the
    read fails too, :class:`ErasureIncompleteError` says the outcome is not
    known, carrying the tombstone (saved and indexed): "it stays pending"
    could be false.
    """
    tenant = done.target.tenant_id
    try:
        pending = await pending_records(ticket, store, tenant, "erasure pending read back")
    except Exception as again:
        raise ErasureIncompleteError(
            f"erasure {done.erasure_id} of {done.target.describe()} is complete (its tombstone is saved and "
            f"indexed), but taking it out of the pending erasures failed ({error_text(exc)}) and reading "
            f"them back failed too ({error_text(again)}): whether its scope is still refused is not known. "
            "erasure_status (agentium erase --status) lists it as pending if it still is; resuming it "
            "(agentium erase --resume) then lifts the fence",
            done,
        ) from exc
    return any(r.erasure_id == done.erasure_id for r in pending)
