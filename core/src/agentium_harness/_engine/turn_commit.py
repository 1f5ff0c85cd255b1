"""Steps 7 and 8 of a turn, as the orchestrator runs them: the group, its commit, what follows it.

:func:`commit_group` is the one commit path: ``run()`` and the history API
(``append``, ``retract``, ``reset_view``) all commit through it. The turn
becomes a :class:`~agentium_harness._history.MessageGroup` with its
retained record (R26); the commit (:mod:`.commit`) runs directly or under
the host's conditional publication (R25); archived groups are indexed for
recall; the task summary is updated, in the background by default.

A turn that stopped after its tools ran — the provider failed on a later
step, the recall policy stopped it at the commit fence, another writer
committed first, the publication hook refused the answer, the run was
cancelled (:mod:`.effects`) — is committed too: tools changed the world,
so their calls and results are canonical history. Its group keeps the
turn up to its last tool result (a complete group: every call answered)
and leaves out the answer; the retained record's ``interruption`` says
why. Such a commit records what happened,
so it is never handed to the publication hook, whose condition is about
publishing an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

import attrs

from .._errors import AgentiumError, ArchiveError, PublicationRefusedError, SessionStoreError
from .._errors_memory import MemoryStoreError
from .._history import (
    InterruptionCause,
    Message,
    MessageGroup,
    RetainedRecord,
    Role,
    TurnInterruption,
    ViewState,
    new_write_id,
)
from .._observe import spans as observe
from .._observe.turn import already_said
from .._ports.summary import SummaryState
from .._scope import Scope, SessionKey
from .._text import clean_text, cut_text, error_text
from .._verdicts import VerificationRecord
from .archive_index import index_archived
from .arguments import source_uncertainty
from .commit import CommitOutcome, commit
from .lifecycle import Ticket
from .progress import RunProgress
from .recall_view import RecallView, publish
from .results import CommitState, Diagnostic, RunResult, RunStatus, Severity
from .sources import SourceStatus
from .summary import summarize_after_commit, summarize_timeout
from .turn import TurnOutcome
from .turn_fence import TurnFence
from .verification import final_answer

if TYPE_CHECKING:
    from .recall_turn import RecallOutcome
    from .runtime import HarnessRuntime

__all__ = [
    "MAX_INTERRUPTION_BYTES",
    "GroupCommit",
    "answered_part",
    "commit_group",
    "commit_turn",
    "committed_text",
    "interruption",
    "retained_record",
    "settle_earlier",
]

#: The interruption's detail (an error message, a policy's reason) is cut to this many bytes.
MAX_INTERRUPTION_BYTES = 1024


def answered_part(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The turn up to and including its last tool result: what ran, without the answer after it.

    Tools run only between model calls, all calls of one reply before the
    next call, so the turn cut after its last tool result answers every call.
    """
    last = max((i for i, m in enumerate(messages) if m.role is Role.TOOL), default=-1)
    return messages[: last + 1]


def interruption(cause: InterruptionCause, detail: str) -> TurnInterruption:
    """The record of why a committed turn has no answer, its detail bounded and storable.

    The detail is free text, often an adapter's error message: a lone
    surrogate in it is replaced (U+FFFD), or the record could not be encoded
    and the tool calls it keeps would be lost with it.
    """
    return TurnInterruption(cause, cut_text(clean_text(detail), MAX_INTERRUPTION_BYTES)[0])


def committed_text(error: AgentiumError) -> str:
    """What an interruption commits of the ``error`` that stopped a turn whose tools ran: ``Type: message``.

    An error whose message quotes a store (a document fence or a memory fact fence that could not
    look, an adapter's exception no stage typed) says why whole to the host; committed, it says it
    in the engine's words (``error.committed_detail``: the store's error by its class), as the recall
    uncertainty does: the store's text may name another tenant's rows. Every typed error a store call
    raised, whatever its class, carries such words (:meth:`.lifecycle.Ticket.call` raises a fresh copy,
    :mod:`.store_errors`, never a value the store set); one the engine raised in a session store's,
    archive's or memory store's name without them is committed by its class alone.
    """
    if error.committed_detail is not None:
        return error.committed_detail
    for kind, store in _STORES:
        if isinstance(error, kind):
            # A store's own typed error (or one the engine said in a store's name): its message may be
            # the adapter's words whole. Named by its class; the error raised keeps the text.
            return (
                f"{clean_text(type(error).__name__)} (the {store} store's error; its text is not committed)"
            )
    return error_text(error)


#: The errors of the stores shared by tenants, whose messages are committed by their class alone.
_STORES: tuple[tuple[type[AgentiumError], str], ...] = (
    (SessionStoreError, "session"),
    (ArchiveError, "archive"),
    (MemoryStoreError, "memory"),
)


def retained_record(
    scope: Scope,
    *,
    recall: RecallOutcome | None,
    summary: SummaryState | None,
    omitted_sources: tuple[str, ...],
    verification: VerificationRecord | None,
    stopped: TurnInterruption | None = None,
) -> RetainedRecord:
    """What is kept with the group about how it was produced (R26); ``summary`` if it was in the request."""
    return RetainedRecord(
        scope=scope,
        source_view_revision=recall.source_view_revision if recall is not None else None,
        summary_policy=summary.summary.policy if summary is not None else None,
        summary_version=summary.summary.version if summary is not None else None,
        uncertainty=(*source_uncertainty(omitted_sources), *(recall.uncertainty if recall else ())),
        verification=verification,
        interruption=stopped,
        write_id=new_write_id(),
    )


async def settle_earlier(runtime: HarnessRuntime, key: SessionKey) -> list[Diagnostic]:
    """Let the session's previous summary update land (bounded) before a new commit; its report.

    The update saves into the snapshot the next commit is based on: waiting
    for it first means it never makes this commit conflict. The wait is the
    update's own deadlines added up (group read, summarizer call, save), so
    a summarizer given a long model deadline (the summary's or the runtime's,
    :func:`.summary.summarize_timeout`) is not cancelled short of it.
    """
    if runtime.parts.work.busy(key):
        limits = runtime.summary_limits
        summarize = summarize_timeout(limits, runtime.limits.model_timeout_s)
        await runtime.parts.work.settle(key, limits.timeout_s + summarize + runtime.limits.op_timeout_s)
    earlier, said = runtime.parts.work.take_report(key)
    if earlier is None:
        return []
    # The update said these as it ended: the run carries them to the host but says them not again.
    already_said(earlier.diagnostics[:said])
    return list(earlier.diagnostics)


@attrs.frozen(slots=True)
class GroupCommit:
    """One group committed, and what followed: the revision and summary after the summary update."""

    outcome: CommitOutcome
    revision: int
    summary: SummaryState | None


async def commit_group(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    *,
    scope: Scope,
    group: MessageGroup,
    summary: SummaryState | None,
    publication: RecallView | None = None,
    view: ViewState | None = None,
    restarted_summary: SummaryState | None = None,
    update_summary: bool = True,
) -> GroupCommit:
    """Commit ``group`` as the session's next group, index what was archived, update the summary.

    The one commit path of ``run()``, ``append``, ``retract`` and
    ``reset_view``. ``progress`` follows the commit, so an error or a
    cancellation on the way still reports whether the group landed.
    ``publication`` hands the commit to the host's conditional publication
    first (R25). ``view`` and ``restarted_summary`` are saved with the
    group when given (a retraction or a reset moves the view, and restarts a
    summary that covers what left it); otherwise the stored ones are kept.
    ``update_summary=False`` skips the summary update (a commit during shutdown).
    Diagnostics go to ``progress.diagnostics``.
    """
    assert progress.snap is not None
    snap, stored, key = progress.snap, progress.stored, scope.session_key
    progress.group = group
    done: list[CommitOutcome] = []

    async def do_commit() -> None:
        if done:
            raise PublicationRefusedError("the publication hook called commit() twice")
        with observe.stage("commit", {"agentium.group.seq": group.seq}) as span:
            try:
                outcome = await commit(
                    ticket,
                    archive=runtime.archive,
                    store=runtime.session_store,
                    hooks=runtime.parts.hooks,
                    limits=runtime.limits.resident,
                    key=key,
                    scope=scope,
                    stored=stored,
                    resident=(*snap.resident, group),
                    boundary=snap.boundary,
                    next_seq=snap.next_seq + 1,
                    keep_receipts=runtime.summarizer is not None,
                    before_save=progress.saving,
                    on_settled=progress.settled,
                    view=view,
                    summary=restarted_summary,
                )
            except AgentiumError as exc:
                # Settled by the commit when its save failed; anything else failed before the save.
                if exc.commit_state is not None:
                    progress.commit_state = exc.commit_state
                span.set("agentium.commit_state", progress.commit_state.value)
                raise
            # An enum's ``.value`` is two Python calls: none made when nothing records.
            if span is not observe.NULL:
                span.set("agentium.commit_state", CommitState.COMMITTED.value)
                span.set("agentium.eviction.status", outcome.eviction.value)
                span.set("agentium.snapshot.revision", outcome.revision)
        progress.commit_state = CommitState.COMMITTED
        progress.outcome = outcome
        done.append(outcome)

    if publication is not None and runtime.publication is not None:
        await publish(runtime.publication, publication, do_commit, done, runtime.limits.op_timeout_s * 3)
    else:
        await do_commit()
    outcome = done[0]
    diagnostics = progress.diagnostics
    diagnostics.extend(outcome.diagnostics)
    if outcome.archived_groups:
        diagnostics.extend(
            await index_archived(
                runtime.recall,
                ticket,
                key,
                outcome.archived_groups,
                outcome.archived,
                runtime.archive,
                hybrid=runtime.hybrid,
                erased=snap.erased or (),
            )
        )
    revision = outcome.revision
    current = restarted_summary if restarted_summary is not None else summary
    saved_view = view if view is not None else snap.view
    if update_summary and runtime.summarizer is not None and runtime.parts.summary_reader is not None:
        summarizer, reader, limits = runtime.summarizer, runtime.parts.summary_reader, runtime.summary_limits

        first, committed = ticket.fence_seen, outcome.revision

        async def summarize(on: Ticket) -> tuple[int, SummaryState | None, list[Diagnostic]]:
            return await summarize_after_commit(
                on,
                summarizer=summarizer,
                reader=reader,
                store=runtime.session_store,
                key=key,
                current=current,
                outcome=outcome,
                limits=limits,
                view=saved_view,
                erased=snap.erased or (),
                revisions=runtime.parts.summary_revisions,
                model_timeout_s=runtime.limits.model_timeout_s,
                # From the run's load: the groups it summarizes were committed from what it loaded.
                before_call=TurnFence(
                    on,
                    runtime.session_store,
                    since=first,
                    revision=committed,
                    what="summary update",
                    erased=snap.erased,
                ).check_offered,
            )

        if limits.background:
            runtime.parts.work.start(key, lambda on: _state_and_notes(summarize(on)))
        else:
            revision, current, notes = await summarize(ticket)
            diagnostics.extend(notes)
    return GroupCommit(outcome, revision, current)


async def commit_turn(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    *,
    scope: Scope,
    turn: TurnOutcome,
    retained: RetainedRecord,
    summary: SummaryState | None,
    status: RunStatus,
    sources: SourceStatus,
    update_summary: bool = True,
) -> RunResult:
    """Commit ``turn`` as the session's next group, then index and summarize; the run's result.

    With ``retained.interruption`` set only the answered part of the turn is
    committed, directly. ``progress`` follows the commit, so an error or a
    cancellation on the way still reports whether the group landed.
    """
    assert progress.snap is not None
    stopped = retained.interruption is not None
    messages = answered_part(turn.messages) if stopped else turn.messages
    group = MessageGroup(seq=progress.snap.next_seq, messages=messages, retained=retained)
    recall = progress.recall
    publication = None
    if runtime.publication is not None and not stopped and recall is not None and recall.included:
        publication = RecallView(scope, recall.included, recall.source_view_revision or "")
    done = await commit_group(
        runtime,
        ticket,
        progress,
        scope=scope,
        group=group,
        summary=summary,
        publication=publication,
        update_summary=update_summary,
    )
    outcome, diagnostics = done.outcome, progress.diagnostics
    if stopped:
        assert retained.interruption is not None
        diagnostics.append(
            Diagnostic(
                "turn_interrupted_committed",
                f"the turn stopped after its tools ran ({retained.interruption.cause.value}); its tool "
                f"calls and results are committed as group {group.seq}, without an answer",
                Severity.WARNING,
            )
        )
    return RunResult(
        output="" if stopped else final_answer(turn.messages),
        status=status,
        eviction=outcome.eviction,
        sources=sources,
        group_seq=group.seq,
        boundary=outcome.boundary,
        resident_groups=len(outcome.resident),
        snapshot_revision=done.revision,
        archived=outcome.archived,
        tool_outcomes=turn.tool_outcomes,
        usage=turn.usage,
        retained=retained,
        diagnostics=tuple(diagnostics),
        recall=recall,
        summary=done.summary,
        verification=retained.verification,
    )


async def _state_and_notes(
    work: Awaitable[tuple[int, SummaryState | None, list[Diagnostic]]],
) -> tuple[SummaryState | None, list[Diagnostic]]:
    _, state, notes = await work
    return state, notes
