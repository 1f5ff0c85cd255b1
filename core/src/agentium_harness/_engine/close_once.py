"""One close for many ``aclose()`` callers, with one outcome for them all (:class:`CloseOnce`).

Adapters' ``aclose()`` may be called from several tasks, threads or event
loops, and a caller may be cancelled while it closes. Four plugins each kept a
copy of this logic, and each lost something: the problem of a close whose first
caller was natively cancelled (``Task.cancel()`` passes anyio's shield on
asyncio), or the first's problem for a second caller, which returned as if all
had closed. One helper, exported by ``plugin_api``, keeps them together.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType

import anyio

from .._errors import OperationCancelledError, OperationTimeoutError
from .._observe.spans import current_span_event
from .loops import ThreadSafeEvent, current_library

__all__ = ["CloseOnce"]

_log = logging.getLogger("agentium.adapters")

# How often a later caller looks whether the close's event loop was closed under it.
_LOOK_S = 0.1


class CloseOnce:
    """Runs an adapter's close once; every ``aclose()`` caller, first or later, hears its outcome.

    ``what`` names the adapter in log lines (``"OpenAI provider"``): no ids, no
    URLs, no content. ``wait_s`` bounds how long a later caller waits for the
    first's close (a little more than the close's own bound: a caller that
    stops waiting as the close fails is not told of the failure). ``logger`` is
    the adapter's (``agentium.adapters`` by default).

    ``await once.run(close)`` in ``aclose()``:

    - the first caller (decided under a thread lock, across tasks, threads and
      loops) calls ``close()`` at once, so its synchronous part runs before
      ``run`` first yields (mark the adapter closed there, or check
      :attr:`claimed`), and awaits what it returns: on asyncio in a task of its
      own, so a native ``Task.cancel()`` of the caller stops the caller's wait,
      not the close; on trio shielded in the caller's task (no asyncio task:
      trio's cancellations respect the shield);
    - a later or concurrent caller waits (shielded, at most ``wait_s``) for that
      close to end;
    - every caller then sees the same outcome: nothing, or the exception the
      close raised, re-raised (each caller a copy of it: the adapter's type,
      message, attributes and cause, over the close's traceback; one object
      raised to several callers took each caller's frames and handled
      exception for the next to see). A close that did not finish (its task
      cancelled, by ``asyncio.run`` returning say, or a ``KeyboardInterrupt``
      in it) is :class:`OperationCancelledError` for the later callers, never
      "closed"; the first caller hears a ``KeyboardInterrupt`` itself.
      When the first caller was cancelled natively before the close ended, its
      problem is logged at WARNING (the adapter's name and the exception's type,
      nothing else) and raised to the next caller.

    A later caller whose wait ran out gets :class:`OperationTimeoutError`
    (``operation`` ``"aclose"``), with a WARNING: the close is still running
    (``wait_s`` is shorter than the close's own bound). A close
    whose event loop was closed with it pending can never end: a later caller
    finds that out (within a tenth of a second) and it is an
    :class:`OperationCancelledError` for every later caller.
    """

    __slots__ = (
        "_claimed",
        "_context",
        "_done",
        "_kind",
        "_lock",
        "_log",
        "_problem",
        "_task",
        "_trace",
        "_wait_s",
        "_what",
    )

    def __init__(self, what: str, *, wait_s: float, logger: logging.Logger | None = None) -> None:
        self._what = what
        self._wait_s = wait_s
        self._log = logger if logger is not None else _log
        self._lock = threading.Lock()
        self._claimed = False
        self._done = ThreadSafeEvent()
        self._problem: Exception | None = None  # what the close raised, for every caller
        self._trace: TracebackType | None = None  # its traceback as the close raised it
        self._context: BaseException | None = None  # its __context__ as the close raised it
        self._kind = ""  # the type of what ended the close (its error, a cancellation): for the log
        self._task: asyncio.Task[None] | None = None  # held: asyncio keeps weak references to tasks

    @property
    def claimed(self) -> bool:
        """True once a caller took on the close (it may still be running): refuse new calls then."""
        return self._claimed

    @property
    def ended(self) -> bool:
        """True once the close has ended, whatever its outcome."""
        return self._done.is_set()

    async def run(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close once (the first caller) or wait for that close (later ones); raise its problem if any."""
        with self._lock:
            first, self._claimed = not self._claimed, True
        if not first:
            await self._wait()
        elif current_library() == "asyncio":
            await self._run_in_task(close)
        else:
            await self._run_here(close)
        self._raise_problem()

    async def _run_here(self, close: Callable[[], Awaitable[None]]) -> None:
        """Trio: the close runs shielded in this task (no native cancellation passes the shield)."""
        try:
            with anyio.CancelScope(shield=True):
                await close()
        except BaseException as exc:
            self._keep(exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: this caller hears it itself; later ones are told
        finally:
            self._done.set()

    async def _run_in_task(self, close: Callable[[], Awaitable[None]]) -> None:
        """Asyncio: the close runs in a task of its own; a natively cancelled caller stops waiting only."""
        try:
            work = close()  # its synchronous part runs now, in the caller
        except BaseException as exc:
            self._keep(exc)
            self._done.set()  # ended: later callers must not wait for a close that never began
            if not isinstance(exc, Exception):
                raise
            return
        left = False  # the caller stopped waiting: only the log (and the next caller) hear the problem

        async def closing() -> None:
            try:
                await work
            except BaseException as exc:
                # A cancellation too (asyncio.run returning cancels the tasks left, this one among
                # them): the close did not finish, and later callers must not be told it did.
                self._keep(exc)
                if left:
                    self._warn_unheard()
                if not isinstance(exc, Exception):
                    raise  # the task ends cancelled (or the interruption goes on to the loop)
            finally:
                self._task = None  # ended: a finished task (and its traceback) is not kept
                if left:
                    self._done.set()

        def never_began(task: asyncio.Task[None]) -> None:
            # Cancelled before its first step (asyncio.run returning as it was made): closing() never
            # ran, its handlers neither. Cut off all the same, never "closed".
            if task.cancelled() and self._problem is None:
                self._keep(asyncio.CancelledError())
                if left:
                    self._warn_unheard()
            if left:
                self._task = None
                self._done.set()

        # Held here until it ends (asyncio keeps weak references), even once the caller let go.
        self._task = task = asyncio.get_running_loop().create_task(closing())
        task.add_done_callback(never_began)
        try:
            with anyio.CancelScope(shield=True):
                await asyncio.shield(task)
        except BaseException:
            left = True  # one loop thread: the task has not ended yet, or has just now (below)
            if task.done():
                if task.cancelled() and self._problem is None:
                    self._keep(asyncio.CancelledError())  # never began (see never_began)
                self._done.set()
                if self._problem is not None:
                    self._warn_unheard()
            raise
        # Ended here rather than in the task: the first caller goes on before the waiting callers wake.
        self._done.set()

    async def _wait(self) -> None:
        """A later caller: wait, shielded and within ``wait_s``, for the first's close to end."""
        with anyio.move_on_after(self._wait_s, shield=True):
            # In slices: a close whose loop is closed under it never ends, nor says so (see _orphaned).
            while not self._orphaned():
                with anyio.move_on_after(_LOOK_S):
                    await self._done.wait()
                if self._done.is_set():
                    break
        if not self._done.is_set() and not self._orphaned():
            self._log.warning(
                "%s: a later aclose() stopped waiting for the first's close after %ss; it is still running",
                self._what,
                self._wait_s,
            )
            # Not "closed": the close still runs (its outcome goes to the first caller, or the log).
            raise OperationTimeoutError(
                f"{self._what}: the first aclose()'s close was still running after {self._wait_s}s; "
                "it may not have closed yet",
                "aclose",
                self._wait_s,
            )

    def _orphaned(self) -> bool:
        """True once the close has ended, or its task's loop was closed with it pending (then ended here).

        A loop closed without cancelling its tasks (``run_until_complete``, then
        ``close()``) never runs the close again: it is ended as cut off, for every caller.
        """
        task = self._task
        if self._done.is_set():
            return True
        if task is None or not task.get_loop().is_closed() or task.done():
            return False
        self._task = None  # never to run again: the close's task (and what it holds) is let go
        self._kind = "its event loop was closed"
        self._problem = OperationCancelledError(
            f"{self._what}: its close did not finish (its event loop was closed with the close pending); "
            "what it had not closed may still be open",
            "close interrupted",
        )
        self._trace = self._context = None
        self._done.set()
        return True

    def _keep(self, exc: BaseException) -> None:
        """Keep the close's outcome for every caller (an interruption as an OperationCancelledError)."""
        if self._done.is_set():
            return  # ended already (a task of a closed loop, collected later): its outcome stands
        self._kind = type(exc).__name__  # the type only: the log names nothing else
        if isinstance(exc, Exception):
            self._problem, self._trace, self._context = exc, exc.__traceback__, exc.__context__
            return
        # Cancelled, or interrupted: what it had not closed stays open; no later caller is told "closed".
        self._problem = OperationCancelledError(
            f"{self._what}: its close did not finish ({type(exc).__name__}); "
            "what it had not closed may still be open",
            "close interrupted",
        )
        self._trace = self._context = None

    def _raise_problem(self) -> None:
        problem = self._problem
        if problem is not None:
            # Each caller its own copy: one object raised to several callers took each caller's handled
            # exception as its __context__ and each caller's frames in its traceback, for the next to see.
            raise self._copy(problem).with_traceback(self._trace)

    def _copy(self, problem: Exception) -> Exception:
        """``problem`` again (type, arguments, attributes, cause, context), or itself if it will not copy."""
        try:
            twin = copy.copy(problem)
        except Exception:  # an __init__ that does not take its own args: the object itself, its context reset
            twin = problem
        if type(twin) is not type(problem):  # pragma: no cover - a __reduce__ of its own
            twin = problem
        if twin is not problem and isinstance(getattr(problem, "__notes__", None), list):
            twin.__notes__ = list(problem.__notes__)
        twin.__cause__, twin.__context__ = problem.__cause__, self._context
        twin.__suppress_context__ = problem.__suppress_context__
        return twin

    def _warn_unheard(self) -> None:
        """The close failed (or was cut off) after its caller was cancelled: logged, then raised later."""
        kind = self._kind
        self._log.warning(
            "%s: closing failed (%s) after the aclose() caller that started it was cancelled; "
            "the next aclose() raises it",
            self._what,
            kind,
        )
        current_span_event("agentium.close.unheard", {"error.type": kind})
