"""The document methods of :class:`~.runtime.HarnessRuntime`: host documents indexed for recall, fenced.

``index_document`` and ``delete_document`` are the host's way to put
documents in (and take them out of) the runtime's recall store
(docs/recall.md). They are mixed into the runtime like the history and
erasure APIs, so the orchestrator stays small. Unlike the store's own
methods, they are admitted like every runtime call (refused once the
runtime is closing, waited for or cancelled by ``aclose()``), check their
arguments before anything is written, and index through
:func:`~.document_fence.index_document_fenced`, so a document never lands in
a scope an operator erasure is taking (docs/erasure.md). A delete is not
fenced: it only removes, so it can never leave anything in such a scope.
Every error either method raises once admitted says in ``commit_state`` whether
the document is indexed (or deleted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

import attrs

from .._errors import (
    AgentiumError,
    CapabilityError,
    ContractViolationError,
    InvalidArgumentError,
    RuntimeClosedError,
    UnsupportedOperationError,
)
from .._observe.spans import using
from .._observe.turn import settings_of, traced_operation
from .._ports._base import capabilities_of
from .._ports.recall import RecallStore, SourceOwner, SourceRef
from .._text import error_text
from .._validators import check_duration, unicode_text, validate_id
from .document_fence import checked_ref, index_document_fenced, marked
from .embedding import index_sources
from .erasure_fence import ErasureFence
from .results import CommitState, Diagnostic, Severity

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["MAX_DOCUMENT_BYTES", "MAX_DOCUMENT_TITLE_BYTES", "DocumentOperations", "DocumentResult"]

#: The largest document text indexed, in UTF-8 bytes (``agentium recall add`` skips larger files).
MAX_DOCUMENT_BYTES: Final = 4 * 1024 * 1024
#: The largest document title, in UTF-8 bytes.
MAX_DOCUMENT_TITLE_BYTES: Final = 1024


@attrs.frozen(slots=True)
class DocumentResult:
    """What ``HarnessRuntime.index_document`` indexed: the document's ref, checked against erasures.

    - ``ref``: the document's source id (:func:`document_source_id`) and its
      revision, which changes whenever its text or title does;
    - ``commit_state``: ``committed`` (a call that returns always is; its
      errors carry ``not_committed`` or ``unknown``);
    - ``diagnostics``: degraded outcomes — ``erasure_fence_unchecked`` when
      the erasures under way could not be read again after the write (the
      document stands, unchecked), ``recall_embed_failed`` when hybrid
      recall could not store its vector (it is found by its words only).
    """

    ref: SourceRef
    commit_state: CommitState = CommitState.COMMITTED
    diagnostics: tuple[Diagnostic, ...] = ()

    def has(self, code: str) -> bool:
        """True if a diagnostic with ``code`` was recorded."""
        return any(d.code == code for d in self.diagnostics)


def _bounded_text(value: object, name: str, max_bytes: int) -> str:
    """``value`` as valid Unicode text of at most ``max_bytes`` UTF-8 bytes; else InvalidArgumentError."""
    text = unicode_text(value, name, "; nothing was written")
    # Each character is at least one byte: a text longer than the bound is refused without encoding it.
    size = len(text) if len(text) > max_bytes else len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidArgumentError(
            f"{name} is {'over ' if len(text) > max_bytes else ''}{size} bytes of UTF-8; at most "
            f"{max_bytes} are indexed. Nothing was written"
        )
    return text


def _checked_owner(owner: object) -> SourceOwner:
    if not isinstance(owner, SourceOwner):
        raise InvalidArgumentError(
            f"owner must be a SourceOwner (who may see the document), got {type(owner).__name__}; "
            "nothing was written"
        )
    return owner


def _checked_timeout(runtime: HarnessRuntime, timeout_s: object) -> float:
    if timeout_s is None:
        return runtime.limits.op_timeout_s
    return check_duration(timeout_s, "timeout_s")


def _document_store(runtime: HarnessRuntime) -> RecallStore:
    """The runtime's recall store, if it declares ``document_indexing``; else CapabilityError."""
    store = runtime.recall
    if store is None:
        raise CapabilityError(
            "the runtime has no recall store (recall= or [recall]): there is nothing to index documents "
            "into; nothing was written"
        )
    if not getattr(capabilities_of(store), "document_indexing", False):
        raise CapabilityError(
            f"recall store {type(store).__name__} does not declare document_indexing; nothing was written"
        )
    return store


def _failed_delete(exc: Exception, store: RecallStore) -> AgentiumError:
    """The typed error for a failed ``delete_document`` call, saying whether the document may be deleted."""
    if isinstance(exc, InvalidArgumentError | UnsupportedOperationError):
        return marked(exc, CommitState.NOT_COMMITTED)  # the port: refused before writing anything
    if isinstance(exc, AgentiumError):
        # A timeout or a cancellation may have stopped the store after its delete landed.
        return marked(exc, CommitState.UNKNOWN)
    error = ContractViolationError(
        f"recall store {type(store).__name__}.delete_document raised {error_text(exc)}, not a typed error; "
        "whether the document was deleted is unknown (commit_state unknown): delete it again to know"
    )
    error.__cause__ = exc
    return marked(error, CommitState.UNKNOWN)


class DocumentOperations:
    """The document methods of the runtime (mixed into :class:`~.runtime.HarnessRuntime`)."""

    __slots__ = ()
    #: docs/api.md documents these methods with :class:`~.runtime.HarnessRuntime` (testing._api_docs).
    __agentium_documented_mixin__ = True

    def _runtime(self) -> HarnessRuntime:
        return cast("HarnessRuntime", self)

    async def index_document(
        self,
        owner: SourceOwner,
        doc_id: str,
        text: str,
        *,
        title: str = "",
        timeout_s: float | None = None,
    ) -> DocumentResult:
        """Add or replace host document ``doc_id`` of ``owner`` in the runtime's recall store, fenced.

        ``owner`` says who may see it (a tenant, and optionally one user,
        session, project and repository: ``SourceOwner("acme")`` is visible
        to every run of tenant ``acme``); the host builds it from its own
        authorization, as it does a ``MemoryScope``. ``text`` (valid Unicode,
        at most :data:`MAX_DOCUMENT_BYTES` of UTF-8) and ``title`` (at most
        :data:`MAX_DOCUMENT_TITLE_BYTES`) are checked first; bad input raises
        :class:`InvalidArgumentError` and nothing is written. A runtime
        without a recall store, or whose store does not declare
        ``document_indexing``, raises :class:`CapabilityError`; a closing or
        closed one :class:`RuntimeClosedError`.

        Fenced against operator erasures in every process sharing the
        session store (docs/erasure.md): while an erasure covering the owner
        is pending the document is refused with
        :class:`ErasureInProgressError` and nothing is written; if one began
        while it was being written, it is deleted again and the same error
        says it was not kept. If the erasures cannot be read again after the
        write, the document stands and the result's ``erasure_fence_unchecked``
        warning says so. With hybrid recall its vector is stored beside it.

        ``timeout_s`` (default ``op_timeout_s``) bounds each store call it
        makes: the erasure fence's two reads, the index, and a delete. Every
        error raised once admitted says in ``commit_state`` whether the
        document is indexed (``unknown`` after a store failure or timeout part
        way: indexing it again is safe, it replaces it).
        """
        runtime = self._runtime()
        who = _checked_owner(owner)
        name = validate_id(doc_id, "doc_id")
        body = _bounded_text(text, "text", MAX_DOCUMENT_BYTES)
        heading = _bounded_text(title, "title", MAX_DOCUMENT_TITLE_BYTES)
        timeout = _checked_timeout(runtime, timeout_s)
        store = _document_store(runtime)
        fence = ErasureFence(runtime.session_store, timeout)
        admitted = False
        # One span for the whole write (its fence's reads, index, take-back), under the runtime's Telemetry.
        user, session = who.user or "", who.session or ""
        operation = traced_operation(
            runtime, "document index", who.tenant, user, session, name="agentium.document.index"
        )
        with operation:
            try:
                async with runtime.parts.admission.admit_shared(None, "document index", timeout) as ticket:
                    admitted = True
                    ref, notes = await index_document_fenced(
                        fence, ticket, store, who, name, body, title=heading, timeout_s=timeout
                    )
                    ref = checked_ref(ref, who, name, store)
                    diagnostics = [
                        Diagnostic("erasure_fence_unchecked", note, Severity.WARNING) for note in notes
                    ]
                    if runtime.hybrid is not None:
                        try:
                            await index_sources(ticket, runtime.hybrid, store, [(ref, body)])
                        except Exception as exc:  # the document stands, found by its words
                            diagnostics.append(
                                Diagnostic(
                                    "recall_embed_failed",
                                    f"the document is indexed, but its vector was not stored "
                                    f"({error_text(exc)}): it is found by its words only",
                                    Severity.WARNING,
                                )
                            )
                    result = ticket.report(DocumentResult(ref, diagnostics=tuple(diagnostics)))
                # Logged and span events as a history write's diagnostics are; the fence's own (its
                # WARNING and its agentium.document.* event are said where it finds them) are not again.
                operation.report(d for d in result.diagnostics if d.code != "erasure_fence_unchecked")
                return result
            except RuntimeClosedError as exc:
                if admitted and exc.commit_state is None:
                    # aclose() cancelled it part way: the write may have landed.
                    exc.commit_state = CommitState.UNKNOWN
                raise
        raise AssertionError("unreachable")  # pragma: no cover - admit_shared() re-raises a cancellation

    async def delete_document(
        self, owner: SourceOwner, doc_id: str, *, timeout_s: float | None = None
    ) -> bool:
        """Remove host document ``doc_id`` of ``owner`` from the recall store; ``True`` if it was there.

        Checked and admitted as :meth:`index_document` (the same typed errors
        for bad input, a runtime without a document-indexing recall store, or
        a closed runtime; nothing is changed). Not fenced against erasures,
        on purpose: a removal takes away and never adds, so whichever of a
        delete and an erasure of its owner lands first, the erasure completes
        with nothing of the owner left (the delete answers ``False`` if the
        erasure took the document first), and a pending erasure does not hold
        back a host removing a document. A run whose request carries
        excerpts of the document stops before its next model call — or,
        deleted during its last call, before its commit
        (``DocumentDeletedDuringRunError``, nothing committed; docs/erasure.md).
        ``timeout_s`` (default ``op_timeout_s``) bounds the store's call.

        Every error raised once admitted says in ``commit_state`` whether the
        document was deleted: ``not_committed`` when the store refused the
        call as its port allows (bad input, an undeclared operation: nothing
        was written); ``unknown`` when the store's call failed, timed out or
        was cancelled by ``aclose()`` part way, raised an exception of its own
        (:class:`ContractViolationError`), or answered neither ``True`` nor
        ``False`` (:class:`ContractViolationError`): deleting it again is
        safe, and says whether it is still there.
        """
        runtime = self._runtime()
        who = _checked_owner(owner)
        name = validate_id(doc_id, "doc_id")
        timeout = _checked_timeout(runtime, timeout_s)
        store = _document_store(runtime)
        admitted = False
        with using(settings_of(runtime), runtime):
            try:
                async with runtime.parts.admission.admit_shared(None, "document delete", timeout) as ticket:
                    admitted = True
                    try:
                        existed = await ticket.call(
                            "recall delete", lambda ctx: store.delete_document(who, name, ctx)
                        )
                    except Exception as exc:
                        error = _failed_delete(exc, store)
                        if error is exc:
                            raise
                        raise error from exc
                    if not isinstance(existed, bool):
                        error = ContractViolationError(
                            f"recall store {type(store).__name__}.delete_document answered "
                            f"{type(existed).__name__}, not True or False; the document may have been "
                            "deleted (commit_state unknown): delete it again to know"
                        )
                        raise marked(error, CommitState.UNKNOWN)
                    return existed
            except RuntimeClosedError as exc:
                if admitted and exc.commit_state is None:
                    # aclose() cancelled it part way: the delete may have landed.
                    exc.commit_state = CommitState.UNKNOWN
                raise
        raise AssertionError("unreachable")  # pragma: no cover - admit_shared() re-raises a cancellation
