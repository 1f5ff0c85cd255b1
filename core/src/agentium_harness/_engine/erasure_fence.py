"""The erasure fence around a write an erasure must not miss: the pending erasures read before and after.

A write made outside a session's load (a memory fact, :mod:`.memory_fence`;
a host document indexed for recall, :mod:`.document_fence`) is fenced here,
in every process sharing the session store, where erasures are recorded.
What the write claims (:class:`FencedWrite`: its tenant, which erasure
targets take it, how to find the finished ones, how to refuse) is the
caller's; the reads and the reasoning are shared:

- **before the write** (:meth:`ErasureFence.check`), a covering erasure
  pending refuses it: nothing is written;
- **after the write** (:meth:`ErasureFence.covering_since`), a covering
  erasure that began after that first read may have erased and verified the
  store before the write landed, and would then say ``complete`` with the
  write still there. So the pending ledger is read again; a covering erasure
  in it, or — when the ledger changed meanwhile — one of the tenant's
  finished erasures that joined the ledger after the first read, is
  returned, and the caller takes its write back and refuses.

An erasure adds itself to ``pending`` before it erases anything, and leaves
it only after its tombstone is indexed; the ledger's revision changes at each
step. So either the second read sees the erasure (pending, or the ledger's
revision moved and its tombstone is indexed) or it began after that read,
once the write landed, and erases it itself.

Which finished erasures joined after the first read is told by each one's
join record (the ledger revision it joined after,
:func:`.erasure_ledger.joined_since`, as the commit fence reads it)
against the revision the first read saw, kept in :class:`FenceCheck`: the
store's revisions, no clock. So a covering erasure that finished before the
first read (its user erased last week, or a minute ago) does not take back
a write that raced only another erasure of the tenant, and one that joined
after it takes the write back whatever the clocks of the two processes say.

An erasure without a join record (one an earlier version started, or one
that stopped between joining and keeping it) is judged as before, by its
``completed_at`` (another process's clock) against this process's clock at
the first read (:attr:`ErasureFence.clock`), less :data:`CLOCK_MARGIN_S`
for clock skew: one completed just before a write that raced another
erasure of the tenant takes it back too (try again); one that finished
after the first read on a clock running more than the margin behind this
process's is missed (docs/erasure.md says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

import attrs

from .._errors import AgentiumError, ErasureInProgressError, InvalidArgumentError, SessionStoreError
from .._observe import spans as observe
from .._ports.erasure import EraseTarget, ErasureLedger, ErasureRecord
from .._ports.sessions import SessionStore
from .._scope import SessionKey
from .erasure_index import joined_covering
from .erasure_ledger import joined_since, ledger_of, load_ledger, pending_key
from .lifecycle import Ticket

__all__ = ["CLOCK_MARGIN_S", "ErasureFence", "FenceCheck", "FencedWrite"]

#: How far apart the clocks of two processes sharing the session store may be, for an erasure without a
#: join record (an earlier version's): one that completed this long before a write's first check still
#: takes it back, if the ledger moved. An erasure with one is judged by it, no clock.
CLOCK_MARGIN_S: Final = 300.0
_OPERATION: Final = "erasure fence"


def utc_now() -> datetime:
    """The time now by this process's clock, in UTC (:attr:`ErasureFence.clock` by default)."""
    return datetime.now(UTC)


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise InvalidArgumentError(f"the erasure fence's clock must be callable, got {type(value).__name__}")


def _when(record: ErasureRecord) -> datetime:
    """When ``record``'s erasure finished, by the clock of the process that ran it."""
    return record.completed_at or record.started_at


def _marks(write: FencedWrite) -> bool:
    """Whether a chain's mark may answer for its pages: not for a write a groups erasure may take.

    A mark names the newest erasure of a whole scope on the pages; a groups
    erasure (retention, a forgotten fact's sources) listed after it there
    is not in it. ``cites_groups`` (a fact citing groups, an extraction's
    sources) says so; a write without it (a host document) is taken by no
    groups erasure.
    """
    return getattr(write, "cites_groups", False) is not True


class FencedWrite(Protocol):
    """What a fenced write claims: whose erasures it reads, which take it, how it is refused."""

    @property
    def tenant(self) -> str:
        """The tenant whose erasure ledger is read."""
        ...

    @property
    def scopes(self) -> tuple[str, str | None, tuple[str, ...]]:
        """Its tenant, user (``None``: tenant-wide) and the sessions whose erasures may take it."""
        ...

    def covers(self, target: EraseTarget) -> bool:
        """True if an erasure of ``target`` takes what is written."""
        ...

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        """The tenant's finished erasures that may cover the write (filtered by :meth:`covers` after).

        Every one its scopes ever had: read only by :meth:`ErasureFence.covering_after` (a fence
        gained after the write's first reads, no revision to stop at); :meth:`ErasureFence.covering_since`
        reads the chains of :attr:`scopes` newest first instead.
        """
        ...

    def refusal(self, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
        """The typed refusal naming ``record``; ``outcome`` says what became of the write."""
        ...


def _known_ledger(
    ticket: Ticket, store: SessionStore, key: SessionKey
) -> tuple[int | None, ErasureLedger] | None:
    """The ledger at ``key`` when the store knows it unchanged (no read, no bounded call); else ``None``.

    The built-in SQLite store answers a row it wrote or read last, with no
    commit to the file by anyone since, without waiting (as the run's load
    takes it: :func:`.load.known_fence_and_session`): the same answer a read
    would give now. Only with nothing recording (the read's span stays as it
    was otherwise); anything else is left to the bounded read.
    """
    known_load = getattr(store, "_agentium_load_known", None)
    if known_load is None or observe.current() is not None:
        return None
    try:
        known = known_load((key,), ticket.context())
    except Exception:  # the bounded read meets it again and raises it typed
        return None
    if type(known) is not tuple or len(known) != 1:
        return None
    return ledger_of(key, known[0])


@attrs.frozen(slots=True)
class ErasureFence:
    """Reads ``store``'s erasures around a write (one bounded read each, ``timeout_s``).

    A read the store can answer from what it knows unchanged (the built-in
    SQLite store, nothing committed to the file since, no tracer recording)
    is taken from it instead: no read, no bounded call (:func:`_known_ledger`).

    ``clock`` is this process's clock (UTC), read at the first check: only
    an erasure without a join record is judged by it (the module's
    docstring says why); a test can give a skewed one.
    """

    store: SessionStore
    timeout_s: float
    clock: Callable[[], datetime] = attrs.field(default=utc_now, kw_only=True, validator=_callable)

    def _ticket(self) -> Ticket:
        return Ticket(None, _OPERATION, self.timeout_s)

    async def _pending(self, ticket: Ticket, tenant: str) -> tuple[int | None, ErasureLedger]:
        key = pending_key(tenant)
        known = _known_ledger(ticket, self.store, key)
        if known is not None:
            return known
        try:
            return await load_ledger(ticket, self.store, key, _OPERATION)
        except AgentiumError:
            raise
        except Exception as exc:
            # A store's foreign exception reaches the host typed (its type only: no stored content).
            raise SessionStoreError(
                f"the erasure fence could not read the erasures under way ({type(exc).__name__}); "
                "nothing was written"
            ) from exc

    async def check(self, write: FencedWrite) -> FenceCheck:
        """Before the write: refuse (nothing written) if a covering erasure is pending; what was seen."""
        seen, pending = await self.look(write)
        if pending:
            raise write.refusal(pending[0], "nothing was written")
        return seen

    async def look(self, write: FencedWrite) -> tuple[FenceCheck, tuple[ErasureRecord, ...]]:
        """What :meth:`check` sees, refusing nothing: the check, and the covering erasures pending.

        A host's erasure reading (:mod:`.memory.erasure_reading`) keeps them, to judge later
        against the groups an extraction turns out to read.
        """
        at = self.clock()
        if not isinstance(at, datetime) or at.utcoffset() is None:
            # Compared with the tombstones' aware times after the write: refused before it instead.
            shown = "a naive datetime" if isinstance(at, datetime) else type(at).__name__
            raise InvalidArgumentError(
                f"the erasure fence's clock must return an aware datetime, got {shown}; nothing was written"
            )
        revision, ledger = await self._pending(self._ticket(), write.tenant)
        pending = tuple(record for record in ledger.records if _counts(write, record))
        return FenceCheck(self, write, revision, at), pending

    async def covering_since(self, seen: FenceCheck) -> ErasureRecord | None:
        """After the write: a covering erasure pending, or finished and joined since ``seen``; else ``None``.

        A finished one without a join record counts if it completed since
        ``seen.at`` less :data:`CLOCK_MARGIN_S`, by the two processes' clocks.
        The finished ones are read newest first, each scope's chain to its
        first entry that joined before ``seen`` (:func:`.erasure_index.joined_covering`):
        the cost does not grow with the erasures the write's scopes had.
        """
        ticket = self._ticket()
        write = seen.write
        revision, ledger = await self._pending(ticket, write.tenant)
        for record in ledger.records:
            if _counts(write, record):
                return record
        if revision == seen.revision:
            return None  # no erasure of the tenant began or ended meanwhile
        since = seen.at - timedelta(seconds=CLOCK_MARGIN_S)

        async def judge(record: ErasureRecord) -> bool | None:
            joined = await joined_since(ticket, self.store, record, seen.revision)
            if joined is not False and not _counts(write, record):
                return None  # an erasure of a kind that does not take this write: the walk goes on
            if joined is None and _when(record) >= since:
                return True  # no join record (an earlier version's): the clock counts it
            return joined

        try:
            # Each scope's chain newest first, to its first entry that joined before ``seen``: no erasure
            # listed before that one can have joined since (:func:`.erasure_index.joined_covering`).
            return await joined_covering(
                ticket, self.store, write.scopes, write.covers, judge, marks=_marks(write)
            )
        except SessionStoreError:
            # Past the read cap (an earlier version's chain: no join records, no marks), a damaged
            # mark, or a failed read: every covering erasure the scopes had, judged as before, rather
            # than leave the write standing unchecked (a store that keeps failing fails this too).
            pass
        covering = [r for r in await write.finished(ticket, self.store) if _counts(write, r)]
        # Newest first (by their own clocks: only the order of the reads depends on it).
        for record in sorted(covering, key=_when, reverse=True):
            if await judge(record):
                return record
        return None

    async def covering_after(self, write: FencedWrite, at: datetime) -> ErasureRecord | None:
        """After a write whose first reads missed this store: a covering erasure pending, or one since ``at``.

        The store began fencing the writer only after the write's first reads (a runtime built
        meanwhile around a shared memory manager), so no ledger revision was seen to compare
        join records with: a finished covering erasure counts by the clocks, as one without a
        join record does in :meth:`covering_since` (``at``: this process's clock at the first read).

        Each scope's chain is read newest first (:func:`.erasure_index.joined_covering`) and stops
        at its first entry, covering or not, that completed :data:`CLOCK_MARGIN_S` before that
        bound: every entry listed before it ran before it (a chain lists overlapping erasures in
        the order they ran), so by any clock within the margin of its own it completed before
        the bound too. It used to read every page of the write's chains, on every such write.
        """
        ticket = self._ticket()
        _, ledger = await self._pending(ticket, write.tenant)
        for record in ledger.records:
            if _counts(write, record):
                return record
        since = at - timedelta(seconds=CLOCK_MARGIN_S)
        settled = since - timedelta(seconds=CLOCK_MARGIN_S)

        async def judge(record: ErasureRecord) -> bool | None:
            when = _when(record)
            if when >= since:
                return True if _counts(write, record) else None  # counts (taken when it covers the write)
            return False if when < settled else None  # None: not counted, the walk goes on

        try:
            return await joined_covering(
                ticket, self.store, write.scopes, write.covers, judge, marks=_marks(write)
            )
        except SessionStoreError:
            pass  # past the read cap, a damaged mark, a failed read: every covering erasure, as before
        covering = [r for r in await write.finished(ticket, self.store) if _counts(write, r)]
        return next((r for r in sorted(covering, key=_when, reverse=True) if _when(r) >= since), None)


def _counts(write: FencedWrite, record: ErasureRecord) -> bool:
    """Whether erasure ``record`` takes ``write``: by its kind too when the write tells (``covers_record``).

    A memory fact's write (:mod:`.memory_fence`) counts a groups erasure of a group it cites only
    when it is a ``forget``'s: retention and an operator's groups erasure keep the facts
    derived from what they erase, and retention names every seq below its cutoff, those erased long
    before too.
    """
    by_record = getattr(write, "covers_record", None)
    return write.covers(record.target) if by_record is None else bool(by_record(record))


@attrs.frozen(slots=True)
class FenceCheck:
    """What :meth:`ErasureFence.check` saw: the write, the pending ledger's revision, when it was read.

    ``revision`` (``None``: no ledger stored) is what the join records of the
    erasures finished since are compared with; ``at`` (the fence's clock)
    only serves erasures without one.
    """

    fence: ErasureFence
    write: FencedWrite
    revision: int | None
    at: datetime
