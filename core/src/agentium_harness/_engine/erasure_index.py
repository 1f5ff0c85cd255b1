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
:func:`.erasure_index_add.add_finished`), and no record grows past what a store can read or write.
This module is the layout and its reads; adding to it is :mod:`.erasure_index_add`.

The checks on a run's path (the commit and turn fences, recall's) and a
fenced memory write's or document index's second read read the chains
newest first and stop at the entry that settles them (:func:`last_whole_erasures`,
:func:`last_covering_erasures`, :func:`joined_covering`): their cost
does not grow with the erasures before it, and past
:data:`MAX_CHAIN_PAGES_READ` pages of one scope's chain they fail
closed. That relies on each chain listing overlapping erasures in the
order they ran, which :mod:`.erasure_index_add` keeps (an erasure is listed only
while still pending). A scope's head that holds no erasure of its whole
scope (a session's retention erasures filled it) is answered by its
pages' *mark* instead (:func:`read_mark`: the newest such erasure on
them, written with each page), one read however many pages; pages an
earlier version moved get theirs at the next move.

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

from .._errors import SessionStoreError, SnapshotCorruptError
from .._ports.erasure import EraseLevel, EraseTarget, ErasureLedger, ErasureRecord
from .._ports.memory import GroupRef, MemoryScope
from .._ports.recall_sources import SourceOwner
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from .erasure_ledger import (
    as_they_ran,
    index_key,
    joined_since,
    load_ledger,
)
from .lifecycle import Ticket, covers

__all__ = [
    "INDEX_PAGE_RECORDS",
    "MAX_CHAIN_PAGES_READ",
    "TENANT_CHAIN",
    "chain_of",
    "mark_key",
    "newest_first",
    "page_key",
    "read_mark",
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
#: The head name of the tenant's chain (what ``erasure_status`` lists).
TENANT_CHAIN: Final = "index"


def _scope_chain(*parts: str) -> str:
    """The head name of one scope's chain: a digest of its ids, so any id fits in a key."""
    joined = "\x00".join((str(len(parts)), *parts)).encode("utf-8", "surrogatepass")
    return f"by-{hashlib.sha256(joined).hexdigest()[:40]}"


def chain_of(target: EraseTarget) -> str:
    """The head name of the chain of ``target``'s scope (groups targets go with their session)."""
    if target.level is EraseLevel.TENANT or target.user_id is None:
        return _scope_chain("tenant")
    if target.session_id is None:
        return _scope_chain("user", target.user_id)
    return _scope_chain("session", target.user_id, target.session_id)


def page_key(tenant: str, chain: str, page: int) -> SessionKey:
    """The key of page ``page`` (1 is the oldest) of ``chain``."""
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
        key = page_key(tenant, chain, page)
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
    _, head = await load_ledger(ticket, store, index_key(tenant, TENANT_CHAIN))
    return head


async def tenant_index_page(ticket: Ticket, store: SessionStore, tenant: str, page: int) -> ErasureLedger:
    """Page ``page`` (1 is the oldest) of the tenant's chain, one read; missing, the data is damaged."""
    return ErasureLedger(await _read_pages_from(ticket, store, tenant, TENANT_CHAIN, page, page))


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
    *,
    marks: bool = True,
) -> ErasureRecord | None:
    """A finished erasure that ``covers`` a write and joined the ledger since its first read; else ``None``.

    ``write``: its tenant, user and the sessions whose erasures take it (the
    chains :func:`finished_covering_fact` and :func:`finished_covering_owner`
    read). ``joined`` says of an entry whether it joined since that read
    (``None``: not known; the fence says ``True`` of a covering one its
    clock rule counts). Every erasure of one scope's chain overlaps every
    other (:func:`.lifecycle.overlaps`): they ran one after another and the
    chain lists them so (:mod:`.erasure_index_add`). So each chain is read newest first
    (:func:`newest_first`, capped) and stops at its first entry that joined
    before the read, covering or not (retention's): every entry listed
    before it joined before it. Its pages answer from their mark (the
    newest covering entry on them) unless that one's join is not known. The
    tenant's legacy entries stop scope by scope. One join record per entry
    read (each once), not one per erasure the write's scopes ever had.
    ``marks=False`` for a write a groups erasure may take (a fact citing
    groups): a mark names only erasures of a whole scope, so the pages are
    read newest first to the entry that settles them instead.
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
        scope = chain_of(record.target)
        if scope not in scopes or scope in settled:
            return False  # another scope's (the tenant's legacy entries), or one settled already
        if await judge(record) is False:
            settled.add(scope)
        return bool(found) or settled == scopes

    async def on_pages(whole: ErasureRecord | None) -> bool:
        return whole is None or await judge(whole) is False or bool(found)

    for chain, head, pages in await _chain_heads(ticket, store, tenant, user, sessions):
        scopes, settled = (wanted if chain == TENANT_CHAIN else {chain}), set()
        await newest_first(ticket, store, tenant, chain, head, pages, settles, on_pages if marks else None)
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
    lists them in that order (:mod:`.erasure_index_add` lists an erasure only while it is
    still pending, so a late resume completing one again after another
    process did never lists it after a later one). So each chain is read
    newest first (:func:`newest_first`) and stops at the first erasure of
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
        await newest_first(ticket, store, key.tenant, chain, head, pages, settles, on_pages)
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
        scopes = _LastOfEachScope(key, 3 if chain == TENANT_CHAIN else 1)
        await newest_first(ticket, store, key.tenant, chain, head, pages, scopes.settles, scopes.on_pages)
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
        self.last.setdefault(chain_of(record.target), record)
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
    _, head = await load_ledger(ticket, store, index_key(tenant, TENANT_CHAIN))
    legacy = len(head.records) if head.legacy is None else head.legacy
    heads = [(TENANT_CHAIN, head, min(head.pages or 0, math.ceil(legacy / INDEX_PAGE_RECORDS)))]
    chains = [_scope_chain("tenant")]
    if user is not None:
        chains.append(_scope_chain("user", user))
        chains.extend(_scope_chain("session", user, session) for session in sessions)
    for chain in chains:
        _, scoped = await load_ledger(ticket, store, index_key(tenant, chain))
        heads.append((chain, scoped, scoped.pages or 0))
    return heads


async def newest_first(
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
    whose pages have a mark (:func:`read_mark`), ``on_pages`` gets the
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
    if on_pages is not None and last_page and chain != TENANT_CHAIN:
        mark = await read_mark(ticket, store, tenant, chain, last_page)
        if mark is not None and await on_pages(mark[0] if mark else None):
            return
    for read, page in enumerate(range(last_page, 0, -1)):
        if read >= MAX_CHAIN_PAGES_READ and chain != TENANT_CHAIN:
            raise SessionStoreError(
                f"the erasure index of tenant {tenant!r} holds more than {MAX_CHAIN_PAGES_READ} pages to "
                f"read back in one chain ({chain!r}) before an entry settles the check; it was not read "
                "further and the check failed: nothing was shown, sent or committed on its word"
            )
        for record in reversed(await _read_pages_from(ticket, store, tenant, chain, page, page)):
            if await settles(record):
                return


def mark_key(tenant: str, chain: str, page: int) -> SessionKey:
    """The key of the mark of scope chain ``chain``'s pages 1..``page``."""
    return index_key(tenant, f"{chain}-w{page}")


async def read_mark(
    ticket: Ticket, store: SessionStore, tenant: str, chain: str, page: int
) -> tuple[ErasureRecord, ...] | None:
    """The mark of pages 1..``page`` of scope chain ``chain``: ``(newest whole-scope erasure,)``, ``()``.

    ``None`` when there is none (pages an earlier version moved: not
    known). A mark holding anything but at most one header of an erasure
    of this chain's whole scope is damaged: :class:`SnapshotCorruptError`.
    """
    key = mark_key(tenant, chain, page)
    revision, mark = await load_ledger(ticket, store, key)
    if revision is None:
        return None
    if (
        len(mark.records) > 1
        or (mark.pages, mark.legacy, mark.joined_after) != (None, None, None)
        or any(r.target.groups or chain_of(r.target) != chain for r in mark.records)
    ):
        raise SnapshotCorruptError(
            f"the erasure records at {key.session!r} of tenant {tenant!r} are not a mark of the index "
            "pages before them; the stored data is damaged and was left as it is"
        )
    return mark.records
