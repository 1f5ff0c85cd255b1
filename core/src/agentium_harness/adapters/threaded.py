"""A base for adapters over blocking clients: one lazily opened connection used from worker threads.

The SQLite adapters are built on :class:`ThreadBoundAdapter`; any adapter
whose backend client blocks (boto3 for S3 or DynamoDB, a database driver
without async support, a file-system API) can reuse it instead of
re-implementing the same care:

- **Lazy connect.** Building the adapter does no I/O (as
  :class:`~agentium_harness._plugins.spec.AdapterSpec` requires). The first call
  runs :meth:`ThreadBoundAdapter.open_connection` in its worker thread; a
  failure is retried by the next call.
- **One call at a time, from any loop.** Calls run in a worker thread (on
  asyncio a process-wide pool, handed over with about half the cost of
  :func:`anyio.to_thread.run_sync`, which serves other loops) behind a ``CapacityLimiter(1)`` of the
  calling event loop (one per loop: an anyio limiter belongs to its loop, so
  one adapter object serves threads that each run their own loop, and
  successive ``anyio.run`` calls; waiting for it is bounded by the deadline),
  and inside the thread under a ``threading.Lock`` with the deadline as its
  timeout, so the connection is never used by two threads at once — across
  loops too, and even when a cancelled caller abandoned a call whose thread is
  still running.
- **Cancellation.** The :class:`~agentium_harness._ports.OpContext` is checked
  before the call starts and again in the worker thread (time may pass
  waiting for the previous call); a refused call raises
  :class:`~agentium_harness._errors.OperationCancelledError` and touches
  nothing. :meth:`ThreadBoundAdapter.call_guard` lets a backend stop work in
  progress (SQLite installs a progress handler there). A cancelled caller
  waits at most ``cancel_grace_s`` for its thread to stop (nothing at all with
  ``abandon_on_cancel``), then abandons it: a blocked client never holds its
  caller past that.
- **Typed errors.** Exceptions of the classes in ``backend_errors`` become the
  port's error family (``storage_error``), or ``OperationCancelledError`` when
  the context had expired meanwhile. Agentium's own errors pass through.
- **Bounded close.** :meth:`ThreadBoundAdapter.aclose` is shielded from the
  caller's cancellation, idempotent, and waits at most ``close_timeout_s`` for
  a call still in its thread; past that it raises ``storage_error`` and the
  connection is closed by that call's thread as soon as it returns (calling
  ``aclose`` again waits again).
- **Bounded exit.** On asyncio the worker threads are daemons: at interpreter
  exit calls still running get at most ``AGENTIUM_ADAPTER_EXIT_TIMEOUT``
  seconds (10 by default) to end, then the process exits without them and
  logs a WARNING with their number (see ``_worker_pool``). On trio they run
  in trio's worker threads, daemons too.

An S3 archive, for example, would look like this (boto3 calls block and
cannot be interrupted, so a cancelled caller should not wait for them)::

    class S3Archive(ThreadBoundAdapter["S3Client"], HistoryArchive):
        capabilities = ArchiveCapabilities(durable=True, idempotent_append=True)
        storage_error = ArchiveError
        adapter_name = "s3 archive"
        backend_errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
        abandon_on_cancel = True  # a stuck HTTP call must not hold the caller

        def __init__(self, config: S3Config) -> None:
            super().__init__()
            self._config = config

        def open_connection(self) -> S3Client:
            # Runs in a worker thread on first use; credentials come from the
            # host's environment, never from the config file.
            return boto3.client("s3", region_name=self._config.region)

        def close_connection(self, client: S3Client) -> None:
            client.close()

        async def append(self, key, groups, ctx):
            body = [(g.seq, g.canonical_bytes()) for g in groups]  # encode on the loop
            return await self.run(ctx, "archive append", lambda s3: self._put_all(s3, key, body, ctx))

Inside ``work`` call ``ctx.raise_if_expired(operation)`` between backend
steps, so a long batch stops at the next step once the deadline passes.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from .._engine.bounded import caller_waker
from .._engine.inline_call import inline_call
from .._engine.loops import PerLoop, current_library
from .._errors import AgentiumError, OperationCancelledError
from .._ports import OpContext
from .._ports.recall_args import checked_ctx
from ._worker_pool import WorkerPool, register_at_exit

__all__ = ["ThreadBoundAdapter", "host_task_cancelled"]

ConnT = TypeVar("ConnT")
T = TypeVar("T")


#: Worker threads of the asyncio hop (see :func:`_hop`): as many as anyio's default thread limiter.
_WORKERS = 40
# The pool, made on first use. A child forked after the pool was used has none of its threads, so
# it forgets the pool (and the lock, which a thread of the parent may have held) and makes its own.
# Its threads are daemons, waited for at exit only up to a bound (see ``_worker_pool``).
_executor: WorkerPool | None = None
_executor_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # no fork, and no hook, on Windows
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _at_exit() -> None:
    # The pool of this process, if it made one: a forked child's is not its parent's.
    pool = _executor
    if pool is not None:
        pool.at_exit()


register_at_exit(_at_exit)

# In a worker thread of the asyncio hop: the call it runs (whether its caller stopped waiting).
_running = threading.local()


class _Borrower:
    """What holds an adapter's limiter token for one call (only its identity matters)."""

    __slots__ = ()


class _Hop:
    """One call handed to a worker thread on asyncio; ``cancelled`` once its caller stopped waiting.

    ``waiter``: what the thread's outcome resolves, read on the loop when it
    arrives (an inline bounded call swaps it once it waits only for the end).
    """

    __slots__ = ("cancelled", "waiter")

    def __init__(self, waiter: Any) -> None:
        self.cancelled = False
        self.waiter = waiter


def _resolve(hop: _Hop, value: Any, error: BaseException | None, wake: Callable[[], None] | None) -> None:
    """On the caller's loop: hand a worker thread's outcome to the caller, unless it stopped waiting.

    ``wake`` (:func:`~agentium_harness._engine.bounded.caller_waker`) then
    wakes the engine waiting for the bounded call that made this one, in the
    same loop iteration as the call's own task: one iteration less from the
    thread's end to the engine's resumption.
    """
    waiter = hop.waiter
    if waiter.done():
        return
    if error is None:
        waiter.set_result(value)
    else:
        waiter.set_exception(error)
    if wake is not None:
        wake()


def _stop_iteration_error(exc: StopIteration) -> RuntimeError:
    """What the caller gets for a call that raised StopIteration: the RuntimeError trio's hop raises.

    An asyncio future refuses StopIteration (``set_exception`` raises
    TypeError in the loop's callback), which would leave the caller waiting
    for an outcome that never comes.
    """
    error = RuntimeError("coroutine raised StopIteration")
    error.__cause__ = exc
    return error


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    hop: _Hop,
    value: Any,
    error: BaseException | None,
    wake: Callable[[], None] | None,
) -> None:
    """In the worker thread, last: hand the call's outcome to the caller's loop (see :func:`_resolve`)."""
    try:
        loop.call_soon_threadsafe(_resolve, hop, value, error, wake)
    except RuntimeError:  # the loop has closed: nobody is left waiting
        pass


def _workers() -> WorkerPool:
    global _executor  # one pool per process, made on first use
    made = _executor
    if made is not None:
        return made
    with _executor_lock:
        if _executor is None:
            _executor = WorkerPool(_WORKERS, "agentium-adapter")
        return _executor


def host_task_cancelled() -> bool:
    """In a worker thread: True if the task waiting for this thread has been cancelled."""
    hop: _Hop | None = getattr(_running, "hop", None)
    if hop is not None:
        return hop.cancelled
    try:
        anyio.from_thread.check_cancelled()
    except BaseException:  # the backend's Cancelled class is not an Exception on every backend
        return True
    return False


class ThreadBoundAdapter(Generic[ConnT]):
    """Lazy-connect, one-thread-at-a-time base for adapters over a blocking client ``ConnT``.

    Subclasses implement :meth:`open_connection` (and usually
    :meth:`close_connection`), set the class attributes below, and run every
    backend call through :meth:`run`. Call ``super().__init__()`` from the
    subclass's ``__init__``.
    """

    #: Error class for backend failures and refused calls; pick your port's
    #: family (``ArchiveError``, ``SessionStoreError`` or a subclass).
    storage_error: ClassVar[type[AgentiumError]] = AgentiumError
    #: Short name used in messages ("sqlite archive", "s3 archive").
    adapter_name: ClassVar[str] = "adapter"
    #: The client library's exception classes, turned into ``storage_error``.
    backend_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    #: True for clients whose calls cannot be interrupted (boto3): a cancelled
    #: caller returns at once and the thread's result is discarded. The
    #: connection stays locked until that thread returns, so the next call
    #: waits for it (within its own deadline). False (the default) makes a
    #: cancelled caller wait for the thread to stop — up to ``cancel_grace_s``,
    #: then it is abandoned the same way — which suits backends that stop
    #: promptly through :meth:`call_guard` (SQLite rolls back first, so the
    #: caller learns the outcome).
    abandon_on_cancel: ClassVar[bool] = False
    #: With ``abandon_on_cancel`` False: how long a cancelled caller waits for
    #: its thread to stop before abandoning it.
    cancel_grace_s: ClassVar[float] = 1.0
    #: How long :meth:`aclose` waits for a call still running in its thread.
    close_timeout_s: ClassVar[float] = 10.0

    def __init__(self) -> None:
        self._conn: ConnT | None = None
        self._closed = False
        # One limiter per event loop (an anyio limiter belongs to the loop that uses it): it keeps a
        # loop's callers waiting on the loop, not in worker threads. Across loops the lock below orders them.
        self._limiters: PerLoop[anyio.CapacityLimiter] = PerLoop(lambda: anyio.CapacityLimiter(1))
        # Held by the thread using the connection, so an abandoned call still
        # excludes the next one (from any loop) and close waits for it.
        self._conn_lock = threading.Lock()

    # -- what subclasses provide ----------------------------------------------------------------

    def open_connection(self) -> ConnT:
        """Open the backend client. Runs in a worker thread on the first call (and after a failed open)."""
        raise NotImplementedError(f"{type(self).__name__} must implement open_connection()")

    def close_connection(self, conn: ConnT) -> None:
        """Release ``conn``. Runs in a worker thread, never while a call uses it. Default: nothing."""

    @contextmanager
    def call_guard(self, conn: ConnT, ctx: OpContext) -> Iterator[None]:
        """Wrap one call's work in the worker thread (install interrupts, per-call timeouts).

        The default does nothing. Override to let the backend stop work when
        ``ctx`` expires or :func:`host_task_cancelled` turns true.
        """
        yield

    def failure_message(self, operation: str, exc: BaseException) -> str:
        """The message of the ``storage_error`` raised for a backend exception ``exc``."""
        return f"{self.adapter_name}: {operation} failed: {exc}"

    # -- state ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called; later calls are refused."""
        return self._closed

    def refuse_if_closed(self, operation: str) -> None:
        """Raise the adapter's storage error if it is closed (its sessions call it before each step)."""
        if self._closed:
            raise self.storage_error(f"{self.adapter_name}: {operation} refused: the adapter is closed")

    def _connect(self) -> ConnT:
        """The connection, opened on first use (in the calling worker thread)."""
        if self._conn is None:
            self._conn = self.open_connection()
        return self._conn

    # -- running work ---------------------------------------------------------------------------

    async def run(self, ctx: OpContext, operation: str, work: Callable[[ConnT], T]) -> T:
        """Run ``work(conn)`` in a worker thread, one call at a time, honouring ``ctx``.

        :raises OperationCancelledError: ``ctx`` was cancelled or past its
            deadline before the work started (nothing was done), or expired
            while a backend error interrupted it.
        :raises storage_error: the adapter is closed, or the backend raised
            one of ``backend_errors``.
        :raises InvalidArgumentError: ``ctx`` is not an :class:`OpContext`.
        """
        checked_ctx(ctx, operation).raise_if_expired(operation)
        self.refuse_if_closed(operation)
        # The limiter is taken here, not by run_sync, so waiting for it is
        # bounded by the deadline and an abandoned call releases its token
        # when its caller leaves (the lock in the thread still orders them).
        limiter = self._limiters.get()
        # The token is borrowed for this call, not for the calling task (``acquire_nowait``'s borrower):
        # the same exclusion (every call runs in a task of its own, see ``bounded``), without the two
        # ``current_task()`` lookups, a Python function on 3.11.
        borrower = _Borrower()
        try:
            # Free: take it without a cancel scope (the common case, and the
            # cheap one); only a real wait needs the deadline around it.
            limiter.acquire_on_behalf_of_nowait(borrower)
            taken = True
        except anyio.WouldBlock:
            taken = False
        if not taken:
            left = ctx.time_left()
            with anyio.move_on_after(math.inf if left is None else left) as waiting:
                await limiter.acquire_on_behalf_of(borrower)
            if waiting.cancelled_caught:
                raise OperationCancelledError(
                    f"{operation} refused: the previous call on this adapter was still running at the "
                    "deadline; nothing was done",
                    "deadline passed",
                )
        try:
            if current_library() == "asyncio":
                return await self._hop(ctx, operation, work)
            stopped = threading.Event()

            def in_thread() -> T:
                try:
                    return self._run_in_thread(ctx, operation, work)
                finally:
                    stopped.set()

            try:
                # Always abandonable, so a thread that will not stop cannot hold its caller forever;
                # without abandon_on_cancel the caller first gives it cancel_grace_s to stop.
                return await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                if not self.abandon_on_cancel and not stopped.is_set():
                    with anyio.CancelScope(shield=True):
                        grace = self.cancel_grace_s
                        await anyio.to_thread.run_sync(stopped.wait, grace, abandon_on_cancel=True)
                raise
        finally:
            limiter.release_on_behalf_of(borrower)

    async def _hop(self, ctx: OpContext, operation: str, work: Callable[[ConnT], T]) -> T:
        """On asyncio: run the call in a worker thread, abandoned (not waited for) on cancellation.

        What ``anyio.to_thread.run_sync(..., abandon_on_cancel=True)`` does,
        at under half its cost (no checkpoint, limiter or cancel scope
        of its own: :meth:`run` bounds the wait and the thread already; the
        thread resolves the caller's future directly). The thread
        runs in a copy of the caller's context (its span stays current), and
        :func:`host_task_cancelled` tells it when its caller stopped waiting.
        A cancelled caller then gives the thread ``cancel_grace_s`` to stop
        (unless ``abandon_on_cancel``), as on trio; a call cancelled before its
        thread started it never runs (its job is cancelled), so there is
        nothing to wait for. The pool's job says when the thread has stopped: no
        event is made for that on every call.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()
        hop = _Hop(waiter)
        # Part of an inline bounded call (the engine's, in its own task): it keeps the deadline here.
        inline = inline_call()
        wake = caller_waker() if inline is None else None

        def in_worker() -> Callable[[], None]:
            # Runs the call; what it returns resolves the caller's future (one call_soon_threadsafe,
            # what asyncio.wrap_future would do through two chained futures and their callbacks),
            # called by the pool once it noted the call's end (see ``WorkerPool.submit``).
            _running.hop = hop
            value: T | None = None
            error: BaseException | None = None
            try:
                value = self._run_in_thread(ctx, operation, work)
            except BaseException as exc:  # handed to the caller, as a concurrent future would
                error = exc if not isinstance(exc, StopIteration) else _stop_iteration_error(exc)
            finally:
                _running.hop = None
            return partial(_hand_back, loop, hop, value, error, wake)

        job = _workers().submit(partial(contextvars.copy_context().run, in_worker))
        if inline is not None:
            # With abandon_on_cancel the hop gives its thread no time at all after a cancellation.
            grace = 0.0 if self.abandon_on_cancel else self.cancel_grace_s
            return await inline.wait(loop, hop, job, grace)  # type: ignore[no-any-return]
        try:
            return await waiter
        except asyncio.CancelledError:
            hop.cancelled = True
            # A call its thread has not started yet never runs: nothing to wait for.
            job.cancel()
            if not self.abandon_on_cancel and not job.done():
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(job.wait, self.cancel_grace_s, abandon_on_cancel=True)
            raise

    def _run_in_thread(self, ctx: OpContext, operation: str, work: Callable[[ConnT], T]) -> T:
        # Checked again here: time may have passed waiting for the limiter, and
        # aclose() may have run meanwhile.
        ctx.raise_if_expired(operation)
        left = ctx.time_left()
        if not self._conn_lock.acquire(timeout=-1 if left is None else max(0.0, left)):
            raise OperationCancelledError(
                f"{operation} refused: the previous call on this connection was still running at the "
                "deadline; nothing was done",
                "deadline passed",
            )
        try:
            ctx.raise_if_expired(operation)
            if host_task_cancelled():
                # The caller left while this thread waited for another loop's call: do nothing.
                raise OperationCancelledError(f"{operation} refused: the caller was cancelled", "cancelled")
            self.refuse_if_closed(operation)
            try:
                conn = self._connect()
                with self.call_guard(conn, ctx):
                    return work(conn)
            except self.backend_errors as exc:
                raise self._translate(ctx, operation, exc) from exc
        finally:
            try:
                if self._closed:
                    # aclose() gave up waiting for this call: close now that it is done.
                    self._close_locked()
            finally:
                self._conn_lock.release()

    def _translate(self, ctx: OpContext, operation: str, exc: BaseException) -> BaseException:
        if host_task_cancelled():
            if getattr(_running, "hop", None) is not None:
                # The asyncio caller already left with its cancellation; nobody reads this.
                return OperationCancelledError(f"{operation} stopped: the caller was cancelled", "cancelled")
            # The calling task was cancelled: raise the backend's own
            # cancellation exception so the caller's cancel scope handles it.
            anyio.from_thread.check_cancelled()
        if ctx.expired:
            reason = ctx.signal.reason or "deadline passed"
            return OperationCancelledError(
                f"{operation} stopped before it committed: {reason}; nothing was written", reason
            )
        return self.storage_error(self.failure_message(operation, exc))

    # -- closing --------------------------------------------------------------------------------

    def _close_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.close_connection(conn)

    def _close_in_thread(self) -> bool:
        """Close the connection unless a call still holds it after ``close_timeout_s``; True once closed."""
        # Bounded like aclose's wait: past it a call still holds the connection, and its own thread
        # closes it when it returns. Waiting on would leave this thread (one of anyio's, not a daemon
        # on asyncio) blocked for good behind a call that never ends, and the interpreter's exit with it.
        if not self._conn_lock.acquire(timeout=self.close_timeout_s):
            return False
        try:
            self._close_locked()
            return True
        finally:
            self._conn_lock.release()

    async def aclose(self) -> None:
        """Close the connection this adapter opened. Idempotent; later calls are refused.

        Shielded from the caller's cancellation and bounded by
        ``close_timeout_s``. If a call is still running in its thread past
        that, raises ``storage_error``; the connection is then closed when that
        call returns, and calling ``aclose`` again waits for it again.
        """
        self._closed = True
        if self._conn is None and not self._conn_lock.locked():
            return
        closed = False
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.close_timeout_s):
                # No limiter: the lock inside the thread orders close after a
                # call in flight, and an abandoned call holds no limiter token.
                closed = await anyio.to_thread.run_sync(self._close_in_thread, abandon_on_cancel=True)
        if not closed:
            raise self.storage_error(
                f"{self.adapter_name}: close did not finish within {self.close_timeout_s}s because a call "
                "is still running in its worker thread; the connection is closed when that call returns"
            )
