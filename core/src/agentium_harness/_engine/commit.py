"""Step 8 of a turn: commit — archive what is over the resident bound, then save (R2, R3).

Write-ahead, then commit: the oldest complete groups over the bound go to
the archive first; every receipt's seq and digest is checked; only then is
the snapshot saved with compare-and-set on its revision. A failure anywhere
leaves the last committed state intact:

- an archive that fails or times out *defers* eviction: the new group
  commits, the boundary stays, the next commit retries;
- an archive that holds *different* groups at seqs this session never
  committed (another writer, a lost snapshot store) marks the session
  ``diverged``; nothing is overwritten and an operator reconciles it
  (:mod:`.maintenance`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

import attrs

from .._errors import ArchiveConflictError, ContractViolationError, EncodingError, SessionConflictError
from .._history import MessageGroup, ViewState
from .._json import MAX_JSON_BYTES
from .._observe import spans as observe
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._ports.sessions import (
    ArchivedDigest,
    ArchiveDivergence,
    SessionSnapshot,
    SessionStore,
    StoredSnapshot,
    add_archive_mark,
)
from .._ports.snapshot import MAX_DIVERGENCE_DETAIL_BYTES, seal_new_snapshot, snapshot_bytes
from .._ports.summary import SummaryState
from .._scope import Scope, SessionKey
from .._text import clean_text, cut_text, error_text
from .._validators import exact_int, shown_number
from .archive_receipts import archive_groups, checked_receipts
from .commit_fence import refuse_if_erased_since_load
from .commit_joint import (
    FENCED_COMMIT,
    CommitOutcome,
    broadcast_archived,
    fence_after_look,
    landed_joint,
    shares_transaction,
    transaction_fence,
)
from .hooks import HookBroadcaster
from .lifecycle import Ticket
from .limits import ResidentLimits
from .load import note_well_formed
from .resident import EvictionPlan, plan_eviction
from .results import CommitState, Diagnostic, EvictionStatus, Severity
from .settle import mark_commit_state, settle_save

__all__ = [
    "CommitOutcome",
    "archive_groups",
    "broadcast_archived",
    "check_revision",
    "commit",
    "plan_diagnostics",
]

_log = logging.getLogger("agentium.engine.commit")


def plan_diagnostics(plan: EvictionPlan) -> list[Diagnostic]:
    """Diagnostics for a plan's oversized groups and for an incomplete group that blocks eviction."""
    out = [
        Diagnostic(
            "oversized_group",
            f"group {seq} alone exceeds a resident bound; kept whole, never split",
            Severity.WARNING,
        )
        for seq in plan.oversized
    ]
    if plan.blocked_by_incomplete is not None:
        out.append(
            Diagnostic(
                "eviction_blocked_incomplete",
                f"group {plan.blocked_by_incomplete} is incomplete and cannot be archived; "
                "eviction stopped there",
                Severity.WARNING,
            )
        )
    return out


async def commit(
    ticket: Ticket,
    *,
    archive: HistoryArchive,
    store: SessionStore,
    hooks: HookBroadcaster | None,
    limits: ResidentLimits,
    key: SessionKey,
    scope: Scope | None,
    stored: StoredSnapshot | None,
    resident: Sequence[MessageGroup],
    boundary: int,
    next_seq: int,
    divergence: ArchiveDivergence | None = None,
    save_unchanged: bool = True,
    joint: bool = True,
    keep_receipts: bool = False,
    before_save: Callable[[], None] | None = None,
    on_settled: Callable[[CommitState, int | None], None] | None = None,
    view: ViewState | None = None,
    summary: SummaryState | None = None,
    told: Mapping[CommitState, str] | None = None,
) -> CommitOutcome:
    """Archive the groups over the resident bound, check every receipt, then save with compare-and-set.

    ``save_unchanged=False`` (maintenance flushes) skips the save when nothing
    was archived, so a flush that achieved nothing does not bump the revision.

    When the session store declares ``joint_archive_commit`` and shares a
    transaction with the archive (the built-in SQLite pair on one file), the
    append and the save are one atomic transaction instead of two: one
    fsynced commit per turn, and still never a boundary past what is
    archived. ``joint=False`` forces the separate calls.

    ``before_save`` is called right before the snapshot is written (a run
    marks its commit state ``unknown`` from then until the save settles).
    ``on_settled`` is told as soon as that is known: ``committed`` (and the
    revision) once the save stands, before any await after it (the archived-groups hook, receipts read
    again: a cancellation there is of a committed write), ``not_committed``
    when a joint commit read back as not landed is retried as separate calls.

    ``keep_receipts`` (a summarizer is configured) saves the digest of each
    group archived here in the snapshot, with the boundary move
    (``SessionSnapshot.receipts``): the summary frontier checks what it reads
    back against them. Receipts the summary has already passed are dropped.

    ``view`` and ``summary``, when given, replace the stored view state and
    task summary in the saved snapshot (a retraction or a view reset);
    otherwise both are carried over unchanged.

    ``told`` words what a failed save's ``commit_state`` means (a turn's words by default).
    """
    # Nearly every commit replaces neither: the one record for that (frozen), not a new one each time.
    changes = _NO_CHANGES if view is None and summary is None else _Changes(view, summary)
    plan = plan_eviction(resident, limits)
    if plan.evict:
        _log.debug("evicting %d group(s) over the resident bound", len(plan.evict))
    diagnostics = plan_diagnostics(plan)
    keep: tuple[MessageGroup, ...] = tuple(resident)
    new_boundary = boundary
    receipts: tuple[ArchiveReceipt, ...] = ()
    eviction = EvictionStatus.NOT_NEEDED
    # Whether the erasure fence was read again (.commit_fence): before archiving, else before saving.
    fenced = divergence is None and bool(plan.evict)
    if divergence is not None:
        eviction = EvictionStatus.DIVERGED
        diagnostics.append(_diverged_diagnostic(divergence))
    elif plan.evict and joint and shares_transaction(store, archive):
        # One transaction does not make the load fresh: an erasure under way has the snapshot
        # still to erase, and the id erased and used again can be back at the loaded revision,
        # so the compare-and-set would pass and write the erased groups back (.commit_fence).
        # A store that can checks it inside the transaction itself (commit_joint.transaction_fence).
        fence = transaction_fence(ticket, store, key)
        if fence is None:
            await refuse_if_erased_since_load(ticket, store, key, stored)
        moves = 0
        while True:
            try:
                joined = await _joint_commit(
                    ticket,
                    archive,
                    store,
                    key,
                    scope,
                    stored,
                    plan,
                    next_seq,
                    keep_receipts,
                    before_save,
                    changes,
                    fence,
                )
            except ArchiveConflictError as exc:
                # Nothing was written; record the divergence with a separate save below.
                divergence = _divergence(plan, exc)
                eviction = EvictionStatus.DIVERGED
                diagnostics.append(_diverged_diagnostic(divergence, exc))
            except Exception as exc:
                # The transaction may have landed although the call failed: settle that first, so a
                # landed commit is neither reported failed nor retried into a conflict.
                landed = plan.keep[0].seq if plan.keep else next_seq
                digests = [(g.seq, g.digest) for g in plan.evict] if keep_receipts else []
                kept = _kept_receipts(stored, digests)
                saved = _sealed(scope, stored, landed, next_seq, plan.keep, None, kept, changes)
                settled = await settle_save(
                    ticket, store, key, saved, _expected(stored), _new(stored, resident), exc, archive
                )
                if on_settled is not None and settled.state is not CommitState.UNKNOWN:
                    # Landed; or not: the separate calls start afresh.
                    on_settled(settled.state, settled.revision)
                if settled.state is CommitState.COMMITTED:
                    found = await landed_joint(ticket, archive, hooks, key, plan, landed, settled, exc)
                    return attrs.evolve(found, diagnostics=(*diagnostics, *found.diagnostics), receipts=kept)
                if settled.state is CommitState.UNKNOWN or isinstance(exc, SessionConflictError):
                    raise mark_commit_state(exc, settled.state, settled.how, told=told)  # noqa: B904 - marked
                # The joint transaction failed for another reason: take the
                # ordinary path, which defers eviction if the archive really is down.
                outcome = await commit(
                    ticket,
                    archive=archive,
                    store=store,
                    hooks=hooks,
                    limits=limits,
                    key=key,
                    scope=scope,
                    stored=stored,
                    resident=resident,
                    boundary=boundary,
                    next_seq=next_seq,
                    save_unchanged=save_unchanged,
                    joint=False,
                    keep_receipts=keep_receipts,
                    before_save=before_save,
                    on_settled=on_settled,
                    view=view,
                    summary=summary,
                    told=told,
                )
                note = Diagnostic(
                    "joint_commit_failed",
                    f"the joint archive-and-save transaction failed ({error_text(exc)}); "
                    "retried as separate calls",
                    Severity.WARNING,
                )
                return attrs.evolve(outcome, diagnostics=(note, *outcome.diagnostics))
            else:
                if joined is None:
                    # The erasure ledger moved since the load (or the last look): nothing was
                    # written. The look as for any store: it refuses, or the commit runs again,
                    # fenced at the revision that look saw (commit_joint.fence_after_look).
                    if on_settled is not None:
                        on_settled(CommitState.NOT_COMMITTED, None)
                    moves += 1
                    looked = await refuse_if_erased_since_load(ticket, store, key, stored)
                    fence = fence_after_look(fence, looked, moves)
                    continue
                if on_settled is not None:
                    on_settled(CommitState.COMMITTED, joined.revision)
                extra = (
                    await broadcast_archived(hooks, key, joined.archived, plan.evict, ticket.hook_timeout_s)
                    if hooks is not None
                    else []
                )
                notes = (*diagnostics, *extra)
                return attrs.evolve(joined, diagnostics=notes) if notes else joined
            break  # an archive conflict: recorded with a separate save below
    elif plan.evict:
        # An erasure another process ran since the load would get the erased groups back (.commit_fence).
        await refuse_if_erased_since_load(ticket, store, key, stored)
        try:
            receipts = await archive_groups(ticket, archive, key, plan.evict)
        except ArchiveConflictError as exc:
            divergence = _divergence(plan, exc)
            eviction = EvictionStatus.DIVERGED
            diagnostics.append(_diverged_diagnostic(divergence, exc))
        except Exception as exc:
            eviction = EvictionStatus.DEFERRED
            code = (
                "archive_contract_violation"
                if isinstance(exc, ContractViolationError)
                else "eviction_deferred"
            )
            diagnostics.append(
                Diagnostic(
                    code,
                    f"eviction of {len(plan.evict)} group(s) deferred, boundary unchanged: {error_text(exc)}",
                    Severity.WARNING,
                )
            )
        else:
            eviction = EvictionStatus.ARCHIVED
            keep = plan.keep
            new_boundary = plan.keep[0].seq if plan.keep else next_seq
    if (
        not save_unchanged
        and stored is not None
        and not receipts
        and divergence == stored.snapshot.divergence
        and changes == _NO_CHANGES
    ):
        return CommitOutcome(
            stored.revision,
            boundary,
            keep,
            (),
            eviction,
            tuple(diagnostics),
            receipts=stored.snapshot.receipts,
        )
    if not fenced:
        # Not read above (nothing to archive): a save alone needs the look as well, as the erased
        # id used again can be back at the loaded revision and the compare-and-set would then put
        # the erased session over the new one (.commit_fence).
        await refuse_if_erased_since_load(ticket, store, key, stored)
    kept = _kept_receipts(stored, [(r.seq, r.digest) for r in receipts] if keep_receipts else [])
    snapshot = _sealed(scope, stored, new_boundary, next_seq, keep, divergence, kept, changes)
    if before_save is not None:
        before_save()
    new = _new(stored, resident)
    revision = await _save(ticket, store, archive, key, snapshot, stored, new, diagnostics, told)
    if on_settled is not None:
        on_settled(CommitState.COMMITTED, revision)
    archived_groups = plan.evict if receipts else ()
    if receipts and hooks is not None:
        diagnostics.extend(
            await broadcast_archived(hooks, key, receipts, archived_groups, ticket.hook_timeout_s)
        )
    return CommitOutcome(
        revision, new_boundary, keep, receipts, eviction, tuple(diagnostics), archived_groups, kept
    )


def _expected(stored: StoredSnapshot | None) -> int | None:
    """The revision a save must find (``None``: the session must not exist yet)."""
    return None if stored is None else stored.revision


def _new(stored: StoredSnapshot | None, resident: Sequence[MessageGroup]) -> tuple[MessageGroup, ...]:
    """The groups this commit adds to the session (none for a maintenance flush)."""
    first = stored.snapshot.next_seq if stored is not None else 0
    return tuple(g for g in resident if g.seq >= first)


async def _save(
    ticket: Ticket,
    store: SessionStore,
    archive: HistoryArchive,
    key: SessionKey,
    snapshot: SessionSnapshot,
    stored: StoredSnapshot | None,
    new_groups: tuple[MessageGroup, ...],
    diagnostics: list[Diagnostic],
    told: Mapping[CommitState, str] | None = None,
) -> int:
    """Save with compare-and-set; a save that raises is settled by reading back before anything is said.

    A save found to have landed returns its revision (diagnostic
    ``save_settled``); otherwise the save's error is raised carrying
    ``commit_state`` ``not_committed`` or ``unknown``.
    """
    expected = _expected(stored)
    try:
        answer = await ticket.call(
            "session save", lambda ctx: store.save(key, snapshot, expected, ctx), hops_only=(store, "save")
        )
        revision = check_revision(answer, expected)
    except Exception as exc:
        settled = await settle_save(ticket, store, key, snapshot, expected, new_groups, exc, archive)
        if settled.state is not CommitState.COMMITTED:
            raise mark_commit_state(exc, settled.state, settled.how, told=told)  # noqa: B904 - the same error, marked
        assert settled.revision is not None
        broken = isinstance(exc, ContractViolationError)
        diagnostics.append(
            Diagnostic(
                "save_settled",
                f"the session save raised {error_text(exc)}; {settled.how}, so the turn is "
                "committed" + ("; the session store broke its contract" if broken else ""),
                Severity.ERROR if broken else Severity.WARNING,
            )
        )
        return settled.revision
    return revision


async def _joint_commit(
    ticket: Ticket,
    archive: HistoryArchive,
    store: SessionStore,
    key: SessionKey,
    scope: Scope | None,
    stored: StoredSnapshot | None,
    plan: EvictionPlan,
    next_seq: int,
    keep_receipts: bool,
    before_save: Callable[[], None] | None,
    changes: _Changes,
    fence: tuple[SessionKey, int | None] | None = None,
) -> CommitOutcome | None:
    """Archive the plan's groups and save the new snapshot in one transaction; check the answer.

    With ``fence`` the store checks the commit fence inside the transaction
    (:func:`.commit_joint.transaction_fence`); ``None``: it moved, nothing was written.
    """
    new_boundary = plan.keep[0].seq if plan.keep else next_seq
    # The snapshot is written in the same transaction as the groups, before
    # their receipts exist: it keeps the digests the archive must acknowledge,
    # which the receipts are checked against right after.
    kept = _kept_receipts(stored, [(g.seq, g.digest) for g in plan.evict] if keep_receipts else [])
    snapshot = _sealed(scope, stored, new_boundary, next_seq, plan.keep, None, kept, changes)
    expected = _expected(stored)
    if before_save is not None:
        before_save()
    attributes = {"agentium.eviction.groups": len(plan.evict), "agentium.eviction.joint": True}
    with observe.stage("eviction", attributes):
        if fence is None:
            answer, raw = await ticket.call(
                "session commit with archive",
                lambda ctx: store.commit_with_archive(archive, key, plan.evict, snapshot, expected, ctx),
                hops_only=(store, "commit_with_archive"),
            )
        else:
            fenced = getattr(store, FENCED_COMMIT)
            found = await ticket.call(
                "session commit with archive",
                lambda ctx: fenced(archive, key, plan.evict, snapshot, expected, fence, ctx),
                hops_only=(store, FENCED_COMMIT),
            )
            if found is None:
                return None
            answer, raw = found
        # Checked like separate calls, although after the commit: a store that
        # answers wrongly here is broken, and the run says so loudly.
        receipts = checked_receipts(plan.evict, tuple(raw))
    revision = check_revision(answer, expected)
    note_well_formed(key, snapshot)  # its next load, handed this object back, need not check its shape
    return CommitOutcome(
        revision, new_boundary, plan.keep, receipts, EvictionStatus.ARCHIVED, (), plan.evict, kept
    )


@attrs.frozen(slots=True)
class _Changes:
    """What a commit replaces besides history: the view state and the task summary (``None``: kept)."""

    view: ViewState | None = None
    summary: SummaryState | None = None


_NO_CHANGES: Final = _Changes()


def _sealed(
    scope: Scope | None,
    stored: StoredSnapshot | None,
    boundary: int,
    next_seq: int,
    resident: tuple[MessageGroup, ...],
    divergence: ArchiveDivergence | None,
    receipts: tuple[ArchivedDigest, ...],
    changes: _Changes,
) -> SessionSnapshot:
    """The sealed snapshot to save; without a scope (maintenance) the stored one's is kept.

    The last line before a write: a snapshot larger than a session store's
    strict decoder reads back (``MAX_JSON_BYTES``) would be saved and then
    never load again, so it is refused with :class:`EncodingError` before
    anything is written (the turn checks its parts' sizes long before).
    """
    memory_scope = scope if scope is not None else (stored.snapshot.memory_scope if stored else None)
    old = stored.snapshot if stored is not None else None
    marks = old.archived if old is not None else None
    if boundary > (old.boundary if old is not None else 0):
        # When these groups were archived: what retention by age reads (docs/erasure.md).
        marks = add_archive_mark(marks, boundary, datetime.now(UTC))
    sealed = seal_new_snapshot(
        memory_scope=memory_scope,
        boundary=boundary,
        next_seq=next_seq,
        resident=resident,
        divergence=divergence,
        # The task summary is carried over unchanged: only a summary update moves it, or a
        # retraction or reset that restarts it (its text may describe what left the view).
        summary=changes.summary if changes.summary is not None else (old.summary if old else None),
        receipts=receipts,
        view=changes.view if changes.view is not None else (old.view if old else None),
        # Erased groups stay erased: only an erasure adds to them (docs/erasure.md).
        erased=old.erased if old else None,
        archived=marks,
    )
    size = len(snapshot_bytes(sealed))  # kept with the snapshot: the store writes these bytes
    if size > MAX_JSON_BYTES:
        error = EncodingError(
            f"the session snapshot would be {size} bytes of JSON, over the {MAX_JSON_BYTES} a session store "
            "reads back (MAX_JSON_BYTES): saved, the session could never be loaded again; nothing was written"
        )
        error.commit_state = CommitState.NOT_COMMITTED
        raise error
    return sealed


def _divergence(plan: EvictionPlan, exc: ArchiveConflictError) -> ArchiveDivergence:
    """The divergence an archive's conflict records: the groups to evict, the conflict by its class.

    The record is committed (the snapshot holds it until reconciled): the archive's message, which may
    name another tenant's rows, is never in it; the ``archive_diverged`` diagnostic says it to the host.
    """
    # Cut here: the record itself takes a detail up to the stored bound (earlier versions' whole
    # messages), and no new record may hold more than MAX_DIVERGENCE_DETAIL_BYTES.
    said = f"{clean_text(type(exc).__name__)} (the archive's conflict; its text is not committed)"
    detail = cut_text(said, MAX_DIVERGENCE_DETAIL_BYTES)[0]
    return ArchiveDivergence(seqs=tuple(g.seq for g in plan.evict), detail=detail)


def _kept_receipts(
    stored: StoredSnapshot | None, archived: Sequence[tuple[int, str]]
) -> tuple[ArchivedDigest, ...]:
    """The stored receipt digests the summary frontier has not passed, and those of the groups just archived.

    A seq already held keeps the digest acknowledged first: nothing here
    may replace what an earlier eviction recorded.
    """
    held = stored.snapshot.receipts if stored is not None else ()
    if not held and not archived:
        return ()  # no summarizer: nothing is ever kept
    summary = stored.snapshot.summary if stored is not None else None
    frontier = summary.summary.frontier if summary is not None else 0
    kept = {r.seq: r for r in held if r.seq >= frontier}
    for seq, digest in archived:
        if seq >= frontier:
            kept.setdefault(seq, ArchivedDigest(seq, digest))
    return tuple(kept[seq] for seq in sorted(kept))


def check_revision(revision: object, expected: int | None) -> int:
    """The revision a save returned, as an exact ``int`` past ``expected``; else a contract violation.

    A subclass is read as the int it holds: its own ``__le__`` could pass the bound, and
    its ``__eq__`` then answer the next compare-and-set otherwise.
    """
    exact = revision if type(revision) is int else exact_int(revision)
    if exact is None or exact < 1 or (expected is not None and exact <= expected):
        raise ContractViolationError(
            f"session store returned revision {shown_number(revision)} after saving on revision {expected}"
        )
    return exact


def _diverged_diagnostic(
    divergence: ArchiveDivergence, exc: ArchiveConflictError | None = None
) -> Diagnostic:
    """The ``archive_diverged`` note: the record's detail, and the archive's message when it just conflicted.

    The message (cut to the record's bound) is the host's, in the run's result: never committed.
    """
    said = (
        "" if exc is None else ": " + cut_text(error_text(exc, named=False), MAX_DIVERGENCE_DETAIL_BYTES)[0]
    )
    return Diagnostic(
        "archive_diverged",
        f"the archive holds different groups at seq(s) {list(divergence.seqs)[:5]} that this session "
        "never committed; eviction is stopped and the session needs reconciliation "
        "(agentium session reconcile): " + divergence.detail + said,
        Severity.ERROR,
    )
