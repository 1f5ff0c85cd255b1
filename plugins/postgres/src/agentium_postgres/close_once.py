"""Close once: of several ``aclose()`` calls, one closes and the others wait for its end (private).

``aclose()`` may be called from several tasks, threads or event loops. Who
closes is decided under a :class:`threading.Lock`; a later call waits for the
first's close to end (shielded, and bounded by the close's own bound) instead
of returning at once, which told its caller the link was closed while the first
still closed the pools. The close runs in a task of its own: a native
``Task.cancel()`` of the first caller passes anyio's shield, and would cut the
close short (pools left open for good) and end it for the waiting callers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import anyio

from agentium_harness.plugin_api import ThreadSafeEvent


class CloseOnce:
    """Runs a close exactly once; later callers wait (within ``wait_s``) for it to end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed = False
        self._done = ThreadSafeEvent()
        self._task: asyncio.Task[list[str]] | None = None  # held: asyncio keeps weak references

    @property
    def claimed(self) -> bool:
        """True once a caller took on the close (it may still be running)."""
        return self._claimed

    def claim(self) -> bool:
        """Mark the close taken; True for the first caller only, who must then call :meth:`run`."""
        with self._lock:
            first, self._claimed = not self._claimed, True
        return first

    async def run(self, close: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """Run ``close`` in a task of its own and return its problems (the first caller only)."""

        async def closing() -> list[str]:
            try:
                return await close()
            finally:
                self._task = None  # ended: its traceback is not kept for the link's life
                self._done.set()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Not asyncio (trio: the adapters refuse its calls, but aclose() must still close): no
            # native Task.cancel() passes anyio's shield there, so the close runs in this task.
            with anyio.CancelScope(shield=True):
                return await closing()
        self._task = loop.create_task(closing())
        problems: list[str] = []
        with anyio.CancelScope(shield=True):
            problems = await asyncio.shield(self._task)
        return problems

    async def wait(self, wait_s: float) -> None:
        """Wait (shielded, at most ``wait_s``) for the first caller's close to end."""
        with anyio.move_on_after(wait_s, shield=True):
            await self._done.wait()
