"""The delete fence before each later model call of a run: a host document deleted since is not sent again.

Recall puts excerpts of host documents into a run's request once, and every
model call of the run — each tool round, a verification revision — sends
that request again. ``delete_document`` (the runtime's, or the recall
store's own, by another task or process) is not an erasure: the tenant's
erasure ledger does not move and :class:`~.turn_fence.TurnFence` never
looks. This fence does, for the documents the request carries and nothing
else:

- a run whose request carries no document excerpt makes none (no cost);
- the first model call follows recall's own validation, so it is looked
  before only when a memory search ran in between (``first``: the one
  await between the two, and a slow one); without memory nothing runs
  there and only later calls look;
- a later call validates the carried documents again: one recall session
  (open, ``validate_current`` of those refs, close), as the commit fence
  does (:func:`~.recall.revalidate`), from what the run's recall has spent
  so far: each look's time is added to the run's recall latency
  (``spent``), so the looks of many tool rounds together stay within
  ``max_latency_s``, and the commit fence and ``RunResult.recall.usage``
  count them (:meth:`DocumentFence.counted`). Their validations are not
  added: each look validates the same refs again, and ``max_validations``
  bounds the sources a round validates (dispatch keeps half for the commit
  fence). A document the store calls ``deleted`` — or ``forbidden``: the
  run may no longer see it — stops the run. A changed one (indexed again,
  another revision) does not: it was not taken away, and the commit fence
  judges it by the recall policy as before. What a look found the store
  breaking (its contract violations, its notes) is the host's, as the
  commit fence's is: a ``recall_contract_violation`` WARNING each, listed
  in ``RunResult.recall.violations`` (a ``recall_note`` each), said once
  however many looks (the commit fence's validation among them) meet the
  same answer, and not again when the dispatch fence said it; within the
  run's one bound: the first 16 violations listed, one WARNING counting
  every other (:mod:`.recall_findings`); the model is told nothing more;
- after the last call no look of its own is made: the commit fence
  validates every included source anyway, and :meth:`DocumentFence.at_commit`
  reads its answers for the carried documents: one deleted (or forbidden)
  during that call stops the run the same way, before the commit and
  whatever the recall policy would say of a changed source (the answer was
  made while the document was deleted). After a last call that failed no
  commit fence follows: :meth:`DocumentFence.after_failed_call` looks once
  more before the tool rounds that ran are kept.

Stopping raises :class:`~agentium_harness._errors_run.DocumentDeletedDuringRunError`
(an :class:`ErasedDuringRunError`; ``before_commit`` at the commit) before
the call, or the commit, with a WARNING (no
content, no ids) and the span event ``agentium.run.erased_during_run``: the
run commits nothing, as for a forgotten memory fact (:mod:`.fact_fence`).
A look that could not be made (the store failed or timed out, broke its
contract, a budget ran out, or called a document ``unknown``) fails closed, as a failed read of a carried
memory fact does: :class:`~agentium_harness._errors_run.DocumentUncheckedDuringRunError`
before the call (saying why), a WARNING (no content, no ids) and the span
event ``agentium.run.document_fence_unchecked``. Nothing says a document
went, so it is no erasure stop: what ran is committed without the answer,
as after any typed stop (:class:`~.effects.EffectsKeeper`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from .._errors_run import (
    STOPPED_BEFORE,
    STOPPED_BEFORE_LOG,
    DocumentDeletedDuringRunError,
    DocumentUncheckedDuringRunError,
)
from .._observe.spans import current_span_event
from .._ports.recall import RecallLimits, RecallStore, SourceRef, Validation, ValidationStatus
from .._scope import Scope
from .lifecycle import Ticket
from .memory.sources_write import names_facts
from .recall import revalidate
from .recall_checks import Failed
from .recall_findings import RunFindings
from .recall_round import RecallUsage
from .recall_turn import RecallOutcome
from .results import CommitState

if TYPE_CHECKING:
    from .progress import RunProgress

__all__ = ["DOCUMENT_PREFIX", "DocumentFence"]

_log = logging.getLogger("agentium.engine")

#: Source ids of host documents: ``doc/<owner segments>/<doc id>`` (:func:`document_source_id`).
DOCUMENT_PREFIX = "doc/"
#: What a store says of a document taken away from the run since it was read.
_GONE = frozenset({ValidationStatus.DELETED, ValidationStatus.FORBIDDEN})


class DocumentFence:
    """One run's look, before each later model call, at the host documents its request carries."""

    __slots__ = ("calls", "findings", "first", "limits", "refs", "run", "scope", "spent", "store")

    def __init__(
        self,
        store: RecallStore,
        scope: Scope,
        limits: RecallLimits,
        refs: tuple[SourceRef, ...],
        spent: RecallUsage,
        run: RunProgress,
        *,
        first: bool = False,
    ) -> None:
        self.store, self.scope, self.limits = store, scope, limits
        #: The run the looks report to: the store's contract violations and notes (:meth:`_report`).
        self.run = run
        #: What the run reported so far, the dispatch fence's violations among it: a later look (or the
        #: commit fence) answered the same way says nothing again.
        self.findings = RunFindings(run)
        #: What the run's recall has spent: recall's, each look's time added (one budget for the run).
        self.spent = spent
        #: The refs of the documents whose excerpts the request carries, at the revisions read.
        self.refs = refs
        #: Whether the first model call is looked before too: a memory search ran after recall's validation.
        self.first = first
        #: Model calls checked so far.
        self.calls = 0

    @staticmethod
    def carried(refs: tuple[SourceRef, ...]) -> tuple[SourceRef, ...]:
        """The host documents among recall's included ``refs``."""
        return tuple(ref for ref in refs if ref.source_id.startswith(DOCUMENT_PREFIX))

    async def check(self, ticket: Ticket, what: str = "run") -> None:
        """Raise :class:`DocumentDeletedDuringRunError` if a carried document was deleted since."""
        self.calls += 1
        if (self.calls == 1 and not self.first) or not self.refs:
            return
        failure = await self._look(ticket, what, before_commit=False)
        if failure is not None:
            raise _unchecked(failure, what)

    async def after_failed_call(self, ticket: Ticket, what: str = "run") -> str | None:
        """After a model call that failed, before what ran is kept: the same stop if a carried document went.

        The answer's commit has the commit fence's validation (:meth:`at_commit`); the tool rounds kept
        after a failed call have none, and were made from the documents as the answer would have been:
        one look, as before a call (counted in ``spent``), raising :class:`DocumentDeletedDuringRunError`
        with ``before_commit``. Returns why the look could not be made (``None``: made, nothing gone): the
        caller says so and keeps what ran, as after a look at the commit that could not be made.
        """
        failure = await self._look(ticket, what, before_commit=True) if self.refs else None
        return None if failure is None else str(failure)

    async def _look(self, ticket: Ticket, what: str, *, before_commit: bool) -> Failed | None:
        validations, violations, notes, failure, usage = await revalidate(
            ticket, self.store, self.scope, self.limits, self.refs, self.spent, said=self.findings.said
        )
        # Reported first: a look that stops the run, or cannot be made, reports what the store broke too.
        if violations or notes:
            self._report(violations, notes)
        # The look's time is the run's: the next look, the commit fence and the result start from it.
        self.spent = attrs.evolve(self.spent, latency_s=usage.latency_s)
        if failure is not None:
            return failure  # its text the host's (``_unchecked``), its ``shown`` what may be committed
        gone = tuple(v.ref.source_id for v in validations if v.status in _GONE)
        if gone:
            raise _deleted(gone, what, before_commit=before_commit)
        unknown = sum(v.status is ValidationStatus.UNKNOWN for v in validations)
        # The store did not say (no answer for the ref, or an id it cannot place): no look was made.
        return Failed(f"the recall store called {unknown} of them unknown") if unknown else None

    def _report(self, violations: list[str], notes: list[str]) -> None:
        """A look's contract violations and notes, to the run as the commit fence reports its own.

        A violation is a ``recall_contract_violation`` diagnostic (a WARNING record: its text, which
        may quote an id the store returned, only with content capture) listed in
        ``RunResult.recall.violations``, within the run's one bound; a note is a ``recall_note``.
        Each is said once (:class:`~.recall_findings.RunFindings`): the looks validate the refs
        the dispatch fence validated, again, and a store answering each tool round's look the same
        way is one finding, not one per round. Neither the status, the uncertainty (what the model
        was told) nor which documents stop the run changes: the violations are the host's.
        """
        run = self.run
        listed = self.findings.report(() if run.recall is None else run.recall.violations, violations, notes)
        if run.recall is not None:
            run.recall = attrs.evolve(run.recall, violations=listed)

    def counted(self, outcome: RecallOutcome) -> RecallOutcome:
        """``outcome`` with the looks' time in its usage: what the commit fence starts from.

        Also what a run stopped before its commit reports (:class:`~.effects.EffectsKeeper`). The
        looks started from recall's usage, so their latency holds it; an ``outcome`` already past it
        (the commit fence's, which started from this) is left as it is: nothing is counted twice.
        """
        if self.spent.latency_s <= outcome.usage.latency_s:
            return outcome
        return attrs.evolve(outcome, usage=attrs.evolve(outcome.usage, latency_s=self.spent.latency_s))

    def at_commit(self, validations: Iterable[Validation], what: str = "run") -> None:
        """Raise :class:`DocumentDeletedDuringRunError` if the commit fence's ``validations`` say one went.

        No read: they are the commit fence's own answers (:func:`~.recall_turn.recall_before_commit`),
        of every included source; those of the carried documents called ``deleted`` or ``forbidden``
        stop the run before the commit, as they would before a call.
        """
        refs = self.refs
        gone = tuple(v.ref.source_id for v in validations if v.status in _GONE and v.ref in refs)
        if gone:
            raise _deleted(gone, what, before_commit=True)


def _unchecked(failure: Failed, what: str) -> DocumentUncheckedDuringRunError:
    """The stop for carried documents that could not be validated again: fail closed, a WARNING, a span event.

    ``failure`` (recall's reason, which may quote the store's error) goes to the error only, not the log;
    what ran before is committed with the error's ``committed`` words, which say it as ``failure.shown``
    does (the store's error by its class): its text may name another tenant's rows.
    """
    _log.warning(
        "%s stopped before a model call: the host documents its request carries could not be validated "
        "again, so they were not sent again unchecked",
        what,
        extra={"agentium_operation": what},
    )
    current_span_event("agentium.run.document_fence_unchecked", {"agentium.operation": what})

    def said(why: str) -> str:
        return (
            f"the host documents whose excerpts the {what}'s request carries could not be validated again "
            f"({why}); the {what} stopped before its next model call rather than send them unchecked "
            "(one may have been deleted since recall read it)"
        )

    error = DocumentUncheckedDuringRunError(said(str(failure)))
    error.committed_detail = f"{type(error).__name__}: {said(failure.shown)}"
    return error


def _deleted(
    source_ids: tuple[str, ...], what: str, *, before_commit: bool = False
) -> DocumentDeletedDuringRunError:
    """The stop for carried documents deleted since the run's recall: a WARNING, a span event.

    ``before_commit``: found by the commit fence, after the run's last model call (during which they went).
    """
    where = STOPPED_BEFORE[before_commit]
    _log.warning(
        "%s stopped before %s: %d host document(s) whose excerpts its request carries were "
        "deleted after recall read them; nothing was sent again or committed",
        what,
        STOPPED_BEFORE_LOG[before_commit],
        len(source_ids),
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event("agentium.run.erased_during_run", {"agentium.erasure.state": "deleted"})
    sent = "what was made from them was not committed" if before_commit else "their text was not sent again"
    # Hosts log error texts, and a document's id (the host's own name for it) is content: named
    # only with content capture, as a forgotten fact's is (:mod:`.fact_fence`); ``source_ids`` holds them.
    count = f"{len(source_ids)} host document(s)"
    named = f"host document(s) {list(source_ids)!r}" if names_facts() else count
    error = DocumentDeletedDuringRunError(
        f"{named}, whose excerpts the {what}'s request carries, were deleted "
        f"after recall read them; the {what} stopped before {where}, so {sent}; nothing was committed "
        "(what ran was made from them)",
        source_ids,
    )
    error.before_commit = before_commit
    error.commit_state = CommitState.NOT_COMMITTED
    return error
