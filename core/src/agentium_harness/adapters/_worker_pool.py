"""The worker threads of ThreadBoundAdapter calls on asyncio: daemons, waited for at exit only up to a bound.

A :class:`concurrent.futures.ThreadPoolExecutor` joins its threads at
interpreter exit without a limit, so one adapter call that never returns (a
sync client stuck on a network read, abandoned by its caller at its deadline)
would keep the process from ever exiting. These threads are daemons instead,
and a hook run at the start of interpreter exit (before non-daemon threads are
joined and before :mod:`atexit` handlers) waits for the calls still in flight
for at most :func:`exit_timeout` seconds — long enough for a SQLite write to
finish cleanly — then lets the process exit without them, logging how many were
left (a WARNING on ``agentium.engine.lifecycle``, with no call's content).

Like a ``ThreadPoolExecutor``, the pool grows a thread only when no idle one
is free, up to its limit, and an idle worker has no frame of Agentium code on
its stack: it waits in C code (``deque`` draining ``map`` over the queue), so
the contract suite's leak check does not count it as a running call.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from .._errors import InvalidArgumentError
from .._plugins.deadline import check_timeout

__all__ = ["DEFAULT_EXIT_TIMEOUT_S", "ENV_EXIT_TIMEOUT", "WorkerPool", "exit_timeout"]

#: How long interpreter exit waits, by default, for adapter calls still running in worker threads.
DEFAULT_EXIT_TIMEOUT_S = 10.0
#: The environment variable that sets that bound, in seconds (read when the process exits).
ENV_EXIT_TIMEOUT = "AGENTIUM_ADAPTER_EXIT_TIMEOUT"

_log = logging.getLogger("agentium.engine.lifecycle")

_Item = tuple["Job", Callable[[], "Callable[[], object] | None"]]

# A job's states, changed only under its pool's lock.
_PENDING, _RUNNING, _DONE, _CANCELLED = 0, 1, 2, 3


class Job:
    """One submitted call: whether it started, ended or was cancelled before it started.

    What ``_hop`` needs of a :class:`concurrent.futures.Future` (``cancel``,
    ``done``, and a bounded wait for its end), without one: a future's
    condition variable, made on every call, and its locked state changes were
    a measurable part of a call's hand-over on both threads. The state changes
    under the pool's lock, which the worker takes at the end of each call anyway.
    """

    __slots__ = ("_ended", "_pool", "state")

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool
        self.state = _PENDING
        self._ended: threading.Event | None = None  # made only when someone waits for the end

    def cancel(self) -> bool:
        """Cancel the call unless its thread started it; True if it will never run."""
        with self._pool._lock:
            if self.state == _PENDING:
                self.state = _CANCELLED
            return self.state == _CANCELLED

    def done(self) -> bool:
        """True once the call ended, or was cancelled before it started."""
        return self.state >= _DONE

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for the call to end (a worker thread's wait); True if it did."""
        with self._pool._lock:
            if self.state >= _DONE:
                return True
            if self._ended is None:
                self._ended = threading.Event()
            ended = self._ended
        return ended.wait(timeout)


def exit_timeout() -> float:
    """The exit bound :data:`ENV_EXIT_TIMEOUT` sets, else :data:`DEFAULT_EXIT_TIMEOUT_S`.

    An invalid value is logged and the default used: the process is exiting,
    so there is nobody left to raise to.
    """
    raw = os.environ.get(ENV_EXIT_TIMEOUT, "")
    if not raw.strip():
        return DEFAULT_EXIT_TIMEOUT_S
    try:
        return check_timeout(float(raw), ENV_EXIT_TIMEOUT)
    except (ValueError, InvalidArgumentError):
        _log.warning(
            "%s must be a number of seconds in (0, 86400], got %r; using %gs",
            ENV_EXIT_TIMEOUT,
            raw,
            DEFAULT_EXIT_TIMEOUT_S,
        )
        return DEFAULT_EXIT_TIMEOUT_S


class WorkerPool:
    """Daemon worker threads grown on demand up to ``limit``; at exit, in-flight calls get a bounded wait."""

    def __init__(self, limit: int, name_prefix: str) -> None:
        self._limit = limit
        self._prefix = name_prefix
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        # Workers free for a new call, each counted once when it finished a call (under the lock):
        # what a semaphore released by each worker would count, without its Python-level condition.
        self._idle = 0
        self._pending = 0  # submitted calls not ended yet
        self._shut = False

    def submit(self, call: Callable[[], Callable[[], object] | None]) -> Job:
        """Run ``call`` in a worker thread; the job says when it has ended (``call`` must not raise).

        What ``call`` returns, if not ``None``, is called once the pool has
        noted the call's end: the caller's wake-up goes last, so the woken
        caller does not wait for this thread's bookkeeping to let go of the GIL.
        """
        job = Job(self)
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot start an adapter call after interpreter shutdown began")
            self._pending += 1
            self._queue.put((job, call))
            # A free worker takes it; else a new thread, as long as the limit allows.
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._limit:
                worker = threading.Thread(
                    # The loop is C code: an idle worker's stack holds no Agentium frame.
                    target=deque,
                    args=(map(self._run, iter(self._queue.get, None)), 0),
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                worker.start()
                self._threads.append(worker)
        return job

    def _run(self, item: _Item) -> None:
        job, call = item
        then: Callable[[], object] | None = None
        with self._lock:
            started = job.state == _PENDING  # a call cancelled before it started never runs
            if started:
                job.state = _RUNNING
        try:
            if started:
                try:
                    then = call()
                except BaseException:  # noqa: S110 - nothing may end the worker's loop (call must not raise)
                    pass
        finally:
            with self._lock:
                if started:
                    job.state = _DONE
                if job._ended is not None:
                    job._ended.set()
                self._pending -= 1
                self._idle += 1
                if self._shut:
                    self._ended.notify_all()
        if then is not None:
            try:
                then()
            except BaseException:  # noqa: S110 - as for the call: nothing may end the worker's loop
                pass

    def at_exit(self) -> None:
        """Stop idle workers; wait for calls in flight up to :func:`exit_timeout`, then leave them."""
        bound = exit_timeout()
        deadline = time.monotonic() + bound
        with self._lock:
            self._shut = True
            for _ in self._threads:
                self._queue.put(None)  # each worker ends once it reaches one
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ended.wait(left)
            still = self._pending
        if still:
            _log.warning(
                "interpreter exit: %d adapter call(s) still running in worker threads after %gs (%s); "
                "exiting without them",
                still,
                bound,
                ENV_EXIT_TIMEOUT,
            )


def register_at_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` when the interpreter starts exiting, before non-daemon threads are joined."""
    register = getattr(threading, "_register_atexit", None)  # what concurrent.futures uses
    if register is None:  # pragma: no cover - every supported Python has it
        import atexit

        atexit.register(hook)
        return
    register(hook)
