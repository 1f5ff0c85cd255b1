"""Maintenance outside a turn: close a session, flush, migrate, inspect, reconcile.

Each function here runs inside an admitted operation (:class:`.lifecycle.Ticket`)
so shutdown can cancel it like a run, and every adapter call in it is bounded.
"""

from __future__ import annotations

import enum
from functools import partial
from typing import TYPE_CHECKING

import attrs

from .._errors import ArchiveError, CapabilityError, ContractViolationError
from .._history import MessageGroup, RetractedSpan, TurnInterruption, ViewState
from .._observe.turn import traced_operation
from .._ports._base import capabilities_of
from .._ports.archive import HistoryArchive, check_archived_group
from .._ports.erasure import ErasureRecord, SeqRange
from .._ports.recall import RecallStore
from .._ports.sessions import ArchiveDivergence, SessionStore, seal_snapshot
from .._ports.summary import SummaryState
from .._scope import RecallScope, Scope, SessionKey, VerifiedIdentity, require_identity
from .._validators import shown_number
from .adapter_lists import adapter_method, read_on
from .archive_index import index_archived
from .arguments import check_attest, run_scope
from .commit import commit
from .embedding import Hybrid
from .erasure_index import finished_covering
from .erasure_ledger import pending_records
from .hooks import HookBroadcaster
from .lifecycle import Ticket, covers
from .limits import ResidentLimits
from .load import load_session
from .maintenance_state import MAINTENANCE_TOLD, RECONCILE_TOLD, maintenance_errors, save_settled
from .resident import plan_eviction
from .results import Diagnostic, Severity
from .unexpected import WriteProgress

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = [
    "MigrationReport",
    "ReconcileReport",
    "SessionState",
    "SessionView",
    "flush_session",
    "inspect_session",
    "migrate_admitted",
    "migrate_session",
    "reconcile_session",
]

#: Archive groups read per page while reconciling, and in total at most.
_RECONCILE_PAGE = 64
_RECONCILE_MAX_GROUPS = 100_000


class SessionState(enum.StrEnum):
    """What an operator needs to know about a stored session."""

    ABSENT = "absent"
    OK = "ok"
    LEGACY = "legacy"
    #: Resident history is over its bound: an eviction was deferred and will be retried.
    EVICTION_PENDING = "eviction_pending"
    #: The archive disagrees with the session; runs are refused until reconciled.
    DIVERGED = "diverged"
    #: An erasure covering the session is pending; runs are refused until it completes.
    ERASING = "erasing"


@attrs.frozen(slots=True)
class SessionView:
    """A read-only view of a stored session, for inspection."""

    exists: bool
    revision: int | None
    boundary: int
    next_seq: int
    resident_seqs: tuple[int, ...]
    archived_count: int
    memory_scope: Scope | None
    format_version: int | None
    state: SessionState = SessionState.OK
    divergence: ArchiveDivergence | None = None
    #: The stored task summary and its coverage gaps, if the session has one (``None`` while an
    #: erasure covering the session is pending: its text may be what the erasure removes).
    summary: SummaryState | None = None
    #: Resident groups committed without an answer because the turn stopped after its tools ran:
    #: ``(seq, why)`` pairs (the group's ``retained.interruption``).
    interrupted: tuple[tuple[int, TurnInterruption], ...] = ()
    #: The seq the session's view starts at: the group after its latest ``reset_view`` (0 when none).
    view_start: int = 0
    #: How many messages retractions took out of the current view (none is deleted).
    retracted: int = 0
    #: Archived groups of the session an erasure removed (retention, a forgotten fact's sources).
    erased: tuple[SeqRange, ...] = ()
    #: The erasures covering the session — its own, its user's, its tenant's — pending or complete
    #: (their tombstones, without the per-session lists: ``erasure_status`` has those).
    erasures: tuple[ErasureRecord, ...] = ()


@attrs.frozen(slots=True)
class MigrationReport:
    """What a legacy-scope migration changed."""

    changed: bool
    previous_revision: int | None
    revision: int | None
    memory_scope: Scope | None
    message: str


@attrs.frozen(slots=True)
class ReconcileReport:
    """What reconciling a diverged session did.

    ``adopted_seqs`` are the archive's groups (the other copy) that are now part
    of canonical history below the boundary; ``renumbered`` maps each of this
    session's resident groups that the archive never had, as ``(old, new)``
    seq, now placed after them. Nothing was deleted from either copy.
    """

    changed: bool
    previous_revision: int | None
    revision: int | None
    boundary: int
    adopted_seqs: tuple[int, ...]
    renumbered: tuple[tuple[int, int], ...]
    message: str
    diagnostics: tuple[Diagnostic, ...] = ()


async def inspect_session(
    ticket: Ticket, store: SessionStore, limits: ResidentLimits, key: SessionKey
) -> SessionView:
    """Boundary, resident groups, state, revision and erasures of a stored session (read-only)."""
    stored, snap = await load_session(ticket, store, key, None, attest_legacy=False, fence=False)
    pending = [r for r in await pending_records(ticket, store, key.tenant) if covers(r.target, key)]
    erasures = (*await finished_covering(ticket, store, key), *pending)
    if pending:
        state = SessionState.ERASING
    elif stored is None:
        state = SessionState.ABSENT
    elif snap.divergence is not None:
        state = SessionState.DIVERGED
    elif snap.memory_scope is None:
        state = SessionState.LEGACY
    elif plan_eviction(snap.resident, limits).evict:
        state = SessionState.EVICTION_PENDING
    else:
        state = SessionState.OK
    return SessionView(
        exists=stored is not None,
        revision=None if stored is None else stored.revision,
        boundary=snap.boundary,
        next_seq=snap.next_seq,
        resident_seqs=tuple(g.seq for g in snap.resident),
        archived_count=snap.boundary,
        memory_scope=snap.memory_scope,
        format_version=None if stored is None else snap.format_version,
        state=state,
        divergence=snap.divergence,
        # Fenced like a read while an erasure covering it is pending: its text may be what goes.
        summary=None if pending else snap.summary,
        interrupted=tuple(
            (g.seq, g.retained.interruption)
            for g in snap.resident
            if g.retained is not None and g.retained.interruption is not None
        ),
        view_start=snap.view.start if snap.view is not None else 0,
        retracted=snap.view.retracted if snap.view is not None else 0,
        erased=snap.erased or (),
        erasures=erasures,
    )


async def flush_session(
    ticket: Ticket,
    *,
    archive: HistoryArchive,
    store: SessionStore,
    hooks: HookBroadcaster | None,
    limits: ResidentLimits,
    key: SessionKey,
    diagnostics: list[Diagnostic],
    recall: RecallStore | None = None,
    keep_receipts: bool = False,
    hybrid: Hybrid | None = None,
    progress: WriteProgress | None = None,
) -> tuple[int, int]:
    """Retry deferred eviction for a session; return (groups flushed, groups still resident).

    Saves only when something was archived, so a flush that achieved nothing
    leaves the revision as it was. A ``recall`` store that declares
    ``archive_indexing`` indexes what the flush archived, as after a run.
    ``keep_receipts`` keeps the archive's digests for the summary frontier,
    as a run's commit does (:func:`.commit.commit`). ``progress`` follows its
    save (what an error must say was committed).
    """
    stored, snap = await load_session(ticket, store, key, None, attest_legacy=False)
    if stored is None:
        diagnostics.append(Diagnostic("no_session", "no stored session; nothing to flush"))
        return 0, 0
    if snap.memory_scope is None:
        over = bool(plan_eviction(snap.resident, limits).evict)
        diagnostics.append(
            Diagnostic(
                "legacy_not_flushed",
                "legacy snapshot without scope; migrate it before flushing"
                + ("; resident history is over its bound and nothing was archived" if over else ""),
                Severity.ERROR if over else Severity.INFO,
            )
        )
        return 0, len(snap.resident)
    if snap.divergence is None and not plan_eviction(snap.resident, limits).evict:
        return 0, len(snap.resident)
    outcome = await commit(
        ticket,
        archive=archive,
        store=store,
        hooks=hooks,
        limits=limits,
        key=key,
        scope=snap.memory_scope,
        stored=stored,
        resident=snap.resident,
        boundary=snap.boundary,
        next_seq=snap.next_seq,
        divergence=snap.divergence,
        save_unchanged=False,
        keep_receipts=keep_receipts,
        before_save=None if progress is None else progress.saving,
        on_settled=None if progress is None else progress.settled,
        told=MAINTENANCE_TOLD,  # a failed flush is the session's own save, not a turn's
    )
    if progress is not None and outcome.revision != stored.revision:
        progress.committed()  # saved: what follows (indexing what it archived) cannot undo it
    diagnostics.extend(outcome.diagnostics)
    if outcome.archived_groups:
        diagnostics.extend(
            await index_archived(
                recall,
                ticket,
                key,
                outcome.archived_groups,
                outcome.archived,
                archive,
                hybrid=hybrid,
                erased=snap.erased or (),
            )
        )
    return len(outcome.archived), len(outcome.resident)


async def migrate_admitted(
    runtime: HarnessRuntime,
    identity: VerifiedIdentity,
    session_id: str,
    recall_scope: RecallScope | None,
    *,
    attest: bool,
) -> MigrationReport:
    """``runtime.migrate_legacy_session``: admitted like a run; every error says what it saved.

    A span of its own (``agentium.migration``); an error leaving it once its
    arguments are checked (a damaged snapshot, a scope that differs) is a WARNING.
    """
    progress = WriteProgress()
    with maintenance_errors("migrate_legacy_session", progress):
        scope = run_scope(identity, session_id, recall_scope)
        check_attest(attest)
    key = scope.session_key
    operation = traced_operation(
        runtime, "migration", key.tenant, key.user, key.session, name="agentium.migration"
    )
    with operation, maintenance_errors("migrate_legacy_session", progress):
        try:
            async with runtime.parts.admission.admit(key, "migration") as ticket:
                return await migrate_session(
                    ticket, runtime.session_store, key, scope, attest=attest, progress=progress
                )
        except Exception as exc:
            operation.failed(exc, getattr(exc, "commit_state", None) or progress.commit_state)
            raise
    raise AssertionError("unreachable")  # pragma: no cover - admit() re-raises a cancellation


async def inspect_admitted(runtime: HarnessRuntime, key: SessionKey) -> SessionView:
    """``runtime.inspect_session``: admitted shared, under a span of its own (``agentium.inspection``).

    An error leaving it (a snapshot that fails closed on damage) is a WARNING, as a history read's.
    """
    operation = traced_operation(
        runtime, "inspection", key.tenant, key.user, key.session, name="agentium.inspection"
    )
    with operation:
        try:
            async with runtime.parts.admission.admit_shared(key, "inspection") as ticket:
                return await inspect_session(ticket, runtime.session_store, runtime.limits.resident, key)
        except Exception as exc:
            operation.failed(exc)
            raise
    raise AssertionError("unreachable")  # pragma: no cover - admit_shared() re-raises a cancellation


async def migrate_session(
    ticket: Ticket,
    store: SessionStore,
    key: SessionKey,
    scope: Scope,
    *,
    attest: bool,
    progress: WriteProgress | None = None,
) -> MigrationReport:
    """Stamp a legacy snapshot with its verified memory scope at the current format (R15, R43).

    A save that raises is read back first (:func:`.maintenance_state.save_settled`):
    one that landed is a migration, otherwise the error says ``not_committed``
    (another writer's revision: the compare-and-set refused it) or ``unknown``.
    """
    stored, snap = await load_session(ticket, store, key, scope, attest_legacy=attest)
    if stored is None:
        return MigrationReport(False, None, None, None, "no stored session; nothing to migrate")
    if snap.memory_scope is not None:
        return MigrationReport(
            False, stored.revision, stored.revision, snap.memory_scope, "already scoped; unchanged"
        )
    stamped = seal_snapshot(attrs.evolve(snap, memory_scope=scope))
    if progress is not None:
        progress.saving()
    revision, settled = await save_settled(ticket, store, key, stamped, stored.revision)
    if progress is not None:
        progress.committed()
    message = "legacy snapshot stamped with the attested scope"
    return MigrationReport(
        True,
        stored.revision,
        revision,
        scope,
        f"{message} (the save raised; {settled})" if settled else message,
    )


async def reconcile_admitted(
    runtime: HarnessRuntime, identity: VerifiedIdentity, session_id: str
) -> ReconcileReport:
    """``runtime.reconcile_session``: admitted like a run, under the runtime's telemetry.

    A span of its own (``agentium.reconciliation``) is the parent of its
    admission and adapter-call spans, and the report's diagnostics (an eviction
    deferred, a hook that failed) are span events and log records, as a run's.
    Every error says whether its save landed (``commit_state``).
    """
    progress = WriteProgress()
    with maintenance_errors("reconcile_session", progress):  # a refused identity: nothing was saved
        key = SessionKey.of(require_identity(identity), session_id)
    operation = traced_operation(
        runtime, "reconciliation", key.tenant, key.user, key.session, name="agentium.reconciliation"
    )
    with operation, maintenance_errors("reconcile_session", progress):
        try:
            async with runtime.parts.admission.admit(key, "reconciliation") as ticket:
                report = await reconcile_session(
                    ticket,
                    archive=runtime.archive,
                    store=runtime.session_store,
                    hooks=runtime.parts.hooks,
                    limits=runtime.limits.resident,
                    key=key,
                    keep_receipts=runtime.summarizer is not None,
                    progress=progress,
                )
        except Exception as exc:  # a snapshot damaged, a store's error: a WARNING, as a write's failure
            operation.failed(exc, getattr(exc, "commit_state", None) or progress.commit_state)
            raise
        operation.report(report.diagnostics)
        return report
    raise AssertionError("unreachable")  # pragma: no cover - admit() re-raises a cancellation


async def reconcile_session(
    ticket: Ticket,
    *,
    archive: HistoryArchive,
    store: SessionStore,
    hooks: HookBroadcaster | None,
    limits: ResidentLimits,
    key: SessionKey,
    keep_receipts: bool = False,
    progress: WriteProgress | None = None,
) -> ReconcileReport:
    """Resolve a diverged session without losing either copy.

    The archive is append-only, so its groups at this session's uncommitted
    seqs stay where they are and become canonical history below the boundary.
    This session's resident groups that the archive does not hold identically
    are renumbered to follow them (they were never archived, so no receipt
    names their old seqs), and the snapshot is saved with compare-and-set.
    Needs an archive that declares ``bounded_reads``.
    """
    if not getattr(capabilities_of(archive), "bounded_reads", False):
        raise CapabilityError(
            f"archive {type(archive).__name__} does not declare bounded_reads; reconciliation needs to "
            "read the archive's copy of the diverged groups"
        )
    stored, snap = await load_session(ticket, store, key, None, attest_legacy=False)
    if stored is None or snap.memory_scope is None:
        what = "no stored session" if stored is None else "a legacy snapshot (migrate it first)"
        return ReconcileReport(
            False,
            None if stored is None else stored.revision,
            None if stored is None else stored.revision,
            snap.boundary,
            (),
            (),
            f"{what}; nothing to reconcile",
        )
    archived = await _read_from(ticket, archive, key, snap.boundary)
    ours = {g.seq: g for g in snap.resident}
    adopted = tuple(g.seq for g in archived if ours.get(g.seq) is None or ours[g.seq].digest != g.digest)
    if not adopted and snap.divergence is None:
        return ReconcileReport(
            False,
            stored.revision,
            stored.revision,
            snap.boundary,
            (),
            (),
            "the archive agrees with the session; nothing to reconcile",
        )
    archived_seqs = {g.seq: g.digest for g in archived}
    new_boundary = archived[-1].seq + 1 if archived else snap.boundary
    kept: list[MessageGroup] = []
    renumbered: list[tuple[int, int]] = []
    for group in snap.resident:
        if archived_seqs.get(group.seq) == group.digest:
            continue  # already archived identically: it is canonical history at its seq
        new_seq = new_boundary + len(kept)
        kept.append(attrs.evolve(group, seq=new_seq))
        if new_seq != group.seq:
            renumbered.append((group.seq, new_seq))
    outcome = await commit(
        ticket,
        archive=archive,
        store=store,
        hooks=hooks,
        limits=limits,
        key=key,
        scope=snap.memory_scope,
        stored=stored,
        resident=kept,
        boundary=new_boundary,
        next_seq=new_boundary + len(kept),
        divergence=None,
        keep_receipts=keep_receipts,
        view=_renumbered_view(snap.view, dict(renumbered)),
        before_save=None if progress is None else progress.saving,
        on_settled=None if progress is None else progress.settled,
        told=RECONCILE_TOLD,  # a failed save is reconcile's own, not a turn's
    )
    if progress is not None:
        progress.committed()
    return ReconcileReport(
        True,
        stored.revision,
        outcome.revision,
        outcome.boundary,
        adopted,
        tuple(renumbered),
        f"kept the archive's {len(adopted)} group(s) and renumbered {len(renumbered)} resident group(s) "
        "after them; nothing was deleted",
        outcome.diagnostics,
    )


def _renumbered_view(view: ViewState | None, moved: dict[int, int]) -> ViewState | None:
    """The view with the seqs of renumbered groups moved (``None`` when there is no view to move).

    Renumbering keeps the order of the groups it moves, so the spans stay
    ascending. The control records inside renumbered groups keep naming the
    seqs they were committed with; the reconcile report lists the moves.
    """
    if view is None or not moved:
        return None

    def at(seq: int) -> int:
        return moved.get(seq, seq)

    return ViewState(
        start=at(view.start - 1) + 1 if view.start > 0 else 0,
        spans=tuple(RetractedSpan(at(s.first_seq), s.first_index, at(s.last_seq)) for s in view.spans),
        retracted=view.retracted,
    )


async def _read_from(
    ticket: Ticket, archive: HistoryArchive, key: SessionKey, start: int
) -> list[MessageGroup]:
    """Every archived group from ``start``, contiguous, checked; bounded in pages and in total."""
    out: list[MessageGroup] = []
    seq = start
    while True:
        who = adapter_method("archive", archive, "read_groups")
        # Read to one past the page at most: reconcile writes what it read, so an answer over its
        # bound (or one that never ends) is refused before any of it is kept. A shorter answer is
        # read on (an archive may bound a call's bytes): only an empty one ends the archive, or
        # reconcile would set the boundary below archived groups and renumber resident ones onto them.
        page = await read_on(
            lambda at, n: ticket.call("archive read", partial(archive.read_groups, key, at, n)),
            seq,
            _RECONCILE_PAGE,
            who,
        )
        for group in page:
            # ``type(...) is int``: a seq set past the group's validator is not compared by its ``__ne__``.
            if not isinstance(group, MessageGroup) or type(group.seq) is not int or group.seq != seq:
                raise ContractViolationError(
                    f"archive read from seq {start} returned {shown_number(getattr(group, 'seq', group))} "
                    f"where group {seq} belongs; reconcile needs a contiguous archive"
                )
            # The archive should have checked this already; the engine does not trust it.
            check_archived_group(key, group, expected_seq=seq)
            out.append(group)
            seq += 1
        if len(page) < _RECONCILE_PAGE:
            return out
        if len(out) >= _RECONCILE_MAX_GROUPS:
            raise ArchiveError(
                f"more than {_RECONCILE_MAX_GROUPS} archived groups past the boundary; reconcile refused"
            )
