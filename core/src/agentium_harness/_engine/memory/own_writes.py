"""An :class:`~.agent.Agent`'s own ``remember`` calls in flight: admitted while open, awaited by its close.

The agent's close used to tear down what it owns (its session store, its
manager and the manager's memory store) while a ``remember`` of its own was
still writing: the write ran into a closed store, or its second erasure read
into a closed session store. Now each call is admitted under the agent's
state lock (so a close that begins afterwards sees it, and one begun before
refuses it), and the close waits for those in flight, up to its
``close_timeout_s``, before it withdraws its erasure fence and closes
anything. One still running past that bound does not hold the close up (a
close is bounded), and the agent's fence stays while it runs. One still
running as the close goes on to close what the agent owns (after the
drain; :meth:`OwnWrites.leave`) is said: a WARNING on ``agentium.engine``
and the event :data:`UNFINISHED_EVENT` on a short :data:`CLOSE_SPAN` span
(counts only), and the call's acknowledgment, when it comes, carries a
note that it was not confirmed (:func:`noted`). One that ended before then
met open stores, and is not said unconfirmed.
"""

from __future__ import annotations

import logging
import threading

import anyio
import attrs

from ..._observe import spans as observe
from ..._observe.settings import Resolved
from ..._ports.memory import AckStatus, MemoryAck
from ..loops import ThreadSafeEvent

__all__ = ["CLOSE_SPAN", "UNFINISHED_EVENT", "OwnWrite", "OwnWrites", "noted"]

_log = logging.getLogger("agentium.engine")

#: The span a close opens only when its own writes still run as it closes what it owns, and its event.
CLOSE_SPAN = "agentium.agent.close"
UNFINISHED_EVENT = "agentium.agent.remember_unfinished"


@attrs.define(slots=True, eq=False)
class OwnWrite:
    """One ``remember`` in flight; ``left_behind`` is the close's bound once a close tore down under it."""

    left_behind: float | None = None


class OwnWrites:
    """The agent's own writes in flight, from any thread or loop; a close waits for them to end."""

    __slots__ = ("_calls", "_idle", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: set[OwnWrite] = set()
        self._idle = ThreadSafeEvent()
        self._idle.set()

    def admit(self) -> OwnWrite:
        """A new call in flight. Called under the agent's state lock, once it checked the agent admits."""
        call = OwnWrite()
        with self._lock:
            if not self._calls:
                self._idle = ThreadSafeEvent()
            self._calls.add(call)
        return call

    def finish(self, call: OwnWrite) -> float | None:
        """``call`` ended: the bound of a close that tore down under it, else ``None``.

        Under the lock the close marks the calls it tears down under with: a
        call is either finished before then (not counted, no note) or counted
        by the close (and noted), never neither.
        """
        with self._lock:
            self._calls.discard(call)
            if not self._calls:
                self._idle.set()
            return call.left_behind

    def busy(self) -> bool:
        """Whether a call is still in flight (the agent's erasure fence stays while one is)."""
        return bool(self._calls)

    async def settle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the calls in flight to end (at once when none is)."""
        with self._lock:
            idle = self._idle
        if idle.is_set():
            return
        with anyio.move_on_after(timeout_s):
            await idle.wait()

    def leave(self, timeout_s: float, telemetry: Resolved, owner: object) -> int:
        """Mark and report the calls still in flight as the close tears down; how many.

        Called only once the close goes on to close what the agent owns (when
        it owns anything): a call that ended before then (during the drain,
        or before a failed close was retried) met open stores and is not said
        unconfirmed. Nothing is opened or logged when none is in flight. A
        call marked by an earlier attempt (a teardown retried) is not
        reported again.
        """
        with self._lock:
            left = [call for call in self._calls if call.left_behind is None]
            for call in left:
                call.left_behind = timeout_s
        if left:
            # Counts only: a fact's text or scope is content, and the host did not opt in here.
            _log.warning(
                "agent close went on with %d remember call(s) of its own still running after %ss: what "
                "the agent owns is closed under them, and their acknowledgments say they are not confirmed",
                len(left),
                timeout_s,
            )
            # A span of its own: the close has none, and "the span current" would be the host's,
            # through the global provider, whatever the manager's telemetry says.
            with observe.using(telemetry, owner), observe.internal_span(CLOSE_SPAN) as span:
                span.event(UNFINISHED_EVENT, {"agentium.agent.remember.running": len(left)})
        return len(left)


def noted(ack: MemoryAck, left_behind: float | None) -> MemoryAck:
    """``ack``, with a note that it is not confirmed when a close tore down under its call.

    A rejected write wrote nothing: nothing to confirm.
    """
    if left_behind is None or ack.status is AckStatus.REJECTED:
        return ack
    note = (
        f"not confirmed: the agent's close stopped waiting for this write after its {left_behind}s "
        "bound and closed what the agent owns while it ran"
    )
    return attrs.evolve(ack, notes=(*ack.notes, note))
