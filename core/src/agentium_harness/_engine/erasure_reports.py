"""What a store's ``erase`` reports, checked and merged into an erasure's record (docs/erasure.md).

Part of an erasure's step 4 (:mod:`.erasure`): every report a store's
``erase`` returns is checked against the port's contract first
(:func:`check_report`: a report breaking it is a
:class:`~agentium_harness.ContractViolationError`, and nothing of it is
kept), then added to the record (:func:`merge_report`: counts summed per
kind, the sessions' groups united, :func:`merge_sessions`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import attrs

from .._errors import ContractViolationError
from .._ports.erasure import (
    MAX_ERASE_RANGES,
    MAX_KIND_BYTES,
    MAX_REPORT_DETAIL_BYTES,
    MAX_REPORT_KINDS,
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
from .._scope import SessionKey
from .._validators import DIGEST_FORM, MAX_COUNT, MAX_SEQ, exact_int, lone_surrogate_at, shown_number
from .erasure_events import erasure_event
from .erasure_resume import store_counts, unite_sessions
from .erasure_scrub import PHYSICAL_RANK
from .lifecycle import covers

__all__ = ["check_report", "merge_report", "merge_sessions", "warn_unvouched"]

_log = logging.getLogger("agentium.engine.erasure")


def warn_unvouched(record: ErasureRecord, role: str, report: EraseReport) -> None:
    """Damage a store erased unread (groups with digest ``""``): a WARNING and an erasure span event.

    The erasure goes on (the operator asked to remove them), but what was stored
    was damaged and the tombstone cannot vouch for it. The record's id, the
    store's role and a count only: never a session id, a seq's content or a digest.
    """
    damaged = sum(1 for entry in report.sessions for _, digest in entry.groups if not digest)
    if not damaged:
        return
    _log.warning(
        "erasure %s: the %s store erased %d group(s) whose digest was damaged (recorded with none)",
        record.erasure_id,
        role,
        damaged,
    )
    erasure_event(
        "agentium.erasure.damaged_erased",
        {"agentium.erasure.store": role, "agentium.erasure.groups": damaged},
    )


def merge_report(record: ErasureRecord, role: str, adapter: str, report: EraseReport) -> ErasureRecord:
    """``record`` with one store call's report added: counts summed, sessions' groups united."""
    old = record.store(role) or StoreErasure(role, adapter)
    counts: dict[str, int] = {c.kind: c.count for c in old.counts}
    for item in report.counts:
        counts[item.kind] = counts.get(item.kind, 0) + item.count
    summed = store_counts(role, counts)  # within the bounds over its calls too, or refused
    physical = max(old.physical, report.physical, key=PHYSICAL_RANK.__getitem__)
    entry = StoreErasure(
        role,
        adapter,
        summed,
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
    """The store's report if it keeps the port's contract, else :class:`ContractViolationError`.

    What goes into the stored record is held to its form and bounds here, before anything of
    the report is kept: the counts (:data:`MAX_REPORT_KINDS` kinds at most, each a short name,
    each count an ``int`` from 0 to ``MAX_COUNT``), the ``detail`` (at most
    :data:`MAX_REPORT_DETAIL_BYTES`), the sessions (one per item at most: ``bound``), each
    group's seq and digest, and the runs of consecutive seqs each session's groups form (at most
    ``bound`` or :data:`MAX_ERASE_RANGES`, the larger): each becomes a range the record keeps.
    """
    name = f"the {role} store's erase"
    if not isinstance(report, EraseReport):
        raise ContractViolationError(f"{name} returned {type(report).__name__}, not an EraseReport")
    _check_counts(report.counts, name)
    _check_text(report.detail, f"{name}'s detail", MAX_REPORT_DETAIL_BYTES)
    items = report.removed - report.count("revision")
    if items > bound:
        raise ContractViolationError(f"{name} reported {items} items for a call bounded to {bound}")
    if not dry_run and report.status is EraseStatus.PARTIAL and items == 0:
        raise ContractViolationError(f"{name} said partial without removing anything; it would never end")
    # Each session listed stands for an item removed (a group, a snapshot): never more than the bound.
    if len(report.sessions) > bound:
        raise ContractViolationError(
            f"{name} listed {len(report.sessions)} sessions for a call bounded to {bound} items"
        )
    for entry in report.sessions:
        if not isinstance(entry, ErasedSession) or not isinstance(entry.session, SessionKey):
            raise ContractViolationError(
                f"{name} listed {type(entry).__name__} entries naming no session key; the erasure stops here"
            )
        for seq, digest in entry.groups:
            _check_group(seq, digest, name)
        _check_runs(entry.groups, bound, name)
        # The session itself too: an entry naming no group (a snapshot removed) must be in the target.
        if not covers(target, entry.session) or not all(
            target.covers_group(entry.session, seq) for seq, _ in entry.groups
        ):
            raise ContractViolationError(
                f"{name} reported removing groups outside {target.describe()}; the erasure stops here"
            )
    return report


def _check_group(seq: object, digest: object, name: str) -> None:
    # A seq no group has is the store's fault, not the host's: unchecked, building the record
    # refused it as an InvalidArgumentError.
    plain = exact_int(seq)  # an int subclass as its number: its own comparisons are not trusted
    if plain is None or not 0 <= plain <= MAX_SEQ:
        raise ContractViolationError(
            f"{name} reported removing group seq {shown_number(seq)}, which no group has "
            f"(0 to {MAX_SEQ}); the erasure stops here"
        )
    # The digest goes into the tombstone as it came: any other text (100 MB of it, another hash,
    # upper case) would be kept for good. Its text is never shown: a backend may fill it with content.
    # "" is the one other form: the store found no digest it can vouch for (the S3 archive's group
    # whose metadata is gone, a SQLite row whose digest is damaged, both erased all the same), and
    # the record says so rather than the erasure stopping on damage the operator asked to remove.
    if type(digest) is not str or (digest and DIGEST_FORM.fullmatch(digest) is None):
        shown = f"{len(digest)} characters of other text" if type(digest) is str else type(digest).__name__
        raise ContractViolationError(
            f"{name} reported group seq {plain} with a digest that is neither 'sha256:' and 64 "
            f"lowercase hex digits nor empty ({shown}); the erasure stops here"
        )


def _check_runs(groups: Sequence[tuple[int, str]], bound: int, name: str) -> None:
    # Each run of consecutive seqs is one range of the record, kept exact for good (the tombstone):
    # millions of scattered seqs made a record of millions of ranges. A store that keeps the contract
    # lists at most ``bound`` runs: each group an archive or a recall store removes is an item (at most
    # ``bound`` of them), and a snapshot's resident groups are consecutive but for the holes a groups
    # erasure left (a target names at most MAX_ERASE_RANGES ranges), the floor for the small bounds
    # (the verification's one-item check). Consecutive groups cost one range however many.
    most = max(bound, MAX_ERASE_RANGES)
    if len(groups) <= most:
        return  # never more runs than groups
    seqs = sorted({exact_int(seq) or 0 for seq, _ in groups})
    runs = 1 + sum(1 for before, after in itertools.pairwise(seqs) if after != before + 1)
    if runs > most:
        raise ContractViolationError(
            f"{name} listed {len(groups)} groups of one session in {runs} runs of consecutive seqs, each a "
            f"range the record keeps; a call bounded to {bound} items lists at most {most}. "
            "The erasure stops here"
        )


def _check_counts(counts: object, name: str) -> None:
    # Summed into the store's entry of the stored record, kind by kind: each kind is kept there.
    if not isinstance(counts, tuple) or len(counts) > MAX_REPORT_KINDS:
        shown = f"{len(counts)} counts" if isinstance(counts, tuple) else type(counts).__name__
        raise ContractViolationError(
            f"{name} reported {shown}; at most {MAX_REPORT_KINDS} kinds are kept. The erasure stops here"
        )
    for item in counts:
        if not isinstance(item, ErasedCount):
            raise ContractViolationError(f"{name} reported a {type(item).__name__} among its counts")
        _check_text(item.kind, f"{name}'s count kind", MAX_KIND_BYTES, name=True)
        plain = exact_int(item.count)
        if plain is None or not 0 <= plain <= MAX_COUNT:
            raise ContractViolationError(
                f"{name} reported a count of {shown_number(item.count)} (0 to {MAX_COUNT}); "
                "the erasure stops here"
            )


def _check_text(value: object, what: str, max_bytes: int, *, name: bool = False) -> None:
    """``value`` is text of at most ``max_bytes`` UTF-8 bytes the record can hold (a ``name``: one line)."""
    text = str.__str__(value) if isinstance(value, str) else None  # a subclass as the text it holds
    if text is None:
        raise ContractViolationError(f"{what} is a {type(value).__name__}, not a str; the erasure stops here")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes or (name and size == 0):
        raise ContractViolationError(
            f"{what} is {size} UTF-8 bytes ({1 if name else 0} to {max_bytes}); the erasure stops here"
        )
    if "\x00" in text or lone_surrogate_at(text) is not None or (name and not text.isprintable()):
        raise ContractViolationError(f"{what} is not valid text; the erasure stops here")
