"""The erasure fence for host documents indexed for recall: none is kept in a scope an erasure takes.

``RecallStore.index_document`` writes straight into the recall store, beside
no session: nothing a session load fences. An erasure in another process
could erase and verify the recall store, then the document land, and the
erasure say ``complete`` with it indexed. So the engine's document writes
(``agentium recall add``, the eval harness's document steps) go through
:func:`index_document_fenced`, which reads the tenant's erasures around the
write with the shared :class:`~.erasure_fence.ErasureFence` (its docstring
says why the two reads suffice). A document an erasure covers
(:meth:`EraseTarget.covers_owner`: its tenant, or the user or session its
owner names) is refused with
:class:`~agentium_harness._errors.ErasureInProgressError`:

- **before the write**, when such an erasure is pending: nothing is written;
- **after the write**, when such an erasure began after that first read
  (pending now, or finished having joined the ledger since): the document
  is deleted again (``delete_document``) and the error says it was not
  kept — or, if the delete failed, that it is still there and how to
  remove it.

If the second read fails, the write stands: the WARNING and the returned
note say it was not checked again. A cancellation from the store's call on
(Ctrl-C to ``agentium recall add``, the host cancelling the call) does not
leave the document unchecked: the second read and the delete run again,
shielded from it and bounded (:func:`_take_back_cancelled`), before it goes on.

An index call abandoned past its deadline (stuck in a worker thread) may
land after the caller left, with no second read: it is noted as a late call
of the owner, which an erasure in this process covering it waits for (as it
does for a session's), and when it lands it runs the second read itself and
deletes the document if a covering erasure began since the first read. No
caller is left to raise to: each outcome of that late check (taken back, a
delete or a read that failed, an answer that is no ref of the document) is a
WARNING and an event on its ``agentium.document.late_take_back`` span
(:func:`_take_back_late`).

Every error raised says in ``commit_state`` whether the document is indexed:
``not_committed`` when it was refused before the write, refused by the store
as its port allows (bad input, an undeclared operation) or deleted again;
``unknown`` when the store's call failed or timed out part way (indexing it
again is safe: it replaces it) or the delete failed. A store's own
(foreign) exception reaches the caller typed, as
:class:`~agentium_harness._errors.ContractViolationError`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import attrs

from .._errors import (
    AgentiumError,
    ContractViolationError,
    ErasureInProgressError,
    InvalidArgumentError,
    UnsupportedOperationError,
)
from .._observe.spans import NullSpan, Span, current_span_event, error_type, internal_span
from .._ports.erasure import EraseTarget, ErasureRecord, ErasureState
from .._ports.recall import RecallStore, SourceOwner, SourceRef, document_source_id
from .._ports.sessions import SessionStore
from .._text import error_text
from .bounded import LATE_CLEANUP_S, bounded
from .erasure_fence import ErasureFence, FenceCheck
from .erasure_index import finished_covering_owner
from .lifecycle import Ticket
from .memory.sources_write import names_facts
from .results import CommitState

__all__ = ["checked_ref", "index_document_fenced", "marked"]

#: Its records name an error by ``error_type``: the class name the store chose, escaped (one record,
#: one line, whatever the name holds), never its message.
_log = logging.getLogger("agentium.engine.recall")


def _whose(owner: SourceOwner) -> str:
    if owner.session is not None:
        return f"session {owner.session!r} of user {owner.user!r}"
    if owner.user is not None:
        return f"user {owner.user!r}"
    return f"tenant {owner.tenant!r}"


@attrs.frozen(slots=True)
class _DocumentWrite:
    """Host document ``doc_id`` of ``owner``, as the fence sees it (:class:`.FencedWrite`)."""

    owner: SourceOwner
    doc_id: str

    @property
    def tenant(self) -> str:
        return self.owner.tenant

    @property
    def scopes(self) -> tuple[str, str | None, tuple[str, ...]]:
        owner = self.owner
        return owner.tenant, owner.user, () if owner.session is None else (owner.session,)

    def covers(self, target: EraseTarget) -> bool:
        return target.covers_owner(self.owner)

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        return await finished_covering_owner(ticket, store, self.owner)

    def refusal(self, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
        where = f"({record.target.describe()}, erasure {record.erasure_id})"
        whose = _whose(self.owner)
        # Hosts log error texts, and a document's id is content: named only with content capture,
        # as a memory write's refusal names its fact (memory/sources_write.py).
        named = f"document {self.doc_id!r}" if names_facts() else "the document"
        if record.state is ErasureState.COMPLETE:
            said = f"the documents of {whose} were erased while {named} was indexed {where}"
        else:
            said = (
                f"the documents of {whose} are being erased {where}; {named} is refused "
                "until the erasure completes (agentium erase --resume)"
            )
        return ErasureInProgressError(f"{said}; {outcome}", record.erasure_id)


def marked(error: AgentiumError, state: CommitState) -> AgentiumError:
    """``error`` carrying ``state``: whether the document operation (index or delete) committed."""
    error.commit_state = state
    return error


def checked_ref(ref: object, owner: SourceOwner, doc_id: str, store: RecallStore) -> SourceRef:
    """The store's answer, if it is the ref of this document; else ContractViolationError (state unknown)."""
    if (
        isinstance(ref, SourceRef)
        and isinstance(ref.source_id, str)
        and isinstance(ref.revision, str)
        and ref.source_id == document_source_id(owner, doc_id)
    ):
        return ref
    error = ContractViolationError(
        f"recall store {type(store).__name__}.index_document answered {type(ref).__name__}, not the "
        "SourceRef of this document; whether it is indexed is unknown (commit_state unknown): index it "
        "again (it replaces it) or delete it"
    )
    error.commit_state = CommitState.UNKNOWN
    raise error


def _failed_write(exc: Exception, store: RecallStore) -> AgentiumError:
    """The typed error for a failed ``index_document`` call, saying whether the document may be indexed."""
    if isinstance(exc, InvalidArgumentError | UnsupportedOperationError):
        return marked(exc, CommitState.NOT_COMMITTED)  # the port: refused before writing anything
    unknown = (
        "whether the document was indexed is unknown (commit_state unknown); indexing it again is safe "
        "(it replaces it), or delete it"
    )
    if isinstance(exc, AgentiumError):
        # A timeout or a cancellation may have stopped the store after its write landed.
        exc.args = (
            (f"{exc.args[0]}; {unknown}",)
            if len(exc.args) == 1 and isinstance(exc.args[0], str)
            else exc.args
        )
        return marked(exc, CommitState.UNKNOWN)
    error = ContractViolationError(
        f"recall store {type(store).__name__}.index_document raised {error_text(exc)}, not a typed error; "
        f"{unknown}"
    )
    error.__cause__ = exc
    return marked(error, CommitState.UNKNOWN)


async def index_document_fenced(
    fence: ErasureFence,
    ticket: Ticket,
    store: RecallStore,
    owner: SourceOwner,
    doc_id: str,
    text: str,
    *,
    title: str = "",
    timeout_s: float | None = None,
) -> tuple[SourceRef, tuple[str, ...]]:
    """``store.index_document`` fenced by the erasures ``fence`` reads: the ref and notes (none if checked).

    ``timeout_s`` bounds the index and delete calls (default: the ticket's).
    Every error carries ``commit_state`` (see the module's docstring).

    :raises ErasureInProgressError: an erasure covering ``owner`` is pending
        (nothing written), or one began while the document was written (it
        was deleted again, or the message says deleting it failed).
    :raises SessionStoreError: the erasures could not be read before the
        write (nothing written).
    :raises ContractViolationError: the store raised an exception of its own.
    """
    write = _DocumentWrite(owner, doc_id)
    try:
        seen = await fence.check(write)
    except AgentiumError as exc:
        exc.commit_state = CommitState.NOT_COMMITTED
        raise

    async def take_back(raw: object) -> None:
        # It landed after the caller walked away, and the second read never ran: run it now, and
        # take the document back from a covering erasure that began since the first read.
        # The index's span ended when the call was abandoned: the late check has one of its own.
        with internal_span(
            "agentium.document.late_take_back", {"agentium.operation": "recall index"}
        ) as span:
            await _take_back_late(fence, seen, store, write, raw, span)

    try:
        ref = await ticket.call(
            "recall index",
            lambda ctx: store.index_document(owner, doc_id, text, ctx, title=title),
            timeout_s=timeout_s,
            on_late=take_back,
            # Abandoned (stuck in a worker thread), it may land after the fence's second read never
            # ran: an erasure in this process covering the owner waits for it, as for a session's.
            late_scope=owner,
        )
    except anyio.get_cancelled_exc_class():
        await _take_back_cancelled(fence, seen, store, write)  # the store may have written it
        raise
    except Exception as exc:
        error = _failed_write(exc, store)
        if error is exc:
            raise
        raise error from exc
    try:
        record = await fence.covering_since(seen)
    except anyio.get_cancelled_exc_class():
        await _take_back_cancelled(fence, seen, store, write)
        raise
    except Exception as exc:  # the write stands: said in the notes, never a bare error after a commit
        _log.warning("document indexing not confirmed against erasures: %s", error_type(exc))
        current_span_event("agentium.document.unconfirmed", {"error.type": error_type(exc)})
        return ref, (f"the document was not checked again against erasures under way ({type(exc).__name__})",)
    if record is None:
        return ref, ()
    try:
        await ticket.call(
            "recall delete",
            lambda ctx: store.delete_document(owner, doc_id, ctx),
            timeout_s=timeout_s,
        )
    except anyio.get_cancelled_exc_class():
        await _take_back_cancelled(fence, seen, store, write)
        raise
    except Exception as exc:
        _log.warning("a document indexed during an erasure could not be taken back: %s", error_type(exc))
        current_span_event("agentium.document.take_back_failed", {"error.type": error_type(exc)})
        refused = write.refusal(
            record,
            f"the document was indexed meanwhile and deleting it failed ({type(exc).__name__}): "
            "erase the scope again",
        )
        raise marked(refused, CommitState.UNKNOWN) from exc
    current_span_event("agentium.document.taken_back", {"agentium.document.write": "answered"})
    refused = write.refusal(record, "the document, indexed meanwhile, was deleted: it was not kept")
    raise marked(refused, CommitState.NOT_COMMITTED)


async def _take_back_cancelled(
    fence: ErasureFence, seen: FenceCheck, store: RecallStore, write: _DocumentWrite
) -> None:
    """After a cancellation from the write on (Ctrl-C, a host's cancel): the second read and delete again.

    Shielded and bounded (:data:`~.bounded.LATE_CLEANUP_S`): cut short, the document stayed
    indexed unchecked, and a covering erasure that began after the first read (its inventory
    taken before the document landed) said ``complete`` with it there. The store may not have
    written it (a delete of none is harmless). Nobody is left to tell but the log: a WARNING
    and an event say it was taken back, or could not be checked or deleted.
    """
    owner, doc_id = write.owner, write.doc_id

    async def again() -> bool:
        record = await fence.covering_since(seen)
        if record is None:
            return False
        late = Ticket(None, "recall delete (cancelled)", fence.timeout_s)
        await late.call("recall delete", lambda ctx: store.delete_document(owner, doc_id, ctx))
        return True

    attributes = {"agentium.document.write": "cancelled"}
    with anyio.CancelScope(shield=True):
        try:
            taken = await bounded(again, LATE_CLEANUP_S)
        except Exception as exc:
            _log.warning(
                "a document indexed during an erasure, its write then cancelled, could not be checked "
                "or taken back: %s",
                error_type(exc),
            )
            current_span_event(
                "agentium.document.take_back_failed", {**attributes, "error.type": error_type(exc)}
            )
            return
    if taken:
        _log.warning("a document indexed during an erasure, its write then cancelled, was taken back")
        current_span_event("agentium.document.taken_back", attributes)


def _late_event(name: str, exc: BaseException | None = None) -> None:
    """An outcome of the late take-back as an event on its span: ``late``, and only the error's type."""
    attributes = {"agentium.document.write": "late"}
    if exc is not None:
        attributes["error.type"] = error_type(exc)
    current_span_event(name, attributes)


async def _take_back_late(
    fence: ErasureFence,
    seen: FenceCheck,
    store: RecallStore,
    write: _DocumentWrite,
    raw: object,
    span: Span | NullSpan,
) -> None:
    """The late check of an abandoned index under its ``span``: each degraded outcome reported, not raised.

    Nobody is left to raise to (the wrapper that runs this, ``bounded``'s
    release of a late result, drops what escapes it), so each outcome is a
    WARNING on ``agentium.engine.recall`` and an event on ``span``, with
    the error's type only: an answer that is no ref of this document
    (``late_answer_refused``; the check runs all the same, since the store
    may have indexed it whatever it answered), the erasures not read again
    (``unconfirmed``: the document stands), a delete that failed
    (``take_back_failed``). Each fails ``span`` with its ``error.type``
    (the last one's, the most telling of what is left), as
    ``agentium.memory.late_take_back`` ends. A read or delete cut short
    (the release is bounded, :data:`~.bounded.LATE_CLEANUP_S`) is said the
    same way, ``error.type`` ``cancelled``, before the cancellation goes on.
    """
    failed: Exception | None = None
    try:
        checked_ref(raw, write.owner, write.doc_id, store)
    except ContractViolationError as exc:
        _log.warning("a document index landed past its deadline with an answer that is no ref of it")
        _late_event("agentium.document.late_answer_refused", exc)
        failed = exc
    unconfirmed = "a document indexed past its deadline was not confirmed against erasures: %s"
    try:
        record = await fence.covering_since(seen)
    except anyio.get_cancelled_exc_class() as exc:
        # Cut short: the release of a late result is bounded (``bounded.LATE_CLEANUP_S``), and a loop
        # ending cancels it too. Said here, before the span ends ``cancelled``: nothing else would say it.
        _log.warning(unconfirmed, "cut short")
        _late_event("agentium.document.unconfirmed", exc)
        raise
    except Exception as exc:
        _log.warning(unconfirmed, error_type(exc))
        _late_event("agentium.document.unconfirmed", exc)
        failed = exc
        record = None
    if record is not None:
        late = Ticket(None, "recall delete (late)", fence.timeout_s)
        owner, doc_id = write.owner, write.doc_id
        not_taken = "a document indexed past its deadline during an erasure could not be taken back: %s"
        try:
            await late.call("recall delete", lambda ctx: store.delete_document(owner, doc_id, ctx))
        except anyio.get_cancelled_exc_class() as exc:
            _log.warning(not_taken, "cut short")  # as the read above
            _late_event("agentium.document.take_back_failed", exc)
            raise
        except Exception as exc:
            _log.warning(not_taken, error_type(exc))
            _late_event("agentium.document.take_back_failed", exc)
            failed = exc
        else:
            _log.warning("a document indexed past its deadline during an erasure was taken back")
            _late_event("agentium.document.taken_back")
    if failed is not None:
        span.fail(error_type(failed), failed)
