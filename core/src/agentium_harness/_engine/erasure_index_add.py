"""Adding a finished erasure to the index (:mod:`.erasure_index`): its chains' heads, pages and marks.

:func:`add_finished` lists an erasure's header in the tenant's chain and in
its scope's, each by compare-and-set of the chain's head; a full head moves,
unchanged, to the chain's next page (written once, never rewritten), and a
scope chain's move writes the mark of its pages (their newest erasure of the
whole scope) with each page. What the layout is and how it is read:
:mod:`.erasure_index`.
"""

from __future__ import annotations

from typing import Final

from .._errors import SessionConflictError, SessionStoreError, SnapshotCorruptError
from .._ports.erasure import ErasureLedger, ErasureRecord
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from . import erasure_index as index
from .erasure_index import TENANT_CHAIN, chain_of, mark_key, newest_first, page_key, read_mark
from .erasure_ledger import header, index_key, load_ledger, pending_key, save_ledger
from .lifecycle import Ticket

__all__ = ["add_finished"]

#: Compare-and-set attempts of one head update before it gives up (another erasure kept winning).
_ATTEMPTS: Final = 16


async def add_finished(ticket: Ticket, store: SessionStore, done: ErasureRecord) -> None:
    """Add ``done``'s header to the tenant's chain, then to its scope's (each bounded).

    Called once its tombstone is saved and before it leaves ``pending``, so
    a crash anywhere here leaves it pending, and its resume adds it again:
    a head that has it already is left as it is.

    A resume whose erasure its scope's head lists already adds nothing: the
    tenant's chain got it first, and may have moved it to a page since (other
    users' erasures fill that head), where its head no longer shows it; added
    again, ``erasure_status`` listed it twice. The scope's head still shows
    it: every erasure of one scope chain overlaps every other, so none is
    listed there while this one is pending, and that head does not move. Only
    a stop between the two chains' updates can still list it twice in the
    tenant's (noticing that would need a record of the first listing: a
    format change).
    """
    scope = chain_of(done.target)
    _, head = await load_ledger(ticket, store, index_key(done.target.tenant_id, scope))
    if any(r.erasure_id == done.erasure_id for r in head.records):
        return
    await _add(ticket, store, done, TENANT_CHAIN)
    await _add(ticket, store, done, scope)


async def _add(ticket: Ticket, store: SessionStore, done: ErasureRecord, chain: str) -> None:
    """Add ``done``'s header to the head of ``chain``, moving a full head to pages first.

    The pages are written before the head that counts them, and each holds
    exactly what the full head held (a full head changes only by this move),
    so a crash in between, or another process moving the same head, writes
    the same pages again and loses nothing; the head changes only by
    compare-and-set.
    """
    tenant = done.target.tenant_id
    key = index_key(tenant, chain)
    for _ in range(_ATTEMPTS):
        revision, head = await load_ledger(ticket, store, key)
        if any(r.erasure_id == done.erasure_id for r in head.records):
            return
        # Read after the head and before its compare-and-set: an erasure out of ``pending`` was
        # indexed by the completion that took it out, so a late resume completing it again does
        # not list it again; one still pending then was so while the head stood unchanged, and no
        # erasure overlapping it can be listed before it (they join only once it left): each
        # chain lists overlapping erasures in the order they ran, which the newest-first reads
        # of the fences rely on (:func:`last_whole_erasures`).
        _, pending = await load_ledger(ticket, store, pending_key(tenant))
        if all(r.erasure_id != done.erasure_id for r in pending.records):
            return
        legacy = head.legacy
        if chain == TENANT_CHAIN and legacy is None:
            # Written by an earlier version (or absent): every entry it holds is in no scope's chain.
            legacy = len(head.records)
        pages, kept = head.pages or 0, head.records
        if len(kept) >= index.INDEX_PAGE_RECORDS:  # the index's, read through its module: one value
            # Full, or written by an earlier version and unbounded: every writer moves the same
            # entries into the same pages (and a scope's chain the same marks: :func:`_mark_pages`).
            whole = None
            if chain != TENANT_CHAIN:
                whole = await _mark_before(ticket, store, tenant, chain, pages)
            for start in range(0, len(kept), index.INDEX_PAGE_RECORDS):
                pages += 1
                page = ErasureLedger(kept[start : start + index.INDEX_PAGE_RECORDS])
                await _write_page(ticket, store, page_key(tenant, chain, pages), page)
                if chain != TENANT_CHAIN:
                    whole = await _mark_pages(ticket, store, tenant, chain, pages, page, whole)
            kept = ()
        new = ErasureLedger((*kept, header(done)), pages=pages or None, legacy=legacy)
        try:
            await save_ledger(ticket, store, key, new, revision)
        except SessionConflictError:
            continue  # another erasure of the tenant wrote first: add to what it wrote
        return
    raise SessionConflictError(
        f"the erasure records of tenant {tenant!r} kept changing under {_ATTEMPTS} attempts to update "
        f"{key.session!r}; try again"
    )


async def _mark_before(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, pages: int
) -> tuple[ErasureRecord, ...] | None:
    """The mark of ``chain``'s pages 1..``pages`` before a move adds to them; ``None``: not known.

    No pages: none. Pages an earlier version moved have no mark: their
    newest erasure of the whole scope is looked for newest first, as a
    reader would (at most :data:`.erasure_index.MAX_CHAIN_PAGES_READ` pages; once per
    move, so such a chain gets its marks from its next move on); not found
    by then, or a page unreadable, it stays not known (the readers walk
    the pages and say what they find).
    """
    if pages == 0:
        return ()
    mark = await read_mark(ticket, store, tenant, chain, pages)
    if mark is not None:
        return mark
    found: list[ErasureRecord] = []

    async def whole(record: ErasureRecord) -> bool:
        if record.target.groups:
            return False
        found.append(record)
        return True

    try:
        await newest_first(ticket, store, tenant, chain, ErasureLedger(), pages, whole)
    except (SessionStoreError, SnapshotCorruptError):
        return None  # past the cap, or damaged: not known; the readers meet the same and say so
    return tuple(found)


async def _mark_pages(
    ticket: Ticket,
    store: SessionStore,
    tenant: str,
    chain: str,
    number: int,
    page: ErasureLedger,
    before: tuple[ErasureRecord, ...] | None,
) -> tuple[ErasureRecord, ...] | None:
    """Write the mark of ``chain``'s pages 1..``number`` (``page`` the last), if known; return it.

    A mark says which erasure of the whole scope is the newest on those
    pages: the newest on ``page``, else the one before it. The pages never
    change, so neither does a mark that is known (written once, like a
    page: :func:`_write_page`); one not known is not written. Written after
    its page and before the head that counts it, so a reader of a head
    with ``pages = n`` finds the mark of page n there if the move made one.
    """
    newest = next((r for r in reversed(page.records) if not r.target.groups), None)
    mark = (newest,) if newest is not None else before
    if mark is not None:
        await _write_page(ticket, store, mark_key(tenant, chain, number), ErasureLedger(mark))
    return mark


async def _write_page(ticket: Ticket, store: SessionStore, key: SessionKey, page: ErasureLedger) -> None:
    """Write ``page`` at ``key`` once: already there with the same entries is done; other entries, damage."""
    for _ in range(_ATTEMPTS):
        revision, stored = await load_ledger(ticket, store, key)
        if revision is not None:
            if stored == page:
                return  # a crash after writing it, or another process moving the same head
            raise SnapshotCorruptError(
                f"the erasure records at {key.session!r} of tenant {key.user!r} hold other entries than "
                "the index about to move there; the stored data is damaged and was left as it is"
            )
        try:
            await save_ledger(ticket, store, key, page, None)
        except SessionConflictError:
            continue  # another process wrote it just now: check what it wrote
        return
    raise SessionConflictError(f"the erasure records at {key.session!r} kept changing; try again")
