"""What a store's ``erase`` reports, checked and merged into an erasure's record (docs/erasure.md).

Part of an erasure's step 4 (:mod:`.erasure`): every report a store's
``erase`` returns is checked against the port's contract first
(:func:`check_report`: a report breaking it is a
:class:`~agentium_harness.ContractViolationError`, and nothing of it is
kept), then added to the record (:func:`merge_report`: counts summed per
kind, the sessions' groups united, :func:`merge_sessions`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._errors import ContractViolationError
from .._ports.erasure import (
    ErasedCount,
    ErasedGroups,
    ErasedSession,
    EraseReport,
    EraseStatus,
    EraseTarget,
    ErasureRecord,
    SeqRange,
    StoreErasure,
)
from .._validators import MAX_SEQ, exact_int, shown_number
from .erasure_resume import unite_sessions
from .erasure_scrub import PHYSICAL_RANK
from .lifecycle import covers

__all__ = ["check_report", "merge_report", "merge_sessions"]


def merge_report(record: ErasureRecord, role: str, adapter: str, report: EraseReport) -> ErasureRecord:
    """``record`` with one store call's report added: counts summed, sessions' groups united."""
    old = record.store(role) or StoreErasure(role, adapter)
    counts: dict[str, int] = {c.kind: c.count for c in old.counts}
    for item in report.counts:
        counts[item.kind] = counts.get(item.kind, 0) + item.count
    physical = max(old.physical, report.physical, key=PHYSICAL_RANK.__getitem__)
    entry = StoreErasure(
        role,
        adapter,
        tuple(ErasedCount(k, n) for k, n in counts.items()),
        report.status,
        physical,
        report.detail or old.detail,
    )
    stores = tuple(entry if s.role == role else s for s in record.stores)
    if record.store(role) is None:
        stores = (*stores, entry)
    return merge_sessions(attrs.evolve(record, stores=stores), role, report.sessions)


def merge_sessions(record: ErasureRecord, role: str, found: Sequence[ErasedSession]) -> ErasureRecord:
    """``record`` with the groups of ``found`` united into its sessions (ranges exact, digests budgeted)."""
    # One store call's groups as the record's shape (a one-seq range and a digest each), so the
    # union, the digest budget and the omitted count are the one resume uses too.
    snapshot = role == "session_store"
    groups = tuple(
        ErasedGroups(
            e.session, len(e.groups), tuple(SeqRange(seq, seq + 1) for seq, _ in e.groups), e.groups, snapshot
        )
        for e in found
    )
    sessions, omitted = unite_sessions(record, groups)
    return attrs.evolve(record, sessions=sessions, omitted_sessions=omitted)


def check_report(report: object, target: EraseTarget, role: str, bound: int, dry_run: bool) -> EraseReport:
    """The store's report if it keeps the port's contract, else :class:`ContractViolationError`."""
    name = f"the {role} store's erase"
    if not isinstance(report, EraseReport):
        raise ContractViolationError(f"{name} returned {type(report).__name__}, not an EraseReport")
    items = report.removed - report.count("revision")
    if items > bound:
        raise ContractViolationError(f"{name} reported {items} items for a call bounded to {bound}")
    if not dry_run and report.status is EraseStatus.PARTIAL and items == 0:
        raise ContractViolationError(f"{name} said partial without removing anything; it would never end")
    for entry in report.sessions:
        # A seq no group has is the store's fault, not the host's: unchecked, building the record
        # refused it as an InvalidArgumentError.
        for seq, _ in entry.groups if isinstance(entry, ErasedSession) else ():
            plain = exact_int(seq)  # an int subclass as its number: its own comparisons are not trusted
            if plain is None or not 0 <= plain <= MAX_SEQ:
                raise ContractViolationError(
                    f"{name} reported removing group seq {shown_number(seq)}, which no group has "
                    f"(0 to {MAX_SEQ}); the erasure stops here"
                )
        # The session itself too: an entry naming no group (a snapshot removed) must be in the target.
        if (
            not isinstance(entry, ErasedSession)
            or not covers(target, entry.session)
            or not all(target.covers_group(entry.session, seq) for seq, _ in entry.groups)
        ):
            raise ContractViolationError(
                f"{name} reported removing groups outside {target.describe()}; the erasure stops here"
            )
    return report
