"""Two calls resuming one erasure at once: the one that finds it completed elsewhere stops.

Calling ``erase`` again with a pending erasure's target resumes it, so two
processes (or an operator's ``--resume`` while the first call still runs)
can carry out the same erasure together. Once one completes it the fence is
down and writes of the scope are acknowledged again; the other must neither
erase them nor save its progress over the tombstone. :func:`finished_elsewhere`
is read before each store call that deletes; :func:`save_progress` saves
progress by compare-and-set, never over the tombstone, and adds to what the
other call saved meanwhile rather than writing over it (:func:`merge_progress`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from .._errors import ContractViolationError
from .._ports.erasure import (
    MAX_RECORD_DIGESTS,
    MAX_RECORD_SESSIONS,
    MAX_REPORT_KINDS,
    ErasedCount,
    ErasedGroups,
    EraseReport,
    ErasureLedger,
    ErasureRecord,
    ErasureState,
    SeqRange,
    StoreErasure,
)
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from .._text import error_text
from .._validators import MAX_COUNT
from .erasure_ledger import load_ledger, pending_records, record_key, update_ledger
from .erasure_scrub import PHYSICAL_RANK
from .lifecycle import Ticket

__all__ = [
    "MARKS_KEPT",
    "Saved",
    "Stray",
    "Tried",
    "finished_elsewhere",
    "is_save_note",
    "merge_progress",
    "progress_over",
    "save_progress",
    "store_counts",
    "stored_record",
    "union_ranges",
    "unite_sessions",
]


class _CompletedMeanwhile(Exception):
    """Raised inside a ledger update: the stored record is this erasure's tombstone already."""

    def __init__(self, record: ErasureRecord) -> None:
        super().__init__(record.erasure_id)
        self.record = record


#: The note a marked save leaves in the record: which save of which call it stored last.
_MARK = re.compile(r"progress save (\d+) of call ([0-9a-f]{16})")
#: Save notes a record keeps, the latest calls' (each save puts its call's first): a call that stops
#: leaves its note, and a record resumed again and again (each call stopping) must not grow with each.
MARKS_KEPT: Final = 16


def is_save_note(note: str) -> bool:
    """Whether ``note`` is the note a call's progress save leaves (:class:`Tried`): bookkeeping, not news."""
    return _MARK.fullmatch(note) is not None


@attrs.define(eq=False)
class Tried:
    """What one call's saves wrote, or may have (they raised), each with the record it merged in.

    A save can land though it raises (a reply lost on the way back); another
    call may then save on top of it, even its tombstone, so the record stored
    is no longer that write. ``marked`` (an erasure's progress saves,
    :func:`.erasure.carry_out`): each save leaves a note naming this call and
    the save's number, in place of the call's earlier one (one per call, of
    the :data:`MARKS_KEPT` calls that saved last; a tombstone keeps the other
    calls' notes and drops its own call's). Notes
    are kept by every merge, so the stored record holds a save's progress
    exactly when it holds that save's note or a later one's
    (:meth:`holds`): counted once, whoever saved on top. Unmarked saves
    know their own write only by equality (nothing written meanwhile).
    """

    marked: bool = False
    token: str = attrs.field(factory=lambda: secrets.token_hex(8))
    saves: int = 0
    attempts: list[tuple[int, ErasureRecord, ErasureRecord]] = attrs.field(factory=list)

    def holds(self, stored: ErasureRecord | None, number: int) -> bool:
        """Whether ``stored`` holds this call's save ``number`` (or a later one, which held it too)."""
        return stored is not None and self._latest(stored) >= number

    def _latest(self, stored: ErasureRecord) -> int:
        found = (_MARK.fullmatch(note) for note in stored.notes)
        return max((int(m[1]) for m in found if m is not None and m[2] == self.token), default=0)

    def stamp(self, new: ErasureRecord) -> ErasureRecord:
        """``new`` as this call's next save writes it: its note, when marked, in place of the call's last."""
        self.saves += 1
        if not self.marked:
            return new
        notes = tuple(n for n in new.notes if (m := _MARK.fullmatch(n)) is None or m[2] != self.token)
        if new.state is not ErasureState.COMPLETE:  # the call's last save: no later save of it to tell apart
            notes = (f"progress save {self.saves} of call {self.token}", *notes)  # first: the rest in order
        # The notes of calls that saved longest ago go past MARKS_KEPT: calls that ended (stopped,
        # or found it completed), all but unfailingly; a live one's would only be counted again.
        marks = iter(range(1, len(notes) + 1))
        notes = tuple(n for n in notes if _MARK.fullmatch(n) is None or next(marks) <= MARKS_KEPT)
        return attrs.evolve(new, notes=notes)


@attrs.frozen(slots=True)
class Stray:
    """A store call of an erasure that removed something, and found it completed by another call after.

    Between its look at ``pending`` (still pending) and its store call,
    the other call may have completed the erasure and lifted the fence: what
    the call removed may have been written after that completion, and the
    tombstone does not count it. The call records it under the new erasure
    it then starts (:func:`.erasure_run._again`).
    """

    erasure_id: str
    role: str
    adapter: str
    report: EraseReport


@attrs.frozen(slots=True)
class Saved:
    """What :func:`save_progress` left stored: the record saved, or another call's tombstone.

    ``elsewhere`` says another call completed the erasure: ``record`` is its
    tombstone, kept as it is, and nothing was written.
    """

    record: ErasureRecord
    elsewhere: bool = False


async def save_progress(
    ticket: Ticket,
    store: SessionStore,
    record: ErasureRecord,
    base: ErasureRecord | None = None,
    finish: Callable[[ErasureRecord], ErasureRecord] | None = None,
    *,
    tried: Tried | None = None,
) -> Saved:
    """Save ``record``'s progress unless another process completed it: then its tombstone, kept as it is.

    Compare-and-set on the record's key: progress saved over the tombstone
    made a completed erasure read ``pending`` while out of the pending
    ledger. ``base`` is the record as this call last saved or loaded it:
    when the stored one is no longer that (another call resuming the same
    erasure saved its own progress meanwhile), what this call added since
    ``base`` is added to the stored one (:func:`merge_progress`), so neither
    call's counts nor inventory are lost; a conflict retries on what is
    stored then. ``finish`` (the tombstone's last touch) applies to the
    record about to be written. The result's record is what was written.

    ``tried`` (the caller's, kept across its saves) lists what this call's
    saves that raised may have written, each with the record it merged: a
    save can land though it raises (a reply lost on the way back), and the
    stored record then holds this call's own write (another call may have
    saved on top of it), whose progress merged in again would be counted
    twice (a store retrying a write whose reply it lost, then saying the
    revision moved, is the same case within one save). Its attempts are
    emptied once a save succeeds.
    """
    written: list[ErasureRecord] = []
    # Within this save too: a store may retry a write whose reply it lost and find its own there.
    attempts = tried if tried is not None else Tried()

    def put(ledger: ErasureLedger) -> ErasureLedger:
        stored = None
        for saved in ledger.records:
            if saved.erasure_id == record.erasure_id:
                if saved.state is ErasureState.COMPLETE:
                    raise _CompletedMeanwhile(saved)
                stored = saved
        new = progress_over(stored, record, base, attempts)
        if finish is not None:
            new = finish(new)
        new = attempts.stamp(new)
        written[:] = [new]
        attempts.attempts.append((attempts.saves, new, record))
        return ErasureLedger((new,))

    try:
        await update_ledger(ticket, store, record_key(record.target.tenant_id, record.erasure_id), put)
    except _CompletedMeanwhile as done:
        return Saved(done.record, elsewhere=True)
    attempts.attempts.clear()
    return Saved(written[-1])


def progress_over(
    stored: ErasureRecord | None, record: ErasureRecord, base: ErasureRecord | None, tried: Tried
) -> ErasureRecord:
    """``record``'s progress since ``base`` added to ``stored``: what :func:`save_progress` writes over it.

    ``tried`` as :func:`save_progress` keeps it: when ``stored`` holds one of
    those writes (it landed though it raised), only what came after it is added.
    """
    since = base
    for number, wrote, merged in tried.attempts:
        if stored is not None and (stored == wrote or tried.holds(stored, number)):
            since = merged  # an earlier save of this call landed: add only what came after it
    return record if stored is None or since is None else merge_progress(stored, record, since)


async def stored_record(
    ticket: Ticket, store: SessionStore, record: ErasureRecord
) -> tuple[ErasureRecord | None, str]:
    """``record``'s erasure as stored now (one read, under the call's deadline), and ``""``.

    What an error that stops a call carries: another call (a concurrent
    resume, another process) may have saved its progress, or the tombstone,
    since this call loaded or last saved the record. ``None`` when no record
    is stored (its header alone joined ``pending``), or when the read
    failed: then with what the error's message says of the record it carries.
    """
    try:
        _, ledger = await load_ledger(
            ticket, store, record_key(record.target.tenant_id, record.erasure_id), "erasure record read back"
        )
    except Exception as exc:
        return None, (
            f"its record could not be read back ({error_text(exc)}): the record given is as this call "
            "last had it, without what another call may have saved since"
        )
    return next((r for r in ledger.records if r.erasure_id == record.erasure_id), None), ""


def merge_progress(stored: ErasureRecord, ours: ErasureRecord, base: ErasureRecord) -> ErasureRecord:
    """``stored`` with what ``ours`` added since ``base``: counts summed, groups united, notes kept.

    ``ours`` is ``base`` plus this call's store calls; ``stored`` is
    ``base`` plus another call's. A store this call made no call on keeps
    the stored entry; one it did gets the counts both removed (each call's
    items are its own), the weakest physical outcome, and this call's
    status (its call is the one it knows the result of: a resume erases
    again what a ``partial`` leaves, and the verification asks every store).
    A store's counts summed past the bounds of its entry are a :class:`ContractViolationError`
    (:func:`store_counts`, as one call's summed over its reports): nothing is saved.
    """
    if stored == base:
        return ours
    stores = list(stored.stores)
    for entry in ours.stores:
        before = base.store(entry.role)
        theirs = stored.store(entry.role)
        if entry == before:
            continue
        if theirs is None:
            stores.append(entry)
            continue
        counts = {c.kind: c.count for c in theirs.counts}
        already = {c.kind: c.count for c in before.counts} if before is not None else {}
        for item in entry.counts:
            counts[item.kind] = counts.get(item.kind, 0) + max(0, item.count - already.get(item.kind, 0))
        merged = StoreErasure(
            entry.role,
            entry.adapter,
            store_counts(entry.role, counts),
            entry.status,
            max(theirs.physical, entry.physical, key=PHYSICAL_RANK.__getitem__),
            entry.detail or theirs.detail,
        )
        stores = [merged if s.role == entry.role else s for s in stores]
    # Ours' omitted count may name the very sessions stored's does (both took an inventory, or erased
    # the same sessions past the cap): never summed, united by what can be told apart (unite_sessions).
    sessions, omitted = unite_sessions(stored, ours.sessions, ours.omitted_sessions)
    # A note ours has from base that stored has not was dropped there (a call's note of its save,
    # replaced by its next: :class:`Tried`), not added by ours.
    notes = (*stored.notes, *(n for n in ours.notes if n not in stored.notes and n not in base.notes))
    return attrs.evolve(
        stored,
        state=ours.state,
        completed_at=ours.completed_at,
        stores=tuple(stores),
        sessions=sessions,
        omitted_sessions=omitted,
        notes=notes,
    )


def store_counts(role: str, counts: dict[str, int]) -> tuple[ErasedCount, ...]:
    """A store's ``counts`` summed over its calls, as its entry of the record holds them.

    Each report is within the bounds (:func:`.erasure_reports.check_report`); the store's entry,
    summed over its calls (one call's, or two calls' resuming the same erasure: :func:`merge_progress`),
    must be too: at most :data:`MAX_REPORT_KINDS` kinds, each count at most ``MAX_COUNT``. Past them the
    store's counts are not believed, nor kept: :class:`ContractViolationError`, and nothing is written
    (building the entry refused a count past ``MAX_COUNT`` as the host's bad input, and a record kept
    with more kinds made every later report of the store refused, the erasure never completing).
    """
    if len(counts) > MAX_REPORT_KINDS or any(n > MAX_COUNT for n in counts.values()):
        raise ContractViolationError(
            f"the {role} store's erase reported, over its calls, {len(counts)} kinds of items or a count "
            f"past {MAX_COUNT} (at most {MAX_REPORT_KINDS} kinds); the erasure stops here"
        )
    return tuple(ErasedCount(k, n) for k, n in counts.items())


def unite_sessions(
    stored: ErasureRecord, found: Sequence[ErasedGroups], found_omitted: int = 0
) -> tuple[tuple[ErasedGroups, ...], int]:
    """``stored``'s sessions with ``found``'s united in (ranges exact, digests budgeted); sessions omitted.

    Both a store call's report (:func:`.erasure_reports.merge_sessions`) and a resumed
    call's progress (:func:`merge_progress`, whose own omitted count is
    ``found_omitted``: sessions it counted and did not list) go through it.

    The omitted count never counts a session twice, so it may count fewer
    than were omitted: the ids past :data:`MAX_RECORD_SESSIONS` are not
    kept, so sessions omitted on both sides (two store calls, two
    inventories, two resumes) cannot be told apart. It is the larger of what
    each side proves omitted from the united list: ``stored``'s count less
    the sessions added to the list, and ``found``'s sessions left out of it
    plus ``found_omitted`` less the listed sessions ``found`` does not list.
    """
    sessions = {s.session: s for s in stored.sessions}
    order = [s.session for s in stored.sessions]
    listed = set(order)
    left_out: set[SessionKey] = set()  # found's, not listed: each counted once however often it comes
    digests_left = MAX_RECORD_DIGESTS - sum(len(s.digests) for s in stored.sessions)
    for entry in found:
        current = sessions.get(entry.session)
        if current is None:
            if len(order) >= MAX_RECORD_SESSIONS:
                left_out.add(entry.session)
                continue
            current = ErasedGroups(entry.session)
            order.append(entry.session)
        ranges = union_ranges((*current.ranges, *entry.ranges))
        known = {seq for seq, _ in current.digests}
        fresh = [(seq, d) for seq, d in entry.digests if seq not in known][: max(0, digests_left)]
        digests_left -= len(fresh)
        sessions[entry.session] = ErasedGroups(
            entry.session,
            sum(r.stop - r.start for r in ranges),
            ranges,
            tuple(sorted((*current.digests, *fresh))),
            current.snapshot or entry.snapshot,
        )
    found_listed = {entry.session for entry in found}
    # A side's omitted sessions are none of its listed ones, but may be among those the other listed.
    theirs = stored.omitted_sessions - (len(order) - len(listed))
    ours = len(left_out) + max(0, found_omitted - len(set(order) - found_listed))
    return tuple(sessions[k] for k in order), max(0, theirs, ours)


def union_ranges(ranges: Sequence[SeqRange]) -> tuple[SeqRange, ...]:
    """``ranges`` merged where they touch or overlap, ascending."""
    merged: list[list[int]] = []
    for start, stop in sorted((r.start, r.stop) for r in ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return tuple(SeqRange(a, b) for a, b in merged)


async def finished_elsewhere(
    ticket: Ticket, store: SessionStore, record: ErasureRecord
) -> ErasureRecord | None:
    """The tombstone when another process (a concurrent resume) completed this erasure, else ``None``.

    Its completion lifted the fence, so writes of the scope may have landed
    since: acknowledged after the erasure said ``complete``, they are not its
    to remove. Read before every store call that deletes, before a groups
    erasure's snapshot marking and before every erasure's file clean-up, so a
    call that resumed the same erasure stops instead of erasing them,
    rewriting the snapshot or rebuilding a file it removed nothing from again
    (and of saying the erasure stays pending); :func:`save_progress` keeps its tombstone.
    """
    pending = await pending_records(ticket, store, record.target.tenant_id, "erasure progress")
    if any(r.erasure_id == record.erasure_id for r in pending):
        return None
    _, ledger = await load_ledger(ticket, store, record_key(record.target.tenant_id, record.erasure_id))
    saved = ledger.records[0] if ledger.records else None
    return saved if saved is not None and saved.state is ErasureState.COMPLETE else None
