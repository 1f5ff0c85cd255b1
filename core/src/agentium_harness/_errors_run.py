"""The errors of a run stopped by an erasure (or a forget) that began after it loaded (docs/erasure.md).

A module of its own beside :mod:`._errors` (which is at its length bound):
hosts import it from ``agentium_harness``.
"""

from __future__ import annotations

from typing import Final

from ._errors import AgentiumError, ErasureInProgressError

__all__ = [
    "DocumentDeletedDuringRunError",
    "DocumentUncheckedDuringRunError",
    "ErasedDuringRunError",
    "FactForgottenDuringRunError",
]


#: Where a run fence's stop is, by the error's ``before_commit``: as its text and the run's diagnostic
#: say it ("the run stopped before ..."), and as a log line says it. One wording for every fence.
STOPPED_BEFORE: Final = {False: "its next model call", True: "its commit, after its last model call"}
STOPPED_BEFORE_LOG: Final = {False: "a model call", True: "its commit"}


class ErasedDuringRunError(ErasureInProgressError):
    """An erasure covering the session began after the run loaded it: the run stopped before a model call.

    The run's history (and what its recall found) was loaded before the
    erasure, so it is never sent to the model again: before each model
    call (every tool round) the engine reads the tenant's erasures, and one
    covering the session, its user or its tenant that is under way, or that
    finished having joined the ledger since the load, stops the run there.
    Nothing of the run is committed (``commit_state`` ``not_committed``),
    not even tool calls that already ran (they were made from the erased
    history; ``run_result`` lists them); its diagnostic ``erased_during_run``
    and a WARNING (no content) say why. ``erasure_id`` names the erasure;
    it is empty when the run stopped because a group its request carries
    (an excerpt recall put in it, or resident history another writer
    archived since) was erased meanwhile (retention, a forgotten fact's
    sources): the session's snapshot said the group went, not which
    erasure took it. Run again once the erasure is complete: the session is then
    empty (or, after such a groups erasure, without those groups).
    """

    #: ``True`` when the run stopped after its last model call, before its commit (what it carries went
    #: during that call: a forgotten fact, a deleted document), not before a model call.
    before_commit: bool = False


class FactForgottenDuringRunError(ErasedDuringRunError):
    """A memory fact the run's request carries was forgotten while it ran: it stopped before a call or commit.

    A run injects memory facts once and every later model call of it (each
    tool round, a verification revision) sends them again. A plain
    ``forget`` — another task, or another process over the same memory
    store — is not an erasure, yet the forgotten text must not reach the
    model again: before each later call the engine reads the carried facts
    back (one bounded ``history`` read each; free for a forget through the
    run's own manager when the store cannot) and stops the run there; after
    the last call it reads them back once more, so an answer made while the
    fact was forgotten is not committed either (``before_commit``), nor the
    tool rounds kept after a last call that failed.
    As for any :class:`ErasedDuringRunError`, nothing of the run is
    committed (its tool calls and the model's replies were made from the
    fact and may restate it); ``run_result`` lists them, the diagnostic
    ``erased_during_run`` and a WARNING (no content, no fact id) say why.
    ``erasure_id`` is empty; ``fact_id`` names the fact (the message only
    with content capture: an id is content). Run again: the forgotten fact
    is no longer injected.
    """

    def __init__(self, message: str, fact_id: str) -> None:
        self.fact_id = fact_id
        super().__init__(message)


class DocumentDeletedDuringRunError(ErasedDuringRunError):
    """A host document whose excerpt the run's request carries was deleted while it ran: it stopped.

    Recall puts excerpts of host documents into a run's request once and
    every later model call sends them again. ``delete_document`` (the
    runtime's, another task's or another process's over the same recall
    store) is not an erasure, yet the deleted text must not reach the model
    again: before each later call (and before the first when a memory search
    ran after recall's own validation) the engine validates the carried
    documents again (one recall session: open, ``validate_current``, close)
    and a document the store calls ``deleted`` (or no longer visible to the
    run: ``forbidden``) stops the run there. After the last call, the commit
    fence's validation of the recalled sources stops it the same way
    (``before_commit``), whatever the recall policy says of a changed
    source: an answer made while the document was deleted is not committed. As for any
    :class:`ErasedDuringRunError`, nothing of the run is committed;
    ``run_result`` lists what ran, the diagnostic ``erased_during_run`` and
    a WARNING (no content, no ids) say why. ``erasure_id`` is empty;
    ``source_ids`` names the documents (the message only with content
    capture: an id is content). Run again: recall no longer finds them.
    """

    def __init__(self, message: str, source_ids: tuple[str, ...]) -> None:
        self.source_ids = source_ids
        super().__init__(message)


class DocumentUncheckedDuringRunError(AgentiumError):
    """The host documents a run's request carries could not be validated again: it stopped before a call.

    Before each later model call the engine validates the carried documents
    again (:class:`DocumentDeletedDuringRunError`). When that look cannot be
    made — the recall store failed or timed out, broke its contract, called
    a document ``unknown``, or the run's recall budgets are spent (each
    look's time counts in the run's ``max_latency_s``) — the run fails closed, as it does when
    a carried memory fact cannot be read back: a document that may have
    been deleted is never sent again unchecked. Nothing says a document
    went, so this is no :class:`ErasedDuringRunError`: as after any typed
    stop, the tool calls and results that already ran are committed
    without the answer (``commit_state`` says what was), and a WARNING (no
    content, no ids) and the span event ``agentium.run.document_fence_unchecked``
    say so. The message says why the look failed (the store's error
    whole); the committed ``retained.interruption.detail`` names that error
    by its class alone. Run again once the recall store answers.
    """
