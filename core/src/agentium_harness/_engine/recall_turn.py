"""Recall in a turn: the policy's decision at the dispatch fence and at the commit fence (R20–R26).

Before the model is called, :func:`recall_before_dispatch` gathers evidence
(:mod:`.recall`) and asks the policy: proceed, stop, clarify (at most one
clarification per run, and never after an allocation omission, which returns
``recall_assembly_omitted``), or continue with explicit uncertainty. After the
model answered and before the session commit, :func:`recall_before_commit`
validates the included sources again; a changed, deleted or no-longer
authorized source is recorded and the policy decides again.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable

import attrs

from .._history import Message, RetainedRecord, Role
from .._observe import spans as observe
from .._observe.logs import one_line as log_line
from .._ports.provider import SourceBlock, SourceKind, Usage
from .._ports.recall import RecallLimits, RecallStore, SourceRef, Validation, ValidationStatus
from .._ports.sessions import SessionSnapshot, StoredSnapshot
from .._scope import Scope
from .._text import error_text, one_line
from .bounded import bounded
from .embedding import Hybrid
from .lifecycle import Ticket
from .recall import Evidence, RecallUsage, gather_evidence, revalidate
from .recall_findings import RunFindings, unsaid
from .recall_policy import (
    PolicyDecision,
    PolicyInput,
    QueryInput,
    RecallDecision,
    RecallFence,
    RecallPolicy,
    RecallStatus,
)
from .recall_readback import GroupReader
from .recall_round import VIOLATION, add_violations, run_worded
from .recall_view import source_view_revision
from .results import CommitState, Diagnostic, EvictionStatus, RunResult, RunStatus, Severity
from .sources import SourceStatus

__all__ = [
    "Clarifier",
    "RecallEnd",
    "RecallOutcome",
    "RecallStep",
    "opening_messages",
    "recall_before_commit",
    "recall_before_dispatch",
]

_log = logging.getLogger("agentium.engine.recall")

#: A host callable that asks the user one clarification question and returns the answer.
Clarifier = Callable[[str], Awaitable[str]]


class RecallEnd(enum.StrEnum):
    """Why a run ended before committing because of recall (``None`` when it went on)."""

    STOPPED = "stopped"
    NEEDS_CLARIFICATION = "needs_clarification"
    ASSEMBLY_OMITTED = "recall_assembly_omitted"


@attrs.frozen(slots=True)
class RecallOutcome:
    """What recall did in a run, as the host sees it in ``RunResult.recall``.

    ``included`` are the sources in the request (rank order), ``omitted`` the
    source ids left out by allocation, ``invalidated`` the sources a fence
    removed or found changed, ``violations`` the adapter's contract
    violations (each dropped item; past 16 a run counts the rest in one),
    ``uncertainty`` what the run carries on (also in the retained record;
    at most 40 lines and 16 KiB), ``clarification`` the (question, answer)
    pair when one was asked, ``fence`` where the last decision was taken.

    ``uncertainty`` is committed with the turn, so it is in the engine's own
    words, as the model's ``recall-status`` notice is: an adapter's error by
    its class, contract violations counted, never quoted (they may name
    another tenant's ids). What the store said whole is the host's, in
    ``violations`` and the ``recall_*`` diagnostics, never committed.
    """

    status: RecallStatus
    decision: RecallDecision
    policy: str
    query: str
    reason: str
    fence: RecallFence
    included: tuple[SourceRef, ...] = ()
    omitted: tuple[str, ...] = ()
    invalidated: tuple[Validation, ...] = ()
    violations: tuple[str, ...] = ()
    uncertainty: tuple[str, ...] = ()
    source_view_revision: str | None = None
    usage: RecallUsage = attrs.field(factory=RecallUsage)
    clarification: tuple[str, str] | None = None


@attrs.frozen(slots=True)
class RecallStep:
    """The dispatch fence's result: the outcome, the blocks for the request, and whether the run ends."""

    outcome: RecallOutcome
    blocks: tuple[SourceBlock, ...]
    end: RecallEnd | None
    diagnostics: tuple[Diagnostic, ...]
    #: The clarification question when ``end`` is ``needs_clarification``.
    question: str = ""


def _decide(policy: RecallPolicy, seen: PolicyInput) -> PolicyDecision:
    """The policy's decision; a policy that raises or answers nonsense stops the run (fail closed)."""
    try:
        decision = policy.decide(seen)
    except Exception as exc:
        return PolicyDecision(RecallDecision.STOP, f"recall policy raised {error_text(exc)}")
    if not isinstance(decision, PolicyDecision) or not isinstance(decision.decision, RecallDecision):
        return PolicyDecision(RecallDecision.STOP, f"recall policy returned {type(decision).__name__}")
    return decision


#: Lines of uncertainty a run carries (``RunResult.recall.uncertainty``, the committed record).
MAX_UNCERTAINTY_LINES = 40
#: UTF-8 bytes of uncertainty a run carries, all lines together.
MAX_UNCERTAINTY_BYTES = 16 * 1024


def bounded_uncertainty(lines: tuple[str, ...]) -> tuple[str, ...]:
    """``lines`` within :data:`MAX_UNCERTAINTY_LINES` and :data:`MAX_UNCERTAINTY_BYTES`; the rest counted.

    The uncertainty is committed with the turn and shown to the model: a store
    that floods a round with findings must not make either grow without limit.
    """
    kept: list[str] = []
    size = 0
    for line in lines:
        cost = len(line.encode("utf-8", "surrogatepass")) + 1
        if len(kept) >= MAX_UNCERTAINTY_LINES - 1 or size + cost > MAX_UNCERTAINTY_BYTES - 64:
            break
        kept.append(line)
        size += cost
    if len(kept) < len(lines):
        kept.append(f"recall: and {len(lines) - len(kept)} more uncertainty line(s), not listed")
    return tuple(kept)


def _uncertainty(evidence: Evidence) -> tuple[str, ...]:
    """The uncertainty ``evidence`` carries, as the model is told it and the turn commits it.

    From ``Evidence.shown``, not ``problems``: a problem quotes what an adapter returned (another
    tenant's id in a contract violation, a store's error text), and the uncertainty is committed
    with the turn (``retained.uncertainty``), where no other scope's id may end up.
    """
    return bounded_uncertainty(tuple(f"recall {evidence.status.value}: {p}" for p in evidence.shown)) or (
        (f"recall {evidence.status.value}",) if evidence.status is not RecallStatus.COMPLETE else ()
    )


#: The first line of the recall-status notice; shown whatever the evidence budget (R19, R22).
_NOTICE_HEAD = "Recalled evidence is incomplete; treat what is missing as unknown"


def _notice(text: str) -> SourceBlock:
    return SourceBlock(SourceKind.RECALL, "recall-status", text, (("completeness", "partial"),))


def _status_block(uncertainty: tuple[str, ...], budget: int) -> SourceBlock:
    """The recall-status notice, as much of it as fits ``budget`` tokens, and never less than its head.

    Every line is in ``RunResult.recall.uncertainty`` and the retained
    record; the notice lists them as ``Evidence.shown`` words them (no
    adapter's error text, no id an adapter returned out of contract: the
    model's answer may repeat them to the user), and names how many it had
    to leave out. When even the
    head does not fit the budget, the head is shown anyway: a run that
    continues with uncertainty always tells the model so.
    """
    # Bounded input (``bounded_uncertainty``), and at most that many renderings tried here. One line
    # each (``one_line``): an adapter's error quoted in one cannot add a line that reads as another.
    lines = [f"- {one_line(u)}" for u in bounded_uncertainty(uncertainty)]
    for shown in range(len(lines), -1, -1):
        rest = len(lines) - shown
        tail = [f"- and {rest} more not shown"] if rest else []
        body = lines[:shown] + tail
        block = _notice(_NOTICE_HEAD + (":\n" + "\n".join(body) if body else "."))
        if block.estimated_tokens <= budget:
            return block
    return _notice(_NOTICE_HEAD + ".")


def _diagnostics(evidence: Evidence, *, violations: bool = True) -> list[Diagnostic]:
    """What a dispatch round reports; ``violations=False``: but its contract violations (said as listed)."""
    out = [Diagnostic(VIOLATION, v, Severity.WARNING) for v in evidence.violations] if violations else []
    out += [
        Diagnostic("recall_omitted", f"source {s} left out whole", Severity.WARNING) for s in evidence.omitted
    ]
    out += [Diagnostic("recall_note", n) for n in evidence.notes]
    if evidence.embedding_failure:
        out.append(Diagnostic("recall_embed_failed", evidence.embedding_failure, Severity.WARNING))
    if evidence.erased_documents:
        out.append(Diagnostic("recall_document_erased", evidence.erased_documents, Severity.WARNING))
    if evidence.crowded:
        out.append(Diagnostic("recall_view_crowded", evidence.crowded, Severity.WARNING))
    if evidence.status is RecallStatus.FAILED:
        out.append(Diagnostic("recall_failed", "; ".join(evidence.problems), Severity.ERROR))
    return out


def _describe(span: observe.Span | observe.NullSpan, outcome: RecallOutcome) -> None:
    """A recall outcome as a DEBUG record and on its span: statuses and counts (the query: span, opt-in)."""
    _log.debug(
        "recall %s at the %s fence: %s, %d source(s) included, %d omitted",
        outcome.status.value,
        outcome.fence.value,
        outcome.decision.value,
        len(outcome.included),
        len(outcome.omitted),
        extra={
            "agentium_recall_status": outcome.status.value,
            "agentium_recall_decision": outcome.decision.value,
        },
    )
    span.set("agentium.recall.status", outcome.status.value)
    span.set("agentium.recall.decision", outcome.decision.value)
    span.set("agentium.recall.included", len(outcome.included))
    span.set("agentium.recall.omitted", len(outcome.omitted))
    span.set("agentium.recall.invalidated", len(outcome.invalidated))
    span.set("agentium.recall.violations", len(outcome.violations))
    span.set("agentium.recall.evidence_tokens", outcome.usage.evidence_tokens)
    span.content("gen_ai.retrieval.query.text", outcome.query)


async def recall_before_dispatch(
    ticket: Ticket,
    *,
    store: RecallStore,
    scope: Scope,
    limits: RecallLimits,
    policy: RecallPolicy,
    user_input: str,
    history: tuple[Message, ...],
    clarify: Clarifier | None,
    clarify_timeout_s: float,
    hidden: Callable[[str], bool] | None = None,
    hybrid: Hybrid | None = None,
    groups: GroupReader | None = None,
    said: set[tuple[str, str]] | None = None,
) -> RecallStep:
    """Gather evidence and apply the policy's decision at the dispatch fence (span ``retrieval``).

    ``hidden`` names the sources the session's view hides (see ``gather_evidence``); with
    ``hybrid``, discovery fuses lexical and vector candidates; ``groups`` reads
    recalled groups back so their excerpts are rendered from them; ``said`` gets the key of every
    contract violation met, listed or counted (:class:`~.recall_findings.RunFindings`).
    """
    source = log_line(type(store).__name__)  # the adapter's to choose, in the span's name: escaped
    attributes = {"gen_ai.data_source.id": source}
    with observe.operation("retrieval", f"retrieval {source}", metric_stage="recall", **attributes) as span:
        step = await _dispatch_fence(
            ticket,
            store=store,
            scope=scope,
            limits=limits,
            policy=policy,
            user_input=user_input,
            history=history,
            clarify=clarify,
            clarify_timeout_s=clarify_timeout_s,
            hidden=hidden,
            hybrid=hybrid,
            groups=groups,
            said=said,
        )
        _describe(span, step.outcome)
        if step.end is not None:
            span.set("agentium.recall.end", step.end.value)
        return step


async def _dispatch_fence(
    ticket: Ticket,
    *,
    store: RecallStore,
    scope: Scope,
    limits: RecallLimits,
    policy: RecallPolicy,
    user_input: str,
    history: tuple[Message, ...],
    clarify: Clarifier | None,
    clarify_timeout_s: float,
    hidden: Callable[[str], bool] | None = None,
    hybrid: Hybrid | None = None,
    groups: GroupReader | None = None,
    said: set[tuple[str, str]] | None = None,
) -> RecallStep:
    turn = QueryInput(user_input, history)
    said = set() if said is None else said  # the round after a clarification does not list it again
    evidence = await gather_evidence(
        ticket, store, scope, limits, policy, turn, hidden=hidden, hybrid=hybrid, groups=groups, said=said
    )
    if (runs := run_worded(evidence.violations)) is not evidence.violations:
        evidence = attrs.evolve(evidence, violations=runs)  # the run's list: its count line the run's
    diagnostics = _diagnostics(evidence)
    clarification: tuple[str, str] | None = None
    decision = _decide(policy, _seen(evidence, RecallFence.DISPATCH, clarified=False))
    if decision.decision is RecallDecision.CLARIFY:
        asked = decision.question
        question = asked if isinstance(asked, str) and asked.strip() else "Could you say more?"
        end, why = None, ""
        if evidence.allocation_omitted:
            end, why = (
                RecallEnd.ASSEMBLY_OMITTED,
                (
                    "clarification refused: evidence was omitted by a budget, and more input cannot fix an "
                    "unchanged ceiling"
                ),
            )
        elif clarify is None:
            end, why = (
                RecallEnd.NEEDS_CLARIFICATION,
                "the policy asks a clarification; no clarifier was given",
            )
        elif evidence.usage.queries >= limits.max_queries:
            end, why = (
                RecallEnd.STOPPED,
                f"clarification needs a second query; max_queries={limits.max_queries}",
            )
        if end is not None:
            diagnostics.append(Diagnostic(end.value, why, Severity.WARNING))
            outcome = _outcome(policy, evidence, decision, RecallFence.DISPATCH, why)
            shown = question if end is RecallEnd.NEEDS_CLARIFICATION else ""
            return RecallStep(outcome, (), end, tuple(diagnostics), shown)
        assert clarify is not None
        answer = await _ask(clarify, question, clarify_timeout_s)
        if answer is None:
            why = f"the clarifier did not answer within {clarify_timeout_s}s (or failed)"
            diagnostics.append(Diagnostic("clarification_failed", why, Severity.WARNING))
            stop = PolicyDecision(RecallDecision.STOP, why)
            return RecallStep(
                _outcome(policy, evidence, stop, RecallFence.DISPATCH, why),
                (),
                RecallEnd.STOPPED,
                tuple(diagnostics),
            )
        clarification = (question, answer)
        first, noted = evidence.violations, evidence.notes
        evidence = await gather_evidence(
            ticket,
            store,
            scope,
            limits,
            policy,
            attrs.evolve(turn, clarification=answer),
            spent=evidence.usage,
            hidden=hidden,
            hybrid=hybrid,
            groups=groups,
            said=said,
        )
        # The run's list, as the later rounds add to it: the first round's violations are the run's too,
        # and said as listed (the first 16 a WARNING each, one counting the rest), not each round's whole;
        # what the first round met, met again, is not said again (the round leaves it out: ``said``); nor
        # is a note of a kind the first round noted (its session's close failing: one note in the run).
        violations = add_violations(diagnostics, first, evidence.violations)
        evidence = attrs.evolve(evidence, violations=violations, notes=unsaid(noted, evidence.notes))
        diagnostics.extend(_diagnostics(evidence, violations=False))
        decision = _decide(policy, _seen(evidence, RecallFence.DISPATCH, clarified=True))
        if decision.decision is RecallDecision.CLARIFY:
            decision = PolicyDecision(RecallDecision.STOP, "at most one clarification per run")
    outcome = _outcome(policy, evidence, decision, RecallFence.DISPATCH, decision.reason, clarification)
    if decision.decision is RecallDecision.STOP:
        diagnostics.append(
            Diagnostic(
                "recall_stopped", decision.reason or "the recall policy stopped the run", Severity.WARNING
            )
        )
        return RecallStep(outcome, (), RecallEnd.STOPPED, tuple(diagnostics))
    blocks = list(evidence.blocks)
    if decision.decision is RecallDecision.CONTINUE:
        uncertainty = outcome.uncertainty
        budget = limits.max_evidence_tokens
        # The notice is wrapper metadata: it must fit the same evidence budget,
        # so room is reserved for it first and the lowest-ranked evidence makes
        # way (R19). It is always shown, even when it alone is over the budget.
        # The model reads the lines in the engine's words alone (``Evidence.shown``), as they are committed.
        status = _status_block(uncertainty, budget)
        dropped: list[str] = []
        while blocks and sum(b.estimated_tokens for b in blocks) + status.estimated_tokens > budget:
            dropped.append(blocks.pop().source_id)
        blocks.append(status)
        if status.estimated_tokens > budget:
            diagnostics.append(
                Diagnostic(
                    "recall_status_over_budget",
                    f"the recall-status notice ({status.estimated_tokens} tokens) alone exceeds "
                    f"max_evidence_tokens={budget}; it was shown anyway and no evidence was included",
                    Severity.WARNING,
                )
            )
        if dropped:
            kept = {b.source_id for b in blocks}
            refs = tuple(r for r in outcome.included if r.source_id in kept)
            outcome = attrs.evolve(
                outcome,
                included=refs,
                omitted=outcome.omitted + tuple(dropped),
                source_view_revision=source_view_revision(refs),
                uncertainty=bounded_uncertainty(
                    uncertainty
                    + tuple(f"source {d} left out to make room for the recall status" for d in dropped)
                ),
            )
        # One note per line, each note's own line breaks escaped (as the notice above writes them):
        # joined with "; ", a note holding "; " (a store's error text; "…; dropped") read as two.
        listed = "\n".join(map(one_line, outcome.uncertainty))
        diagnostics.append(Diagnostic("recall_uncertain", listed, Severity.WARNING))
    return RecallStep(outcome, tuple(blocks), None, tuple(diagnostics))


def opening_messages(user_input: str, step: RecallStep | None) -> tuple[tuple[Message, ...], str]:
    """How the turn opens: ``(prior messages, user text)`` for :func:`.turn.run_turn`.

    After a clarification the turn is the input, the question asked and the
    user's answer, in that order: the model sees the whole exchange, and the
    committed group keeps it as canonical history (R21). Otherwise it is the
    input alone.
    """
    clarification = step.outcome.clarification if step is not None else None
    if clarification is None:
        return (), user_input
    question, answer = clarification
    return (Message(Role.USER, user_input), Message(Role.ASSISTANT, question)), answer


async def _ask(clarify: Clarifier, question: str, timeout_s: float) -> str | None:
    try:
        # In its own task: a clarifier blocked in a worker thread cannot hold the run past its deadline.
        answer: object = await bounded(lambda: clarify(question), timeout_s)
    except Exception:  # failed, timed out or abandoned: no answer
        return None
    if not isinstance(answer, str):
        return None
    try:
        answer.encode("utf-8")  # it becomes a message of canonical history: text only
    except UnicodeEncodeError:
        return None
    return answer


def _seen(evidence: Evidence, fence: RecallFence, *, clarified: bool) -> PolicyInput:
    return PolicyInput(
        status=evidence.status,
        fence=fence,
        allocation_omitted=evidence.allocation_omitted,
        problems=evidence.problems,
        clarified=clarified,
    )


def _outcome(
    policy: RecallPolicy,
    evidence: Evidence,
    decision: PolicyDecision,
    fence: RecallFence,
    reason: str,
    clarification: tuple[str, str] | None = None,
) -> RecallOutcome:
    carries = decision.decision is RecallDecision.CONTINUE
    return RecallOutcome(
        status=evidence.status,
        decision=decision.decision,
        policy=policy.name,
        query=evidence.query,
        reason=reason,
        fence=fence,
        included=evidence.refs,
        omitted=evidence.omitted,
        invalidated=evidence.invalidated,
        violations=evidence.violations,
        uncertainty=_uncertainty(evidence) if carries else (),
        source_view_revision=source_view_revision(evidence.refs),
        usage=evidence.usage,
        clarification=clarification,
    )


async def recall_before_commit(
    ticket: Ticket,
    *,
    store: RecallStore,
    scope: Scope,
    limits: RecallLimits,
    policy: RecallPolicy,
    outcome: RecallOutcome,
    findings: RunFindings,
) -> tuple[RecallOutcome, bool, list[Diagnostic]]:
    """The commit fence: validate the included sources again; ``(outcome, stop, diagnostics)``.

    The store's contract violations and notes go to the run through ``findings`` (said once in
    the run, within its bound); ``diagnostics`` are the fence's other findings.
    """
    if not outcome.included:
        return outcome, False, []
    with observe.stage("recall_validation", span_name="agentium.recall.validate") as span:
        validations, violations, notes, failure, usage = await revalidate(
            ticket, store, scope, limits, outcome.included, outcome.usage, said=findings.said
        )
        changed = [v for v in validations if v.status is not ValidationStatus.CURRENT]
        span.set("agentium.recall.validated", len(validations))
        span.set("agentium.recall.invalidated", len(changed))
        if failure is not None:
            span.fail("validation_failed")
    # The store's violations here are the host's as the dispatch fence's are (a WARNING each, listed in
    # ``violations``; one a look or the dispatch fence said is not said again); the status is what the
    # validations found: the answer was made from those sources.
    if violations or notes:
        outcome = attrs.evolve(outcome, violations=findings.report(outcome.violations, violations, notes))
    diagnostics: list[Diagnostic] = []
    if failure is None and not changed:
        return attrs.evolve(outcome, usage=usage), False, diagnostics
    # The host's reasons in full (the policy, the diagnostics); the committed uncertainty in the
    # engine's words (``Failed.shown``: the store's error by its class), as at the dispatch fence.
    problems = (
        (str(failure),)
        if failure is not None
        else tuple(f"source {v.ref.source_id} is {v.status.value} at the commit fence" for v in changed)
    )
    said = (failure.shown,) if failure is not None else problems
    status = RecallStatus.FAILED if failure is not None else RecallStatus.PARTIAL
    decision = _decide(policy, PolicyInput(status, RecallFence.COMMIT, False, problems, True))
    for p in problems:
        diagnostics.append(Diagnostic("recall_source_changed", p, Severity.WARNING))
    stop = decision.decision not in (RecallDecision.PROCEED, RecallDecision.CONTINUE)
    updated = attrs.evolve(
        outcome,
        status=status,
        decision=RecallDecision.STOP if stop else decision.decision,
        fence=RecallFence.COMMIT,
        reason=decision.reason,
        invalidated=outcome.invalidated + tuple(changed),
        uncertainty=bounded_uncertainty(
            outcome.uncertainty + tuple(f"recall {status.value}: {p}" for p in said)
        ),
        usage=usage,
    )
    if stop:
        diagnostics.append(
            Diagnostic("recall_stopped", decision.reason or "stopped at the commit fence", Severity.WARNING)
        )
    return updated, stop, diagnostics


def uncommitted_result(
    scope: Scope,
    stored: StoredSnapshot | None,
    snap: SessionSnapshot,
    status: RunStatus,
    output: str,
    step: RecallStep,
    diagnostics: list[Diagnostic],
) -> RunResult:
    """The result of a run the recall policy ended: nothing committed, the session as loaded."""
    outcome = step.outcome
    return RunResult(
        output=output,
        status=status,
        eviction=EvictionStatus.NOT_NEEDED,
        sources=SourceStatus.NONE,
        group_seq=None,
        boundary=snap.boundary,
        resident_groups=len(snap.resident),
        snapshot_revision=stored.revision if stored is not None else 0,
        archived=(),
        tool_outcomes=(),
        usage=Usage(input_tokens=0, output_tokens=0),
        retained=RetainedRecord(
            scope=scope, source_view_revision=outcome.source_view_revision, uncertainty=outcome.uncertainty
        ),
        diagnostics=tuple(diagnostics),
        recall=outcome,
        commit_state=CommitState.NOT_COMMITTED,
    )


# RunResult names RecallOutcome only under TYPE_CHECKING (this module imports
# results); resolve it here, once both exist, so cattrs can encode a result
# (``agentium run --json``) without a NameError.
attrs.resolve_types(RunResult, localns={"RecallOutcome": RecallOutcome})
