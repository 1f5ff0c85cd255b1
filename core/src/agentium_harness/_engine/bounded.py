"""Calls the engine can walk away from: every adapter call and close returns by its deadline (R10, R12).

A cancel scope only stops work that reaches a checkpoint. An adapter blocked
in a worker thread that does not abandon on cancellation
(``anyio.to_thread.run_sync(...)`` without ``abandon_on_cancel``) reaches none
until the thread returns, so a scope around it would hold the run for as long
as the thread runs and then hand back its late result as if it were on time.

So the engine never awaits an adapter in its own task (but calls that wait for
nothing except a thread hop, whose hop keeps these bounds itself:
:mod:`.inline_call`). :func:`bounded` runs
the call as a separate task of the event loop (an asyncio task, or a trio
system task through :func:`spawn`) and waits for its completion up to the deadline.
Past it, the call's own cancel scope is cancelled and the engine waits a short
grace (:data:`ABANDON_GRACE_S`) for it to unwind, which a cooperative adapter
does at once, and a few loop iterations past it (a stall of the machine must
not use the grace up before the call's task ran its unwinding at all). A call
still running after that is *abandoned*: the engine stops
waiting, the call's eventual result or error is discarded (nothing it returns
late reaches the engine, which only reads what the waiter received), and the
caller learns it from :class:`Overrun` so it can report it. A caller that is
itself cancelled (shutdown) cancels the call the same way and leaves after the
same grace.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from asyncio import get_running_loop
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from .._errors import ContractViolationError, OperationCancelledError
from .._observe.spans import error_type, internal_span
from .._text import error_text
from .loops import ThreadSafeEvent, cancel_scope, current_library

__all__ = [
    "ABANDON_GRACE_S",
    "SETTLE_ITERATIONS",
    "Overrun",
    "bounded",
    "caller_waker",
    "loop_deadlines",
    "spawn",
]

T = TypeVar("T")

#: How long a call past its deadline gets to unwind after its cancellation before
#: the engine abandons it. Cooperative adapters unwind at their next checkpoint,
#: well within it; only a call blocked where cancellation cannot reach waits it out.
ABANDON_GRACE_S = 0.1
#: How many loop iterations past the grace a cancelled call's task gets to end before it is judged
#: abandoned (see ``_Call.stop``): enough for a cooperative unwinding held up by a stall of the
#: machine (a cleanup with a few awaits, a task group's children), nothing for a call blocked in a
#: thread, which no iteration moves. Iterations, not time: a stall does not use them up.
_SETTLE_ITERATIONS = 8
#: How long the release of a late result (``on_late``) may take.
LATE_CLEANUP_S = 5.0

# Detached asyncio tasks are kept referenced until they end (the loop holds only weak references).
_TASKS: set[Any] = set()

_log = logging.getLogger("agentium.engine")


def spawn(run: Callable[[], Awaitable[None]]) -> Any:
    """Start ``run`` as a task of the running event loop, detached from the caller's task.

    Returns the asyncio task (``None`` on trio). ``run`` must not raise
    anything but a cancellation: on trio an exception escaping a system task
    ends the whole run.
    """
    library = current_library()
    if library == "asyncio":
        task: Any = get_running_loop().create_task(run())  # type: ignore[arg-type]
        _keep(task)
        return task
    if library == "trio":
        import trio

        # A system task starts with an empty context; give it the caller's, as asyncio does.
        trio.lowlevel.spawn_system_task(run, context=contextvars.copy_context())
        return None
    raise RuntimeError(f"the engine needs asyncio or trio, not {library}")  # pragma: no cover


class _Deadlines:
    """The deadlines of one asyncio loop's bounded calls, behind one timer.

    A timer per call (``call_later`` and its ``cancel``) was a sixth of a
    call's cost, and nearly every call ends long before its deadline. Here a
    waiter is noted with its deadline; one timer, armed for the earliest,
    wakes every waiter whose deadline has come (at the same moment
    ``call_later`` would: asyncio runs a timer once it is within the clock's
    resolution) and re-arms for the next. A waiter that ended is only
    forgotten, which costs a dict removal.

    The instance does not keep its timer: the timer's callback refers to the
    instance, and a reference back would make a cycle that outlives the
    loop's close (which drops its timers) whenever the instance is no longer
    this thread's (the thread ran another loop since, or ended, before the
    loop was closed), left to the cycle collector. A timer replaced by an
    earlier one is not cancelled either: it fires for nothing (its time is no
    longer ``_at``) and ends there.
    """

    __slots__ = ("_at", "_waiters", "loop")

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self._waiters: dict[Any, float] = {}
        self._at = math.inf  # when the timer that counts is due (``inf``: none armed)

    def add(self, waiter: Any, when: float) -> None:
        """Wake ``waiter`` (``_wake``) at loop time ``when`` unless it is discarded first."""
        self._waiters[waiter] = when
        if when < self._at:
            self._at = when
            self.loop.call_at(when, self._fire, when)

    def discard(self, waiter: Any) -> None:
        """Forget ``waiter`` (its call ended, or its caller left)."""
        self._waiters.pop(waiter, None)

    def _fire(self, at: float) -> None:
        if at != self._at:
            return  # replaced by an earlier timer, which armed the one that counts after it ran
        self._at = math.inf
        now = self.loop.time() + _CLOCK_RESOLUTION
        due = [waiter for waiter, when in self._waiters.items() if when <= now]
        for waiter in due:
            del self._waiters[waiter]
            _wake(waiter)
        if self._waiters:
            self._at = min(self._waiters.values())
            self.loop.call_at(self._at, self._fire, self._at)


# What asyncio allows a timer to run early by (it uses the same figure).
_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
# The deadlines of the loop this thread last ran a bounded call on (one loop runs per thread at a time;
# a second instance for a loop is harmless: each works alone, with its own timer). One let go of here
# is freed by reference counting once its loop's pending timers, which refer to it, are gone.
_LOCAL = threading.local()


def _deadlines(loop: Any) -> _Deadlines:
    deadlines: _Deadlines | None = getattr(_LOCAL, "deadlines", None)
    if deadlines is None or deadlines.loop is not loop:
        deadlines = _LOCAL.deadlines = _Deadlines(loop)
    return deadlines


# The bounded call whose task runs the current code (set in the call's own task, so its context only).
_RUNNING: contextvars.ContextVar[_Call[Any] | None] = contextvars.ContextVar(
    "agentium_bounded_call", default=None
)


def caller_waker() -> Callable[[], None] | None:
    """In a bounded call's task: what wakes its caller early, for code that resumes this task from a callback.

    A worker thread's result resumes the call's task in the loop iteration
    after the callback that delivers it; the call then ends and wakes its
    caller, which resumes one iteration later still. The callback may wake the
    caller too, right after resuming the call's task: both then run in the
    same iteration, the call's task first, and the caller finds the call
    ended (if it has more to do, the caller waits again, under the same
    deadline). ``None`` outside a bounded call.
    """
    call = _RUNNING.get()
    return None if call is None else call.wake_caller


def _keep(task: Any) -> None:
    """Hold a detached asyncio task until it ends."""
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


class Overrun(Exception):
    """The work did not finish by its deadline. ``abandoned``: it had not stopped after the grace either."""

    def __init__(self, timeout_s: float, abandoned: bool) -> None:
        super().__init__(f"did not finish within {timeout_s}s")
        self.timeout_s = timeout_s
        self.abandoned = abandoned


class _Yield:
    """``await _YIELD`` gives the event loop one iteration (a bare ``yield``, as ``asyncio.sleep(0)``)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


_YIELD = _Yield()


def _wake(waiter: Any) -> None:
    """Resolve an asyncio waiter future once (the call ended, or its deadline came)."""
    if not waiter.done():
        waiter.set_result(None)


class _Call(Generic[T]):
    __slots__ = (
        "_done",
        "end_event",
        "ended",
        "error",
        "finished",
        "left",
        "on_late",
        "scope",
        "value",
        "waiter",
    )

    def __init__(self, on_late: Callable[[T], Awaitable[None]] | None, scope: anyio.CancelScope) -> None:
        #: Whether the call ended (returned, raised or was cancelled).
        self.ended = False
        # The event of ``done``, made only when someone waits for it: most calls end in time
        # and are never waited for but through ``waiter`` (asyncio) or ``done`` (trio).
        self._done: anyio.Event | None = None
        #: The call's own cancel scope, entered in its task: cancelling it is level-triggered and
        #: respects shielded scopes in adapter code, as a plain ``Task.cancel()`` would not.
        self.scope = scope
        self.finished = False
        self.left = False  # the waiter walked away: whatever comes now is late
        self.on_late = on_late
        self.value: T | None = None
        #: What the call raised: an Exception, or an interrupt or exit (see ``run``).
        self.error: BaseException | None = None
        #: On asyncio, the future the caller awaits (see ``_wait``); ``None`` on trio.
        self.waiter: Any = None
        #: Made only when the call is abandoned: set when it ends, awaitable from any loop (erasure).
        self.end_event: ThreadSafeEvent | None = None

    @property
    def done(self) -> anyio.Event:
        """Set when the call ends (already set if it has)."""
        if self._done is None:
            self._done = anyio.Event()
            if self.ended:
                self._done.set()
        return self._done

    async def run(self, work: Callable[[], Awaitable[T]]) -> None:
        _RUNNING.set(self)  # in this task's own context: what ``caller_waker`` finds
        try:
            with self.scope:
                self.value = await work()
                self.finished = True
        except Exception as exc:  # handed to the waiter, who re-raises it (or drops it if it left)
            self.error = exc
        except BaseException as exc:
            # Not an Exception: escaping this task, it would end a trio run (TrioInternalError) or be
            # logged by asyncio with its text, and the caller would read a cancellation. A
            # cancellation, or a coroutine being closed, goes on as it came; an interrupt or an
            # exit is re-raised in the caller's task; anything else is the adapter breaking its
            # contract (it may raise exceptions, not BaseExceptions), reported as such.
            if isinstance(exc, GeneratorExit | anyio.get_cancelled_exc_class()):
                raise
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                if self.left:
                    raise  # nobody is waiting to re-raise it: it must not be lost
                self.error = exc
            else:
                self.error = ContractViolationError(
                    f"{error_text(exc)} was raised, a BaseException that is no Exception: "
                    "an adapter (or a tool) may raise only exceptions"
                )
        finally:
            self.ended = True
            if self._done is not None:
                self._done.set()
            if self.end_event is not None:
                self.end_event.set()
            if self.waiter is not None:
                _wake(self.waiter)
        if self.finished and self.left and self.on_late is not None:
            await self._discard(self.on_late, self.value)  # type: ignore[arg-type]  # set when finished

    def wake_caller(self) -> None:
        """Wake the waiting caller now (asyncio): it checks whether the call ended, and waits again if not."""
        if self.waiter is not None:
            _wake(self.waiter)

    @staticmethod
    async def _discard(on_late: Callable[[T], Awaitable[None]], value: T) -> None:
        """Release a result that arrived after the waiter left (close a late-opened session), bounded.

        Nobody is left to raise to, so each release says its own outcomes,
        one cut short by :data:`LATE_CLEANUP_S` too (a WARNING and a span
        event: a recall session's late close, a late write's take-back). What
        escapes one all the same is an engine fault: a WARNING here on
        ``agentium.engine``, with the error's type only (its message may
        quote content), not silence, and a span of its own (the call's has
        ended): ``agentium.late_release``, failed with that type, with the
        event ``agentium.late_release.failed``.
        """
        with anyio.CancelScope(shield=True):
            try:
                await bounded(lambda: on_late(value), LATE_CLEANUP_S)
            except Overrun:
                pass  # the release was cut short, and said so itself before its cancellation went on
            except Exception as exc:
                kind = error_type(exc)
                _log.warning("the release of a late result failed: %s", kind)
                # Under the telemetry of the operation that made the call (its context was copied).
                with internal_span("agentium.late_release") as span:
                    span.event("agentium.late_release.failed", {"error.type": kind})
                    span.fail(kind, exc)

    def result(self) -> T:
        error = self.error
        if error is not None:
            # Handed over, not kept: the call (held by the caller's frame, which the error's
            # traceback holds) would otherwise tie the error, its frames and their objects
            # into a cycle that outlives the call.
            self.error = None
            try:
                raise error
            finally:
                del error
        if not self.finished:
            # Cancelled from outside the engine (the event loop shutting down).
            raise OperationCancelledError("the call was cancelled before it finished", "cancelled")
        return self.value  # type: ignore[return-value]  # set when finished

    def abandon(self, on_abandon: Callable[[ThreadSafeEvent], None] | None) -> None:
        """The waiter walks away for good: hand ``on_abandon`` an event set when the call ends."""
        self.left = True
        if on_abandon is not None:
            # Made here, on the call's own loop and thread, so it cannot miss the end of run().
            self.end_event = ThreadSafeEvent()
            if self.ended:
                self.end_event.set()
            on_abandon(self.end_event)

    async def stop(self, grace_s: float) -> bool:
        """Cancel the call and wait up to ``grace_s`` for it to unwind; True if it stopped.

        Past the grace by the clock, the call's task gets up to
        :data:`_SETTLE_ITERATIONS` loop iterations more before it is judged
        still running. A stall of the machine longer than the grace (the loop
        not running at all) can use the grace up before the call's task, its
        cancellation delivered and ready to run, ran once: without them, a
        call that unwound a moment later was reported abandoned. A call
        blocked where cancellation cannot reach (a worker thread) is not
        ready to run, and is still judged at once.
        """
        self.scope.cancel()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace_s):
                await self.done.wait()
            for _ in range(_SETTLE_ITERATIONS):
                if self.ended:
                    break
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return self.ended


async def bounded(
    work: Callable[[], Awaitable[T]],
    timeout_s: float,
    *,
    on_deadline: Callable[[], None] | None = None,
    on_late: Callable[[T], Awaitable[None]] | None = None,
    grace_s: float = ABANDON_GRACE_S,
    on_abandon: Callable[[ThreadSafeEvent], None] | None = None,
) -> T:
    """Run ``work()`` in its own task and return its result if it finishes within ``timeout_s``.

    Past the deadline ``on_deadline`` runs first (set the call's cancel signal,
    so code in a worker thread sees it), then the call is cancelled and given
    ``grace_s`` to unwind; :class:`Overrun` is raised either way, with
    ``abandoned=True`` when the call was still running (its late result is
    discarded, after ``on_late`` released it if given). An exception ``work``
    raises in time is re-raised here. ``on_abandon`` receives the event set
    when an abandoned call finally ends (whether its caller timed out or was
    cancelled): erasure waits for such late calls of its scope.
    """
    library = current_library()
    call: _Call[T] = _Call(on_late, cancel_scope(library))
    task: Any = None
    if library == "asyncio":
        # The call's task, and a plain future it resolves when it ends (see ``run``), woken at the
        # deadline by the loop's ``_Deadlines``: the same as ``move_on_after`` around
        # ``call.done.wait()``, at a fraction of the cost. A cancellation of the caller (its cancel
        # scope, shutdown) still raises out of the await, because it cancels the future this task
        # waits on. The task is referenced from here while the caller waits, and from ``_TASKS``
        # only if the caller leaves before it ended (a done-callback on every call would cost a
        # loop iteration's handle).
        #
        # First the caller yields for one loop iteration: the call's first step was scheduled before
        # the caller's resumption, so a call that ends without waiting for anything (a cached read,
        # a scripted provider) has ended when the caller resumes, in the same iteration, with no
        # future or deadline to set up and tear down. Only a call still running then is waited for
        # as above, its deadline counted from the start.
        loop = get_running_loop()
        until = loop.time() + timeout_s
        task = loop.create_task(call.run(work))
        if not call.ended:  # it may have run already (an eager task factory)
            try:
                await _YIELD
            except BaseException:
                await _leave(call, task, grace_s, on_abandon)
                raise
        if not call.ended:
            deadlines = _deadlines(loop)
            while True:
                call.waiter = waiter = loop.create_future()
                deadlines.add(waiter, until)
                try:
                    await waiter
                except BaseException:
                    deadlines.discard(waiter)
                    await _leave(call, task, grace_s, on_abandon)
                    raise
                deadlines.discard(waiter)
                # Woken by the call's end, by its deadline, or early by a worker thread's result
                # (see ``caller_waker``): only a call that has more to do before its deadline is
                # waited for again.
                if call.ended or loop.time() + _CLOCK_RESOLUTION >= until:
                    break
    else:
        spawn(lambda: call.run(work))
        try:
            with anyio.move_on_after(timeout_s):
                await call.done.wait()
        except BaseException:
            await _leave(call, None, grace_s, on_abandon)
            raise
    if call.ended:
        return call.result()
    if on_deadline is not None:
        on_deadline()
    stopped = await call.stop(grace_s)
    if not stopped:
        call.abandon(on_abandon)
        if task is not None:
            _keep(task)
    elif call.finished and on_late is not None:
        # It finished during the grace: past its deadline all the same, so released, not used.
        call.left = True
        spawn(lambda: call._discard(on_late, call.value))  # type: ignore[arg-type]
    raise Overrun(timeout_s, abandoned=not stopped)


#: For :mod:`.inline_call`, which keeps the same bounds: the settle iterations and a loop's deadlines.
SETTLE_ITERATIONS = _SETTLE_ITERATIONS
loop_deadlines = _deadlines


async def _leave(
    call: _Call[Any], task: Any, grace_s: float, on_abandon: Callable[[ThreadSafeEvent], None] | None
) -> None:
    """The caller was cancelled (shutdown): stop the call, wait no longer than the grace."""
    if not call.ended and not await call.stop(grace_s):
        call.abandon(on_abandon)
        if task is not None:
            _keep(task)
