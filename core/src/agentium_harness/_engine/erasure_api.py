"""The erasure methods of :class:`~.runtime.HarnessRuntime`: erase, resume, status (docs/erasure.md).

Mixed into the runtime like the history API, so the orchestrator stays
small; the steps themselves are in :mod:`.erasure`, and
:mod:`.erasure_run` carries a pending erasure through. Erasure is an operator
operation: nothing here is reachable from ``run()``, ``pop`` or ``clear``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import attrs

from .._errors import AgentiumError, ErasureInProgressError, ErasureRefusedError, InvalidArgumentError
from .._observe.spans import using
from .._observe.turn import settings_of, traced_operation
from .._ports.erasure import EraseLevel, EraseTarget, ErasureKind, ErasureState
from .._ports.memory import MemoryScope
from .erasure import (
    ErasureResult,
    OperatorAttestation,
    check_capable,
    check_request,
    load_record,
    new_record,
    pending_for,
    plan,
    start,
)
from .erasure_ledger import pending_records
from .erasure_run import erasure_stores, finish
from .erasure_status import DEFAULT_STATUS_LIMIT, ErasureStatusPage, check_status_args, status_page
from .forget import ForgetResult, forget_fact
from .forget_outcomes import ForgetOutcomes, ForgetProgress
from .memory.answers import MEMORY_WRITE
from .results import CommitState
from .retention import RetentionResult, apply_policy
from .said_claims import claims_of, without_claims
from .settle import mark_commit_state
from .unexpected import Outcomes, WriteProgress, typed_unexpected

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["ErasureOperations", "erasure_stores", "run_erasure", "said_by_the_call"]

#: The levels ``erase`` takes; groups targets come from retention and ``forget``.
_WHOLE = (EraseLevel.TENANT, EraseLevel.USER, EraseLevel.SESSION)
#: What an unexpected error leaving an erasure says (docs/erasure.md). Once its record is written,
#: whatever stops it is an ErasureIncompleteError carrying the record (:func:`.erasure_run.finish`).
_ERASURE: Outcomes = {
    CommitState.NOT_COMMITTED: (
        "it failed before it wrote anything: this call erased nothing (commit_state not_committed); an "
        "erasure of the target an earlier call left pending stays pending (erasure_status shows it). "
        "Call erase again: it resumes that erasure, or starts this one"
    ),
    CommitState.UNKNOWN: (
        "it failed while the erasure's record was being written: the erasure may be pending, its scope "
        "then refused until it completes (commit_state unknown); erasure_status shows it, and calling "
        "erase again with the same target resumes it (or starts it)"
    ),
    CommitState.COMMITTED: (
        "it failed after the erasure completed: its tombstone stands (commit_state committed); "
        "erasure_status shows it"
    ),
}
_RETENTION_BEGAN = (
    "it failed once it began erasing: the sessions trimmed before stay trimmed, their tombstones stand, and "
    "the erasure under way may be pending (erasure_status lists them; resume_erasures completes it) "
    "(commit_state unknown); apply retention again for the rest"
)
_RETENTION: Outcomes = {
    CommitState.NOT_COMMITTED: "it failed before erasing anything (commit_state not_committed); apply again",
    CommitState.UNKNOWN: _RETENTION_BEGAN,
    CommitState.COMMITTED: _RETENTION_BEGAN,  # never set: each erasure's own end is not the call's
}
#: Resuming reads the pending records; each erasure it resumes is carried through (erasure_run.finish).
_RESUME: Outcomes = dict.fromkeys(
    CommitState,
    "the erasures it completed before stand; the others stay pending, their scopes refused "
    "(erasure_status lists them): call resume_erasures again",
)


#: What a store's (or one step's) refusal says of its own call, untrue of a call whose erasures wrote
#: (taken whole, "nothing was written or deleted" too; never out of a quoted cause: :mod:`.said_claims`).
_STORE_CLAIMS = claims_of(
    "nothing was changed", "nothing was written or deleted", "nothing was written", "nothing was erased"
)


def said_by_the_call(exc: AgentiumError, state: CommitState, told: Outcomes) -> None:
    """Mark ``exc``, a typed error leaving a call of several erasures, with the call's ``state`` (``told``).

    The error of one of its erasures (or a store's, or the memory manager's) says what that
    erasure or call wrote ("this call erased nothing ... not_committed") while the erasures before
    it stand: once one of the call's erasures began writing, the call's state replaces those words.
    An AgentiumError is marked in place: re-raised as it is, its cause and traceback kept.
    """
    inner = exc.commit_state
    if state is not CommitState.NOT_COMMITTED and len(exc.args) == 1 and isinstance(exc.args[0], str):
        said = exc.args[0]
        # The words of its own state: an erasure's, or the memory manager's (forget's store call).
        for own in () if inner is None else (_ERASURE[inner], MEMORY_WRITE[inner]):
            if f"; {own}" in said:
                said = said.replace(f"; {own}", "")
                exc.commit_state = None
                break
        # A store's "nothing was changed" (written, erased) is its own call's, not this call's.
        exc.args = (without_claims(said, _STORE_CLAIMS),)
    mark_commit_state(exc, state, told=told)


async def run_erasure(
    runtime: HarnessRuntime,
    target: EraseTarget,
    reason: str,
    attestation: OperatorAttestation,
    kind: ErasureKind,
    *,
    dry_run: bool = False,
    progress: WriteProgress | None = None,
) -> ErasureResult:
    """One erasure of ``target`` (checked arguments), or its dry run; see :mod:`.erasure` for the steps.

    Under the runtime's telemetry settings: the record's start and a dry run's
    plan are outside the ``agentium.erasure`` span, and their store calls
    record where the runtime's do. An unexpected error before the record is
    pending says whether it may be (``commit_state``). ``progress`` (a fresh
    one if not given) is the erasure's own: still ``not_committed`` when it
    ends, the erasure wrote and erased nothing (a caller running several
    tells from it what its call changed, whatever error ended this one).
    """
    progress = WriteProgress() if progress is None else progress
    operation = "erase" if kind is ErasureKind.ERASURE else f"erasure ({kind.value})"
    if dry_run:
        # A dry run has no agentium.erasure span: one of its own, so that a store's report refused
        # (ContractViolationError) or any other error leaving it is a failed span and a WARNING.
        plan = traced_operation(
            runtime,
            "erasure plan",
            target.tenant_id,
            target.user_id or "",
            target.session_id or "",
            name="agentium.erasure.plan",
        )
        with plan, typed_unexpected(operation, progress, _ERASURE):
            try:
                return await _run_erasure(
                    runtime, target, reason, attestation, kind, dry_run=True, progress=progress
                )
            except Exception as exc:
                plan.failed(exc)
                raise
    with using(settings_of(runtime), runtime), typed_unexpected(operation, progress, _ERASURE):
        return await _run_erasure(
            runtime, target, reason, attestation, kind, dry_run=dry_run, progress=progress
        )


async def _run_erasure(
    runtime: HarnessRuntime,
    target: EraseTarget,
    reason: str,
    attestation: OperatorAttestation,
    kind: ErasureKind,
    *,
    dry_run: bool,
    progress: WriteProgress,
) -> ErasureResult:
    stores = erasure_stores(runtime, target)
    check_capable(stores)
    admission = runtime.parts.admission
    if dry_run:
        async with admission.admit_shared(target.session_key, "erasure plan") as ticket:
            # What a real run would do: refused by an overlapping pending erasure (raised here
            # too), or resuming the pending one of this target (its id, reason and operator).
            unfinished = await pending_for(ticket, runtime.session_store, target, kind)
            if unfinished is None:
                planned = new_record(target, reason, attestation, kind, ErasureState.PLANNED)
            else:
                planned = attrs.evolve(
                    unfinished,
                    state=ErasureState.PLANNED,
                    stores=(),
                    sessions=(),
                    omitted_sessions=0,
                    notes=("a real run resumes this pending erasure: its own reason and operator stand",),
                    completed_at=None,
                )
            return ErasureResult(await plan(ticket, stores, planned), resumed=unfinished is not None)
    async with admission.admit_erasure(target) as ticket:
        try:
            record, resumed = await start(
                ticket, runtime.session_store, target, reason, attestation, kind, progress.saving
            )
        except ErasureInProgressError:
            # Refused by an overlapping erasure: at the look for one pending, or as this one joined
            # the pending erasures (another process's joined first), where the join raises before
            # its compare-and-set writes. Nothing was written, not even by an earlier attempt of the
            # join that conflicted (one that landed finds its own header, and is not refused).
            progress.settled(CommitState.NOT_COMMITTED)
            raise
        if resumed:
            progress.saving()  # a pending erasure resumed erases from here (no record was written)
        done = await finish(runtime, ticket, record, take_inventory=not resumed)
        progress.committed()
        return ErasureResult(done, resumed)
    raise AssertionError("unreachable")  # pragma: no cover - admit_erasure() re-raises a cancellation


class ErasureOperations:
    """The erasure methods of the runtime (mixed into :class:`~.runtime.HarnessRuntime`)."""

    __slots__ = ()
    #: docs/api.md documents these methods with :class:`~.runtime.HarnessRuntime` (testing._api_docs).
    __agentium_documented_mixin__ = True

    def _runtime(self) -> HarnessRuntime:
        return cast("HarnessRuntime", self)

    async def erase(
        self,
        target: EraseTarget,
        *,
        reason: str,
        attestation: OperatorAttestation,
        dry_run: bool = False,
    ) -> ErasureResult:
        """Erase a session, a user or a tenant from every configured store, and return its tombstone.

        ``target`` is :meth:`EraseTarget.session`, :meth:`EraseTarget.user` or
        :meth:`EraseTarget.tenant`; ``reason`` says why (required, at most
        1,024 bytes); ``attestation`` names the operator, verified by the
        host, whose tenant must be the target's (:class:`ErasureRefusedError`
        otherwise). Every configured store must declare ``erasure``
        (:class:`CapabilityError` otherwise). Nothing is written before
        these checks pass.

        The erasure is recorded durably first; runs, appends and maintenance
        on the scope are refused (:class:`ErasureInProgressError`) until it
        completes, in every process sharing the session store. Each store
        then removes what it holds of the target — snapshots, archived
        groups, recall entries and documents, memory facts (every revision)
        — physically where the backend allows it. The result's record is the
        tombstone: counts, seq ranges and digests of what was removed (never
        content), when, why and by whom; ``inspect_session`` and
        ``agentium erase --status`` show it. A target nothing is stored for
        gets a tombstone saying so.

        If it stops part way (a store fails, writes of the scope this
        runtime abandoned are still running), :class:`ErasureIncompleteError`
        carries the progress; the record stays pending and calling ``erase``
        again with the same target (or :meth:`resume_erasures`) completes
        it. If another process completed the erasure meanwhile, what was
        written since is erased under a new erasure, whose tombstone is
        returned; when that cannot be done, :class:`ErasureOvertakenError`
        (a subclass) carries the completed tombstone and says the target
        may still hold data: erase it again. ``dry_run=True`` asks every store what it would remove and
        writes nothing (the record's state is ``planned``); it answers as a
        real run would: refused by an overlapping pending erasure, or, when
        one of this target is pending, the plan of resuming it (its id,
        reason and operator; ``resumed`` is true).
        """
        target, reason, attestation = check_request(target, reason, attestation, levels=_WHOLE)
        if not isinstance(dry_run, bool):
            raise InvalidArgumentError(f"dry_run must be a bool, got {type(dry_run).__name__}")
        return await run_erasure(
            self._runtime(), target, reason, attestation, ErasureKind.ERASURE, dry_run=dry_run
        )

    async def resume_erasures(self, attestation: OperatorAttestation) -> tuple[ErasureResult, ...]:
        """Complete every erasure of the operator's tenant that an earlier call left pending.

        Each keeps its own target, reason and operator; the result of each
        says ``resumed``. Raises :class:`ErasureIncompleteError` for the
        first one that stops again (those before it are complete).
        """
        runtime = self._runtime()
        if not isinstance(attestation, OperatorAttestation):
            raise InvalidArgumentError("resume_erasures needs an OperatorAttestation; nothing was done")
        tenant = attestation.operator.tenant
        # Its reads of the pending records record where the runtime's calls do (its Telemetry).
        with (
            using(settings_of(runtime), runtime),
            typed_unexpected("resume_erasures", WriteProgress(), _RESUME),
        ):
            async with runtime.parts.admission.admit_shared(None, "erasure status") as ticket:
                pending = await pending_records(ticket, runtime.session_store, tenant)
            results: list[ErasureResult] = []
            for header in pending:
                check_capable(erasure_stores(runtime, header.target))
                async with runtime.parts.admission.admit_erasure(header.target) as ticket:
                    record = await load_record(ticket, runtime.session_store, header)
                    results.append(ErasureResult(await finish(runtime, ticket, record), resumed=True))
        return tuple(results)

    async def erasure_status(
        self,
        attestation: OperatorAttestation,
        target: EraseTarget | None = None,
        *,
        after: str | None = None,
        limit: int = DEFAULT_STATUS_LIMIT,
    ) -> ErasureStatusPage:
        """One page of the erasures of the operator's tenant: finished ones as tombstones, pending in full.

        Finished erasures come first, in the order they completed, then the
        pending ones, in the order they started. With ``target``, only those
        that overlap it (a session's status lists the erasures of its user
        and tenant too). ``limit`` is 1 to :data:`MAX_STATUS_LIMIT` (100 by
        default); the page is a tuple of records whose ``next_after``, passed
        as ``after``, gives the next page (``None``: this was the last). A
        page may hold fewer than ``limit`` records, even none, with more to
        come: one call examines at most 1,024 index entries, whatever
        ``target`` matches among them. Read-only; a bad ``limit`` or an
        ``after`` that is not a ``next_after`` raises
        :class:`InvalidArgumentError`.
        """
        runtime = self._runtime()
        if not isinstance(attestation, OperatorAttestation):
            raise InvalidArgumentError("erasure_status needs an OperatorAttestation")
        tenant = attestation.operator.tenant
        if target is not None and not isinstance(target, EraseTarget):
            raise InvalidArgumentError(
                f"erasure_status takes an EraseTarget or None, got {type(target).__name__}"
            )
        if target is not None and target.tenant_id != tenant:
            raise ErasureRefusedError(f"the status asked for is outside tenant {tenant!r}, the operator's")
        cursor, count = check_status_args(after, limit)
        # A read, but its session store calls record where the runtime's do (its Telemetry).
        with using(settings_of(runtime), runtime):
            async with runtime.parts.admission.admit_shared(None, "erasure status") as ticket:
                return await status_page(ticket, runtime.session_store, tenant, target, cursor, count)
        raise AssertionError("unreachable")  # pragma: no cover - admit_shared() re-raises a cancellation

    async def apply_retention(
        self,
        attestation: OperatorAttestation,
        target: EraseTarget | None = None,
        *,
        reason: str = "retention policy",
        dry_run: bool = False,
    ) -> RetentionResult:
        """Apply the configured retention policy (``[retention]``) to the sessions of ``target``.

        ``target`` is the operator's whole tenant by default, or a user or a
        session of it. For every session, the archived groups past the policy
        (older than ``max_age_days``, or beyond the newest
        ``max_archived_groups``) are erased as a groups erasure, through the
        same path as :meth:`erase` (record first, fence, late writes, every
        store, verification), leaving a tombstone per session trimmed. Resident
        groups are never touched; the session's summary keeps its text and
        marks the citations of erased groups. Never runs by itself, never
        during a turn. ``dry_run=True`` reports what would go and writes
        nothing. Raises :class:`InvalidArgumentError` when no policy is configured.
        Any other error carries ``commit_state``: ``not_committed`` when it came
        before anything was erased, ``unknown`` once erasing began (the sessions
        trimmed before it stay trimmed; the erasure under way may be pending).
        """
        runtime = self._runtime()
        policy = runtime.retention
        if policy is None:
            raise InvalidArgumentError("no retention policy is configured: add [retention] to the config")
        if not isinstance(attestation, OperatorAttestation):
            raise InvalidArgumentError("apply_retention needs an OperatorAttestation; nothing was erased")
        scope = target if target is not None else EraseTarget.tenant(attestation.operator.tenant)
        scope, why, who = check_request(scope, reason, attestation, levels=_WHOLE)
        if not isinstance(dry_run, bool):
            raise InvalidArgumentError(f"dry_run must be a bool, got {type(dry_run).__name__}")
        progress = WriteProgress()
        # One span (agentium.retention), the root of its listing, checks and erasures: a session passed
        # over is an event on it (and a WARNING); an unexpected error says what it erased.
        span = traced_operation(
            runtime, "retention", scope.tenant_id, scope.user_id or "", "", name="agentium.retention"
        )
        with span, typed_unexpected("apply_retention", progress, _RETENTION):
            try:
                return await apply_policy(
                    runtime, policy, scope, why, who, dry_run=dry_run, progress=progress
                )
            except AgentiumError as exc:
                # A typed error (a store's, on a later session) went out as it stood: once sessions
                # were trimmed, nothing in it said so. It now carries the call's state and says it.
                said_by_the_call(exc, progress.commit_state, _RETENTION)
                raise

    async def forget(
        self,
        scope: MemoryScope,
        fact_id: str,
        *,
        erase_sources: bool = False,
        reason: str | None = None,
        attestation: OperatorAttestation | None = None,
    ) -> ForgetResult:
        """Forget a memory fact and say where the text of the groups it came from still is.

        The fact is forgotten through the runtime's memory manager (as
        :meth:`MemoryManager.forget`; it is never injected again). Its
        provenance, read first over every revision, names the groups it came
        from; the result's ``sources`` says for each whether its text is
        archived (recall in its session can surface it), resident, covered
        by the session's summary (cited, or below its frontier), or gone.
        With ``erase_sources=True`` — an operator erasure, so ``reason`` and ``attestation`` are required and
        checked before anything changes — the archived ones are erased from
        the archive and the recall index (a tombstone per session) and a
        summary covering them loses its text, so the forgotten text reaches
        no later request by recall, memory or summary. A resident group can
        only go with its session (:meth:`erase`); ``still_held`` lists it.
        A fact whose history may be longer than one read (written before
        ``MAX_FACT_REVISIONS``) is refused with :class:`MemoryRejectedError`
        and nothing changes: its later revisions' sources could not be found.
        """
        runtime = self._runtime()
        progress = ForgetProgress()
        # One span (agentium.forget), the root of its source lookups, erasures and the store's forget: a
        # provenance that does not match is an event on it (and a WARNING); an unexpected error says what
        # changed. The scope is checked inside: read here as text only.
        tenant, user = str(getattr(scope, "tenant", "")), str(getattr(scope, "user", ""))
        with (
            traced_operation(runtime, "forget", tenant, user, "", name="agentium.forget"),
            typed_unexpected("forget", progress, ForgetOutcomes(progress)),
        ):
            return await forget_fact(
                runtime,
                scope,
                fact_id,
                erase_sources=erase_sources,
                reason=reason,
                attestation=attestation,
                progress=progress,
            )
