"""The harness runtime: a thin orchestrator over the stage modules of a turn.

A turn, in order (see docs/runtime.md), each step in its own module:

1. admission (:mod:`.lifecycle`): a :class:`~agentium_harness._scope.VerifiedIdentity`
   only, one operation per session, nothing once closing;
2. load (:mod:`.load`): the revisioned snapshot, its digest, shape and memory scope (R15);
3. recall (:mod:`.recall`, :mod:`.recall_policy`, :mod:`.recall_turn`), when
   configured: bounded discovery and reads checked item by item, whole
   evidence assembly, validation before dispatch, and the policy's decision;
4. sources (:mod:`.sources`): labeled source data assembled whole under its budget;
5. turn (:mod:`.turn`): the model request, the provider call, granted tools;
   then, when the run asks for it, verification (:mod:`.verification`): the
   final answer checked against current host evidence, with revisions as the
   completion policy allows;
6. the last look and the commit fence (:mod:`.last_look`, :mod:`.recall_turn`,
   :mod:`.recall_view`): the carried memory facts read back once more, recalled
   sources validated again (a carried document deleted stops the run), the
   policy decides, optional conditional publication;
7. commit (:mod:`.commit`): append the new group, archive the oldest complete
   groups over the resident bound, check every receipt, and only then save the
   snapshot with compare-and-set on its revision (R3); a recall store that
   declares ``archive_indexing`` then indexes the archived groups;
8. summary (:mod:`.summary`, :mod:`.owned_work`), when a summarizer is
   configured: the groups between the frontier and the boundary are folded
   into the task summary, in the background by default.

Maintenance outside a turn — flush, migrate, inspect, reconcile — is in
:mod:`.maintenance`; closing a session in :mod:`.closing`. The history API
for hosts that run their own agent loop (``append``, ``read_history``,
``list_sessions``, ``retract``, ``reset_view``) is mixed in from
:mod:`.history_api` and commits through the same path as a run; the erasure
API from :mod:`.erasure_api`, host documents from :mod:`.document_api`. Every
adapter call anywhere runs under its deadline (:meth:`.lifecycle.Ticket.call`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import partial

import anyio

from .._errors import AgentiumError, InvalidArgumentError, SessionDivergedError
from .._history import Message, RetainedRecord, TurnInterruption
from .._observe.settings import Telemetry
from .._observe.turn import settings_of, traced_run
from .._ports.archive import HistoryArchive
from .._ports.provider import ModelProvider, SourceBlock
from .._ports.recall import RecallLimits, RecallStore
from .._ports.sessions import SessionStore
from .._ports.summary import Summarizer, SummaryLimits
from .._ports.verify import CompletionVerifier
from .._scope import RecallScope, Scope, SessionKey, VerifiedIdentity, require_identity
from .._verdicts import EvidenceLimits, VerificationRecord
from .arguments import (
    check_attest,
    check_completion,
    check_grants,
    check_sources,
    check_user_input,
    run_scope,
)
from .call_ids import request_history
from .closing import HarnessResources, ResourcesOf, drain_runtime, shutdown_runtime
from .document_api import DocumentOperations
from .effects import EffectsKeeper
from .embedding import Hybrid
from .erasure_api import ErasureOperations
from .history_api import HistoryOperations
from .history_view import recall_hidden
from .hooks import HookBroadcaster
from .last_look import commit_run
from .lifecycle import Admission, LifecycleState, Ticket
from .limits import RuntimeLimits
from .load import load_session
from .maintenance import (
    MigrationReport,
    ReconcileReport,
    SessionState,
    SessionView,
    inspect_admitted,
    migrate_admitted,
    reconcile_admitted,
)
from .memory.holders import adopt_runtime
from .memory.manager import MemoryManager
from .memory.work import DrainResult, OwnedWorkSource
from .memory.work import WorkTracker as MemoryWorkDrainer
from .memory_fence import fence_memory
from .owned_work import OwnedWork
from .parts import RuntimeParts
from .progress import RunProgress, failed_run, unexpected_error
from .readiness import AdapterReadiness
from .recall_policy import RecallPolicy, current_session_recall_policy
from .recall_readback import session_groups
from .recall_turn import (
    Clarifier,
    RecallEnd,
    RecallStep,
    opening_messages,
    recall_before_dispatch,
    uncommitted_result,
)
from .recall_view import ConditionalPublication
from .request import assemble_request
from .results import Diagnostic, RunResult, RunStatus
from .retention import RetentionPolicy
from .summary import GroupReader
from .tools import ToolRegistry
from .turn import TurnInterrupted, TurnOutcome, run_turn
from .turn_commit import retained_record, settle_earlier
from .verification import (
    REVISION_REQUEST,
    CompletionPolicy,
    check_verify,
    verified_completion_policy,
    verify_completed_turn,
    verify_on_demand,
)

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "HarnessResources",
    "HarnessRuntime",
    "HookBroadcaster",
    "LifecycleState",
    "MigrationReport",
    "ReconcileReport",
    "RuntimeLimits",
    "SessionState",
    "SessionView",
]

#: The system instructions of a runtime built without any (and of ``[runtime] instructions`` left unset).
DEFAULT_INSTRUCTIONS = "You are a helpful assistant."


class HarnessRuntime(HistoryOperations, ErasureOperations, DocumentOperations, AdapterReadiness):
    """The runtime built by :func:`create_harness_runtime` or ``load_runtime``.

    Adapters passed in are borrowed: the runtime never closes them. Adapters it built itself from
    config (``owned``) are closed by :meth:`aclose`. Besides :meth:`run`, hosts that run their own
    agent loop write and read canonical history with :meth:`append`, :meth:`read_history`,
    :meth:`list_sessions`, :meth:`retract` and :meth:`reset_view` (docs/history-api.md). Operators
    erase a session, user or tenant with :meth:`erase` (docs/erasure.md). Hosts index documents for
    recall with :meth:`index_document` and :meth:`delete_document`, fenced against erasures.
    """

    resources = ResourcesOf()  # per-session resources: made on each access (stored, a cycle back here)

    def __init__(
        self,
        *,
        provider: ModelProvider,
        archive: HistoryArchive,
        session_store: SessionStore,
        limits: RuntimeLimits,
        instructions: str,
        tools: ToolRegistry,
        hooks: HookBroadcaster | None,
        owned: Sequence[object],
        recall: RecallStore | None = None,
        recall_limits: RecallLimits | None = None,
        recall_policy: RecallPolicy | None = None,
        publication: ConditionalPublication | None = None,
        summarizer: Summarizer | None = None,
        summary_limits: SummaryLimits | None = None,
        summary_reader: GroupReader | None = None,
        verifier: CompletionVerifier | None = None,
        completion_policy: CompletionPolicy | None = None,
        evidence_limits: EvidenceLimits | None = None,
        verify_timeout_s: float | None = None,
        memory: MemoryManager | None = None,
        owns_memory_manager: bool = False,
        telemetry: Telemetry | None = None,
        retention: RetentionPolicy | None = None,
        hybrid: Hybrid | None = None,
    ) -> None:
        #: Where spans and metrics go, and whether content is captured (docs/observability.md).
        self.telemetry = telemetry or Telemetry()
        #: What :meth:`apply_retention` applies (``[retention]``); ``None`` when not configured.
        self.retention = retention
        self._memory = memory
        if memory is not None:
            fence_memory(memory, session_store, limits.op_timeout_s, holder=self)
        self.verifier = verifier
        self.completion_policy = completion_policy or verified_completion_policy()
        self.evidence_limits = evidence_limits or EvidenceLimits()
        self.verify_timeout_s = verify_timeout_s or limits.op_timeout_s
        self.summarizer = summarizer
        self.summary_limits = summary_limits or SummaryLimits()
        self.recall = recall
        #: Hybrid recall (an embedder beside the recall store), or ``None`` for lexical recall.
        self.hybrid = hybrid
        self.recall_limits = recall_limits or RecallLimits()
        self.recall_policy = recall_policy or current_session_recall_policy()
        self.publication = publication
        self.provider = provider
        self.archive = archive
        self.session_store = session_store
        self.limits = limits
        self.instructions = instructions
        self.tools = tools
        admission = Admission(limits.op_timeout_s, hook_timeout_s=limits.close_timeout_s)
        work = OwnedWork(limits.op_timeout_s, admission.late)
        # One place drains all owned work (R40): the memory manager's, with the summary jobs tracked in it.
        drainer = memory if memory is not None else MemoryWorkDrainer()
        drainer.track(OwnedWorkSource(work, self))  # this runtime's: its own close drains them
        #: The parts the stage modules share (:mod:`.parts`); not for hosts.
        self.parts = RuntimeParts(
            admission=admission,
            work=work,
            drainer=drainer,
            hooks=hooks,
            owned=list(owned),
            owns_memory_manager=owns_memory_manager,
            summary_reader=summary_reader,
            telemetry=self.telemetry.resolve(),
        )
        if memory is not None:  # last: other threads' drains read its state and limits (not its telemetry)
            adopt_runtime(memory, self)

    @property
    def state(self) -> LifecycleState:
        """``open``, ``closing`` or ``closed``."""
        return self.parts.admission.state

    @property
    def memory(self) -> MemoryManager | None:
        """The runtime's memory manager (``[memory]``), or ``None`` when memory is not configured.

        A multi-tenant host uses it to remember, correct, forget and list facts
        per :class:`MemoryScope`; runs read from it. The runtime drains it on
        ``aclose()`` and closes it when it built it from config.
        """
        return self._memory

    # -- the turn ------------------------------------------------------------

    @traced_run
    async def run(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        user_input: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
        grants: Iterable[str] = (),
        sources: Sequence[SourceBlock] = (),
        clarify: Clarifier | None = None,
        completion: CompletionPolicy | bool | None = None,
    ) -> RunResult:
        """Run one turn for a verified identity on a session and commit it (R7).

        ``completion`` asks for the turn's final answer to be verified as a
        completion candidate (R27): ``True`` uses the runtime's policy
        (``completion_policy``, from ``[verifier.policy]``), a
        :class:`CompletionPolicy` overrides it for this run. The verdict is in
        ``result.verification`` and the retained record; an unaccepted one
        makes the status ``not_accepted``. It needs a configured verifier.

        ``grants`` names the tools the model may run (registered ones; read once, at
        most :data:`MAX_RUN_GRANTS` items); ``sources`` (at most :data:`MAX_RUN_SOURCES`)
        adds host-supplied labeled source data, assembled whole under the
        ``source_tokens`` budget (docs/runtime.md: what is refused). With recall configured, evidence is
        recalled first and the recall policy decides; ``clarify`` (an async
        callable taking the question and returning the user's answer) lets
        the policy ask one clarification in this run. A run the policy stops
        commits nothing (``commit_state`` ``not_committed``) — unless tools
        already ran, whose calls and results are committed without the answer.

        A failure raises a typed error carrying ``commit_state`` (and, once
        the session was loaded, ``run_result`` with every tool outcome and the
        usage): nothing is committed, except the tool calls and results of a
        turn whose tool ran — whatever stopped it before its commit landed:
        the provider, another writer, the publication hook, a cancellation,
        an engine bug (raised as an ``AgentiumError`` caused by it) — which are
        committed without the answer (``committed``); a save that failed is
        read back first, and one that cannot be settled is ``unknown``. See
        docs/runtime.md, "Errors and what was committed".
        """
        progress = RunProgress()
        ticket: Ticket | None = None
        try:
            if clarify is not None and not callable(clarify):
                raise InvalidArgumentError(f"clarify must be an async callable, got {type(clarify).__name__}")
            scope = run_scope(identity, session_id, recall_scope)
            check_user_input(user_input)
            check_attest(attest_legacy_memory_scope)
            granted = check_grants(grants, self.tools)
            offered = check_sources(sources)
            policy = check_completion(completion, self.completion_policy, self.verifier)
            async with self.parts.admission.admit(scope.session_key, "run") as ticket:
                try:
                    return ticket.report(
                        await self._run_admitted(
                            ticket,
                            scope,
                            user_input,
                            attest_legacy_memory_scope,
                            granted,
                            offered,
                            clarify,
                            policy,
                            progress,
                        )
                    )
                except anyio.get_cancelled_exc_class():
                    # aclose() or the host cancelled the run: what ran is committed first, bounded.
                    if progress.keeper is not None:
                        await progress.keeper.cancelled()
                    raise
        except Exception as exc:
            # Every error says whether the turn was committed, and what ran before it (docs/runtime.md);
            # one no stage typed (an engine bug) becomes an AgentiumError saying so, caused by it.
            typed = exc if isinstance(exc, AgentiumError) else unexpected_error(exc, progress, "run")
            error = failed_run(typed, progress)
            del typed
            if ticket is not None and error.run_result is not None:
                error.run_result = ticket.report(error.run_result)
            try:
                raise error  # the same error, marked
            finally:
                del error  # the error's traceback holds this frame: no cycle through the local
        finally:
            # The progress and its keeper refer to each other: left to the cycle collector, every
            # run's snapshot, ticket and outcome would outlive the run until a collection ran.
            progress.keeper = None
        raise AssertionError("unreachable")  # pragma: no cover - admit() re-raises a cancellation

    async def _run_admitted(
        self,
        ticket: Ticket,
        scope: Scope,
        user_input: str,
        attest_legacy: bool,
        granted: frozenset[str],
        offered: tuple[SourceBlock, ...],
        clarify: Clarifier | None,
        policy: CompletionPolicy | None,
        progress: RunProgress,
    ) -> RunResult:
        started_at = time.time()
        key = scope.session_key
        earlier = await settle_earlier(self, key)
        stored, snap = await load_session(ticket, self.session_store, key, scope, attest_legacy=attest_legacy)
        if snap.divergence is not None:
            raise SessionDivergedError(
                f"session {key.session!r} is diverged from its archive at seq(s) "
                f"{list(snap.divergence.seqs)[:5]}; reconcile it first (agentium session reconcile, "
                "or runtime.reconcile_session); nothing was run"
            )
        progress.scope, progress.stored, progress.snap = scope, stored, snap
        diagnostics = progress.diagnostics
        diagnostics.extend(earlier)
        if snap.memory_scope is None:
            diagnostics.append(
                Diagnostic(
                    "legacy_scope_attested", "legacy snapshot loaded by attestation; stamped at commit"
                )
            )
        history = request_history(snap.resident, snap.view, diagnostics)
        step: RecallStep | None = None
        if self.recall is not None:
            step = await recall_before_dispatch(
                ticket,
                store=self.recall,
                scope=scope,
                limits=self.recall_limits,
                policy=self.recall_policy,
                user_input=user_input,
                history=history,
                clarify=clarify,
                clarify_timeout_s=self.limits.op_timeout_s,
                hidden=recall_hidden(key, snap.view, snap.erased),
                hybrid=self.hybrid,
                groups=session_groups(ticket, self.archive, self.session_store, key, snap),
                said=progress.recall_said,
            )
            diagnostics.extend(step.diagnostics)
            progress.recall = step.outcome
            if step.end is not None:
                status = (
                    RunStatus.NEEDS_CLARIFICATION
                    if step.end is RecallEnd.NEEDS_CLARIFICATION
                    else RunStatus.STOPPED
                )
                return uncommitted_result(scope, stored, snap, status, step.question, step, diagnostics)
        request = await assemble_request(self, ticket, scope, snap, offered, step, user_input, diagnostics)
        in_request, assembly = request.in_request, request.assembly
        request_sources = request.blocks
        prior, opening = opening_messages(user_input, step)
        verification: VerificationRecord | None = None

        def noted(record: VerificationRecord) -> None:  # what a turn stopped in a revision commits
            nonlocal verification
            verification = record

        def retained(stopped: TurnInterruption | None = None) -> RetainedRecord:
            return retained_record(
                scope,
                recall=progress.recall,
                summary=in_request,
                omitted_sources=assembly.omitted,
                verification=verification,
                stopped=stopped,
            )

        # Commits the turn, or what ran of it when the turn stops (a failure, a conflict, a cancellation).
        keeper = progress.keeper = EffectsKeeper(
            self, ticket, progress, scope, retained, assembly.status, attest_legacy, request
        )
        ask = partial(
            run_turn,
            ticket,
            provider=self.provider,
            tools=self.tools,
            limits=self.limits,
            instructions=self.instructions,
            history=history,
            granted=granted,
            trace=keeper.trace,
        )

        try:
            turn = await ask(sources=request_sources, user_input=opening, prior=prior)
            if policy is not None and self.verifier is not None:

                async def rerun(
                    prior: tuple[Message, ...], block: SourceBlock, refuse: bool, steps: int
                ) -> TurnOutcome:
                    return await ask(
                        sources=(*request_sources, block),
                        user_input=REVISION_REQUEST,
                        prior=prior,
                        refuse_write_effects=refuse,
                        max_steps=steps,
                    )

                turn, verification, verify_notes = await verify_completed_turn(
                    ticket,
                    turn,
                    rerun,
                    verifier=self.verifier,
                    policy=policy,
                    limits=self.evidence_limits,
                    scope=scope,
                    started_at=started_at,
                    timeout_s=self.verify_timeout_s,
                    max_steps=self.limits.max_steps,
                    noted=noted,
                )
                diagnostics.extend(verify_notes)
            # The run fences' last look (a fact forgotten, a document deleted during the last call),
            # the commit fence, then the commit (.last_look).
            return await commit_run(self, ticket, scope, keeper, turn, step, stored, snap)
        except TurnInterrupted as stop:
            # A model call failed mid-turn. Tools that already ran are committed, never dropped;
            # the error is raised either way, carrying what ran and whether it was committed.
            await keeper.interrupted(stop)
        except Exception as exc:
            # Whatever else stops the turn or its commit (a conflict, a refused publication, an
            # engine bug): what ran is committed first, on the session as it is now (docs/runtime.md).
            await keeper.failed(exc)

    # -- inspection and maintenance ------------------------------------------

    async def inspect_session(self, identity: VerifiedIdentity, session_id: str) -> SessionView:
        """Boundary, resident groups, state (ok, diverged …) and revision of a stored session (read-only).

        Admitted shared: it may run alongside a run on the same session, is
        refused once the runtime is closing (:class:`RuntimeClosedError`), and
        ``aclose()`` waits for it or cancels it before closing the store.
        """
        # Read-only: admitted shared, so it may look at a session while a run holds it,
        # and shutdown waits for it (or cancels it) before closing the store.
        return await inspect_admitted(self, SessionKey.of(require_identity(identity), session_id))

    async def migrate_legacy_session(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
    ) -> MigrationReport:
        """Stamp a legacy snapshot with its verified memory scope (R15, R43).

        Requires the explicit attestation, ``True`` (a value that is not a bool, here
        or in :meth:`run`, raises :class:`InvalidArgumentError`). A snapshot that already has a scope
        is left alone when it matches and refused when it differs. The stamped
        snapshot is written at the current format version with its digest.
        Every error it raises carries ``commit_state``: a save that raised is
        read back first (docs/runtime.md, "Errors and what was committed").
        """
        return await migrate_admitted(
            self, identity, session_id, recall_scope, attest=attest_legacy_memory_scope
        )

    async def reconcile_session(self, identity: VerifiedIdentity, session_id: str) -> ReconcileReport:
        """Resolve a ``diverged`` session, keeping both copies (see ``maintenance.reconcile_session``).

        Every error it raises carries ``commit_state``, as :meth:`migrate_legacy_session`'s does.
        """
        return await reconcile_admitted(self, identity, session_id)

    async def drain(self, timeout_s: float | None = None) -> DrainResult:
        """Wait for owned background work (summary updates, memory extraction, writes); say what happened.

        Work started while it waits is waited for too; work still running
        after ``timeout_s`` (default ``settle_timeout_s``) is cancelled. The
        result names each item completed, failed (a summary update whose
        summarizer failed included) or cancelled; any failure or cancellation
        raises :class:`~agentium_harness._errors.MemoryDrainError` carrying it (R40).
        """
        return await drain_runtime(self, self.limits.settle_timeout_s if timeout_s is None else timeout_s)

    async def verify(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        claim: str = "",
        *,
        recall_scope: RecallScope | None = None,
        since: float = 0.0,
    ) -> tuple[VerificationRecord, tuple[Diagnostic, ...]]:
        """Run the configured verifier now, outside a turn (``agentium verify``); nothing is stored.

        ``claim`` is the candidate's text (it proves nothing, R29); ``since``
        stands in for the run's start time (evidence older than it is stale).
        The call runs under ``verify_timeout_s`` and the evidence budget, as in
        a turn. Raises :class:`InvalidArgumentError` without a verifier, and for a
        ``since`` that is no finite time of 0 or more (the verifier is not called).
        Admitted shared like :meth:`inspect_session`: ``aclose()`` never closes the
        verifier under a running call.
        """
        scope = run_scope(identity, session_id, recall_scope)
        verifier = check_verify(self.verifier, claim, since)
        admitted = self.parts.admission.admit_shared(scope.session_key, "verification", self.verify_timeout_s)
        async with admitted as ticket:
            return await verify_on_demand(
                ticket,
                verifier=verifier,
                limits=self.evidence_limits,
                scope=scope,
                claim=claim,
                started_at=since,
                timeout_s=self.verify_timeout_s,
                telemetry=settings_of(self),
                owner=self,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    # -- shutdown --------------------------------------------------------------

    async def aclose(self) -> None:
        """Refuse new operations, settle or cancel admitted ones, close owned adapters; bounded.

        Waits up to ``settle_timeout_s`` for admitted operations and owned
        background work, cancels what is left (its caller gets
        :class:`RuntimeClosedError` saying, in ``commit_state``, whether it committed) and gives it
        ``close_timeout_s`` to stop; then closes every owned adapter, each
        bounded by ``close_timeout_s``, even when one of them fails. Returns
        within about ``settle_timeout_s + 2 * close_timeout_s`` whatever an
        adapter does (one blocked in a worker thread is abandoned), as long as
        it does not block the event loop itself. Concurrent calls share one
        attempt and its outcome. Any failure raises :class:`RuntimeCloseError`
        listing all of them; the runtime then stays ``closing`` and ``aclose()``
        may be called again to retry what failed. Borrowed adapters are never closed.
        """
        await shutdown_runtime(self)
        self.parts.claims.release_all()  # it runs none of its sessions now (docs/memory.md)

    async def __aenter__(self) -> HarnessRuntime:
        await self.start()  # warm the adapters (the embedder's model) before the first operation
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
