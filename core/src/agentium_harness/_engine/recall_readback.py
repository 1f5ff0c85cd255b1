"""Reading recalled groups back for :mod:`.recall_groups`: within a byte budget, and the session's past.

Recall renders each recalled group's excerpt from the group itself
(:mod:`.recall_groups`). This module reads those groups: resident ones from
the snapshot (nothing is read), archived ones from the archive, one group
per read, in the order asked (the excerpts' rank order), each checked as
every history read checks it (:func:`.history_read.fetch_groups`: seq,
owner, receipt digest), inside the round's latency deadline. A group may
be up to 32 MiB (``MAX_APPEND_BYTES``) for an excerpt of a few hundred
bytes, so the reads have a byte budget of their own
(``RecallLimits.max_readback_bytes``): once what they returned reaches it,
no read starts, whatever size the archive's groups turn out to be. One
group per read is what lets the engine hold it: it learns a group's size
only once it has it, so at most one group past the budget is read, and
each digest check runs on a group the budget allowed.

It also answers the question an excerpt nothing here can vouch for leaves
open: was this session id erased whole before (the tenant's index of
finished erasures, :func:`.erasure_index.last_whole_erasures`)? A session
erased and then used again starts at seq 0 with the same source ids, so a
recall store that missed the erasure answers with the erased groups' text
under ids the new session uses. An erasure of the session still under way
(the tenant's ``pending``, begun after the run loaded) counts too: it may
have removed the groups from the archive already, and the index names it
only once it finishes. And which finished erasures cover the session
(:meth:`GroupReader.finished_erasures`, for recalled documents:
:mod:`.recall_erased_docs`), kept per session store and the erasure
ledger's revision the run's load saw.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import anyio
import attrs

from .._errors import OperationCancelledError, OperationTimeoutError
from .._history import MessageGroup
from .._ports.archive import HistoryArchive
from .._ports.erasure import ErasureRecord
from .._ports.sessions import SessionSnapshot, SessionStore
from .._scope import SessionKey
from .erasure_index import last_covering_erasures, last_whole_erasures
from .erasure_ledger import load_ledger, pending_key
from .history_read import fetch_groups
from .lifecycle import Ticket, covers

__all__ = ["GroupReader", "ReadBack", "SessionGroups", "session_groups"]


@attrs.frozen(slots=True)
class ReadBack:
    """What one read-back found: the groups, what reading them cost, and what it left.

    ``groups`` by seq (resident ones too, read from nothing); ``read_bytes``
    the bytes of the archived groups the reads returned (their canonical
    encoding), a group the checks refused included; ``unread`` the seqs
    not read because ``max_bytes`` was spent;
    ``error`` what stopped the reads (a failed or timed-out archive read):
    the seqs after it were not read.
    """

    groups: Mapping[int, MessageGroup] = attrs.field(factory=dict)
    read_bytes: int = 0
    unread: tuple[int, ...] = ()
    error: Exception | None = None


class GroupReader(Protocol):
    """Reads the run's session's groups back for recall, and says whether the session was erased whole."""

    async def read(self, seqs: Sequence[int], deadline: float, max_bytes: int) -> ReadBack:
        """Groups ``seqs``, in that order, until their archived bytes reach ``max_bytes`` (:class:`ReadBack`).

        ``deadline`` (``time.monotonic()``) is the round's: past it no read
        starts and a read running is cut (:class:`OperationTimeoutError`,
        in ``error``). A cancellation of the run itself is raised.
        """
        ...

    async def erased_whole(self, deadline: float) -> bool:
        """Whether a finished erasure took the whole session (its own, its user's or its tenant's).

        Or whether an erasure touching the session is under way: it may have
        removed groups the archive no longer vouches for.

        Raises :class:`OperationTimeoutError` past ``deadline`` (not started,
        or cut), or what reading the erasure index raised.
        """
        ...

    async def finished_erasures(self, deadline: float) -> tuple[ErasureRecord, ...]:
        """The last finished erasure of each scope of the session, in the order they ran (headers).

        Every erasure that can take a document this run may recall covers the
        session (its tenant's, its user's, its own), and a document is
        decided by the last one covering its owner: the last of its scope is
        among these. A groups erasure takes none and is left out. Raises as
        :meth:`erased_whole` (and when the index would need more than
        :data:`.erasure_index.MAX_CHAIN_PAGES_READ` pages of one chain).
        """
        ...


class SessionGroups:
    """The :class:`GroupReader` of session ``key`` as ``snap`` holds it (an erased group is not read)."""

    def __init__(
        self,
        ticket: Ticket,
        archive: HistoryArchive,
        store: SessionStore,
        key: SessionKey,
        snap: SessionSnapshot,
    ) -> None:
        self._ticket, self._archive, self._store, self._key, self._snap = ticket, archive, store, key, snap

    async def read(self, seqs: Sequence[int], deadline: float, max_bytes: int) -> ReadBack:
        snap = self._snap
        erased = snap.erased or ()
        resident = {g.seq: g for g in snap.resident}
        groups: dict[int, MessageGroup] = {}
        spent = 0
        unread: list[int] = []
        for seq in seqs:
            if any(seq in span for span in erased):
                continue  # removed by an erasure: not history any more, never read
            if seq in resident:
                groups[seq] = resident[seq]  # held already: nothing is read
                continue
            if seq >= snap.boundary:
                continue  # neither resident nor archived: no group of this session's to read
            if spent >= max_bytes:
                unread.append(seq)
                continue
            returned: list[Sequence[object]] = []
            try:
                # One group a read: the next read starts only while the budget has room left.
                got = await fetch_groups(
                    self._ticket,
                    self._archive,
                    self._key,
                    snap,
                    [seq],
                    deadline=deadline,
                    on_page=returned.append,
                )
            except OperationCancelledError as exc:
                if not isinstance(exc, OperationTimeoutError):
                    raise  # the run itself was cancelled: not a degraded read
                return ReadBack(groups, spent + _bytes_of(returned), tuple(unread), exc)
            except Exception as exc:
                # A group the checks refused was read all the same: it counts, as it is reported.
                return ReadBack(groups, spent + _bytes_of(returned), tuple(unread), exc)
            groups[seq] = got[seq]
            spent += _bytes_of(returned)
        return ReadBack(groups, spent, tuple(unread))

    async def erased_whole(self, deadline: float) -> bool:
        left = min(deadline - time.monotonic(), self._ticket.op_timeout_s)
        if left <= 0:
            raise OperationTimeoutError(
                "erasure index read not started: its deadline had passed", "erasure index read", 0.0
            )
        # Several small reads (the tenant's pending erasures, then the tenant's, the user's and the
        # session's chains) under one deadline: each is a bounded call, so a cancellation at the
        # deadline leaves none of them running.
        with anyio.move_on_after(left) as scope:
            found = await self._under_way() or await last_whole_erasures(self._ticket, self._store, self._key)
        if scope.cancelled_caught:
            raise OperationTimeoutError(
                f"erasure index read did not finish within {left:.3f}s and was cancelled",
                "erasure index read",
                left,
            )
        return bool(found)

    async def finished_erasures(self, deadline: float) -> tuple[ErasureRecord, ...]:
        seen = self._ticket.fence_seen
        if seen is not None and seen[0] is None:
            # No erasure ledger at the run's load: no erasure of the tenant ever began, so none
            # finished before the load (one since is the turn fence's: it stops the run).
            return ()
        known = _cached(self._store, (self._key, seen)) if seen is not None else None
        if known is not None:
            return known  # finished erasures change only with the ledger's revision
        left = min(deadline - time.monotonic(), self._ticket.op_timeout_s)
        if left <= 0:
            raise OperationTimeoutError(
                "erasure index read not started: its deadline had passed", "erasure index read", 0.0
            )
        with anyio.move_on_after(left) as scope:
            # The last of each scope only (each chain read newest first): the check decides each
            # document by the last erasure covering its owner, and a groups erasure (retention, a
            # fact's sources) takes none.
            found = await last_covering_erasures(self._ticket, self._store, self._key)
        if scope.cancelled_caught:
            raise OperationTimeoutError(
                f"erasure index read did not finish within {left:.3f}s and was cancelled",
                "erasure index read",
                left,
            )
        if seen is not None:
            _remember(self._store, (self._key, seen), found)
        return found

    async def _under_way(self) -> bool:
        """Whether an erasure touching this session is under way (in the tenant's ``pending``).

        The run loaded before it began (a load refuses while one is pending),
        so it may have removed archived groups already, while its excerpts in
        a recall store that missed it are still answered: until it finishes
        the index of finished erasures does not name it.
        """
        _, pending = await load_ledger(self._ticket, self._store, pending_key(self._key.tenant))
        return any(covers(record.target, self._key) for record in pending.records)


# The finished erasures covering a session, per session store (weakly), by the session and the
# erasure ledger's revision its run's load saw: an erasure joins and leaves the ledger with a new
# revision, so under one revision the answer stands. Bounded per store; a store that cannot be
# weakly referenced is read each time.
_FINISHED: weakref.WeakKeyDictionary[
    SessionStore, dict[tuple[SessionKey, tuple[int | None]], tuple[ErasureRecord, ...]]
] = weakref.WeakKeyDictionary()
_MAX_FINISHED: Final = 1024


def _cached(
    store: SessionStore, at: tuple[SessionKey, tuple[int | None]]
) -> tuple[ErasureRecord, ...] | None:
    try:
        cache = _FINISHED.get(store)
    except TypeError:  # no weak reference to it: nothing kept
        return None
    return None if cache is None else cache.get(at)


def _remember(
    store: SessionStore, at: tuple[SessionKey, tuple[int | None]], found: tuple[ErasureRecord, ...]
) -> None:
    try:
        cache = _FINISHED.setdefault(store, {})
    except TypeError:  # no weak reference to it: nothing kept
        return
    if len(cache) >= _MAX_FINISHED:
        cache.clear()
    cache[at] = found


def _bytes_of(pages: Sequence[Sequence[object]]) -> int:
    """The canonical bytes of the groups the archive's reads returned (nothing else there has a size)."""
    total = 0
    for item in (item for page in pages for item in page):
        if not isinstance(item, MessageGroup):
            continue
        try:
            total += item.size_bytes
        except Exception:  # noqa: S112  # a group set past its validators, unencodable: the checks refuse it
            continue
    return total


def session_groups(
    ticket: Ticket, archive: HistoryArchive, store: SessionStore, key: SessionKey, snap: SessionSnapshot
) -> SessionGroups:
    """The :class:`GroupReader` of session ``key`` as ``snap`` holds it."""
    return SessionGroups(ticket, archive, store, key, snap)
