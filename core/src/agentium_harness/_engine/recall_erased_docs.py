"""Recalled host documents an erasure took but the recall store may still hold: never shown (docs/erasure.md).

An erasure of a tenant, a user or a session takes the host documents it
owns from every store of the erasing runtime. A recall store that was not
among them — the erasing process had no recall store configured, or another
one — still answers with the erased documents' text, and a later run of the
user (a new session, the same session id used again) would hand it to the
model. The tenant's index of finished erasures says, for each one, which
stores took part (its header's ``stores``, by role).

So once a round has read its excerpts, each document excerpt whose owner a
finished erasure covers is checked against the **last** such erasure (in
the order they ran, by their join records, not their clocks): if no
``recall`` store reported that erasure complete, the document may predate
it and be erased text, and it is hidden (``None`` in its place), with
the WARNING diagnostic ``recall_document_erased``, a WARNING on
``agentium.engine.recall`` and the span event
``agentium.recall.document_erased`` (how many; no ids, no content). If the
last one had a recall store complete it, whatever was indexed before it was
erased there, and what the store answers now was indexed after: shown. A
document indexed after an erasure the recall store missed is hidden too
(nothing tells it from one before), until the scope is erased again with the
recall store configured. What is not caught: a recall store that reports an
erasure complete and keeps the documents (the contract suites check
adapters for that), and one whose erasure was reported by another recall
store of the same role.

Cost: nothing when the round recalled no document, or when the tenant's
erasure ledger did not exist at the run's load (no erasure ever began
there); else the session's erasure index chains, each read newest first
to the last erasure of its scope (the heads alone, usually, however many
erasures came before; at most :data:`.erasure_index.MAX_CHAIN_PAGES_READ`
pages of one chain, past which the check fails closed), kept per session
store and ledger revision, so later runs read them again only once an
erasure began or ended in the tenant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from .._errors import OperationCancelledError, OperationTimeoutError
from .._observe.spans import current_span_event, error_type
from .._ports.erasure import EraseStatus, ErasureRecord
from .._ports.recall import Excerpt, source_owner
from .._text import error_text
from .recall_checks import Failed
from .recall_readback import GroupReader
from .recall_round import Round

__all__ = ["hide_erased_documents"]

_log = logging.getLogger("agentium.engine.recall")


def _recall_took_part(record: ErasureRecord) -> bool:
    """Whether a recall store reported ``record``'s erasure complete (its documents gone there)."""
    entry = record.store("recall")
    return entry is not None and entry.status is EraseStatus.COMPLETE


async def hide_erased_documents(
    excerpts: Sequence[Excerpt], texts: list[str | None], state: Round, reader: GroupReader | None
) -> None:
    """Put ``None`` in ``texts`` for each document excerpt an erasure its recall store missed may have taken.

    Raises :class:`~.recall_checks.Failed` when the erasure index cannot be
    read within the round's latency budget: whether the documents are
    erased text is not known, so none of the round is shown (the policy's
    ``on_failed`` decides).
    """
    documents = [
        (at, owner)
        for at, excerpt in enumerate(excerpts)
        if texts[at] is not None
        and excerpt.ref.source_id.startswith("doc/")
        and (owner := source_owner(excerpt.ref.source_id)) is not None
    ]
    if not documents or reader is None:
        return
    cause: Exception | None = None
    try:
        records = await reader.finished_erasures(state.deadline)
    except OperationCancelledError as exc:
        if not isinstance(exc, OperationTimeoutError):
            raise  # the run itself was cancelled
        cause = exc
    except Exception as exc:
        cause = exc
    if cause is not None:
        spent = time.monotonic() >= state.deadline
        spent_why = f"the recall latency budget of {state.limits.max_latency_s}s is spent"
        why, shown = (spent_why, spent_why) if spent else (error_text(cause), error_type(cause))
        head = "recall erasure check of recalled documents failed"
        tail = "; documents an erasure may have taken are not shown"
        raise Failed(f"{head} ({why}){tail}", f"{head} ({shown}){tail}") from cause
    hidden: list[str] = []
    erasures: list[str] = []
    for at, owner in documents:
        covering = [r for r in records if r.target.covers_owner(owner)]
        if covering and not _recall_took_part(covering[-1]):
            texts[at] = None
            hidden.append(excerpts[at].ref.source_id)
            erasures.append(covering[-1].erasure_id)
    if not hidden:
        return
    state.erased_documents = (
        f"{len(hidden)} recalled document(s) hidden: their owner was erased (erasure "
        f"{', '.join(dict.fromkeys(erasures))}) by a runtime whose recall store did not take part, so "
        "the recall store may still hold the erased documents; erase the scope again with this recall "
        "store configured: " + ", ".join(hidden[:5]) + (", …" if len(hidden) > 5 else "")
    )
    _log.warning(
        "%d recalled document(s) hidden: an erasure of their owner did not reach the recall store",
        len(hidden),
    )
    current_span_event("agentium.recall.document_erased", {"agentium.recall.hidden": len(hidden)})
