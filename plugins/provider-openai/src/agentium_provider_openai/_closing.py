"""One close for many callers (:class:`CloseOnce`): the first runs it, the others wait for it to end."""

from __future__ import annotations

import threading

import anyio

from agentium_harness.plugin_api import ThreadSafeEvent

__all__ = ["CloseOnce"]


class CloseOnce:
    """Which caller of ``aclose()`` closes, and an end the others wait for (any task, thread or loop).

    :meth:`begin` is an atomic check-and-set across threads: exactly one caller
    is told to close. The others :meth:`wait` for its :meth:`end`, bounded:
    returning at once, they told their callers the clients were closed while
    the first still closed them.
    """

    __slots__ = ("_begun", "_done", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._begun = False
        self._done = ThreadSafeEvent()

    def begin(self) -> bool:
        """True for the one caller that closes; False for every later one."""
        with self._lock:
            first, self._begun = not self._begun, True
        return first

    def end(self) -> None:
        """The close is over (whatever its outcome): wake every caller waiting in :meth:`wait`."""
        self._done.set()

    async def wait(self, timeout_s: float) -> None:
        """Wait, shielded, for :meth:`end`, at most ``timeout_s`` (the close's own bound)."""
        with anyio.move_on_after(timeout_s, shield=True):
            await self._done.wait()
