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
import contextlib
import copy
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

import anyio

from .._errors import OperationCancelledError, OperationTimeoutError
from .._observe.spans import current_span_event
from .close_attempt import Attempt as _Attempt
from .close_waits import close_waits_for_current_task, current_task_or_none
from .loops import current_library

__all__ = ["CloseOnce"]

_log = logging.getLogger("agentium.adapters")

# How often a later caller looks whether the close's event loop was closed (or stopped) under it.
_LOOK_S = 0.1
# How often a caller about to run a cut-off close looks whether the loop that cut it off has finished,
# and a caller from a task the close started whether the close has come to wait for it.
_END_S = 0.01

# The CloseOnce objects whose close runs in this context (its task, and the tasks it starts): an
# aclose() from inside its own close would wait for itself (wait_s, then a timeout).
_INSIDE: ContextVar[frozenset[object]] = ContextVar("agentium_close_once_inside", default=frozenset())


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
    - a later or concurrent caller waits (shielded, at most ``wait_s`` in all)
      for that close to end;
    - every caller then sees the same outcome: nothing, or the exception the
      close raised, re-raised (each caller a copy of it: the adapter's type,
      message, attributes and cause, over the close's traceback; one object
      raised to several callers took each caller's frames and handled
      exception for the next to see). A close that did not finish (its task
      cancelled, by ``asyncio.run`` returning say, or a ``KeyboardInterrupt``
      in it) is :class:`OperationCancelledError` for the later callers, never
      "closed"; a caller no one cancelled whose close's task ended cancelled
      (a cancelled await in it) hears it too, never a bare cancellation out
      of ``aclose()``; the first caller hears a ``KeyboardInterrupt`` itself.
      When the first caller was cancelled natively before the close ended, its
      problem is logged at WARNING (the adapter's name and the exception's type,
      nothing else) and raised to the next caller.

    A close cut off before any of it ran (its task cancelled before its first
    step, as ``asyncio.run`` returning just after ``aclose()`` began does, or
    its loop closed first, or stopped and not running again within a tenth of
    a second) has released nothing: the next caller (one waiting for it, or a
    later ``aclose()``) awaits what ``close()`` returned itself, on its own
    loop, once the loop that cut it off has finished (a caller of another loop
    waits for that, shielded, within its bound: a loop's own values are then
    dropped, not scheduled onto it as it closes); the cut-off is logged at
    WARNING, once. ``close()`` is not called again (its synchronous part ran):
    this needs it to return a coroutine (as an ``async def`` does) or another
    awaitable that runs the close when awaited, which awaits nothing of the
    first caller's loop (a task or future made there in ``close()`` fails, or
    was cancelled with it, when run again). A future (``asyncio.Future``,
    work already under way on the loop that cut it off) cannot be awaited
    again: every later caller gets :class:`OperationCancelledError` saying so.

    An ``aclose()`` made from inside the close itself (in its task, or a task
    the close waits for: one it awaits, directly or through ``gather``,
    ``wait`` or ``shield``, or one of a task group it opened, or a worker
    thread it awaits through ``to_thread`` that runs the ``aclose()`` in
    ``anyio.run`` or ``from_thread.run``; in ``close()``'s synchronous part
    too: a wrapper it closes that closes this adapter again)
    returns at once instead of waiting for the close it is part of; the
    close's outcome goes to its callers. A task the close started and left
    running is not part of it: its ``aclose()`` waits for the close as any
    later caller does (never told "closed" while the close runs), and returns
    at once only once the close comes to wait for that task.

    A later caller's whole wait (for the first's close, for the loop that cut
    it off to finish, for a run again it makes or another caller makes) is
    bounded by one ``wait_s``. Once it runs out the caller gets
    :class:`OperationTimeoutError` (``operation`` ``"aclose"``), with a
    WARNING: the close is still running (``wait_s`` is shorter than the
    close's own bound; a run again goes on without the caller, its outcome
    to the log and the next caller), or, cut off, has not run again yet (the
    next caller runs it). So does a caller whose close began on a loop that
    stopped (not closed) with it pending, within a tenth of a second: the
    close may go on if that loop runs again. A close whose event loop was
    closed with it pending can never end: a later caller finds that out
    (within a tenth of a second) and it is an :class:`OperationCancelledError`
    for every later caller.
    """

    __slots__ = ("_attempt", "_claimed", "_lock", "_log", "_token", "_wait_s", "_what")

    def __init__(self, what: str, *, wait_s: float, logger: logging.Logger | None = None) -> None:
        self._what = what
        self._wait_s = wait_s
        self._log = logger if logger is not None else _log
        self._lock = threading.Lock()
        self._claimed = False
        self._attempt: _Attempt | None = None  # the close's latest run (a new one after a cut-off)
        self._token = object()  # this close in _INSIDE (not self: a context keeps what it holds)

    @property
    def claimed(self) -> bool:
        """True once a caller took on the close (it may still be running): refuse new calls then."""
        return self._claimed

    @property
    def ended(self) -> bool:
        """True once the close has ended, whatever its outcome.

        A close cut off before it began has ended too, and is False again while
        a later caller runs it: not a sign that nothing more will be closed.
        """
        attempt = self._attempt
        return attempt is not None and attempt.done.is_set()

    async def run(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close once (the first caller) or wait for that close (later ones); raise its problem if any."""
        inside = self._token in _INSIDE.get()
        library = current_library()
        # One bound for all this caller waits (the first run, the end of the loop that cut it off, a run
        # again): not one per phase. Only the first caller's own close is bounded by the close alone.
        deadline = time.monotonic() + self._wait_s
        while True:
            await self._let_its_loop_finish(deadline)
            attempt, start, part_of_it = self._claim(close, inside, library)
            if part_of_it:
                return  # the close waits for this very caller: waiting for it would wait for itself
            if start is not None:
                bound = None if start is close else deadline  # a run again is a later caller's
                if library == "asyncio":
                    await self._run_in_task(attempt, start, bound)
                elif bound is None:
                    await self._run_here(attempt, start)
                else:
                    await self._run_aside(attempt, start, bound)
            elif await self._wait(attempt, deadline, inside, library):
                return  # the close has come to wait for this caller (a task it started, then awaited)
            if not (attempt.unbegun() or attempt.again):
                break  # else cut off before it began meanwhile: run (or wait for) it again
        self._raise_problem(attempt)

    def _claim(
        self, close: Callable[[], Awaitable[None]], inside: bool, library: str
    ) -> tuple[_Attempt, Callable[[], Awaitable[None]] | None, bool]:
        """The run to wait for, or a new one and what it runs; and whether the close waits for this caller."""
        with self._lock:
            attempt = self._attempt
            start: Callable[[], Awaitable[None]] | None = close
            if attempt is not None:
                if inside and not attempt.done.is_set():
                    # Inside the close: its own task, or a task it waits for, returns at once; a task it
                    # started and left running waits for it as any caller does (it is not closed yet).
                    return attempt, None, close_waits_for_current_task(attempt.owner, library, attempt.outer)
                start = self._take_over(attempt)
                if start is None:
                    return attempt, None, False
            self._claimed = True
            self._attempt = _Attempt()
            return self._attempt, start, False

    async def _let_its_loop_finish(self, deadline: float) -> None:
        """Before running a close cut off before it began: wait for the loop that cut it off to finish.

        ``asyncio.run`` cuts the close off as it begins shutting its loop down,
        and may go on for a while (a job of its default executor): run at once
        from another thread, the close scheduled that loop's own values onto it,
        to be cut short as it closed, and waited its whole bound to report
        them unclosed. Once the loop has finished they are dropped instead. A
        caller on that very loop runs it at once; another waits until its
        deadline (shielded), then raises rather than run it onto that loop.
        """
        attempt = self._attempt
        if attempt is None or attempt.loop is None or not attempt.done.is_set() or not attempt.unbegun():
            return
        loop = attempt.loop
        if loop is None or loop is _running_asyncio_loop():
            return
        with anyio.move_on_after(_left(deadline), shield=True):
            # In slices: nothing says that a loop has closed. One stopped for good is not waited for.
            while loop.is_running() and not loop.is_closed():  # noqa: ASYNC110
                await anyio.sleep(_END_S)
        if loop.is_running() and not loop.is_closed():
            # Out of this caller's time: not run onto a loop that is closing, nor reported "closed".
            self._log.warning(
                "%s: a later aclose() stopped waiting for the event loop that cut its close off to finish; "
                "the close has not run again (the next aclose() runs it)",
                self._what,
            )
            raise OperationTimeoutError(
                f"{self._what}: its close was cut off before it began, and the event loop that cut it off "
                f"was still finishing after {self._wait_s}s; nothing was closed yet "
                "(the next aclose() runs it)",
                "aclose",
                self._wait_s,
            )

    @staticmethod
    def _take_over(attempt: _Attempt) -> Callable[[], Awaitable[None]] | None:
        """The close to run again (under the lock): what it returned, if it ended before any of it ran."""
        work = attempt.work
        if work is None or not attempt.done.is_set() or not attempt.unbegun():
            return None
        # This caller's now (a coroutine is awaited once). Marked run again before its coroutine is let
        # go: a caller that woke from the cut-off reads them without the lock (run()), in this order.
        attempt.again = True
        attempt.work = attempt.loop = None

        def start() -> Awaitable[None]:
            return work  # close() is not called again: its synchronous part ran already

        return start

    def _begin(self, attempt: _Attempt) -> bool:
        """Mark the close begun, unless it was ended as cut off (its old task, its loop run again)."""
        with self._lock:
            if attempt.done.is_set() or attempt.orphaning or attempt.again:
                return False  # the next caller runs it (or has): not this task of a loop that stopped
            attempt.began = True
            return True

    async def _run_here(self, attempt: _Attempt, close: Callable[[], Awaitable[None]]) -> None:
        """Trio: the close runs shielded in this task (no native cancellation passes the shield)."""
        mark = _INSIDE.set(_INSIDE.get() | {self._token})
        owner = attempt.owner = current_task_or_none("trio")
        # The caller's own nurseries, open before its close: a task the close starts in one is left running.
        attempt.outer = frozenset(id(nursery) for nursery in owner.child_nurseries)
        try:
            with anyio.CancelScope(shield=True):
                work = attempt.work = close()
                if self._begin(attempt):
                    await work
        except BaseException as exc:
            self._keep(attempt, exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: this caller hears it itself; later ones are told
        finally:
            _INSIDE.reset(mark)
            attempt.end()

    async def _run_aside(
        self, attempt: _Attempt, close: Callable[[], Awaitable[None]], deadline: float
    ) -> None:
        """Trio, a close run again by a later caller: in a system task, waited for until the deadline."""
        import trio

        work = attempt.work = close()  # what the cut-off close returned: nothing of it runs here
        left = False  # the caller stopped waiting: only the log (and the next caller) hear the problem

        async def closing() -> None:
            _INSIDE.set(_INSIDE.get() | {self._token})
            attempt.owner = trio.lowlevel.current_task()
            try:
                if self._begin(attempt):
                    await work
            except BaseException as exc:
                self._keep(attempt, exc)
                if left:
                    self._warn_unheard(attempt)
                if isinstance(exc, trio.Cancelled):
                    raise  # the run is ending: a system task ends cancelled, nothing else escapes it
            finally:
                attempt.end()

        trio.lowlevel.spawn_system_task(closing)
        with anyio.move_on_after(_left(deadline), shield=True):
            await attempt.done.wait()
        if not attempt.done.is_set():
            left = True  # one thread: the task has not ended (it would have set done)
            raise self._stop_waiting("ran its cut-off close again and stopped waiting for it")

    async def _run_in_task(
        self, attempt: _Attempt, close: Callable[[], Awaitable[None]], deadline: float | None
    ) -> None:
        """Asyncio: the close runs in a task of its own; a natively cancelled caller stops waiting only.

        A close run again by a later caller is waited for until its ``deadline``
        only; past it the caller stops waiting (the close goes on), as a
        cancelled caller does.
        """
        # Its synchronous part is the close too (as on trio): a task it starts is inside the close.
        mark = _INSIDE.set(_INSIDE.get() | {self._token})
        try:
            work = attempt.work = close()  # its synchronous part runs now, in the caller
        except BaseException as exc:
            self._keep(attempt, exc)
            attempt.end()  # ended: later callers must not wait for a close that never began
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            _INSIDE.reset(mark)  # the caller itself is not inside the close: it hears its outcome
        left = False  # the caller stopped waiting: only the log (and the next caller) hear the problem

        async def closing() -> None:
            _INSIDE.set(_INSIDE.get() | {self._token})  # this task's own context, and its children's
            try:
                if self._begin(attempt):
                    await work
            except BaseException as exc:
                # A cancellation too (asyncio.run returning cancels the tasks left, this one among
                # them): the close did not finish, and later callers must not be told it did.
                self._keep(attempt, exc)
                if left:
                    self._warn_unheard(attempt)
                if not isinstance(exc, Exception):
                    raise  # the task ends cancelled (or the interruption goes on to the loop)
            finally:
                attempt.task = None  # ended: a finished task (and its traceback) is not kept
                if left:
                    attempt.end()

        def never_began(task: asyncio.Task[None]) -> None:
            # Cancelled before its first step (asyncio.run returning as it was made): closing() never
            # ran, its handlers neither. Cut off all the same, never "closed"; the next caller runs it.
            if task.cancelled() and attempt.problem is None:
                self._keep(attempt, asyncio.CancelledError())
                if left:
                    self._warn_unheard(attempt)
            if left:
                attempt.task = None
                attempt.end()

        # Held here until it ends (asyncio keeps weak references), even once the caller let go.
        loop = asyncio.get_running_loop()
        attempt.task, attempt.loop = loop.create_task(closing()), loop
        task = attempt.owner = attempt.task
        task.add_done_callback(never_began)
        try:
            with anyio.move_on_after(_left(deadline), shield=True):
                await asyncio.shield(task)
        except BaseException as exc:
            if not (isinstance(exc, asyncio.CancelledError) and self._cancelled_on_its_own(task)):
                left = True  # one loop thread: the task has not ended yet, or has just now (below)
                if task.done():
                    if task.cancelled() and attempt.problem is None:
                        self._keep(attempt, asyncio.CancelledError())  # never began (see never_began)
                    if attempt.problem is not None:
                        # Before it is ended: a caller of another thread may run it again from then on,
                        # and the log would no longer see that it never began.
                        self._warn_unheard(attempt)
                    attempt.end()
                raise
            # Not this caller's cancellation but its close's, which it hears as every caller does (below).
            if attempt.problem is None:
                self._keep(attempt, asyncio.CancelledError())  # never began (see never_began)
        if not task.done():  # a run again, past this caller's deadline: the close goes on without it
            left = True
            raise self._stop_waiting("ran its cut-off close again and stopped waiting for it")
        # Ended here rather than in the task: the first caller goes on before the waiting callers wake.
        attempt.end()

    @staticmethod
    def _cancelled_on_its_own(task: asyncio.Task[None]) -> bool:
        """True when the close's task ended cancelled while this caller was not (a cancelled await in it).

        Then ``asyncio.shield`` raised its cancellation in this caller: a close that
        awaited something cancelled (a task of a loop ``asyncio.run`` ended, the
        first caller's, when this caller runs a cut-off close again) is its outcome
        (:class:`OperationCancelledError`), not a cancellation of a caller no one cancelled.
        """
        caller = asyncio.current_task()
        return task.done() and task.cancelled() and caller is not None and not caller.cancelling()

    async def _wait(self, attempt: _Attempt, deadline: float, inside: bool, library: str) -> bool:
        """A later caller: wait, shielded and until ``deadline``, for the first's close to end.

        True when this caller is a task the close started that the close has
        come to wait for (it returns at once then).
        """
        stalled = False
        # When this caller first saw the close's loop not running (not another's), and whether it ran since.
        stopped: list[tuple[float, list[bool]]] = []
        with anyio.move_on_after(_left(deadline), shield=True):
            # In slices: a close whose loop is closed (or stopped) under it never ends, nor says so.
            while not self._orphaned(attempt, stopped):
                if inside and close_waits_for_current_task(attempt.owner, library, attempt.outer):
                    return True
                if self._stalled(attempt, stopped):
                    stalled = True
                    break
                with anyio.move_on_after(_END_S if inside else _LOOK_S):
                    await attempt.done.wait()
                if attempt.done.is_set():
                    break
        if attempt.done.is_set() or self._orphaned(attempt, stopped):
            return False
        if stalled:
            raise self._stop_waiting(
                "stopped waiting for the first's close: its event loop stopped with it pending", waited=False
            )
        raise self._stop_waiting(f"stopped waiting for the first's close after {self._wait_s}s")

    def _stop_waiting(self, why: str, *, waited: bool = True) -> OperationTimeoutError:
        """A caller stops waiting while the close still runs: a WARNING, and its error (never "closed").

        ``waited``: the caller waited its whole ``wait_s`` (not when it found the close's loop stopped).
        """
        self._log.warning("%s: a later aclose() %s; it is still running", self._what, why)
        after = f" after {self._wait_s}s" if waited else ""
        return OperationTimeoutError(
            f"{self._what}: the first aclose()'s close was still running{after} "
            f"(this aclose() {why}); it may not have closed yet",
            "aclose",
            self._wait_s,
        )

    @staticmethod
    def _stopped_long(stopped: list[tuple[float, list[bool]]], loop: asyncio.AbstractEventLoop) -> bool:
        """True once this caller saw the close's loop not running twice, ``_LOOK_S`` apart, nor run between.

        Not between two of its runs: a look of another caller (long ago, the loop
        has run since) does not count, nor a loop run a pass at a time (a GUI
        host's ``stop()`` then ``run_forever()``): a callback put on it at the
        first look has run by the second.
        """
        if loop.is_running() or (stopped and stopped[0][1]):
            stopped.clear()
            return False
        if not stopped:
            ran: list[bool] = []
            with contextlib.suppress(RuntimeError):  # closed meanwhile: the caller finds it so
                loop.call_soon_threadsafe(ran.append, True)
            stopped.append((time.monotonic(), ran))
            return False
        return time.monotonic() - stopped[0][0] >= _LOOK_S

    def _stalled(self, attempt: _Attempt, stopped: list[tuple[float, list[bool]]]) -> bool:
        """True when the close began and its loop stopped (not closed): it may never go on."""
        task = attempt.task
        if task is None or task.done() or not attempt.began:
            return False
        loop = task.get_loop()
        return not loop.is_closed() and self._stopped_long(stopped, loop)

    def _orphaned(self, attempt: _Attempt, stopped: list[tuple[float, list[bool]]]) -> bool:
        """True once the close has ended, or can never run on its loop (then ended here, once).

        A loop closed without cancelling its tasks (``run_until_complete``, then
        ``close()``) never runs the close again: it is ended as cut off, for every
        caller (or, when none of it had run, run by the next caller). So is a
        close none of which ran whose loop stopped (and is not running): the
        next caller runs it rather than wait for a loop that may never run again.
        """
        if attempt.done.is_set():
            return True
        task = attempt.task
        if task is None or task.done():
            return False
        loop = task.get_loop()
        closed = loop.is_closed()
        if not closed and (attempt.began or not self._stopped_long(stopped, loop)):
            return False
        with self._lock:
            # Once, whichever caller (of whichever thread) finds it first: one outcome, one WARNING.
            if attempt.done.is_set():
                return True
            if attempt.orphaning or (attempt.began and not closed):
                return False  # another caller ends it now (its end wakes this one), or it began meanwhile
            attempt.orphaning = True
        how = "its event loop was closed" if closed else "its event loop stopped"
        attempt.task = None  # not run by this loop again: the close's task (and what it holds) is let go
        attempt.kind = how
        attempt.problem = OperationCancelledError(
            f"{self._what}: its close did not finish ({how} with the close pending); "
            "what it had not closed may still be open",
            "close interrupted",
        )
        attempt.trace = attempt.context = None
        if not attempt.began:
            self._warn_unheard(attempt)
        attempt.end()
        return True

    def _keep(self, attempt: _Attempt, exc: BaseException) -> None:
        """Keep the close's outcome for every caller (an interruption as an OperationCancelledError)."""
        if attempt.done.is_set():
            return  # ended already (a task of a closed loop, collected later): its outcome stands
        attempt.kind = type(exc).__name__  # the type only: the log names nothing else
        if isinstance(exc, Exception):
            attempt.problem, attempt.trace, attempt.context = exc, exc.__traceback__, exc.__context__
            return
        # Cancelled, or interrupted: what it had not closed stays open; no later caller is told "closed".
        attempt.problem = OperationCancelledError(
            f"{self._what}: its close did not finish ({type(exc).__name__}); "
            + (
                "it was cut off before it began, and what close() returned (not a coroutine, nor an "
                "awaitable never awaited: a future) cannot be awaited again; "
                if attempt.refused()
                else ""
            )
            + "what it had not closed may still be open",
            "close interrupted",
        )
        attempt.trace = attempt.context = None

    def _raise_problem(self, attempt: _Attempt) -> None:
        problem = attempt.problem
        if problem is not None:
            # Each caller its own copy: one object raised to several callers took each caller's handled
            # exception as its __context__ and each caller's frames in its traceback, for the next to see.
            raise self._copy(problem, attempt.context).with_traceback(attempt.trace)

    @staticmethod
    def _copy(problem: Exception, context: BaseException | None) -> Exception:
        """``problem`` again (type, arguments, attributes, cause, context), or itself if it will not copy."""
        try:
            twin = copy.copy(problem)
        except Exception:  # an __init__ that does not take its own args: the object itself, its context reset
            twin = problem
        if type(twin) is not type(problem):  # pragma: no cover - a __reduce__ of its own
            twin = problem
        if twin is not problem and isinstance(getattr(problem, "__notes__", None), list):
            twin.__notes__ = list(problem.__notes__)
        twin.__cause__, twin.__context__ = problem.__cause__, context
        twin.__suppress_context__ = problem.__suppress_context__
        return twin

    def _warn_unheard(self, attempt: _Attempt) -> None:
        """The close failed (or was cut off) after its caller stopped waiting: logged once, raised later."""
        with self._lock:
            if attempt.warned:
                return  # found by two callers (threads) at once: one WARNING for one cut-off
            attempt.warned = True
        kind = attempt.kind
        if attempt.unbegun():
            self._log.warning(
                "%s: the close was cut off before it began (%s); the next aclose() runs it",
                self._what,
                kind,
            )
        elif attempt.refused():
            self._log.warning(
                "%s: the close was cut off before it began (%s); what close() returned is not a coroutine "
                "and cannot be run again: the next aclose() raises it",
                self._what,
                kind,
            )
        else:
            self._log.warning(
                "%s: closing failed (%s) after the aclose() caller that started it stopped waiting; "
                "the next aclose() raises it",
                self._what,
                kind,
            )
        current_span_event("agentium.close.unheard", {"error.type": kind})


def _left(deadline: float | None) -> float:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), none below zero; unbounded for ``None``."""
    return math.inf if deadline is None else max(0.0, deadline - time.monotonic())


def _running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop running in this thread, or ``None`` (trio, or no loop)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
