"""The erasure fence for memory writes: no fact is kept in a scope an erasure takes.

Runs, appends and reads read the tenant's pending erasures before they load
a session (:mod:`.load`); a fenced memory manager does the same around each
``remember`` and ``correct``, in every process sharing the session store. A
fact an erasure covers (:meth:`EraseTarget.covers_fact`: its user or tenant,
or a session its provenance names) is refused with
:class:`~agentium_harness._errors.ErasureInProgressError`:

- **before the write** (:func:`fence_check`), when such an erasure is
  pending: nothing is written;
- **after the write** (:func:`fence_confirm`), when such an erasure began
  after that first read: it may have erased and verified the memory store
  before the write landed, and would then say ``complete`` with the fact
  still there. So the pending ledger is read again; a covering erasure in
  it, or — when the ledger changed meanwhile — one of the tenant's finished
  erasures that completed since the first read, makes the manager forget
  the fact it just wrote (content removed, as :meth:`forget` does) and
  refuse: the fact was not kept.

An erasure adds itself to ``pending`` before it erases anything, and leaves
it only after its tombstone is indexed; the ledger's revision changes at each
step. So either the second read sees the erasure (pending, or the ledger's
revision moved and its tombstone is indexed) or it began after that read,
once the fact was written, and erases the fact itself. Which finished
erasures are "since the first read" is told by their ``completed_at``
(another process's clock) against this process's clock at the first read,
less :data:`CLOCK_MARGIN_S` for clock skew: a covering erasure completed just
before a write that raced another erasure of the tenant refuses it too (try
again), never the other way round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import attrs

from .._errors import AgentiumError, ErasureInProgressError, MemoryFactNotFoundError, SessionStoreError
from .._ports.erasure import ErasureLedger, ErasureRecord, ErasureState
from .._ports.memory import GroupRef, MemoryAck, MemoryScope
from .._ports.sessions import SessionStore
from .erasure_index import finished_covering_fact
from .erasure_ledger import load_ledger, pending_key
from .lifecycle import Ticket

if TYPE_CHECKING:
    from .memory.manager import MemoryManager

__all__ = [
    "CLOCK_MARGIN_S",
    "ErasureFence",
    "FenceCheck",
    "fence_check",
    "fence_confirm",
    "fence_memory",
]

_log = logging.getLogger("agentium.engine.memory")

#: How far apart the clocks of two processes sharing the session store may be: a covering erasure
#: that completed this long before a write's first check still takes it back, if the ledger moved.
CLOCK_MARGIN_S: Final = 300.0
_OPERATION: Final = "erasure fence"


def _refusal(scope: MemoryScope, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
    where = f"({record.target.describe()}, erasure {record.erasure_id})"
    if record.state is ErasureState.COMPLETE:
        said = f"the memory of user {scope.user!r} was erased while the fact was written {where}"
    else:
        said = (
            f"the memory of user {scope.user!r} is being erased {where}; the fact is refused until "
            "the erasure completes (agentium erase --resume)"
        )
    return ErasureInProgressError(f"{said}; {outcome}", record.erasure_id)


@attrs.frozen(slots=True)
class ErasureFence:
    """Reads ``store``'s erasures around a memory write (one bounded read each, ``timeout_s``)."""

    store: SessionStore
    timeout_s: float

    def _ticket(self) -> Ticket:
        return Ticket(None, _OPERATION, self.timeout_s)

    async def _pending(self, ticket: Ticket, tenant: str) -> tuple[int | None, ErasureLedger]:
        try:
            return await load_ledger(ticket, self.store, pending_key(tenant), _OPERATION)
        except AgentiumError:
            raise
        except Exception as exc:
            # A store's foreign exception reaches the host typed (its type only: no stored content).
            raise SessionStoreError(
                f"the erasure fence could not read the erasures under way ({type(exc).__name__}); "
                "nothing was written"
            ) from exc

    async def check(self, scope: MemoryScope, provenance: Sequence[GroupRef]) -> FenceCheck:
        """Before the write: refuse (nothing written) if a covering erasure is pending; what was seen."""
        at = datetime.now(UTC)
        revision, ledger = await self._pending(self._ticket(), scope.tenant)
        for record in ledger.records:
            if record.target.covers_fact(scope, provenance):
                raise _refusal(scope, record, "nothing was written")
        return FenceCheck(self, scope, tuple(provenance), revision, at)

    async def covering_since(self, seen: FenceCheck) -> ErasureRecord | None:
        """After the write: a covering erasure pending now, or completed since ``seen``; ``None`` if none."""
        ticket = self._ticket()
        scope, provenance = seen.scope, seen.provenance
        revision, ledger = await self._pending(ticket, scope.tenant)
        for record in ledger.records:
            if record.target.covers_fact(scope, provenance):
                return record
        if revision == seen.revision:
            return None  # no erasure of the tenant began or ended meanwhile
        since = seen.at - timedelta(seconds=CLOCK_MARGIN_S)
        for record in await finished_covering_fact(ticket, self.store, scope, provenance):
            if (record.completed_at or record.started_at) >= since:
                return record
        return None


@attrs.frozen(slots=True)
class FenceCheck:
    """What :meth:`ErasureFence.check` saw: the pending ledger's revision and when it was read."""

    fence: ErasureFence
    scope: MemoryScope
    provenance: tuple[GroupRef, ...]
    revision: int | None
    at: datetime


def fence_memory(manager: MemoryManager, store: SessionStore, timeout_s: float) -> None:
    """Fence ``manager``'s writes with the erasures recorded in ``store`` (a fence it has stays).

    Used by the runtime, an :class:`~.memory.agent.Agent` given a session
    store, and ``agentium memory remember|correct``: the session store is
    where erasures are recorded, so a manager without one cannot be fenced.
    """
    if manager._erasure_fence is None:
        manager._erasure_fence = ErasureFence(store, timeout_s)


async def fence_check(
    fence: ErasureFence | None, scope: MemoryScope, provenance: Sequence[GroupRef]
) -> FenceCheck | None:
    """:meth:`ErasureFence.check`, or ``None`` for a manager without a fence."""
    return None if fence is None else await fence.check(scope, provenance)


async def fence_confirm(
    seen: FenceCheck | None, manager: MemoryManager, owner: MemoryScope, ack: MemoryAck
) -> MemoryAck:
    """After the store acknowledged ``ack``: take the fact back and refuse if an erasure took its scope.

    ``owner`` is the scope the write was made under (the manager's
    ``forget`` is asked with it: its hooks see the fact forgotten). If the
    second read fails, the write stands and the ack's notes say it was not
    checked again (a WARNING too).
    """
    if seen is None or ack.fact_id is None:
        return ack
    fact_id = ack.fact_id
    try:
        record = await seen.fence.covering_since(seen)
    except Exception as exc:  # the write stands: said in the ack, never a bare error after a commit
        _log.warning("memory write not confirmed against erasures: %s", type(exc).__name__)
        note = f"the write was not checked again against erasures under way ({type(exc).__name__})"
        return attrs.evolve(ack, notes=(*ack.notes, note))
    if record is None:
        return ack
    try:
        # The manager's own forget: the content goes and the fact is never injected again.
        await manager.forget(owner, fact_id)
    except MemoryFactNotFoundError:
        pass  # the erasure removed it already
    except AgentiumError as exc:
        _log.warning("a fact written during an erasure could not be taken back: %s", type(exc).__name__)
        raise _refusal(
            seen.scope,
            record,
            f"fact {fact_id} was written meanwhile and taking it back failed ({type(exc).__name__}): "
            "forget it (agentium memory forget)",
        ) from exc
    raise _refusal(seen.scope, record, f"fact {fact_id}, written meanwhile, was forgotten: it was not kept")
