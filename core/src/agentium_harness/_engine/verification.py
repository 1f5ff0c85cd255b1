"""Step 5b of a turn: verify a completion candidate against current host evidence (R27–R31).

When a run asks for verification and the model's turn completed, its final
answer is a completion candidate. The engine calls the configured verifier
under its deadline; a verifier that raises, times out, or returns something
other than a :class:`VerificationResult` yields ``unknown`` with the error in
diagnostics. The evidence is cut to the turn's budget by whole entries, in
order, with the omitted count kept (R30); revisions share that one budget.

The policy (:func:`verified_completion_policy`) decides what follows: ``pass``
accepts; ``fail`` stops, or asks the model for a revision with the
verifier's reasons as labeled source data (kind ``verification``), at most
``max_revisions`` times; ``unknown`` always stops (R28). A claim is never
evidence (R29): the verifier sees the candidate, but judges host evidence.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import attrs

from .._errors import InvalidArgumentError, OperationTimeoutError
from .._history import Message, Role
from .._observe import spans as observe
from .._observe.logs import log_diagnostics
from .._observe.settings import Resolved
from .._observe.turn import diagnostic_events
from .._ports.provider import SourceBlock, SourceKind
from .._ports.verify import CompletionCandidate, CompletionVerifier, VerificationResult, VerifyContext
from .._scope import Scope
from .._text import clean_text, cut_text, error_text, one_line
from .._validators import bounded_count, exact_number, shown_number, unicode_text
from .._verdicts import (
    MAX_REASON_BYTES,
    EvidenceEntry,
    EvidenceLimits,
    Verdict,
    VerificationAttempt,
    VerificationRecord,
    evidence_size,
    fit_evidence,
)
from .lifecycle import Ticket
from .results import Diagnostic, RunStatus, Severity
from .turn import TurnInterrupted, TurnOutcome, merge_turns

__all__ = [
    "MAX_REVISIONS_CEILING",
    "REVISION_REQUEST",
    "CompletionPolicy",
    "Reviser",
    "Rerun",
    "verification_block",
    "verified_completion_policy",
    "verify_completed_turn",
    "check_verify",
    "verify_on_demand",
    "verify_turn",
]

#: The user-role message that opens a revision; the reasons themselves travel as labeled source data.
REVISION_REQUEST = (
    "Verification did not accept the completion. The verifier's verdict, reasons and evidence are in "
    "the source data of kind verification. Revise the work, then answer again."
)

#: No policy asks for more revisions than this: each one is a full model turn.
MAX_REVISIONS_CEILING = 8

OnFail = Literal["stop", "revise"]


def _on_fail(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in ("stop", "revise"):
        raise InvalidArgumentError(f'on_fail must be "stop" or "revise", got {value!r}')


def _flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{attribute.name} must be true or false, got {value!r}")


@attrs.frozen(slots=True)
class CompletionPolicy:
    """What a verdict leads to (R28); build it with :func:`verified_completion_policy`.

    - ``on_fail``: ``"stop"`` (the default) ends the turn unaccepted;
      ``"revise"`` asks the model to revise, with the verifier's reasons;
    - ``max_revisions``: revisions at most, 0 to :data:`MAX_REVISIONS_CEILING`;
    - ``allow_revision_effects``: tools with write effects may run during a
      revision (refused and recorded otherwise, R31); grants still apply.
    """

    on_fail: str = attrs.field(default="stop", validator=_on_fail)
    max_revisions: int = attrs.field(
        default=1, validator=bounded_count(minimum=0, ceiling=MAX_REVISIONS_CEILING)
    )
    allow_revision_effects: bool = attrs.field(default=False, validator=_flag)

    @property
    def label(self) -> str:
        """A short name for records: ``stop`` or ``revise(max=2, effects=no)``."""
        if self.on_fail == "stop":
            return "stop"
        effects = "yes" if self.allow_revision_effects else "no"
        return f"revise(max={self.max_revisions}, effects={effects})"


def verified_completion_policy(
    on_fail: OnFail = "stop", max_revisions: int = 1, allow_revision_effects: bool = False
) -> CompletionPolicy:
    """A completion policy: pass accepts, fail stops or revises, unknown always stops (R28).

    Raises :class:`~agentium_harness._errors.InvalidArgumentError` for an
    ``on_fail`` other than ``"stop"``/``"revise"`` or ``max_revisions``
    outside 0–8.
    """
    return CompletionPolicy(
        on_fail=on_fail, max_revisions=max_revisions, allow_revision_effects=allow_revision_effects
    )


#: Continue the turn for revision ``n`` with the feedback block; returns the new final answer,
#: or ``None`` when the revised turn did not complete (step limit).
Reviser = Callable[[int, SourceBlock], Awaitable[str | None]]


def verification_block(scope: Scope, revision: int, attempt: VerificationAttempt) -> SourceBlock:
    """The verifier's reasons and evidence as labeled source data for a revision (R28).

    One line per field, each value on its line (:func:`one_line`): a reason or
    evidence quoting what a test printed cannot add a ``verdict: pass`` line.
    """
    lines = [f"verdict: {attempt.verdict.value}", f"reason: {one_line(attempt.reason) or '(none given)'}"]
    lines.extend(
        f"evidence {one_line(e.kind)} {one_line(e.ref)}: {one_line(e.detail)}" for e in attempt.evidence
    )
    if attempt.omitted:
        lines.append(f"evidence omitted for the budget: {attempt.omitted} entries")
    return SourceBlock(
        kind=SourceKind.VERIFICATION,
        source_id=f"verification/{scope.session}/{revision}",
        content="\n".join(lines),
        attributes=(("verdict", attempt.verdict.value), ("revision", str(revision))),
    )


async def verify_turn(
    ticket: Ticket,
    *,
    verifier: CompletionVerifier,
    policy: CompletionPolicy,
    limits: EvidenceLimits,
    scope: Scope,
    answer: str,
    started_at: float,
    timeout_s: float,
    revise: Reviser,
    steps_left: Callable[[], int] | None = None,
    noted: Callable[[VerificationRecord], None] | None = None,
) -> tuple[VerificationRecord, list[Diagnostic]]:
    """Verify ``answer``, revising as the policy allows; the record of every attempt.

    The evidence budget is the turn's: each attempt gets what earlier attempts
    left, and an attempt that would start with nothing left is not made (the
    turn stops on the last verdict, noted in diagnostics). So is the step
    budget: with ``steps_left`` at 0 no revision is asked for.

    ``noted`` is given the record as it stands after each verdict, and before
    each revision the record that revision leaves if the run stops in it (its
    model call fails, the run is cancelled): the verdicts so far, then an
    ``unknown`` attempt for the revision. What the runtime commits then says
    the completion was judged, and how, rather than that it never was.
    """
    diagnostics: list[Diagnostic] = []
    attempts: list[VerificationAttempt] = []
    used_entries = used_bytes = 0
    revision = 0
    while True:
        attempt, notes = await _attempt(
            ticket,
            verifier,
            CompletionCandidate(claim=answer),
            scope,
            revision=revision,
            max_entries=limits.max_entries - used_entries,
            max_bytes=limits.max_bytes - used_bytes,
            started_at=started_at,
            timeout_s=timeout_s,
        )
        diagnostics.extend(notes)
        attempts.append(attempt)
        if noted is not None:
            noted(_record(attempts, revision, policy))
        used_entries += len(attempt.evidence)
        used_bytes += sum(evidence_size(e) for e in attempt.evidence)
        if attempt.verdict is not Verdict.FAIL or policy.on_fail == "stop":
            break
        if revision >= policy.max_revisions:
            diagnostics.append(
                Diagnostic(
                    "revisions_exhausted",
                    f"verification still failed after {revision} revision(s); the completion is not accepted",
                    Severity.WARNING,
                )
            )
            break
        if used_entries >= limits.max_entries or used_bytes >= limits.max_bytes:
            diagnostics.append(
                Diagnostic(
                    "evidence_budget_exhausted",
                    "the turn's evidence budget is used up, so no revision can be verified; "
                    "the completion is not accepted",
                    Severity.WARNING,
                )
            )
            break
        if steps_left is not None and steps_left() <= 0:
            diagnostics.append(
                Diagnostic(
                    "step_budget_exhausted",
                    "the run's max_steps model calls are used up, so no revision can run; "
                    "the completion is not accepted",
                    Severity.WARNING,
                )
            )
            break
        revision += 1
        diagnostics.append(
            Diagnostic("revision_requested", f"verification failed ({attempt.reason}); revision {revision}")
        )
        if noted is not None:
            why = f"the run stopped in revision {revision} or its verification; not verified"
            noted(_record([*attempts, VerificationAttempt(revision, Verdict.UNKNOWN, why)], revision, policy))
        revised = await revise(revision, verification_block(scope, revision, attempt))
        if revised is None:
            diagnostics.append(
                Diagnostic(
                    "revision_incomplete",
                    f"revision {revision} did not complete within the step limit; not accepted",
                    Severity.WARNING,
                )
            )
            attempts.append(
                VerificationAttempt(revision, Verdict.UNKNOWN, "the revision did not complete; not verified")
            )
            break
        answer = revised
    record = _record(attempts, revision, policy)
    if noted is not None:
        noted(record)
    if not record.accepted:
        diagnostics.append(
            Diagnostic(
                "completion_not_accepted",
                f"verdict {record.verdict.value}: {record.reason}",
                Severity.WARNING,
            )
        )
    return record, diagnostics


def _record(
    attempts: list[VerificationAttempt], revisions: int, policy: CompletionPolicy
) -> VerificationRecord:
    """The record of ``attempts``: its verdict is the last one's."""
    return VerificationRecord(
        verdict=attempts[-1].verdict, revisions=revisions, policy=policy.label, attempts=tuple(attempts)
    )


#: Run the model again: ``(turn so far, feedback block, refuse write effects, model calls left)``
#: ``-> the continued turn``.
Rerun = Callable[[tuple[Message, ...], SourceBlock, bool, int], Awaitable[TurnOutcome]]


async def verify_completed_turn(
    ticket: Ticket,
    turn: TurnOutcome,
    rerun: Rerun,
    *,
    verifier: CompletionVerifier,
    policy: CompletionPolicy,
    limits: EvidenceLimits,
    scope: Scope,
    started_at: float,
    timeout_s: float,
    max_steps: int,
    noted: Callable[[VerificationRecord], None] | None = None,
) -> tuple[TurnOutcome, VerificationRecord | None, list[Diagnostic]]:
    """Verify a finished turn; the turn (with any revisions appended) and the record.

    A turn that did not complete (step limit) has no candidate: it is not
    verified (record ``None``) and a ``not_verified`` diagnostic says so.
    Revisions share the run's ``max_steps`` with the turn: a revision gets
    the model calls the run has left, and none is asked for when none are
    left. A model call failing in a revision raises :class:`TurnInterrupted`
    with the whole turn so far; ``noted`` (see :func:`verify_turn`) has had the
    record that revision leaves by then.
    """
    if turn.status is not RunStatus.COMPLETED:
        note = Diagnostic(
            "not_verified",
            "the turn did not complete, so there was no completion to verify",
            Severity.WARNING,
        )
        return turn, None, [note]
    current = turn

    async def revise(revision: int, block: SourceBlock) -> str | None:
        nonlocal current
        try:
            more = await rerun(
                current.messages, block, not policy.allow_revision_effects, max_steps - current.steps
            )
        except TurnInterrupted as stop:
            error, ran = stop.take()  # neither ``stop`` nor this frame keeps the error: no cycle
            try:
                raise TurnInterrupted(error, merge_turns(current, ran)) from error
            finally:
                del error
        current = merge_turns(current, more)
        return final_answer(more.messages) if more.status is RunStatus.COMPLETED else None

    # The record as it stands: what the runtime commits if the run stops in a revision.
    standing: list[VerificationRecord] = []

    def keep(record: VerificationRecord) -> None:
        standing[:] = [record]
        if noted is not None:
            noted(record)

    with observe.stage("verification", {"agentium.verification.policy": policy.label}) as span:
        try:
            record, notes = await verify_turn(
                ticket,
                verifier=verifier,
                policy=policy,
                limits=limits,
                scope=scope,
                answer=final_answer(turn.messages),
                started_at=started_at,
                timeout_s=timeout_s,
                revise=revise,
                steps_left=lambda: max_steps - current.steps,
                noted=keep,
            )
        except BaseException:
            # A run stopped in a revision (its model call failed, it was cancelled) commits the
            # verdicts so far: the span says the same, not nothing.
            if standing:
                _describe(span, standing[0])
                revision = {"agentium.verification.revision": standing[0].revisions}
                span.event("agentium.verification.interrupted", revision)
            raise
        _describe(span, record)
    status = RunStatus.COMPLETED if record.accepted else RunStatus.NOT_ACCEPTED
    return attrs.evolve(current, status=status), record, notes


def check_verify(verifier: CompletionVerifier | None, claim: object, since: object) -> CompletionVerifier:
    """The runtime's verifier for ``runtime.verify()``, after the call's own checks."""
    if verifier is None:
        raise InvalidArgumentError("the runtime has no verifier; configure [verifier]")
    if not isinstance(claim, str):
        raise InvalidArgumentError(f"claim must be a string, got {type(claim).__name__}")
    started = exact_number(since)
    # Here, not only in VerifyContext: built inside the verifier's call, its refusal would be
    # taken for the verifier's failure and answered as an 'unknown' verdict.
    if started is None or not 0 <= started < math.inf:
        raise InvalidArgumentError(
            f"since must be a finite time.time() value, 0 or more, got {shown_number(since)}"
        )
    return verifier


async def verify_on_demand(
    ticket: Ticket,
    *,
    verifier: CompletionVerifier,
    limits: EvidenceLimits,
    scope: Scope,
    claim: str,
    started_at: float,
    timeout_s: float,
    telemetry: Resolved,
    owner: object = None,
) -> tuple[VerificationRecord, tuple[Diagnostic, ...]]:
    """One verification outside a turn (``agentium verify``): same deadline, budget and checks.

    Recorded under the runtime's ``telemetry`` (``owner``: the runtime), as a turn's verification is,
    and its diagnostics reported as a run's: an event each on its span, a
    record each on its stage's logger (a degraded outcome is a WARNING).
    """
    with observe.using(telemetry, owner), observe.stage("verification", ON_DEMAND) as span:
        attempt, found = await _attempt(
            ticket,
            verifier,
            CompletionCandidate(claim=claim),
            scope,
            revision=0,
            max_entries=limits.max_entries,
            max_bytes=limits.max_bytes,
            started_at=started_at,
            timeout_s=timeout_s,
        )
        record = VerificationRecord(attempt.verdict, 0, "on-demand", (attempt,))
        _describe(span, record)
        notes = (*found, *ticket.abandonment_diagnostics())
        diagnostic_events(span, observe.current_instruments(), telemetry, notes)
        observe.record("verdicts", 1, {"agentium.verification.verdict": record.verdict.value})
    key = scope.session_key
    fields = {"agentium_session": telemetry.ident(key.tenant, key.user, key.session)}
    log_diagnostics(notes, fields, capture_content=telemetry.capture_content)
    return record, notes


#: The span attributes of ``runtime.verify()``'s verification.
ON_DEMAND = {"agentium.verification.policy": "on-demand"}


def _describe(span: observe.Span | observe.NullSpan, record: VerificationRecord) -> None:
    """A verification's verdict and counts on its span (the reason is content: only with capture)."""
    span.set("agentium.verification.verdict", record.verdict.value)
    span.set("agentium.verification.revisions", record.revisions)
    span.set("agentium.verification.attempts", len(record.attempts))
    if record.attempts:
        span.content("agentium.verification.reason", record.attempts[-1].reason)


def final_answer(messages: tuple[Message, ...]) -> str:
    """The last assistant message's text (the completion candidate's claim)."""
    return next((m.content for m in reversed(messages) if m.role is Role.ASSISTANT), "")


def _plain_text(value: object) -> str | None:
    """A plain ``str`` copy of ``value`` when it is valid Unicode text, else ``None``.

    A ``str`` subclass is copied with ``str.__str__`` so none of its own
    methods (an ``encode`` that hides a surrogate, say) is trusted later.
    """
    try:
        return unicode_text(value, "verifier text")
    except InvalidArgumentError:
        return None


def _checked_text(
    given_reason: str, given: tuple[EvidenceEntry, ...]
) -> tuple[str, tuple[EvidenceEntry, ...]] | str:
    """The reason and evidence as plain, encodable text; or which field is not.

    Every string the verifier returns is kept in the committed record and shown
    to the model in a revision, so one that cannot be encoded as UTF-8 (a lone
    surrogate) or is not a string at all makes the whole result malformed.
    """
    reason = _plain_text(given_reason)
    if reason is None:
        return "reason"
    entries: list[EvidenceEntry] = []
    for index, entry in enumerate(given):
        kind, ref, detail = (_plain_text(entry.kind), _plain_text(entry.ref), _plain_text(entry.detail))
        for name, text in (("kind", kind), ("ref", ref), ("detail", detail)):
            if text is None:
                return f"evidence entry {index}: {name}"
        entries.append(EvidenceEntry(kind, ref, detail))  # type: ignore[arg-type]  # checked above
    return reason, tuple(entries)


def _well_formed(result: object) -> tuple[Verdict, tuple[EvidenceEntry, ...], str] | str:
    """A real VerificationResult's verdict, evidence entries and str reason (nothing coerced), else why not.

    Each field is read once and what was checked is what is used: a subclass's property could
    answer a second read with something else (evidence that is no entries), raising an untyped
    error on a turn whose tools ran. The wrong field is named: it read "returned
    VerificationResult, not a VerificationResult" for a result whose one field was wrong.
    """
    if not isinstance(result, VerificationResult):
        return f"{clean_text(type(result).__name__)}, not a VerificationResult with a Verdict"
    try:
        verdict, evidence, reason = result.verdict, result.evidence, result.reason
        entries = tuple(evidence) if isinstance(evidence, tuple | list) else None
    except Exception:  # an instance built without its fields (``__new__``), a property that raises
        return "a VerificationResult whose fields cannot be read"
    if not isinstance(verdict, Verdict):
        return f"a VerificationResult whose verdict is a {clean_text(type(verdict).__name__)}, not a Verdict"
    if entries is None:
        return f"a VerificationResult whose evidence is a {clean_text(type(evidence).__name__)}, not a tuple"
    stray = next((e for e in entries if not isinstance(e, EvidenceEntry)), None)
    if stray is not None:
        shown = clean_text(type(stray).__name__)
        return f"a VerificationResult whose evidence holds a {shown}, not an EvidenceEntry"
    if not isinstance(reason, str):
        return f"a VerificationResult whose reason is a {clean_text(type(reason).__name__)}, not a str"
    return verdict, entries, reason


async def _attempt(
    ticket: Ticket,
    verifier: CompletionVerifier,
    candidate: CompletionCandidate,
    scope: Scope,
    *,
    revision: int,
    max_entries: int,
    max_bytes: int,
    started_at: float,
    timeout_s: float,
) -> tuple[VerificationAttempt, list[Diagnostic]]:
    def context(op: object) -> VerifyContext:
        return VerifyContext(
            scope=scope,
            op=op,  # type: ignore[arg-type]  # an OpContext from Ticket.call
            max_entries=max_entries,
            max_bytes=max_bytes,
            run_started_at=started_at,
            revision=revision,
        )

    began = time.monotonic()
    try:
        result = await ticket.call(
            "verifier verify",
            lambda op: verifier.verify(candidate, context(op)),
            timeout_s=timeout_s,
            store=False,
        )
    except OperationTimeoutError as exc:
        detail = f"the verifier did not answer within {exc.timeout_s}s and was cancelled"
        return VerificationAttempt(revision, Verdict.UNKNOWN, detail), [
            Diagnostic("verifier_timeout", detail, Severity.WARNING)
        ]
    except Exception as exc:  # a verifier's failure is an unknown verdict, never an accepted one
        detail, _ = cut_text(f"the verifier failed: {error_text(exc)}", MAX_REASON_BYTES)
        return VerificationAttempt(revision, Verdict.UNKNOWN, detail), [
            Diagnostic("verifier_failed", detail, Severity.WARNING)
        ]
    fields = _well_formed(result)
    if isinstance(fields, str):
        detail = f"the verifier returned {fields}"
        return VerificationAttempt(revision, Verdict.UNKNOWN, detail), [
            Diagnostic("verifier_contract", detail, Severity.WARNING)
        ]
    verdict, given, given_reason = fields
    checked = _checked_text(given_reason, given)
    if isinstance(checked, str):
        detail = (
            f"the verifier returned a VerificationResult whose {checked} is not valid Unicode text "
            "(not a string, or a lone surrogate)"
        )
        return VerificationAttempt(revision, Verdict.UNKNOWN, detail), [
            Diagnostic("verifier_contract", detail, Severity.WARNING)
        ]
    text, evidence = checked
    notes: list[Diagnostic] = []
    # The reason is free text kept in the record and shown to the model: bounded like the evidence.
    reason, cut = cut_text(text, MAX_REASON_BYTES)
    if cut:
        notes.append(
            Diagnostic(
                "verifier_reason_cut",
                f"the verifier's reason was cut to {MAX_REASON_BYTES} bytes ({cut} bytes left out)",
                Severity.WARNING,
            )
        )
    kept, omitted = fit_evidence(evidence, max_entries, max_bytes)
    if omitted:
        notes.append(
            Diagnostic(
                "evidence_omitted",
                f"{omitted} evidence entr{'y' if omitted == 1 else 'ies'} did not fit the evidence budget "
                f"whole ({max_entries} entries, {max_bytes} bytes left) and were omitted",
                Severity.WARNING,
            )
        )
    elapsed = time.monotonic() - began
    notes.append(
        Diagnostic(
            "verified",
            f"revision {revision}: {verdict.value} with {len(kept)} evidence entries in {elapsed:.3f}s",
        )
    )
    return VerificationAttempt(revision, verdict, reason, kept, omitted), notes
