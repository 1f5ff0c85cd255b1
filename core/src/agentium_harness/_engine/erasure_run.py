"""Carrying a pending erasure through: inventory, late writes, every store, marks, tombstone.

What :mod:`.erasure_api` (``erase``, ``resume_erasures``, retention and
``forget``) runs once an erasure's record is pending (docs/erasure.md), and
what a call does when another call completed its erasure meanwhile (a
concurrent ``agentium erase --resume``): what the target still holds is
erased under a new erasure of its own (:func:`_again`), or the call says it
could not (:class:`ErasureOvertakenError`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from .._erasure_errors import ErasureOvertakenError
from .._errors import ErasureIncompleteError, ErasureInProgressError
from .._observe.spans import error_type
from .._observe.turn import traced_operation
from .._ports._base import capabilities_of
from .._ports.erasure import (
    EraseLevel,
    EraseTarget,
    ErasureKind,
    ErasureRecord,
    ErasureState,
    PhysicalErasure,
)
from .._text import error_text
from .erased_groups import emptied_before, mark_erased
from .erasure import (
    OperatorAttestation,
    carry_out,
    inventory,
    settle_late,
    start,
    still_held,
)
from .erasure_events import erasure_event, spanned
from .erasure_ledger import pending_records
from .erasure_owed import Owed, clean_up_own, warn_overtaken
from .erasure_reports import merge_report
from .erasure_resume import Stray, Tried, finished_elsewhere, save_progress, stored_record
from .erasure_scrub import defers_scrub, scrub_files
from .erasure_status import as_pending
from .erasure_tombstone import complete
from .late_calls import wait_late
from .lifecycle import Ticket, covers, overlaps
from .memory.manager import late_calls_of

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["erasure_stores", "finish"]

#: New erasures one call starts after others completed the one it resumed (each then finds it done).
_AGAIN_AT_MOST = 2
_log = logging.getLogger("agentium.engine.erasure")

After = Callable[[Ticket, ErasureRecord], Awaitable[ErasureRecord]]


def erasure_stores(runtime: HarnessRuntime, target: EraseTarget) -> list[tuple[str, Any]]:
    """The stores an erasure of ``target`` goes through, in order: recall, memory, archive, session store.

    A groups target touches only what holds archived groups: the recall
    index and the archive (the engine rewrites the snapshot itself).
    """
    stores: list[tuple[str, Any]] = []
    if runtime.recall is not None:
        stores.append(("recall", runtime.recall))
    if runtime.memory is not None and target.level is not EraseLevel.GROUPS:
        stores.append(("memory", runtime.memory.store))
    stores.append(("archive", runtime.archive))
    if target.level is not EraseLevel.GROUPS:
        stores.append(("session_store", runtime.session_store))
    return stores


def _after(runtime: HarnessRuntime, record: ErasureRecord, cleaned: list[tuple[str, Any]]) -> After | None:
    """What a groups erasure does once the stores are done: record the groups erased in the snapshot.

    A session store that leaves its clean-up to the engine is added to
    ``cleaned`` when its erase ran, so that its file is cleaned up with the others.
    """
    target = record.target
    key = target.session_key
    if target.level is not EraseLevel.GROUPS or key is None:
        return None
    keep_text = record.kind is not ErasureKind.FORGET
    store = runtime.session_store

    async def mark(ticket: Ticket, done: ErasureRecord) -> ErasureRecord:
        wrote = await mark_erased(ticket, store, key, target.groups, keep_summary_text=keep_text)
        if keep_text or not getattr(capabilities_of(store), "erasure", False):
            return done
        # Nothing to mark: a call of this erasure that emptied the summary and stopped before the
        # clean-up (resumed now) left the former text in the file, still to be cleaned up.
        if not wrote and not await emptied_before(ticket, store, key, target.groups):
            return done
        # The summary lost its text in a snapshot rewrite made after the stores' erasures. The
        # session store's erase of the same groups target removes nothing (it names no snapshot)
        # and cleans up (a SQLite rebuild and log checkpoint) so the old text leaves its files
        # too, or leaves that to the one clean-up per file after this (scrub_files); what it
        # cannot clean up is noted.
        if defers_scrub(store):
            deferring: Any = store  # its erase takes scrub= (erasure_scrub)
            await ticket.call("session store erase", lambda ctx: deferring.erase(target, ctx, scrub=False))
            cleaned.append(("session_store", store))
            return done
        report = await ticket.call("session store erase", lambda ctx: store.erase(target, ctx))
        if report.physical is PhysicalErasure.REMOVED:
            return done
        note = f"the summary's former text: the session store reports {report.physical.value}"
        return attrs.evolve(done, notes=(*done.notes, f"{note} ({report.detail})" if report.detail else note))

    return mark


async def finish(
    runtime: HarnessRuntime, ticket: Ticket, record: ErasureRecord, *, take_inventory: bool = False
) -> ErasureRecord:
    """Carry a pending record through: (inventory,) late writes settle, stores erase, marks, tombstone.

    One ``agentium.erasure`` span; an erasure that stops part way is a WARNING
    and a span event (its error's type and the erasure's id, never content),
    as is each degraded step below it (:mod:`.erasure_events`).
    Whatever stops it once its record is pending — a store's inventory, the
    snapshot's marking, the tombstone's save — is raised as
    :class:`ErasureIncompleteError` carrying the record: the scope stays
    fenced until it is resumed, and the caller must be told so — unless,
    read back, another call completed it (out of ``pending``): the call then
    goes on from that tombstone (:func:`_stopped_or_again`).
    """
    target = record.target
    with (
        traced_operation(
            runtime,
            "erasure",
            target.tenant_id,
            target.user_id or "",
            target.session_id or "",
            name="agentium.erasure",
        ) as span,
        spanned(span),
    ):
        span.set("agentium.erasure.kind", record.kind.value)
        span.set("agentium.erasure.level", target.level.value)
        owed = Owed()
        try:
            if take_inventory:
                record = await _inventoried(runtime, ticket, record)
                if record.state is ErasureState.COMPLETE:
                    # A resume completed it during the inventory and its fence is down.
                    return await _again(runtime, ticket, erasure_stores(runtime, target), record, 0)
            return await _carry(runtime, ticket, record, owed=owed)
        except ErasureIncompleteError as exc:
            stopped = exc
        except Exception as exc:
            try:
                return await _stopped_or_again(runtime, ticket, record, exc, 0, owed=owed)
            except ErasureIncompleteError as again:
                stopped = again
        cause = error_type(stopped.__cause__ if stopped.__cause__ is not None else stopped)
        span.event("agentium.erasure.incomplete", {"error.type": cause})
        if isinstance(stopped, ErasureOvertakenError) and stopped.record is not None:
            _log.warning(
                "erasure %s was completed by another call, but the target still holds data written since "
                "that this call could not erase (%s; pending: %s): erase it again",
                stopped.record.erasure_id,
                cause,
                stopped.pending_id or "none",
            )
            raise stopped
        if stopped.record is not None and stopped.record.state is ErasureState.COMPLETE:
            # Its tombstone is saved, but whether it left pending is not known (erasure_tombstone).
            _log.warning(
                "erasure %s is complete, but whether it left the pending erasures is not known (%s): "
                "erasure_status shows it; if it is still pending, resume it",
                stopped.record.erasure_id,
                cause,
            )
            raise stopped
        # The erasure left pending: a new one (_again) when another call completed this one.
        pending = stopped.record.erasure_id if stopped.record is not None else record.erasure_id
        _log.warning("erasure %s stopped part way (%s); it stays pending: resume it", pending, cause)
        raise stopped


async def _stopped_or_again(
    runtime: HarnessRuntime,
    ticket: Ticket,
    record: ErasureRecord,
    exc: Exception,
    depth: int,
    stray: Stray | None = None,
    tried: Tried | None = None,
    owed: Owed | None = None,
) -> ErasureRecord:
    """Go on as :func:`.erasure.carry_out` does when ``record``'s erasure, stopped on ``exc``, was completed.

    The record is read back once (:func:`_stopped`). Completed by another
    call and out of ``pending`` (its fence down), the erasure is not
    pending, nor is its state unknown: as when a store call fails once
    another call completed it, the call returns that tombstone, or erases
    what the target holds since under a new erasure (:func:`_again`,
    counting ``stray`` unless the stored record holds the save of ``tried``
    that counted it), once it cleaned up the files ``owed`` names (its own
    removals may have come after the other call's clean-up) when the step
    that failed came before that clean-up, and said (:func:`warn_overtaken`)
    which step failed: after the clean-up itself, that those files may keep
    copies. Otherwise :class:`ErasureIncompleteError` says what is known.
    """
    stopped, left = await _stopped(runtime, ticket, record, exc)
    done = stopped.record
    if not left or done is None:
        raise stopped
    if stray is not None and tried is not None and tried.holds(done, 1):
        stray = None  # the save counting it landed (its reply lost), under that tombstone
    if owed is not None and owed.step:
        # A step of _carry past its store calls failed, the erasure still read pending there. Before
        # its clean-up: the clean-up of the files it removed from is owed, as when _carry finds the
        # tombstone itself. The clean-up itself: not run again, as there (the warning says so).
        cleaned_up = owed.step != "file clean-up" and await clean_up_own(ticket, owed.stores, done)
        warn_overtaken(done, owed.step, exc, cleaned_up, owed.marks)
    else:
        _log.warning(
            "erasure %s was completed by another call; this call's step after it failed (%s): it goes on "
            "from that tombstone",
            done.erasure_id,
            error_type(exc),
        )
        # Which step failed is not known here (the inventory, the tombstone, a new erasure's): "other".
        erasure_event(
            "agentium.erasure.overtaken", {"error.type": error_type(exc), "agentium.erasure.step": "other"}
        )
    return await _again(runtime, ticket, erasure_stores(runtime, done.target), done, depth, stray)


async def _stopped(
    runtime: HarnessRuntime, ticket: Ticket, record: ErasureRecord, exc: Exception
) -> tuple[ErasureIncompleteError, bool]:
    """What says that ``record``'s erasure stopped on ``exc``; whether it is complete, out of ``pending``.

    It carries the record as stored now, read back once: ``record`` is as this
    call loaded it (or started it), and since then this call's saves, or
    another call's (a concurrent resume's progress), may have landed. A
    tombstone saved before the erasure left ``pending`` (its index or its
    removal failed) is carried as ``erasure_status`` shows it: pending, with a
    note. A tombstone out of ``pending`` is another call's completion (this
    call's own never raises once out): ``True``, and the caller goes on from it.
    """
    store = runtime.session_store
    stored, unread = await stored_record(ticket, store, record)
    now = record if stored is None else stored
    left = False
    if now.state is ErasureState.COMPLETE:
        try:
            pending = await pending_records(ticket, store, now.target.tenant_id, "erasure pending read back")
        except Exception:
            pending = None  # not known: the tombstone as it is, and the message says where to look
        if pending is not None and any(r.erasure_id == now.erasure_id for r in pending):
            now = as_pending(now)  # as erasure_status shows it, its note and all
        else:
            left = pending is not None
    where = f"(agentium erase --resume, erasure {record.erasure_id})"
    if left:
        message = (
            f"the erasure of {record.target.describe()} stopped ({error_text(exc)}) once another call had "
            "completed it (its tombstone is saved and it left the pending erasures, its fence down)"
        )
    elif now.state is ErasureState.COMPLETE:
        message = (
            f"the erasure of {record.target.describe()} stopped ({error_text(exc)}) once its tombstone was "
            "saved (by this call or another): erasure_status shows whether it is still pending, its scope "
            f"refused; if it is, resume it {where}"
        )
    else:
        message = (
            f"the erasure of {record.target.describe()} stopped part way ({error_text(exc)}); it stays "
            f"pending and its scope is refused until it completes: fix the cause, then resume it {where}"
        )
    stopped = ErasureIncompleteError(f"{message}; {unread}" if unread else message, now)
    stopped.__cause__ = exc
    return stopped, left


async def _carry(
    runtime: HarnessRuntime,
    ticket: Ticket,
    record: ErasureRecord,
    depth: int = 0,
    tried: Tried | None = None,
    owed: Owed | None = None,
) -> ErasureRecord:
    stores = erasure_stores(runtime, record.target)
    tried = Tried(marked=True) if tried is None else tried  # the call's saves, its tombstone's too
    base = record  # as stored: the tombstone adds to what another call resuming it saved since
    if record.state is not ErasureState.COMPLETE:
        timeout = runtime.limits.settle_timeout_s
        background = [
            (key, partial(runtime.parts.work.settle, key, timeout)) for key in runtime.parts.work.running()
        ]
        # This runtime's late calls and its memory manager's (a manager's own ``remember`` calls are
        # admitted nowhere: it notes them itself).
        late = [runtime.parts.admission.late]
        if runtime.memory is not None:
            late.append(late_calls_of(runtime.memory))
        running = await settle_late(record.target, partial(wait_late, late), background, timeout)
        if running:
            raise ErasureIncompleteError(
                f"writes of {record.target.describe()} this runtime walked away from are still running "
                f"({'; '.join(running[:3])}), and one might land after the erase; the erasure stays pending. "
                f"Resume it once they have ended (agentium erase --resume, erasure {record.erasure_id})",
                record,
            )
        # The background updates of the scope have ended (and the fence starts no more): the reports
        # this runtime keeps of them hold the summary's text, which settle_summary would still hand out.
        runtime.parts.work.drop_reports(partial(covers, record.target))
        removed_by: set[str] = set()
        record, stray = await carry_out(
            ticket, stores, runtime.session_store, record, removed_by=removed_by, tried=tried
        )
        if record.state is ErasureState.COMPLETE:
            # Another call completed this erasure meanwhile (erasure_resume) and its fence is down.
            return await _again(runtime, ticket, stores, record, depth, stray)
        base = record
        cleaned = list(stores)
        after = _after(runtime, record, cleaned)
        # Checked first, as each store call is: another call that completed the erasure marked and
        # cleaned up itself, and its fence is down since (marking again would empty a summary
        # written since, from groups the erasure never covered; a clean-up of a file this call removed
        # nothing from would rebuild it again, and its failure would say the erasure stays pending).
        done: ErasureRecord | None = None
        # What this call's own store calls removed rows from: they may have run after the other
        # call's clean-up (a late write it never saw), and its tombstone counts them as removed.
        mine = [(role, store) for role, store in stores if role in removed_by]
        step = "check"  # the step under way: the check, the marking, the clean-up (what a failure names)
        try:
            done = await finished_elsewhere(ticket, runtime.session_store, record)
            if done is None and after is not None:
                step = "snapshot marking"
                record = await after(ticket, record)
                # The snapshot this call's marking rewrote (a summary emptied before the other call
                # found nothing left to mark) is its own to clean up too.
                mine += cleaned[len(stores) :]
                step = "check"
                done = await finished_elsewhere(ticket, runtime.session_store, record)
            step = "file clean-up"
            if done is not None:
                # Only the files this call removed something from: the others, the other call's.
                await scrub_files(ticket, mine, record)
            else:
                # Once every store erased (and the snapshot was marked): each file rebuilt once.
                record = await scrub_files(ticket, cleaned, record)
        except Exception as exc:
            # As a store call failing once another call completed the erasure (carry_out): not
            # "pending", whether it was found complete before this step or completed while it ran.
            if done is None:
                done = await _completed_or_none(ticket, runtime.session_store, record)
            if done is None:
                if owed is not None:
                    # Its tombstone may land before finish reads the record back and goes on from it:
                    # the clean-up of its own files still owed (a step before it), or the warning's
                    # word that they may keep copies (the clean-up itself).
                    owed.step, owed.stores, owed.marks = step, mine, after is not None
                raise
            # A step before it failed: this call's clean-up of its own files has not run, and the
            # other call's may have come before its removals. It runs now, as when found complete.
            cleaned_up = step != "file clean-up" and await clean_up_own(ticket, mine, record)
            warn_overtaken(done, step, exc, cleaned_up, after is not None)
        if done is not None:
            return await _again(runtime, ticket, stores, done, depth)
    tombstone = await complete(ticket, runtime.session_store, record, base, tried)
    if tombstone.elsewhere:
        # Another call completed it after this one's last store call (while it marked or cleaned up):
        # its fence is down since, and what the target holds now is this call's to erase.
        return await _again(runtime, ticket, stores, tombstone.record, depth)
    return tombstone.record


async def _again(
    runtime: HarnessRuntime,
    ticket: Ticket,
    stores: Any,
    done: ErasureRecord,
    depth: int,
    stray: Stray | None = None,
) -> ErasureRecord:
    """``done`` (completed by another call), or, when the target still holds something, a new erasure of it.

    What the target holds now was written before this call returns, so this
    call's erasure covers it: it is erased under a new record (a new fence,
    inventory and tombstone), never by a call whose fence is down. When that
    cannot be done — an overlapping erasure is pending and refuses it, a new
    one cannot be started, or the new ones were completed elsewhere
    ``_AGAIN_AT_MOST`` times — :class:`ErasureOvertakenError` says so, with
    ``done`` (complete) and the stores still holding something: a tombstone
    alone would say the target is erased.

    ``stray`` is what this call's last store call removed when the erasure
    was found completed right after it: that call may have run once the
    fence was down, removing what was written after the completion, which
    ``done`` does not count. The new erasure counts it (a note says how),
    so it is started even when the target holds nothing any more.
    """
    try:
        left = tuple(await still_held(ticket, stores, done.target))
    except Exception as exc:
        # Not "pending", nor "not known whether it left pending": complete, and the target unchecked.
        why = f"checking what the target holds since failed ({error_text(exc)})"
        raise _overtaken(
            done, (), why, stray=stray, held="whether the target holds data written since is not known"
        ) from exc
    if not left and stray is None:
        return done
    if depth >= _AGAIN_AT_MOST:
        raise _overtaken(
            done,
            left,
            f"it may start no more new erasures ({depth} started, each completed by another call)",
            stray=stray,
        )
    attestation = OperatorAttestation(done.operator, statement=done.statement)
    try:
        fresh, resumed = await start(
            ticket, runtime.session_store, done.target, done.reason, attestation, done.kind
        )
    except ErasureInProgressError as exc:
        raise _overtaken(
            done,
            left,
            f"erasure {exc.erasure_id}, pending, overlaps it and refused a new one",
            exc.erasure_id,
            stray,
        ) from exc
    except ErasureIncompleteError:
        raise  # the new erasure joined and is pending: that error carries its record
    except Exception as exc:
        # Its join may have landed though it raised: then the new erasure is pending, fencing the scope.
        joined = await _pending_since(ticket, runtime.session_store, done)
        why = f"a new erasure could not be started ({error_text(exc)})"
        if joined is None:
            why += "; it may have joined the pending erasures all the same (erasure_status shows it)"
        elif joined:
            why = (
                f"starting a new erasure failed ({error_text(exc)}), yet erasure {joined}, pending, "
                "overlaps it (its join may have landed)"
            )
        raise _overtaken(done, left, why, joined or "", stray=stray) from exc
    tried = Tried(marked=True)  # the new erasure's saves by this call: counting, progress, tombstone
    uncounted = stray
    owed = Owed()
    try:
        if stray is not None:
            counted = await save_progress(
                ticket, runtime.session_store, _counting(fresh, stray), fresh, tried=tried
            )
            if counted.elsewhere:  # completed elsewhere already: counted by none (unless this save's
                # attempt that raised landed under it), said by the next
                again = None if tried.holds(counted.record, 1) else stray
                return await _again(runtime, ticket, stores, counted.record, depth + 1, again)
            fresh, uncounted = counted.record, None
        if not resumed:
            fresh = await _inventoried(runtime, ticket, fresh)
            if fresh.state is ErasureState.COMPLETE:
                return await _again(runtime, ticket, stores, fresh, depth + 1)
        return await _carry(runtime, ticket, fresh, depth + 1, tried, owed)
    except ErasureIncompleteError:
        raise
    except Exception as exc:
        # The new erasure is the one left pending (``done`` is complete): the caller resumes that one;
        # or another call completed it meanwhile, and this call goes on from its tombstone.
        return await _stopped_or_again(runtime, ticket, fresh, exc, depth + 1, uncounted, tried, owed)


async def _completed_or_none(ticket: Ticket, store: Any, record: ErasureRecord) -> ErasureRecord | None:
    """The tombstone if another call completed ``record``'s erasure; ``None`` if not, or if unreadable.

    Read once after a step past the store calls failed: it stays pending only if not completed.
    """
    try:
        return await finished_elsewhere(ticket, store, record)
    except Exception:
        return None


async def _pending_since(ticket: Ticket, store: Any, done: ErasureRecord) -> str | None:
    """The id of a pending erasure overlapping ``done``'s target (``""``: none); ``None`` if unreadable.

    Read once after a new erasure's start failed: its join may have landed.
    """
    try:
        pending = await pending_records(ticket, store, done.target.tenant_id)
    except Exception:
        return None
    ids = [r.erasure_id for r in pending if overlaps(r.target, done.target)]
    return next((i for i in ids if i != done.erasure_id), "")


def _counting(record: ErasureRecord, stray: Stray) -> ErasureRecord:
    """New ``record`` counting what ``stray``'s store call removed, with a note saying when it ran."""
    counted = merge_report(record, stray.role, stray.adapter, stray.report)
    note = (
        f"the {stray.role} store's last call of erasure {stray.erasure_id} found it completed by another "
        "call right after: it may have run once that erasure's fence was down, so what it removed "
        "(written before or after that completion) is counted here"
    )
    return attrs.evolve(counted, notes=(*counted.notes, note))


def _overtaken(
    done: ErasureRecord,
    left: tuple[str, ...],
    why: str,
    pending_id: str = "",
    stray: Stray | None = None,
    held: str = "",
) -> ErasureOvertakenError:
    """What says that ``done`` is complete but the target may still hold data this call could not erase."""
    after = f"once erasure {pending_id} completes (agentium erase --resume), " if pending_id else ""
    held = held or (
        f"the {', '.join(left)} still held part of the target, written since, and this call could not "
        "erase it under a new erasure"
        if left
        else "this call could not start a new erasure to count what it removed"
    )
    removed = (
        f"; and its {stray.role} store's last call removed {stray.report.removed} item(s), possibly after "
        f"erasure {done.erasure_id} completed (its fence down), which no tombstone counts"
        if stray is not None
        else ""
    )
    return ErasureOvertakenError(
        f"erasure {done.erasure_id} of {done.target.describe()} was completed by another call (its tombstone "
        f"stands), but {held}: {why}{removed}. "
        f"The target may still hold data: {after}erase it again",
        done,
        pending_id=pending_id,
        still_held=left,
    )


async def _inventoried(runtime: HarnessRuntime, ticket: Ticket, record: ErasureRecord) -> ErasureRecord:
    """New ``record`` with its inventory taken and saved; the tombstone if a resume completed it meanwhile.

    The inventory (a dry run of every store) may take a while, and another
    process (``agentium erase --resume``) may resume the erasure from its
    saved record and complete it meanwhile. Its tombstone stands: the record
    is saved by compare-and-set, never over it (:func:`.erasure_resume.save_progress`),
    and the caller, whose fence is down, erases nothing under this erasure.
    """
    taken = await inventory(ticket, erasure_stores(runtime, record.target), record)
    # Added to what a resume saved meanwhile (its progress stands), or that resume's tombstone.
    return (await save_progress(ticket, runtime.session_store, taken, record)).record
