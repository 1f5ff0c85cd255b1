"""The delete fence before each later model call of a run: a host document deleted since is not sent again.

Recall puts excerpts of host documents into a run's request once, and every
model call of the run — each tool round, a verification revision — sends
that request again. ``delete_document`` (the runtime's, or the recall
store's own, by another task or process) is not an erasure: the tenant's
erasure ledger does not move and :class:`~.turn_fence.TurnFence` never
looks. This fence does, for the documents the request carries and nothing
else:

- a run whose request carries no document excerpt makes none (no cost);
- the first model call follows recall's own validation at once, so only
  later calls look;
- a later call validates the carried documents again: one recall session
  (open, ``validate_current`` of those refs, close), as the commit fence
  does (:func:`~.recall.revalidate`), from what the run's recall had spent
  (each look within the run's recall budgets; not added to its usage). A
  document the store calls ``deleted`` — or ``forbidden``: the run may no
  longer see it — stops the run. A changed one (indexed again, another
  revision) does not: it was not taken away, and the commit fence judges
  it by the recall policy as before.

Stopping raises :class:`~agentium_harness._errors_run.DocumentDeletedDuringRunError`
(an :class:`ErasedDuringRunError`) before the call, with a WARNING (no
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

from .._errors_run import DocumentDeletedDuringRunError, DocumentUncheckedDuringRunError
from .._observe.spans import current_span_event
from .._ports.recall import RecallLimits, RecallStore, SourceRef, ValidationStatus
from .._scope import Scope
from .lifecycle import Ticket
from .recall import revalidate
from .recall_round import RecallUsage
from .results import CommitState

__all__ = ["DOCUMENT_PREFIX", "DocumentFence"]

_log = logging.getLogger("agentium.engine")

#: Source ids of host documents: ``doc/<owner segments>/<doc id>`` (:func:`document_source_id`).
DOCUMENT_PREFIX = "doc/"
#: What a store says of a document taken away from the run since it was read.
_GONE = frozenset({ValidationStatus.DELETED, ValidationStatus.FORBIDDEN})


class DocumentFence:
    """One run's look, before each later model call, at the host documents its request carries."""

    __slots__ = ("calls", "limits", "refs", "scope", "spent", "store")

    def __init__(
        self,
        store: RecallStore,
        scope: Scope,
        limits: RecallLimits,
        refs: tuple[SourceRef, ...],
        spent: RecallUsage,
    ) -> None:
        self.store, self.scope, self.limits, self.spent = store, scope, limits, spent
        #: The refs of the documents whose excerpts the request carries, at the revisions read.
        self.refs = refs
        #: Model calls checked so far: the first is not (recall validated what it read just before).
        self.calls = 0

    @staticmethod
    def carried(refs: tuple[SourceRef, ...]) -> tuple[SourceRef, ...]:
        """The host documents among recall's included ``refs``."""
        return tuple(ref for ref in refs if ref.source_id.startswith(DOCUMENT_PREFIX))

    async def check(self, ticket: Ticket, what: str = "run") -> None:
        """Raise :class:`DocumentDeletedDuringRunError` if a carried document was deleted since."""
        self.calls += 1
        if self.calls == 1 or not self.refs:
            return
        validations, _, failure, _ = await revalidate(
            ticket, self.store, self.scope, self.limits, self.refs, self.spent
        )
        if failure is not None:
            raise _unchecked(failure, what)
        gone = tuple(v.ref.source_id for v in validations if v.status in _GONE)
        if gone:
            raise _deleted(gone, what)
        unknown = sum(v.status is ValidationStatus.UNKNOWN for v in validations)
        if unknown:
            # The store did not say (no answer for the ref, or an id it cannot place): no look was made.
            raise _unchecked(f"the recall store called {unknown} of them unknown", what)


def _unchecked(failure: str, what: str) -> DocumentUncheckedDuringRunError:
    """The stop for carried documents that could not be validated again: fail closed, a WARNING, a span event.

    ``failure`` (recall's reason, which may quote the store's error) goes to the error only, not the log.
    """
    _log.warning(
        "%s stopped before a model call: the host documents its request carries could not be validated "
        "again, so they were not sent again unchecked",
        what,
        extra={"agentium_operation": what},
    )
    current_span_event("agentium.run.document_fence_unchecked", {"agentium.operation": what})
    return DocumentUncheckedDuringRunError(
        f"the host documents whose excerpts the {what}'s request carries could not be validated again "
        f"({failure}); the {what} stopped before its next model call rather than send them unchecked "
        "(one may have been deleted since recall read it)"
    )


def _deleted(source_ids: tuple[str, ...], what: str) -> DocumentDeletedDuringRunError:
    """The stop for carried documents deleted since the run's recall: a WARNING, a span event."""
    _log.warning(
        "%s stopped before a model call: %d host document(s) whose excerpts its request carries were "
        "deleted after recall read them; nothing was sent again or committed",
        what,
        len(source_ids),
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event("agentium.run.erased_during_run", {"agentium.erasure.state": "deleted"})
    error = DocumentDeletedDuringRunError(
        f"host document(s) {list(source_ids)!r}, whose excerpts the {what}'s request carries, were deleted "
        f"after recall read them; the {what} stopped before its next model call, so their text was not "
        "sent again; nothing was committed (what ran was made from them)",
        source_ids,
    )
    error.commit_state = CommitState.NOT_COMMITTED
    return error
