"""Erasure: the one way committed data leaves Agentium (docs/erasure.md).

An erasure of an :class:`~agentium_harness._ports.erasure.EraseTarget` runs
in this order, and every step is durable before the next begins:

1. **Checks**, before anything is written: a reason, an operator
   attestation whose tenant is the target's, and every configured store
   declaring ``erasure`` (a store that cannot erase refuses the whole
   erasure: nothing is removed anywhere).
2. **The record** (:mod:`.erasure_ledger`): the erasure's header joins the
   tenant's ``pending`` ledger, which every run, append and maintenance
   operation reads first and is refused by; where it joined (the ledger's
   revision it was added to, for the commit fence) and its full record are saved.
   From here a crash leaves the record, and the next call (or
   ``agentium erase --resume``) completes it.
3. **Late writes settle**: calls of the scope this process walked away from
   past their deadline (:class:`~.lifecycle.LateCalls`) and background
   summary updates of the scope are waited for, so a write still in flight
   cannot land after the erase and bring an erased group back. If one is
   still running at the bound, the erasure stops here (pending) and says so.
4. **Each store erases** — recall, memory, archive, session store — in
   bounded calls until it reports ``complete``; the record keeps the
   progress after every call. Every report is checked
   (:func:`.erasure_reports.check_report`: a store reporting a group outside
   the target, a seq no group has, a digest or a field out of the record's
   form or bounds, or ``partial`` without progress, is a contract violation).
5. **Verification**: every store is asked again (a dry run) whether it
   still holds anything of the target; what a late write left is erased
   again, a few rounds at most.
6. **The tombstone**: the record becomes ``complete`` (counts, seq ranges and
   digests, never content; when, why, by whom), joins the tenant's
   ``index`` and leaves ``pending`` (:mod:`.erasure_tombstone`).

A groups target (retention, a forgotten fact's sources) also marks the
groups erased in the session's snapshot (:func:`mark_erased`), so summaries,
reads and the recall index's catch-up pass over them.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from .._errors import (
    CapabilityError,
    ContractViolationError,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureRefusedError,
    InvalidArgumentError,
)
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    MAX_ERASURE_REASON_BYTES,  # defined with the record, whose decode holds stored reasons to it too
    EraseLevel,
    EraseStatus,
    EraseTarget,
    ErasureKind,
    ErasureLedger,
    ErasureRecord,
    ErasureState,
)
from .._ports.sessions import SessionStore
from .._scope import ERASURE_RECORDS_TENANT, SessionKey, VerifiedIdentity, require_identity
from .._text import error_text
from .._validators import lone_surrogate_at
from .erasure_ledger import (
    header,
    load_ledger,
    pending_key,
    pending_records,
    record_key,
    save_joined,
    update_ledger_from,
)
from .erasure_reports import check_report, merge_report, merge_sessions, warn_unvouched
from .erasure_resume import (
    Saved,
    Stray,
    Tried,
    finished_elsewhere,
    progress_over,
    save_progress,
    stored_record,
)
from .erasure_scrub import defers_scrub
from .lifecycle import LateScope, Ticket, covers, overlaps

__all__ = [
    "MAX_ERASURE_REASON_BYTES",
    "ErasureResult",
    "OperatorAttestation",
    "carry_out",
    "still_held",
    "check_request",
    "pending_for",
    "plan",
    "start",
]

#: Rounds of "ask every store again, erase what is left" before an erasure gives up.
_VERIFY_ROUNDS: Final = 3
#: Items one dry run counts per store at most (the report then says ``partial``: at least that many).
_PLAN_ITEMS: Final = 100_000

Stores = Sequence[tuple[str, Any]]


def _text(value: object, name: str, *, required: bool) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}; nothing was erased")
    if required and not value.strip():
        raise InvalidArgumentError(f"an erasure needs a {name}: say why it is done; nothing was erased")
    if lone_surrogate_at(value) is not None or "\x00" in value:
        raise InvalidArgumentError(f"{name} is not valid text; nothing was erased")
    if len(value.encode("utf-8")) > MAX_ERASURE_REASON_BYTES:
        raise InvalidArgumentError(
            f"{name} is longer than {MAX_ERASURE_REASON_BYTES} UTF-8 bytes; shorten it. Nothing was erased"
        )
    return value


def _identity(value: object) -> VerifiedIdentity:
    return require_identity(value)


@attrs.frozen(slots=True)
class OperatorAttestation:
    """Who asks for an erasure: an operator the host verified, acting within one tenant.

    ``operator`` is a :class:`~agentium_harness._scope.VerifiedIdentity` (its
    tenant is the one the operator may erase in; its user names the
    operator; ``verified_by`` how the host verified them). ``statement``
    (optional, at most 1,024 bytes) is the host's reference for the request
    — a ticket, a data-subject request id. Both go into the tombstone.
    """

    operator: VerifiedIdentity = attrs.field(converter=_identity)
    statement: str = attrs.field(default="")

    @statement.validator
    def _statement(self, attribute: attrs.Attribute[str], value: object) -> None:
        _text(value, "statement", required=False)


@attrs.frozen(slots=True)
class ErasureResult:
    """What an erasure (or a dry run) did: its record — the tombstone once ``complete`` — and notes.

    ``resumed`` says the call completed an erasure an earlier call had
    started and not finished.
    """

    record: ErasureRecord
    resumed: bool = False
    notes: tuple[str, ...] = ()

    @property
    def state(self) -> ErasureState:
        """``planned`` (a dry run), ``pending`` or ``complete``."""
        return self.record.state

    @property
    def tombstone(self) -> ErasureRecord | None:
        """The record, once the erasure is complete."""
        return self.record if self.record.state is ErasureState.COMPLETE else None


def check_request(
    target: object, reason: object, attestation: object, *, levels: Sequence[EraseLevel] = ()
) -> tuple[EraseTarget, str, OperatorAttestation]:
    """The request's parts, checked before anything is admitted or written; a typed error otherwise.

    ``levels`` (when given) are the target levels the caller accepts.
    """
    if not isinstance(target, EraseTarget):
        raise InvalidArgumentError(
            f"erase takes an EraseTarget (EraseTarget.session/user/tenant), got {type(target).__name__}; "
            "nothing was erased"
        )
    if levels and target.level not in levels:
        raise InvalidArgumentError(
            f"this operation erases {', '.join(lv.value for lv in levels)} targets, not "
            f"{target.level.value}; nothing was erased"
        )
    checked_reason = _text(reason, "reason", required=True)
    if not isinstance(attestation, OperatorAttestation):
        raise InvalidArgumentError(
            f"an erasure needs an OperatorAttestation (who asks, verified by the host), got "
            f"{type(attestation).__name__}; nothing was erased"
        )
    operator = attestation.operator
    if target.tenant_id == ERASURE_RECORDS_TENANT or target.tenant_id != operator.tenant:
        raise ErasureRefusedError(
            f"{target.describe()} is outside tenant {operator.tenant!r}, the operator's: an operator "
            "erases only within their own tenant; nothing was erased"
        )
    return target, checked_reason, attestation


def check_capable(stores: Stores) -> None:
    """Refuse the whole erasure (typed, nothing written) when a configured store cannot erase."""
    unable = [
        f"{role} ({type(store).__name__})"
        for role, store in stores
        if not getattr(capabilities_of(store), "erasure", False)
    ]
    if unable:
        raise CapabilityError(
            f"the {', '.join(unable)} does not declare erasure, so the target cannot be erased everywhere; "
            "nothing was erased. Use stores that can erase, or remove that store from the runtime's config"
        )


def new_record(
    target: EraseTarget, reason: str, attestation: OperatorAttestation, kind: ErasureKind, state: ErasureState
) -> ErasureRecord:
    """A fresh record for ``target``, with a random id (never derived from the target or the reason)."""
    return ErasureRecord(
        erasure_id=secrets.token_hex(12),
        kind=kind,
        target=target,
        reason=reason,
        operator=attestation.operator,
        state=state,
        started_at=datetime.now(UTC),
        statement=attestation.statement,
    )


# -- the steps -------------------------------------------------------------------------------------


def _erase_call(
    store: Any, target: EraseTarget, dry_run: bool, max_items: int
) -> Callable[[OpContext], Awaitable[object]]:
    """One store's ``erase`` as a bounded call (:meth:`.lifecycle.Ticket.call`) makes it.

    A real one leaves the clean-up of a store's file to :func:`.erasure_scrub.scrub_files`
    when the store can (once per file, after every store on it erased).
    """
    deferred = not dry_run and defers_scrub(store)

    def call(ctx: OpContext) -> Awaitable[object]:
        result: Awaitable[object]
        if deferred:
            result = store.erase(target, ctx, dry_run=False, max_items=max_items, scrub=False)
        else:
            result = store.erase(target, ctx, dry_run=dry_run, max_items=max_items)
        return result

    return call


async def plan(ticket: Ticket, stores: Stores, record: ErasureRecord) -> ErasureRecord:
    """A dry run: every store says what it would remove (one bounded call each); nothing is written."""
    for role, store in stores:
        raw = await ticket.call(
            f"{role} erase (dry run)", _erase_call(store, record.target, True, _PLAN_ITEMS)
        )
        report = check_report(raw, record.target, role, _PLAN_ITEMS, True)
        record = merge_report(record, role, type(store).__name__, report)
    return record


async def pending_for(
    ticket: Ticket, store: SessionStore, target: EraseTarget, kind: ErasureKind
) -> ErasureRecord | None:
    """The pending erasure an erasure of ``target`` would resume (same target and kind), or ``None``.

    Raises :class:`ErasureInProgressError` when a pending erasure of an
    overlapping target would refuse it. Reads only: a dry run asks it too, so
    that it reports what a real run would do.
    """
    for pending in await pending_records(ticket, store, target.tenant_id):
        if pending.target == target and pending.kind is kind:
            return pending
        if overlaps(pending.target, target):
            raise ErasureInProgressError(
                f"erasure {pending.erasure_id} of {pending.target.describe()} is still pending and overlaps "
                f"{target.describe()}; finish it first (agentium erase --resume). Nothing was erased",
                pending.erasure_id,
            )
    return None


async def start(
    ticket: Ticket,
    store: SessionStore,
    target: EraseTarget,
    reason: str,
    attestation: OperatorAttestation,
    kind: ErasureKind,
    before_write: Callable[[], None] | None = None,
) -> tuple[ErasureRecord, bool]:
    """The pending record of this erasure, written first: a new one, or the one an earlier call left.

    An unfinished erasure of the same target and kind is resumed (its own
    reason and operator stand); one of an overlapping target refuses this one.
    ``before_write`` is called right before the fence is written, once the
    pending erasures were read and checked (from then the erasure may be
    pending).
    """
    tenant = target.tenant_id
    unfinished = await pending_for(ticket, store, target, kind)
    if unfinished is not None:
        return await load_record(ticket, store, unfinished), True
    record = new_record(target, reason, attestation, kind, ErasureState.PENDING)

    def join(ledger: ErasureLedger) -> ErasureLedger:
        if any(other.erasure_id == record.erasure_id for other in ledger.records):
            # An earlier attempt's write landed though the store answered a conflict (its answer
            # lost, another writer's revision read back on top): joined already, nothing to write.
            # Not a rival "started meanwhile": refused so, the erasure stayed pending unsaid. The
            # revision kept is the one read, at or after the join's: the same for every read an
            # erasure fence asks about (one in between saw the header pending, and was refused).
            return ledger
        # Checked again on what is stored now: another process may have just started one.
        for other in ledger.records:
            if overlaps(other.target, target):
                raise ErasureInProgressError(
                    f"erasure {other.erasure_id} of {other.target.describe()} started meanwhile and overlaps "
                    f"{target.describe()}; nothing was erased",
                    other.erasure_id,
                )
        # Right before the write (its read and checks done: a read failing wrote nothing); called
        # again by each attempt after a conflict, which may have landed (then found above).
        if before_write is not None:
            before_write()
        return ErasureLedger((*ledger.records, header(record)))

    # The fence first: from here every run on the scope is refused, in every process.
    joined, _ = await update_ledger_from(ticket, store, pending_key(tenant), join)
    try:
        # Where the header joined, for the commit fence (.commit_fence), before anything is erased.
        await save_joined(ticket, store, record, joined)
        # Never over a tombstone: a resume from the header may have completed it already (the
        # inventory's save then finds that tombstone and erases nothing under this erasure). Nor over
        # a resume's progress: it is kept (this record adds nothing to it).
        await save_progress(ticket, store, record, base=record)
    except Exception as exc:
        # Pending from here (its header fences the scope; a resume starts from the header). A resume
        # may have saved its progress first (what made this save fail): the record as stored now.
        stored, unread = await stored_record(ticket, store, record)
        if stored is not None and stored.state is ErasureState.COMPLETE:
            state = "a resume completed it meanwhile (the record is its tombstone), and whether it is still "
            state += "pending, its scope refused, is not known (erasure_status shows it): if it is, resume it"
        else:
            state = "it is pending and its scope is refused until it completes: fix the cause, then resume it"
        raise ErasureIncompleteError(
            f"the record of the erasure of {target.describe()} could not be saved ({error_text(exc)}); "
            f"{state} (agentium erase --resume, erasure {record.erasure_id})"
            + (f"; {unread}" if unread else ""),
            record if stored is None else stored,
        ) from exc
    return record, False


async def inventory(ticket: Ticket, stores: Stores, record: ErasureRecord) -> ErasureRecord:
    """``record`` with what every store holds of the target now (a dry run each): its groups and digests.

    Taken once the fence is up and before anything is removed, so the
    tombstone names every group the erasure removed even when a store's
    call fails part way and cannot report what it had removed.
    """
    for role, store in stores:
        raw = await ticket.call(
            f"{role} erase (inventory)", _erase_call(store, record.target, True, _PLAN_ITEMS)
        )
        report = check_report(raw, record.target, role, _PLAN_ITEMS, True)
        record = merge_sessions(record, role, report.sessions)
    return record


async def load_record(ticket: Ticket, store: SessionStore, pending: ErasureRecord) -> ErasureRecord:
    """The full record of a pending erasure, or its header when the record was never saved (a crash)."""
    _, ledger = await load_ledger(ticket, store, record_key(pending.target.tenant_id, pending.erasure_id))
    return ledger.records[0] if ledger.records else pending


async def settle_late(
    target: EraseTarget,
    late: Callable[[Callable[[LateScope], bool], float], Awaitable[list[str]]],
    background: Sequence[tuple[SessionKey, Callable[[], Awaitable[object]]]],
    timeout_s: float,
) -> list[str]:
    """Wait for writes of the scope still in flight (abandoned calls, background updates); what still runs."""
    for key, settle in background:
        if covers(target, key):
            await settle()
    return await late(lambda key: covers(target, key), timeout_s)


async def carry_out(
    ticket: Ticket,
    stores: Stores,
    session_store: SessionStore,
    record: ErasureRecord,
    *,
    batch: int = DEFAULT_ERASE_BATCH,
    removed_by: set[str] | None = None,
    tried: Tried | None = None,
) -> tuple[ErasureRecord, Stray | None]:
    """Erase ``record``'s target from every store, keeping progress in the record; verify; the record.

    ``record`` is as stored (loaded, or just saved). Raises
    :class:`ErasureIncompleteError` (carrying the progress, which is saved)
    when a store fails or still holds part of the target after the
    verification rounds. The record returned is as stored too: this call's
    progress added to what another call resuming the same erasure saved
    (:func:`.erasure_resume.save_progress`), or that call's tombstone — with,
    then, what this call's last store call removed if it removed anything
    (:class:`.erasure_resume.Stray`: the other call may have completed the
    erasure between this call's look at ``pending`` and that store call),
    unless a save of it that raised landed all the same under that tombstone.
    ``removed_by`` gets the role of each store one of this call's store calls
    removed anything from (the records merge every call's counts).
    ``tried`` is the call's (:class:`.erasure_resume.Tried`, marked; the
    tombstone's save drops its note).
    """
    target = record.target
    saved = record  # the record as stored when this call last saved or loaded it
    # What a save that raised may have written (counted once, never again, whoever saved on top).
    tried = Tried(marked=True) if tried is None else tried
    # The last store call's removal until a save holds it: when the erasure is then found completed
    # elsewhere (by that save, or once it raised), the caller counts it under a new erasure. ``since``:
    # the first save that held it.
    unsaved: Stray | None = None
    since = 0
    try:
        for _ in range(_VERIFY_ROUNDS):
            for role, store in stores:
                entry = record.store(role)
                while entry is None or entry.status is not EraseStatus.COMPLETE:
                    done = await finished_elsewhere(ticket, session_store, record)
                    if done is not None:
                        return done, None
                    raw = await ticket.call(f"{role} erase", _erase_call(store, target, False, batch))
                    report = check_report(raw, target, role, batch, False)
                    warn_unvouched(record, role, report)
                    adapter = type(store).__name__
                    record = merge_report(record, role, adapter, report)
                    unsaved = Stray(record.erasure_id, role, adapter, report) if report.removed else None
                    if report.removed and removed_by is not None:
                        removed_by.add(role)
                    since = tried.saves + 1
                    stored = await save_progress(ticket, session_store, record, saved, tried=tried)
                    if stored.elsewhere:
                        # Completed elsewhere before this call saved: its store call may have run with
                        # the fence down (after the completion). What it removed is told to the caller,
                        # unless an attempt of this save landed under the tombstone (it counts it).
                        return stored.record, None if tried.holds(stored.record, since) else unsaved
                    record = saved = stored.record
                    unsaved = None
                    entry = record.store(role)
            left = await still_held(ticket, stores, target)
            if not left:
                return record, None
            # Something landed after a store said it was done (a late write): erase again.
            reopened = tuple(
                attrs.evolve(s, status=EraseStatus.PARTIAL) if s.role in left else s for s in record.stores
            )
            record = attrs.evolve(record, stores=reopened)
        done = await finished_elsewhere(ticket, session_store, record)
        if done is not None:
            return done, None
        raise ErasureIncompleteError(
            f"after {_VERIFY_ROUNDS} rounds the {', '.join(left)} still held part of {target.describe()}; "
            "the erasure stays pending; resume it (agentium erase --resume)",
            record,
        )
    except ErasureIncompleteError:
        raise
    except Exception as exc:
        # The record is kept for good and shown by erasure_status: the error's type only, never its
        # text, which a backend may fill with the very content being erased.
        note = (
            f"stopped: {type(exc).__name__}; what the failing call had removed is not in its "
            "store's counts (the sessions list every group there was)"
        )
        # Once: a record resumed against a store failing the same way would grow a copy each time.
        failed = record if note in record.notes else attrs.evolve(record, notes=(*record.notes, note))
        unread = ""
        try:  # never over a tombstone
            stored = await save_progress(ticket, session_store, failed, saved, tried=tried)
        except Exception:  # the progress saved after the last call stands, and another call's since
            now, unread = await stored_record(ticket, session_store, failed)
            stored = None
            if now is not None and now.state is ErasureState.COMPLETE:
                stored = Saved(now, elsewhere=True)
            elif now is not None:  # what the save would have written over it: this call's progress added
                try:
                    stored = Saved(progress_over(now, failed, saved, tried))
                except ContractViolationError:  # added, past the bounds a record holds (merge_progress)
                    stored = Saved(now)
        if stored is not None and stored.elsewhere:
            # Another call completed it: "it stays pending" would be false. The caller (erasure_run)
            # erases what is left under a new erasure, or says why it cannot, counting what the last
            # store call removed if no save held it (the save after it is what raised; one that
            # landed all the same, under the tombstone, is counted there).
            return stored.record, None if tried.holds(stored.record, since) else unsaved
        failed = failed if stored is None else stored.record
        raise ErasureIncompleteError(
            f"the erasure of {target.describe()} stopped part way ({error_text(exc)}); what was "
            "erased stays erased and the erasure stays pending: fix the cause, then resume it "
            f"(agentium erase --resume, erasure {record.erasure_id})" + (f"; {unread}" if unread else ""),
            failed,
        ) from exc


async def still_held(ticket: Ticket, stores: Stores, target: EraseTarget) -> list[str]:
    """The roles whose store still holds anything of ``target`` (a dry run of one item each)."""
    left: list[str] = []
    for role, store in stores:
        raw = await ticket.call(f"{role} erase (check)", _erase_call(store, target, True, 1))
        report = check_report(raw, target, role, 1, True)
        if report.removed:
            left.append(role)
    return left
