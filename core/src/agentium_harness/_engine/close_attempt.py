"""One run of an adapter's close and its outcome (:class:`Attempt`), for :class:`~.close_once.CloseOnce`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from types import TracebackType

from .loops import ThreadSafeEvent

__all__ = ["Attempt"]


class Attempt:
    """One run of the close and its outcome, for the callers that took part in it."""

    __slots__ = (
        "again",
        "began",
        "context",
        "done",
        "kind",
        "loop",
        "orphaning",
        "outer",
        "owner",
        "problem",
        "task",
        "trace",
        "warned",
        "work",
    )

    def __init__(self) -> None:
        self.done = ThreadSafeEvent()
        self.problem: Exception | None = None  # what the close raised, for every caller
        self.trace: TracebackType | None = None  # its traceback as the close raised it
        self.context: BaseException | None = None  # its __context__ as the close raised it
        self.kind = ""  # the type of what ended the close (its error, a cancellation): for the log
        self.task: asyncio.Task[None] | None = None  # held: asyncio keeps weak references to tasks
        # What close() returned; kept once ended only while none of it ran (see unbegun).
        self.work: Awaitable[None] | None = None
        self.again = False  # cut off before it began, and run again since by another caller
        # Set (under CloseOnce's lock) as what close() returned is first awaited: a close taken over by
        # another caller, or ended as cut off, is not awaited by its old task if its loop runs again.
        self.began = False
        self.orphaning = False  # a caller is ending it as cut off by its loop (once, see _orphaned)
        self.warned = False  # its WARNING was logged (once, whichever thread finds the problem)
        self.owner: object | None = None  # the task the close runs in (see close_waits)
        self.outer: frozenset[int] = frozenset()  # ids of the trio nurseries it had open before the close
        # The asyncio loop of the close's task (None on trio), kept only while the close is to be run
        # again: not weakly, as an event loop class need not take weak references.
        self.loop: asyncio.AbstractEventLoop | None = None

    def unbegun(self) -> bool:
        """True while what close() returned has not been awaited: cut off then, another caller may run it.

        A coroutine, or an awaitable whose ``__await__`` was never called, runs
        anew when awaited; a future does not (it stands for work already
        under way, bound to the loop that made it): it is never run again.
        """
        work = self.work
        if work is None or self.began:
            return False
        if inspect.iscoroutine(work):
            return inspect.getcoroutinestate(work) == inspect.CORO_CREATED
        return inspect.isawaitable(work) and not asyncio.isfuture(work)

    def refused(self) -> bool:
        """True when it was cut off before it began and cannot run again (a future, not an awaitable)."""
        return not self.began and self.work is not None and not self.unbegun()

    def __del__(self) -> None:
        # A close no caller ever ran again goes with its CloseOnce: closed here, quietly. Left to the
        # garbage collector it said "coroutine ... was never awaited" at a random later moment; the
        # cut-off WARNING already said the close never began.
        work = self.work
        if inspect.iscoroutine(work) and inspect.getcoroutinestate(work) == inspect.CORO_CREATED:
            work.close()

    def end(self) -> None:
        """Ended: a close that began is let go (its frames); one that never began is kept to run again."""
        if not self.unbegun():
            self.work = self.loop = None
        self.done.set()
