"""One close for many callers (:class:`CloseOnce`): the first runs it, the others wait for it to end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from agentium_harness.plugin_api import ThreadSafeEvent

__all__ = ["CloseOnce"]

T = TypeVar("T")


class CloseOnce:
    """Which caller of ``aclose()`` closes, and an end the others wait for (any task, thread or loop).

    :meth:`begin` is an atomic check-and-set across threads: exactly one caller
    is told to close. The others :meth:`wait` for its :meth:`end`, bounded:
    returning at once, they told their callers the clients were closed while
    the first still closed them. The first runs its close through :meth:`run`,
    which ends it when the close's work has ended, not when its caller stopped waiting.
    """

    __slots__ = ("_begun", "_done", "_lock", "_task")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._begun = False
        self._done = ThreadSafeEvent()
        self._task: Any = None  # the close's own asyncio task, held until it ends (see run)

    def begin(self) -> bool:
        """True for the one caller that closes; False for every later one."""
        with self._lock:
            first, self._begun = not self._begun, True
        return first

    def end(self) -> None:
        """The close is over (whatever its outcome): wake every caller waiting in :meth:`wait`."""
        self._done.set()

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run the close ``work`` shielded, then :meth:`end`; its result or error is the caller's.

        On asyncio the work runs in a task of its own: a native ``Task.cancel()`` of the
        caller passes anyio's shield, and cut the work short (the clients it had collected
        were then never closed) and ended the close at once (a second ``aclose()`` returned
        while the first's closes still ran). The caller stops waiting; the work goes on, and
        ends the close when it has ended.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: its cancellations respect the shield
            loop = None
        if loop is None:
            try:
                with anyio.CancelScope(shield=True):
                    result = await work()
            finally:
                self.end()
            return result
        # Whether the caller stopped waiting: then the task ends the close; else the caller does, so
        # that it returns before the callers waiting in wait() do.
        left = False

        async def closing() -> T:
            try:
                return await work()
            finally:
                self._task = None  # ended: a finished task (and its traceback) is not kept
                if left:
                    self.end()

        self._task = task = loop.create_task(closing())
        try:
            with anyio.CancelScope(shield=True):
                result = await asyncio.shield(task)
        except BaseException:
            left = True  # one loop thread: the task's finally has run already, or sees this
            if task.done():
                self.end()
            raise
        self.end()
        return result

    async def wait(self, timeout_s: float) -> None:
        """Wait, shielded, for :meth:`end`, at most ``timeout_s`` (the close's own bound)."""
        with anyio.move_on_after(timeout_s, shield=True):
            await self._done.wait()
