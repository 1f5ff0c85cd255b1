"""The tenant's index of finished erasures, kept bounded (docs/erasure.md, "Where the records live").

Every completed erasure adds its header (:func:`.erasure_ledger.header`) to
two *chains* in the session store's reserved keys:

- the tenant's, ``index``: every finished erasure of the tenant, oldest
  first (what ``erasure_status`` lists, a bounded page at a time:
  :mod:`.erasure_status`);
- its scope's, ``by-<scope>``: the finished erasures of exactly its
  target's tenant, user or session (groups targets go with their session).
  A session's erasures are those of three scopes — its tenant, its user,
  itself — so ``inspect_session`` reads three chains, never the tenant's.

A chain's head holds at most :data:`INDEX_PAGE_RECORDS` headers. Each
completion rewrites the head (compare-and-set), so it must stay small: once
full, its headers move, unchanged, to the chain's next page ``<head>-<n>``
(written once, never rewritten) and the head starts again, counting its
pages. Completing an erasure reads and writes the same whatever came before
it (but for a scope chain whose pages an earlier version moved: its moves
read back up to :data:`MAX_CHAIN_PAGES_READ` pages until they mark them,
:func:`_mark_before`), and no record grows past what a store can read or write.

The checks on a run's path (the commit and turn fences, recall's) and a
fenced memory write's or document index's second read read the chains
newest first and stop at the entry that settles them (:func:`last_whole_erasures`,
:func:`last_covering_erasures`, :func:`joined_covering`): their cost
does not grow with the erasures before it, and past
:data:`MAX_CHAIN_PAGES_READ` pages of one scope's chain they fail
closed. That relies on each chain listing overlapping erasures in the
order they ran, which :func:`_add` keeps (an erasure is listed only
while still pending). A scope's head that holds no erasure of its whole
scope (a session's retention erasures filled it) is answered by its
pages' *mark* instead (:func:`_mark_pages`: the newest such erasure on
them, written with each page), one read however many pages; pages an
earlier version moved get theirs at the next move (:func:`_mark_before`).

An index written by an earlier version held every header in the tenant's
head and has no scope chains: the tenant's head counts those entries
(``legacy``, set on its first update, which also moves them to pages), and
``inspect_session`` reads just the pages that hold them too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from .._errors import SessionConflictError, SessionStoreError, SnapshotCorruptError
from .._ports.erasure import EraseLevel, EraseTarget, ErasureLedger, ErasureRecord
from .._ports.memory import GroupRef, MemoryScope
from .._ports.recall_sources import SourceOwner
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from .erasure_ledger import (
    as_they_ran,
    header,
    index_key,
    joined_since,
    load_ledger,
    pending_key,
    save_ledger,
)
from .lifecycle import Ticket, covers

__all__ = [
    "INDEX_PAGE_RECORDS",
    "MAX_CHAIN_PAGES_READ",
    "add_finished",
    "finished_covering",
    "finished_covering_fact",
    "finished_covering_owner",
    "joined_covering",
    "last_covering_erasures",
    "last_whole_erasures",
    "tenant_index_head",
    "tenant_index_page",
]

#: Headers a chain's head holds before they move to a page of their own: bounds what every
#: completion reads and rewrites (a header is about 1 KB; a few KB with the longest reason).
INDEX_PAGE_RECORDS: Final = 64
#: Pages of one chain a newest-first read (:func:`last_whole_erasures`, :func:`last_covering_erasures`)
#: goes back over before it gives up and fails its check: 8,192 headers past the head. The answer is
#: usually in the head; only an earlier version's index, or thousands of a session's retention
#: erasures since its last erasure of the whole session, need pages at all.
MAX_CHAIN_PAGES_READ: Final = 128
#: Compare-and-set attempts of one head update before it gives up (another erasure kept winning).
_ATTEMPTS: Final = 16
_TENANT_CHAIN: Final = "index"


def _scope_chain(*parts: str) -> str:
    """The head name of one scope's chain: a digest of its ids, so any id fits in a key."""
    joined = "\x00".join((str(len(parts)), *parts)).encode("utf-8", "surrogatepass")
    return f"by-{hashlib.sha256(joined).hexdigest()[:40]}"


def _chain_of(target: EraseTarget) -> str:
    if target.level is EraseLevel.TENANT or target.user_id is None:
        return _scope_chain("tenant")
    if target.session_id is None:
        return _scope_chain("user", target.user_id)
    return _scope_chain("session", target.user_id, target.session_id)


def _page(tenant: str, chain: str, page: int) -> SessionKey:
    return index_key(tenant, f"{chain}-{page}")


async def _read_pages(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, upto: int
) -> list[ErasureRecord]:
    """The headers on pages 1..``upto`` of ``chain``, oldest first (one bounded read each)."""
    return await _read_pages_from(ticket, store, tenant, chain, 1, upto)


async def _read_pages_from(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, first: int, upto: int
) -> list[ErasureRecord]:
    """The headers on pages ``first``..``upto`` of ``chain``, oldest first (one bounded read each)."""
    found: list[ErasureRecord] = []
    for page in range(first, upto + 1):
        key = _page(tenant, chain, page)
        revision, ledger = await load_ledger(ticket, store, key)
        if revision is None:
            # Pages are written before the head that counts them: a missing one was removed behind
            # the engine's back. Said, never passed over: the listing would silently lack it.
            raise SnapshotCorruptError(
                f"the erasure records at {key.session!r} of tenant {tenant!r} are missing although the "
                "index counts them; the stored data is damaged and was left as it is"
            )
        found.extend(ledger.records)
    return found


def _once(records: list[ErasureRecord]) -> tuple[ErasureRecord, ...]:
    """Each erasure once (completed again after a crash before it left ``pending``: indexed twice)."""
    seen: dict[str, ErasureRecord] = {}
    for record in records:
        seen.setdefault(record.erasure_id, record)
    return tuple(seen.values())


async def tenant_index_head(ticket: Ticket, store: SessionStore, tenant: str) -> ErasureLedger:
    """The head of the tenant's chain: its newest headers and how many pages came before (one read)."""
    _, head = await load_ledger(ticket, store, index_key(tenant, _TENANT_CHAIN))
    return head


async def tenant_index_page(ticket: Ticket, store: SessionStore, tenant: str, page: int) -> ErasureLedger:
    """Page ``page`` (1 is the oldest) of the tenant's chain, one read; missing, the data is damaged."""
    return ErasureLedger(await _read_pages_from(ticket, store, tenant, _TENANT_CHAIN, page, page))


async def finished_covering(
    ticket: Ticket, store: SessionStore, key: SessionKey
) -> tuple[ErasureRecord, ...]:
    """The headers of the finished erasures covering session ``key``, in the order they completed.

    Reads the chains of its three scopes and, for an index an earlier
    version wrote, the tenant's head and the pages holding those entries.
    """
    found = await _scoped(ticket, store, key.tenant, key.user, (key.session,))
    covering = [r for r in found if covers(r.target, key)]
    return tuple(sorted(covering, key=lambda r: r.completed_at or r.started_at))


async def finished_covering_fact(
    ticket: Ticket, store: SessionStore, scope: MemoryScope, provenance: Sequence[GroupRef]
) -> tuple[ErasureRecord, ...]:
    """The finished erasures covering a memory fact (:meth:`EraseTarget.covers_fact`), every page read.

    The chains of its tenant, its user and each session its provenance names.
    """
    sessions = sorted({ref.session for ref in provenance})
    found = await _scoped(ticket, store, scope.tenant, scope.user, sessions)
    return tuple(r for r in found if r.target.covers_fact(scope, provenance))


async def finished_covering_owner(
    ticket: Ticket, store: SessionStore, owner: SourceOwner
) -> tuple[ErasureRecord, ...]:
    """The finished erasures covering a host document of ``owner`` (:meth:`covers_owner`), every page read.

    The chains of its tenant and, when the owner names them, its user and
    its session (a document owned tenant-wide: tenant erasures only).
    """
    sessions = () if owner.session is None else (owner.session,)
    found = await _scoped(ticket, store, owner.tenant, owner.user, sessions)
    return tuple(r for r in found if r.target.covers_owner(owner))


async def joined_covering(
    ticket: Ticket,
    store: SessionStore,
    write: tuple[str, str | None, Sequence[str]],
    covers: Callable[[EraseTarget], bool],
    joined: Callable[[ErasureRecord], Awaitable[bool | None]],
) -> ErasureRecord | None:
    """A finished erasure that ``covers`` a write and joined the ledger since its first read; else ``None``.

    ``write``: its tenant, user and the sessions whose erasures take it (the
    chains :func:`finished_covering_fact` and :func:`finished_covering_owner`
    read). ``joined`` says of an entry whether it joined since that read
    (``None``: not known; the fence says ``True`` of a covering one its
    clock rule counts). Every erasure of one scope's chain overlaps every
    other (:func:`.lifecycle.overlaps`): they ran one after another and the
    chain lists them so (:func:`_add`). So each chain is read newest first
    (:func:`_newest_first`, capped) and stops at its first entry that joined
    before the read, covering or not (retention's): every entry listed
    before it joined before it. Its pages answer from their mark (the
    newest covering entry on them) unless that one's join is not known. The
    tenant's legacy entries stop scope by scope. One join record per entry
    read (each once), not one per erasure the write's scopes ever had.
    """
    tenant, user, sessions = write
    wanted = {_scope_chain("tenant")}
    if user is not None:
        wanted |= {_scope_chain("user", user), *(_scope_chain("session", user, s) for s in sessions)}
    verdicts: dict[str, bool | None] = {}
    found: list[ErasureRecord] = []

    async def judge(record: ErasureRecord) -> bool | None:
        if record.erasure_id not in verdicts:
            verdicts[record.erasure_id] = await joined(record)
        verdict = verdicts[record.erasure_id]
        if verdict and covers(record.target):
            found.append(record)
        return verdict

    scopes, settled = wanted, set[str]()  # the scopes the chain read now lists, and those it settled

    async def settles(record: ErasureRecord) -> bool:
        scope = _chain_of(record.target)
        if scope not in scopes or scope in settled:
            return False  # another scope's (the tenant's legacy entries), or one settled already
        if await judge(record) is False:
            settled.add(scope)
        return bool(found) or settled == scopes

    async def on_pages(whole: ErasureRecord | None) -> bool:
        return whole is None or await judge(whole) is False or bool(found)

    for chain, head, pages in await _chain_heads(ticket, store, tenant, user, sessions):
        scopes, settled = (wanted if chain == _TENANT_CHAIN else {chain}), set()
        await _newest_first(ticket, store, tenant, chain, head, pages, settles, on_pages)
        if found:
            return found[0]
    return None


async def _scoped(
    ticket: Ticket, store: SessionStore, tenant: str, user: str | None, sessions: Sequence[str]
) -> tuple[ErasureRecord, ...]:
    """The finished erasures of the tenant's, the user's and these sessions' chains (each once), whole.

    Without a user, only the tenant's chain (no user's or session's erasure
    takes what it owns). First the tenant's head with the pages holding an
    earlier version's entries, then each scope's chain, each oldest first.
    """
    read: list[ErasureRecord] = []
    for chain, head, pages in await _chain_heads(ticket, store, tenant, user, sessions):
        read.extend(await _read_pages(ticket, store, tenant, chain, pages))
        read.extend(head.records)
    return _once(read)


async def last_whole_erasures(
    ticket: Ticket, store: SessionStore, key: SessionKey, loaded_at: tuple[int | None] | None = None
) -> tuple[ErasureRecord, ...]:
    """Of the finished erasures of the whole of session ``key``, the last of each chain (each once).

    Such erasures (of the session, its user or its tenant) all overlap, and
    an erasure joins ``pending`` only while no overlapping one is in it
    (:func:`.erasure.start`): they ran one after another, and each chain
    lists them in that order (:func:`_add` lists an erasure only while it is
    still pending, so a late resume completing one again after another
    process did never lists it after a later one). So each chain is read
    newest first (:func:`_newest_first`) and stops at the first erasure of
    the whole session: the one that joined last. The commit fence reads
    these few join records (:mod:`.commit_fence`), not one per erasure the
    session ever had. Newest first, by their clocks.

    ``loaded_at`` (the ledger revision a load saw, a 1-tuple): a chain
    whose newest entry touching the session is an erasure of some of its
    groups (retention, a fact's sources) that joined the ledger before that
    load stops there with none — every erasure of the whole session listed
    before it joined before it, and none listed after it exists. So
    retention's entries are not read back one page after another to find
    an erasure of the whole session joined long before the load.
    """
    last: dict[str, ErasureRecord] = {}

    async def settles(record: ErasureRecord) -> bool:
        if not covers(record.target, key):
            return False  # another session's (the tenant chain's legacy part): says nothing here
        if record.target.covers_session(key):
            last.setdefault(record.erasure_id, record)
            return True
        # Some of the session's groups: it overlaps every erasure of the whole session.
        return loaded_at is not None and await joined_since(ticket, store, record, loaded_at[0]) is False

    async def on_pages(whole: ErasureRecord | None) -> bool:
        # The first entry of the whole session the pages' walk would meet, or none there. The walk
        # could stop before it, with none, at an erasure of groups that joined before the load: the
        # fence's answer is the same unless ``whole`` has no join record (then it would refuse where
        # the walk does not), so only then are the pages walked.
        if whole is None:
            return True
        if loaded_at is not None and await joined_since(ticket, store, whole, loaded_at[0]) is None:
            return False
        return await settles(whole)

    for chain, head, pages in await _chain_heads(ticket, store, key.tenant, key.user, (key.session,)):
        await _newest_first(ticket, store, key.tenant, chain, head, pages, settles, on_pages)
    return tuple(sorted(last.values(), key=lambda r: r.completed_at or r.started_at, reverse=True))


async def last_covering_erasures(
    ticket: Ticket, store: SessionStore, key: SessionKey
) -> tuple[ErasureRecord, ...]:
    """The last finished erasure of each scope of session ``key`` (its tenant, user, itself): headers.

    In the order they ran (:func:`.erasure_ledger.as_they_ran`: by their join records, not
    the clocks of the processes that completed them; at most one more
    small read each). A host document an erasure can take is
    owned by the tenant, a user or a session (:meth:`EraseTarget.covers_owner`),
    and every erasure of one scope covers the same documents: the last one
    covering a document of ``key``'s scopes is among these. Each chain is
    read newest first and stops at its first erasure of a whole scope
    (an erasure of groups takes no document); the tenant's legacy entries
    (:func:`_chain_heads`) at the first of each scope.
    """
    found: dict[str, ErasureRecord] = {}
    for chain, head, pages in await _chain_heads(ticket, store, key.tenant, key.user, (key.session,)):
        # The tenant's legacy entries hold all three scopes' erasures; each scope's chain, its own.
        scopes = _LastOfEachScope(key, 3 if chain == _TENANT_CHAIN else 1)
        await _newest_first(ticket, store, key.tenant, chain, head, pages, scopes.settles, scopes.on_pages)
        for record in scopes.last.values():
            found.setdefault(record.erasure_id, record)
    return await as_they_ran(ticket, store, tuple(found.values()))


class _LastOfEachScope:
    """Keeps, of entries offered newest first, the first erasure of the whole of each scope of ``key``."""

    def __init__(self, key: SessionKey, wanted: int) -> None:
        self.key, self.wanted = key, wanted
        self.last: dict[str, ErasureRecord] = {}

    async def settles(self, record: ErasureRecord) -> bool:
        """Whether the last of each scope the chain can hold is known once ``record`` is kept."""
        if record.target.groups or not covers(record.target, self.key):
            return False  # takes no document, or another session's (the tenant's legacy entries)
        self.last.setdefault(_chain_of(record.target), record)
        return len(self.last) >= self.wanted

    async def on_pages(self, whole: ErasureRecord | None) -> bool:
        """A scope's chain: the newest erasure of its whole scope on its pages (if any) is its answer."""
        if whole is not None:
            await self.settles(whole)
        return True


async def _chain_heads(
    ticket: Ticket, store: SessionStore, tenant: str, user: str | None, sessions: Sequence[str]
) -> list[tuple[str, ErasureLedger, int]]:
    """The heads of the chains :func:`_scoped` reads, each with the last page to read after it.

    The tenant's ``index`` first, with the pages holding an earlier
    version's entries only (its later pages are in the scopes' chains too).
    """
    _, head = await load_ledger(ticket, store, index_key(tenant, _TENANT_CHAIN))
    legacy = len(head.records) if head.legacy is None else head.legacy
    heads = [(_TENANT_CHAIN, head, min(head.pages or 0, math.ceil(legacy / INDEX_PAGE_RECORDS)))]
    chains = [_scope_chain("tenant")]
    if user is not None:
        chains.append(_scope_chain("user", user))
        chains.extend(_scope_chain("session", user, session) for session in sessions)
    for chain in chains:
        _, scoped = await load_ledger(ticket, store, index_key(tenant, chain))
        heads.append((chain, scoped, scoped.pages or 0))
    return heads


async def _newest_first(
    ticket: Ticket,
    store: SessionStore,
    tenant: str,
    chain: str,
    head: ErasureLedger,
    last_page: int,
    settles: Callable[[ErasureRecord], Awaitable[bool]],
    on_pages: Callable[[ErasureRecord | None], Awaitable[bool]] | None = None,
) -> None:
    """Offer ``chain``'s entries to ``settles``, newest first, until it says the answer is known.

    The head's entries first (read already). Then, for a scope's chain
    whose pages have a mark (:func:`_read_mark`), ``on_pages`` gets the
    newest erasure of a whole scope on them (``None``: none), one read
    however many pages: the answer when it says so. Else pages
    ``last_page`` down to 1, one bounded read each. Past :data:`MAX_CHAIN_PAGES_READ` pages
    with no answer, :class:`SessionStoreError`: the check that asked fails
    (its caller shows, sends or commits nothing) rather than read on. The
    tenant's ``index`` is read here only for the pages holding an earlier
    version's entries (:func:`_chain_heads`): their number was fixed when
    this version first updated it and no erasure adds to them, so they are
    read to the end whatever their number (failing there would refuse every
    such tenant's checks for good, for no growth).
    """
    for record in reversed(head.records):
        if await settles(record):
            return
    if on_pages is not None and last_page and chain != _TENANT_CHAIN:
        mark = await _read_mark(ticket, store, tenant, chain, last_page)
        if mark is not None and await on_pages(mark[0] if mark else None):
            return
    for read, page in enumerate(range(last_page, 0, -1)):
        if read >= MAX_CHAIN_PAGES_READ and chain != _TENANT_CHAIN:
            raise SessionStoreError(
                f"the erasure index of tenant {tenant!r} holds more than {MAX_CHAIN_PAGES_READ} pages to "
                f"read back in one chain ({chain!r}) before an entry settles the check; it was not read "
                "further and the check failed: nothing was shown, sent or committed on its word"
            )
        for record in reversed(await _read_pages_from(ticket, store, tenant, chain, page, page)):
            if await settles(record):
                return


async def add_finished(ticket: Ticket, store: SessionStore, done: ErasureRecord) -> None:
    """Add ``done``'s header to the tenant's chain, then to its scope's (each bounded).

    Called once its tombstone is saved and before it leaves ``pending``, so
    a crash anywhere here leaves it pending, and its resume adds it again:
    a head that has it already is left as it is, and a header indexed twice
    (moved to a page meanwhile) is listed once.
    """
    await _add(ticket, store, done, _TENANT_CHAIN)
    await _add(ticket, store, done, _chain_of(done.target))


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
        if chain == _TENANT_CHAIN and legacy is None:
            # Written by an earlier version (or absent): every entry it holds is in no scope's chain.
            legacy = len(head.records)
        pages, kept = head.pages or 0, head.records
        if len(kept) >= INDEX_PAGE_RECORDS:
            # Full, or written by an earlier version and unbounded: every writer moves the same
            # entries into the same pages (and a scope's chain the same marks: :func:`_mark_pages`).
            whole = None
            if chain != _TENANT_CHAIN:
                whole = await _mark_before(ticket, store, tenant, chain, pages)
            for start in range(0, len(kept), INDEX_PAGE_RECORDS):
                pages += 1
                page = ErasureLedger(kept[start : start + INDEX_PAGE_RECORDS])
                await _write_page(ticket, store, _page(tenant, chain, pages), page)
                if chain != _TENANT_CHAIN:
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


def _mark(tenant: str, chain: str, page: int) -> SessionKey:
    return index_key(tenant, f"{chain}-w{page}")


async def _read_mark(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, page: int
) -> tuple[ErasureRecord, ...] | None:
    """The mark of pages 1..``page`` of scope chain ``chain``: ``(newest whole-scope erasure,)``, ``()``.

    ``None`` when there is none (pages an earlier version moved: not
    known). A mark holding anything but at most one header of an erasure
    of this chain's whole scope is damaged: :class:`SnapshotCorruptError`.
    """
    key = _mark(tenant, chain, page)
    revision, mark = await load_ledger(ticket, store, key)
    if revision is None:
        return None
    if (
        len(mark.records) > 1
        or (mark.pages, mark.legacy, mark.joined_after) != (None, None, None)
        or any(r.target.groups or _chain_of(r.target) != chain for r in mark.records)
    ):
        raise SnapshotCorruptError(
            f"the erasure records at {key.session!r} of tenant {tenant!r} are not a mark of the index "
            "pages before them; the stored data is damaged and was left as it is"
        )
    return mark.records


async def _mark_before(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, pages: int
) -> tuple[ErasureRecord, ...] | None:
    """The mark of ``chain``'s pages 1..``pages`` before a move adds to them; ``None``: not known.

    No pages: none. Pages an earlier version moved have no mark: their
    newest erasure of the whole scope is looked for newest first, as a
    reader would (at most :data:`MAX_CHAIN_PAGES_READ` pages; once per
    move, so such a chain gets its marks from its next move on); not found
    by then, or a page unreadable, it stays not known (the readers walk
    the pages and say what they find).
    """
    if pages == 0:
        return ()
    mark = await _read_mark(ticket, store, tenant, chain, pages)
    if mark is not None:
        return mark
    found: list[ErasureRecord] = []

    async def whole(record: ErasureRecord) -> bool:
        if record.target.groups:
            return False
        found.append(record)
        return True

    try:
        await _newest_first(ticket, store, tenant, chain, ErasureLedger(), pages, whole)
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
        await _write_page(ticket, store, _mark(tenant, chain, number), ErasureLedger(mark))
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
