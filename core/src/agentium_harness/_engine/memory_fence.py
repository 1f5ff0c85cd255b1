"""The erasure fence for memory writes: no fact is remembered or corrected into a scope being erased.

Runs, appends and reads read the tenant's pending erasures before they load
a session (:mod:`.load`); the runtime's memory manager does the same before
it writes a fact, in every process sharing the session store: a fact an
erasure under way covers (:meth:`EraseTarget.covers_fact`: its user or
tenant, or a session its provenance names) is refused with
:class:`~agentium_harness._errors.ErasureInProgressError` and nothing is
written. Without it, a fact remembered in another process after the
erasure's memory step and verification survived an erasure that says
``complete``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from .._errors import ErasureInProgressError
from .._ports.memory import GroupRef, MemoryScope
from .._ports.sessions import SessionStore
from .erasure_ledger import pending_records
from .lifecycle import Ticket

__all__ = ["MemoryFence", "memory_fence"]

#: ``fence(scope, provenance)``: raises :class:`ErasureInProgressError` if the write must not happen.
MemoryFence = Callable[[MemoryScope, Sequence[GroupRef]], Awaitable[None]]


def memory_fence(store: SessionStore, timeout_s: float) -> MemoryFence:
    """The fence reading ``store``'s pending erasures (one bounded read per write, ``timeout_s``)."""

    async def fence(scope: MemoryScope, provenance: Sequence[GroupRef]) -> None:
        ticket = Ticket(None, "erasure fence", timeout_s)
        for record in await pending_records(ticket, store, scope.tenant, "erasure fence"):
            if record.target.covers_fact(scope, provenance):
                raise ErasureInProgressError(
                    f"the memory of user {scope.user!r} is being erased ({record.target.describe()}, "
                    f"erasure {record.erasure_id}); the fact is refused until the erasure completes "
                    "(agentium erase --resume); nothing was written",
                    record.erasure_id,
                )

    return fence
