"""Keeping what ran: a turn whose tool ran leaves a durable record whatever stops it (docs/runtime.md).

A tool that ran may have changed the world, so the turn's tool calls and
results — its answered part, without the answer — are committed, with the
reason in the retained record's ``interruption``, even when the turn's own
commit cannot be:

- the provider fails on a later step (``provider_failed``): committed on the
  session as loaded — unless the run fences' last look, made first, finds a
  carried fact forgotten or document deleted during that call (then nothing
  is, as for the answer: :mod:`.last_look`), or an erasure of archived
  groups of the session begun during it (then the commit is refused, as the
  commit fence would refuse it while that erasure is under way, and a
  WARNING says so);
- another writer committed the session first (``commit_conflict``): the
  session is loaded again and the answered part committed on its new head;
- the host's publication hook refused the answer (``publication_refused``):
  its condition is about the answer, so the answered part is committed
  without the hook, on the session loaded again;
- the run is cancelled — ``aclose()``, or the host cancelling ``run()`` —
  after a tool started (``cancelled``): committed shielded from the
  cancellation, within :data:`CLOSE_SHARE` of ``close_timeout_s``, with no
  summary update, before the cancellation goes on — after the same look as
  for a provider's failure (a cancelled call is a failed one), within
  :data:`LOOK_SHARE` of that time;
- any other error leaves the turn before its commit landed (``step_failed``,
  :meth:`EffectsKeeper.failed`): an exception the engine did not type (an
  engine bug; raised as the :class:`AgentiumError` that says so, caused by
  it, its WARNING logged once the outcome is known; one before the run
  fences' last look makes that look first, as after a failed call), or a
  typed one outside the causes above (the turn's own commit refused before
  or by its save).

A conflict while committing the answered part loads the session again and
retries, at most :data:`ATTEMPTS` commits in all, each adapter call under
its deadline. When the answered part cannot be committed either — that
commit failed, typed or not — the error raised says truthfully what was
committed (diagnostic ``effects_commit_failed``) and its ``run_result`` keeps
every call and the usage; after a cancellation, which carries no result, a
WARNING says so. An error that may have committed (``unknown``) or did is
never followed by another commit: that could duplicate the turn.

A load again keeps the run's first load in view: what ran is from before
it, so if the tenant's erasure ledger moved since then and an erasure of
the whole session is recorded, what ran is refused
(:func:`~.commit_fence.refuse_if_erased_since`), never written into the
erased session's id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NoReturn

import anyio
import attrs

from .._errors import (
    AgentiumError,
    ErasureInProgressError,
    PublicationRefusedError,
    SessionConflictError,
    SessionDivergedError,
)
from .._errors_run import ErasedDuringRunError
from .._history import InterruptionCause, MessageGroup, RetainedRecord, TurnInterruption, ViewState
from .._ports.memory import MemoryScope
from .._ports.summary import SummaryState
from .._scope import Scope
from .._text import error_text
from .commit_fence import refuse_if_erased_since
from .document_run_fence import DocumentFence
from .effects_said import commit_failed, refused_by_groups, warn_cancelled, warn_not_kept, warn_unchecked
from .fact_fence import FactFence, carried_facts
from .history_view import model_groups
from .lifecycle import Ticket
from .load import load_session
from .progress import RunProgress, with_result
from .results import CommitState, Diagnostic, RunResult, RunStatus, Severity
from .said_claims import claims_of, without_claims
from .settle import mark_commit_state
from .sources import SourceStatus
from .turn import TurnInterrupted, TurnOutcome, TurnTrace, executed
from .turn_commit import commit_turn, committed_text, interruption
from .turn_fence import TurnFence, erased_during_run, recalled_groups
from .unexpected import unexpected_error, unexpected_kind, warn_unexpected

if TYPE_CHECKING:
    from .request import RequestSources
    from .runtime import HarnessRuntime

__all__ = ["ATTEMPTS", "CLOSE_SHARE", "LOOK_SHARE", "EffectsKeeper"]

#: Commits of a turn's answered part before a run gives up on conflicts with other writers.
ATTEMPTS = 3
#: The share of ``close_timeout_s`` the commit after a cancellation may take: ``aclose()`` gives
#: a cancelled operation ``close_timeout_s`` to stop before it closes the adapters under it.
CLOSE_SHARE = 0.8
#: The share of that the look after a cancelled model call may take (:meth:`EffectsKeeper.cancelled`):
#: the rest is the commit's.
LOOK_SHARE = 0.5

_log = logging.getLogger("agentium.engine")
#: The operation an unexpected exception in the commit of what ran is logged under.
_KEEPING = "run (committing what ran)"

# A refusal before the answer's save says so; what ran was written after it.
_UNWRITTEN = claims_of("nothing was written")


@attrs.define(slots=True, eq=False)
class EffectsKeeper:
    """One run's commits: the turn with its answer, or what ran without it when the turn stopped."""

    runtime: HarnessRuntime
    ticket: Ticket
    progress: RunProgress
    scope: Scope
    #: The retained record for the group, given the interruption (``None``: the turn's own).
    retained: Callable[[TurnInterruption | None], RetainedRecord]
    sources: SourceStatus
    attest_legacy: bool
    #: The run's request sources: the task summary (state) and the memory facts they carry, fenced.
    request: RequestSources | None = None
    #: The turn as it goes (:func:`~.turn.run_turn` records into it), for a cancellation.
    trace: TurnTrace = attrs.field(
        default=attrs.Factory(
            lambda self: TurnTrace(
                TurnFence(
                    self.ticket,
                    self.runtime.session_store,
                    revision=None if self.progress.stored is None else self.progress.stored.revision,
                    recalled=self._recalled(),  # worked out only once the ledger moved
                    resident=self._resident(),  # worked out only once the ledger moved
                    summary=self._summary_sent(),
                    erased=None if self.progress.snap is None else self.progress.snap.erased,
                    facts=self._facts(),
                    documents=self._documents(),
                )
            ),
            takes_self=True,
        )
    )
    #: A commit of what ran was made (the recall policy's stop): an error from it is not followed by another.
    tried: bool = False
    #: The look after a failed model call found an erasure of archived groups of the session under way
    #: (its stop's message and erasure id): the commit of what ran is refused (:meth:`commit`). Not the
    #: error: its traceback holds the frames that hold this keeper.
    refused: tuple[str, str] | None = None
    #: The class of an unexpected exception whose commit of what ran a cancellation cut short: its
    #: WARNING is logged by :meth:`cancelled`, once that settled what is committed (a class, not the
    #: exception: its traceback holds the frames that hold this keeper).
    unwarned: type[BaseException] | None = None
    #: The erasure fence point of the run's own load (its ticket's, taken when the keeper is made):
    #: a load again for what ran is checked against it, not against its own (:meth:`_reload`).
    first_fence: tuple[int | None] | None = attrs.field(
        default=attrs.Factory(lambda self: self.ticket.fence_seen, takes_self=True)
    )

    async def commit(
        self,
        turn: TurnOutcome,
        status: RunStatus,
        why: TurnInterruption | None = None,
        *,
        ticket: Ticket | None = None,
        reload: bool = False,
        update_summary: bool = True,
    ) -> RunResult:
        """Commit ``turn`` — only its answered part when ``why`` is given — and say what was committed.

        With ``why``, a conflict with another writer loads the session again
        and retries, up to :data:`ATTEMPTS` commits; ``reload`` loads it
        before the first one too (the commit that failed was built on a head
        that is gone).
        """
        on = ticket if ticket is not None else self.ticket
        runtime, progress = self.runtime, self.progress
        self.tried = self.tried or why is not None
        if why is not None and self.refused is not None:
            raise refused_by_groups(*self.refused)  # what ran may be made from groups being erased
        for attempt in range(1, ATTEMPTS + 1):
            if reload:
                await self._reload(on)
            assert progress.snap is not None
            try:
                return await commit_turn(
                    runtime,
                    on,
                    progress,
                    scope=self.scope,
                    turn=turn,
                    retained=self.retained(why),
                    summary=progress.snap.summary if runtime.summarizer is not None else None,
                    status=status,
                    sources=self.sources,
                    update_summary=update_summary,
                )
            except SessionConflictError as exc:
                if why is None or exc.commit_state is not CommitState.NOT_COMMITTED or attempt == ATTEMPTS:
                    raise
                reload = True
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt returns or raises

    async def interrupted(self, stop: TurnInterrupted) -> NoReturn:
        """In ``stop``'s handler: raise its error, once what ran of the turn was committed (:meth:`after`).

        Neither ``stop`` nor this frame keeps the error (see
        :meth:`TurnInterrupted.take`), so a failed run's objects are freed as
        soon as the host drops the error, not left to the cycle collector.
        """
        error, ran = stop.take()
        self.progress.turn = ran
        self.progress.diagnostics.extend(ran.diagnostics)
        try:
            await self._look_after_failed_call(ran)
        except ErasedDuringRunError as gone:
            # A fact forgotten, a document deleted during the failed call: the tool rounds made from
            # it are not kept either, as the answer would not be (.last_look); the call's error is its cause.
            failure = await self.after(gone, ran)
            try:
                raise failure from error
            finally:
                del error, failure  # their tracebacks hold this frame
        failure = await self.after(error, ran, InterruptionCause.PROVIDER_FAILED)
        try:
            raise failure from error.__cause__
        finally:
            del error, failure  # their tracebacks hold this frame

    async def _look_after_failed_call(self, ran: TurnOutcome) -> None:
        """Before what ran of a turn whose model call failed is kept: the run fences' last look.

        Raises the :class:`ErasedDuringRunError` of a stop before the commit. An erasure of archived
        groups of the session found under way refuses the commit of what ran (:attr:`refused`; the
        refusal's WARNING says so). A look that could not be made keeps what ran, as a look at the
        commit that fails does (a WARNING says it, no content).
        """
        fence = self.trace.fence
        if fence is None or not executed(ran):
            return  # nothing ran to keep (or nothing carried to look at): the call's error as it is
        try:
            unchecked = await fence.after_failed_call()
        except ErasedDuringRunError:
            raise
        except ErasureInProgressError as exc:
            if exc.erasure_id and exc.erasure_id == fence.groups_erasure:
                # An erasure of archived groups under way: no stop of the run's own, as before a call, but
                # what ran may be made from them, and its commit would be refused (it is: commit()).
                self.refused = (str(exc), exc.erasure_id)
                return
            unchecked = type(exc).__name__
        except AgentiumError as exc:
            unchecked = type(exc).__name__
        except Exception as exc:
            # An engine bug: what ran is kept all the same, as after one in the commit's look (failed());
            # the call's error goes on, the bug is logged (its class, never its text: it may quote content).
            kind = unexpected_kind(exc)
            _log.warning(
                "run: its look after its failed model call failed with an unexpected %s (a bug in the engine "
                "or in code it called unguarded)",
                kind,
                extra={"agentium_operation": "run", "agentium_error_type": kind},
            )
            unchecked = kind
        if unchecked is not None:
            warn_unchecked()

    async def failed(self, exc: Exception) -> NoReturn:
        """In the handler of ``exc``, which left the turn or its commit: raise it, once what ran was kept.

        ``exc`` is any error but a :class:`TurnInterrupted`: one the engine
        did not type becomes the :class:`AgentiumError` saying so, caused by
        it, and its WARNING is logged with the commit state it ends with.
        """
        progress = self.progress
        # An engine bug before the commit (commit_run sets the turn): the run fences' last look was not
        # made. (A typed error there is a look that failed, or a stop: not made again.)
        unlooked = progress.turn is None and not isinstance(exc, AgentiumError)
        typed = exc if isinstance(exc, AgentiumError) else unexpected_error(exc, progress, "run", warn=False)
        if progress.turn is None:
            progress.turn = self.trace.partial("failed")  # the tool calls so far, each answered
        gone: ErasedDuringRunError | None = None
        try:
            try:
                if unlooked and typed.commit_state is CommitState.NOT_COMMITTED:
                    # What ran was made from what the request carries, as after a failed call: the same look.
                    await self._look_after_failed_call(progress.turn)
            except ErasedDuringRunError as erased:
                gone = erased
            failure = await self.after(typed if gone is None else gone, progress.turn)
        except BaseException as stop:
            # The commit of what ran was cut short: the bug is still logged, never lost with it.
            if typed is not exc:
                if isinstance(stop, anyio.get_cancelled_exc_class()):
                    self.unwarned = type(exc)  # run() calls cancelled() next, which may still commit
                else:
                    warn_unexpected("run", exc, progress.commit_state)
            raise
        if typed is not exc:
            warn_unexpected("run", exc, failure.commit_state or progress.commit_state)
        try:
            if gone is not None:
                raise failure from typed  # the stop; what stopped the run before it is not lost
            raise failure  # its cause and context as they were: an unexpected one's cause is ``exc``
        finally:
            del exc, typed, failure, gone  # their tracebacks hold this frame

    async def after(
        self,
        error: AgentiumError,
        turn: TurnOutcome,
        cause: InterruptionCause | None = None,
    ) -> AgentiumError:
        """The error to raise for ``error``, once what ran in ``turn`` was committed under ``cause``.

        ``cause`` defaults to the one ``error`` implies (a conflict, a
        publication refusal), else ``step_failed``. ``error`` comes back
        unchanged when nothing ran, or when it already committed something or
        may have (``unknown``); when a commit of what ran already failed
        (``tried``), it only says so.
        """
        progress = self.progress
        self._count_looks()
        if cause is None:
            if isinstance(error, SessionConflictError):
                cause = InterruptionCause.COMMIT_CONFLICT
            elif isinstance(error, PublicationRefusedError):
                cause = InterruptionCause.PUBLICATION_REFUSED
            else:
                cause = InterruptionCause.STEP_FAILED
        if isinstance(error, ErasedDuringRunError):
            # Stopped before a model call by an erasure since the load: what ran was made from the
            # erased history, and is not committed into the erased id (docs/erasure.md).
            progress.diagnostics.append(erased_during_run(error, executed(turn)))
            return error
        state = error.commit_state if error.commit_state is not None else progress.commit_state
        if not executed(turn) or state is not CommitState.NOT_COMMITTED:
            return error
        if self.tried:
            return self._not_kept(error, error)  # ``error`` is that commit's: not tried twice
        why = interruption(cause, committed_text(error))
        # A commit that was begun was built on a head that may be gone; before one, the load is current.
        reload = progress.group is not None
        try:
            done = await self.commit(turn, RunStatus.INTERRUPTED, why, reload=reload)
        except Exception as failed:
            # Typed or not, it says what the commit of what ran ended with; ``error`` goes on.
            return self._not_kept(error, self._typed(failed))
        error.commit_state = None  # say it again, with what was committed
        if len(error.args) == 1 and isinstance(error.args[0], str):
            # A refusal before the save ("…; nothing was written", EncodingError) was of the answer's commit.
            # Removed whole: never out of a cause it quotes, nor left said as a sentence.
            error.args = (without_claims(error.args[0], _UNWRITTEN),)
        marked = mark_commit_state(
            error,
            CommitState.COMMITTED,
            f"its tool calls and results were committed as group {done.group_seq}, without the answer "
            f"(interruption {cause.value})",
        )
        return with_result(marked, done)

    async def cancelled(self) -> None:
        """After a cancellation: commit what ran, shielded and bounded; ``progress`` says how it ended.

        Only when a tool started and no commit is under way or done (a save
        in flight is ``unknown``: committing again could duplicate the turn;
        that is logged as a WARNING, the commit state being unknown).
        Runs under a ticket of its own (the run's is cancelled), within
        :data:`CLOSE_SHARE` of ``close_timeout_s``, without a summary update.
        An engine bug whose own commit of what ran the cancellation cut short
        (:meth:`failed`) gets its WARNING here, with the state this ends in.
        """
        try:
            await self._keep_cancelled()
        finally:
            if self.unwarned is not None:
                kind, self.unwarned = self.unwarned, None
                warn_unexpected("run", kind, self.progress.commit_state)

    async def _keep_cancelled(self) -> None:
        progress, limits = self.progress, self.runtime.limits
        self._count_looks()
        turn = progress.turn if progress.turn is not None else self.trace.partial()
        if progress.commit_state is CommitState.UNKNOWN:
            # The turn's own save was in flight: it may or may not land, and committing again could
            # duplicate the turn. The host's cancellation carries no result: this record says so.
            warn_cancelled(
                "run cancelled while its commit was in flight; the commit state is unknown", progress
            )
            return
        idle = progress.commit_state is CommitState.NOT_COMMITTED
        if progress.snap is None or not idle or not executed(turn):
            return
        progress.turn = turn
        budget = limits.close_timeout_s * CLOSE_SHARE
        each = min(limits.op_timeout_s, budget)
        ticket = Ticket(self.scope.session_key, "run", each, limits.close_timeout_s)
        ticket.late = self.ticket.late
        why = interruption(InterruptionCause.CANCELLED, "the run was cancelled after a tool started")
        try:
            shield = await self._keep_shielded(ticket, turn, why, budget)
        except BaseException:
            # asyncio: a native Task.cancel() is not held off by the shield (trio's is); one landing
            # during the look or the commit goes on, and this record is still what tells the operator.
            if progress.commit_state is not CommitState.COMMITTED:
                warn_not_kept(progress, " (cancelled again while they were being kept)")
            raise
        if shield.cancelled_caught and progress.commit_state is not CommitState.COMMITTED:
            progress.diagnostics.append(
                Diagnostic(
                    "effects_commit_failed",
                    f"what ran could not be committed within {budget:.3g}s of the cancellation",
                    Severity.ERROR,
                )
            )
            progress.note = (
                f"its tool calls and results could not be committed within {budget:.3g}s either"
                if progress.commit_state is CommitState.NOT_COMMITTED
                else f"the commit of its tool calls and results was cut off at {budget:.3g}s mid-save"
            )
        if progress.commit_state is not CommitState.COMMITTED:
            # A host's cancellation carries no result: this record is what tells the operator.
            warn_not_kept(progress)

    async def _keep_shielded(
        self, ticket: Ticket, turn: TurnOutcome, why: TurnInterruption, budget: float
    ) -> anyio.CancelScope:
        """The look after the cancelled call, then the commit of what ran: shielded, within ``budget``."""
        progress = self.progress
        with anyio.CancelScope(shield=True) as shield:
            shield.deadline = anyio.current_time() + budget
            try:
                done = None
                if not await self._gone_during_cancelled_call(ticket, turn, budget):  # gone: nothing is kept
                    status = RunStatus.INTERRUPTED
                    done = await self.commit(
                        turn, status, why, ticket=ticket, reload=True, update_summary=False
                    )
            except Exception as exc:
                # Even an engine bug must not replace the cancellation, which goes on.
                failed = self._typed(exc)
                progress.diagnostics.append(commit_failed(failed))
                if failed.commit_state is not None:
                    progress.commit_state = failed.commit_state
                why_not = error_text(failed, named=False)
                progress.note = f"its tool calls and results could not be committed either ({why_not})"
            else:
                if done is not None:
                    progress.note = (
                        f"its tool calls and results were committed as group {done.group_seq}, without the "
                        "answer (interruption cancelled)"
                    )
        return shield

    async def _gone_during_cancelled_call(self, ticket: Ticket, turn: TurnOutcome, budget: float) -> bool:
        """True when a carried fact was forgotten (a document deleted) during the cancelled call.

        A cancelled model call is a failed one: the tool rounds that ran were made from what the
        request carries, as after a provider's failure (:meth:`interrupted`), so the same look is
        made first, under ``ticket`` (the run's own is cancelled), within :data:`LOOK_SHARE` of
        ``budget`` so that a store that hangs leaves the commit its time. A stop keeps nothing (the
        fence logged it); a look that could not be made, or in time, keeps what ran.
        """
        fence = self.trace.fence
        if fence is None or (fence.facts is None and fence.documents is None):
            return False
        fence.ticket = ticket
        with anyio.move_on_after(budget * LOOK_SHARE) as cut:
            try:
                await self._look_after_failed_call(turn)
            except ErasedDuringRunError as gone:
                self.progress.diagnostics.append(erased_during_run(gone, True))
                self.progress.note = "its tool calls and results were not committed: " + (
                    "what its request carries went during the cancelled model call"
                )
                return True
            finally:
                self._count_looks()  # the look's time is the run's, as every look's
        if cut.cancelled_caught:
            warn_unchecked()
        return False

    async def _reload(self, ticket: Ticket) -> None:
        """Load the session's current head into ``progress``, for a commit on top of it.

        What ran is from before the run's first load: an erasure of the session since then refuses it.
        """
        progress = self.progress
        key = self.scope.session_key
        store = self.runtime.session_store
        stored, snap = await load_session(ticket, store, key, self.scope, attest_legacy=self.attest_legacy)
        await refuse_if_erased_since(ticket, store, key, self.first_fence)
        if snap.divergence is not None:
            raise SessionDivergedError(
                f"session {key.session!r} became diverged from its archive; what ran was not committed "
                "on it (reconcile it first)"
            )
        progress.stored, progress.snap = stored, snap
        progress.group = progress.outcome = None
        progress.commit_state, progress.saved_revision = CommitState.NOT_COMMITTED, None

    def _count_looks(self) -> None:
        """The document fence's looks in the run's recall usage: what ran is reported (and kept) with them.

        A run reaching its commit fence counts them there (:mod:`.last_look`); one stopped before
        (a look past ``max_latency_s``, a provider failure, a cancellation) is counted here.
        """
        fence, recall = self.trace.fence, self.progress.recall
        documents = None if fence is None else fence.documents
        if documents is not None and recall is not None:
            self.progress.recall = documents.counted(recall)

    def _recalled(self) -> tuple[int, ...] | Callable[[], tuple[int, ...]]:
        """What works out the archived groups of the session whose excerpts recall put in the run's request.

        What it needs is taken now (the load's), the work is left to the fence: done only once
        the ledger moved, not per group on every run.
        """
        outcome, snap = self.progress.recall, self.progress.snap
        if outcome is None or snap is None or not outcome.included:
            return ()
        return partial(recalled_groups, self.scope.session_key, snap.boundary, outcome.included)

    def _summary_sent(self) -> SummaryState | None:
        """The task summary (state) the run's request carries (``None``: none)."""
        return None if self.request is None else self.request.in_request

    def _facts(self) -> FactFence | None:
        """The fence of the memory facts the run's request carries (``None``: it carries none: no cost)."""
        manager, request = self.runtime.memory, self.request
        if manager is None or request is None:
            return None  # no memory: the request carries no facts, and nothing is read to say so
        fact_ids = carried_facts(request.blocks)
        if not fact_ids:
            return None
        return FactFence(manager, MemoryScope.of_session(self.scope), fact_ids)

    def _documents(self) -> DocumentFence | None:
        """The fence of the host documents whose excerpts the run's request carries (``None``: none)."""
        store, outcome = self.runtime.recall, self.progress.recall
        refs = () if outcome is None else DocumentFence.carried(outcome.included)
        if store is None or outcome is None or not refs:
            return None
        # A memory search ran between recall's validation and the first call: that call is looked before too.
        first = self.runtime.memory is not None
        limits = self.runtime.recall_limits
        return DocumentFence(store, self.scope, limits, refs, outcome.usage, self.progress, first=first)

    def _resident(self) -> tuple[int, ...] | Callable[[], tuple[int, ...]]:
        """What works out the seqs of the loaded resident groups whose messages the request sends.

        A partial over the load's values, not a method of this keeper: the fence it goes to is
        held by this keeper's trace, and a bound method would make the three a reference cycle.
        """
        snap = self.progress.snap
        return () if snap is None else partial(_sent_seqs, snap.resident, snap.view)

    def _typed(self, failed: Exception) -> AgentiumError:
        """``failed``, raised by a commit of what ran, typed (an unexpected one logged as such)."""
        if isinstance(failed, AgentiumError):
            return failed
        return unexpected_error(failed, self.progress, _KEEPING)

    def _not_kept(self, error: AgentiumError, failed: AgentiumError) -> AgentiumError:
        """``error`` saying that what ran could not be committed either, and how that ended.

        ``failed`` is the error of that commit; ``error`` itself when it was that commit's.
        """
        progress = self.progress
        progress.diagnostics.append(commit_failed(failed))
        state = failed.commit_state if failed.commit_state is not None else CommitState.NOT_COMMITTED
        progress.commit_state = state
        how = (
            "its tool calls and results could not be committed"
            if failed is error
            else f"its tool calls and results could not be committed either ({error_text(failed)})"
        )
        error.commit_state = None
        marked = mark_commit_state(error, state, f"{how}; they are in the error's run_result")
        marked.run_result = None  # rebuilt from the run so far, with the diagnostic
        return marked


def _sent_seqs(resident: tuple[MessageGroup, ...], view: ViewState | None) -> tuple[int, ...]:
    """The seqs of ``resident`` whose messages ``run()`` sends under ``view``."""
    return tuple(seq for seq, _ in model_groups(resident, view))
