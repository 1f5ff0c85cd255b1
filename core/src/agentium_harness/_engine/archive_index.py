"""After an archiving commit: index the archived groups for the runtime's own recall store.

The groups-archived step of :mod:`.commit` for a recall store that declares
``archive_indexing``. It runs after the commit, so it cannot undo it: a
failure is reported as a diagnostic, and archived groups the index lacks are
caught up later (:mod:`.catch_up`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._history import MessageGroup
from .._ports._base import capabilities_of
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._ports.erasure import SeqRange
from .._ports.recall import RecallStore, SourceRef, group_source_id
from .._scope import SessionKey
from .._text import error_text
from .catch_up import catch_up_index
from .embedding import Hybrid, embedding_text, index_sources
from .index_recheck import drop_erased_meanwhile
from .lifecycle import Ticket
from .results import Diagnostic, Severity

__all__ = ["index_archived"]


async def index_archived(
    store: RecallStore | None,
    ticket: Ticket,
    key: SessionKey,
    groups: tuple[MessageGroup, ...],
    receipts: tuple[ArchiveReceipt, ...],
    archive: HistoryArchive | None = None,
    hybrid: Hybrid | None = None,
    erased: Sequence[SeqRange] = (),
) -> list[Diagnostic]:
    """The groups-archived step for the runtime's own recall store (``archive_indexing``).

    Runs after the commit, so a failure cannot undo it: it is reported.
    Once indexing succeeds again, the archived groups the index lacks are
    caught up from ``archive``, a bounded number per commit
    (:mod:`.catch_up`); ``agentium recall rebuild`` does it all at once.
    With ``hybrid``, the indexed groups are then embedded and their vectors
    stored (``vector_indexing``); a failure there leaves them found by their
    words only, and is reported as ``recall_embed_failed``.
    """
    if store is None or not getattr(capabilities_of(store), "archive_indexing", False):
        return []
    try:
        await ticket.call("recall index", lambda ctx: store.index_groups(key, groups, receipts, ctx))
    except Exception as exc:
        return [
            Diagnostic(
                "recall_index_failed",
                f"archived groups {[g.seq for g in groups]} were not indexed for recall "
                f"({error_text(exc)}); a later archiving commit indexes them once the store "
                "works again, or run `agentium recall rebuild`",
                Severity.WARNING,
            )
        ]
    notes: list[Diagnostic] = []
    if hybrid is not None and groups:
        sources = [(SourceRef(group_source_id(key, g.seq), g.digest), embedding_text(g)) for g in groups]
        try:
            await index_sources(ticket, hybrid, store, sources)
        except Exception as exc:
            notes.append(
                Diagnostic(
                    "recall_embed_failed",
                    f"archived groups {[g.seq for g in groups]} were indexed by their words but not embedded "
                    f"({error_text(exc)}); run `agentium recall rebuild` once the embedder works",
                    Severity.WARNING,
                )
            )
    # Its entries (and vectors) are taken back if an erasure in another process removed the
    # groups meanwhile (see index_recheck): after the embedding, which may have stored vectors.
    notes += await drop_erased_meanwhile(store, archive, ticket, key, groups)
    if archive is None or not groups:
        return notes
    return notes + await catch_up_index(store, archive, ticket, key, min(g.seq for g in groups), erased)
