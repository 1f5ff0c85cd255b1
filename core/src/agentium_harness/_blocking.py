"""A synchronous facade over the runtime: :class:`BlockingRuntime` (docs/sync.md).

A synchronous host (a Flask or Django view, a script, a worker thread) must
not call ``anyio.run`` per request: each call starts an event loop that ends
with the request, and background work the runtime started on it (a summary
update, memory extraction) is cut with it. :class:`BlockingRuntime` instead
runs one event loop for the life of the runtime, in a thread of its own (an
anyio blocking portal), and every method blocks the calling thread until the
runtime has answered on that loop. Any number of threads may call it at once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import anyio.from_thread

from ._blocking_history import BlockingHistoryOperations
from ._blocking_memory import BlockingMemory
from ._config.runtime import load_runtime
from ._engine.closing import HarnessResources
from ._engine.maintenance import MigrationReport, ReconcileReport, SessionView
from ._engine.memory.work import DrainResult
from ._engine.owned_work import SummaryReport
from ._engine.recall_turn import Clarifier
from ._engine.results import CleanupReport, CommitState, Diagnostic, RunResult
from ._engine.runtime import HarnessRuntime, LifecycleState
from ._engine.tools import ToolRegistry
from ._engine.verification import CompletionPolicy
from ._errors import (
    AgentiumError,
    BlockingCallInLoopError,
    InvalidArgumentError,
    RuntimeClosedError,
    RuntimeCloseError,
)
from ._plugins.registry import PluginRegistry
from ._ports.provider import SourceBlock
from ._scope import RecallScope, VerifiedIdentity
from ._verdicts import VerificationRecord

__all__ = ["BlockingRuntime"]

T = TypeVar("T")
E = TypeVar("E", bound=AgentiumError)

#: Added to the runtime's own close bound before :meth:`BlockingRuntime.close` gives up waiting.
CLOSE_SLACK_S = 1.0


def _refused(error: E) -> E:
    """``error``, a refusal raised before the call reached the loop: nothing ran, so ``not_committed``.

    Every other error of a writing operation says whether it committed; a
    host that branches on ``commit_state`` must not find ``None`` here.
    """
    error.commit_state = CommitState.NOT_COMMITTED
    return error


def _check_backend(backend: object) -> None:
    if backend not in ("asyncio", "trio"):
        raise InvalidArgumentError(f"backend must be 'asyncio' or 'trio', got {backend!r}")


def _is_coroutine_function(func: Callable[..., object]) -> bool:
    """Whether calling ``func`` starts a coroutine, known without calling it.

    :func:`inspect.iscoroutinefunction` sees through bound methods and
    :func:`functools.partial`, not through an object with an ``async def __call__``.
    """
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    if inspect.isroutine(func) or isinstance(func, type):
        return False
    return inspect.iscoroutinefunction(type(func).__call__)  # func is callable: it has one


class BlockingRuntime(BlockingHistoryOperations):
    """A :class:`HarnessRuntime` for synchronous code: every method blocks until the runtime answers.

    The runtime runs on one event loop in a daemon thread of its own (an anyio
    blocking portal, :func:`anyio.from_thread.start_blocking_portal`), started
    on entering the ``with`` block or on the first call, and kept for the
    life of this object, so background work (summary updates, memory
    extraction) outlives the request that started it. Calls may come from any
    number of threads at once; each blocks its own thread only. Do not call it
    from the portal's own thread (a tool handler or callback the runtime
    runs): that raises :class:`BlockingCallInLoopError` (a ``RuntimeError``)
    and does nothing. From async code, use the :class:`HarnessRuntime` itself.
    A call refused before it reached the loop (that one, or any call after
    :meth:`close`) ran nothing: its error's ``commit_state`` is ``not_committed``.

    Each method is the blocking twin of the runtime's coroutine of its name
    (the turn, session maintenance, the history API, erasure, host
    documents), with the same arguments, result and typed errors;
    :attr:`memory` is the memory manager's, and :meth:`call` runs any other
    coroutine.

    ``runtime`` is **owned** by default: :meth:`close` closes it (``aclose()``)
    before stopping the loop. With ``owned=False`` it is borrowed and
    :meth:`close` only stops the loop; whoever owns it closes it.
    ``backend`` (``"asyncio"`` or ``"trio"``) and ``backend_options`` (a
    mapping of option names) choose the loop, as for :func:`anyio.run`.
    Another ``backend``, ``backend_options`` that are no such mapping or an
    ``owned`` that is not a bool raise :class:`InvalidArgumentError`.
    """

    def __init__(
        self,
        runtime: HarnessRuntime,
        *,
        owned: bool = True,
        backend: str = "asyncio",
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(runtime, HarnessRuntime):
            raise InvalidArgumentError(
                f"BlockingRuntime wraps a HarnessRuntime, got {type(runtime).__name__}; build one with "
                "create_harness_runtime() or load_runtime(), or use BlockingRuntime.from_config(path)"
            )
        _check_backend(backend)
        if type(owned) is not bool:
            # Not its truth: owned="no" would close a runtime its caller meant to keep.
            raise InvalidArgumentError(f"owned must be True or False, got {type(owned).__name__}")
        if backend_options is not None and (
            not isinstance(backend_options, Mapping) or any(type(k) is not str for k in backend_options)
        ):
            raise InvalidArgumentError(
                "backend_options must be None or a mapping of option names (str) to values, as for "
                f"anyio.run, got {type(backend_options).__name__}"
            )
        self._runtime = runtime
        self._owned = owned
        self._backend = backend
        self._backend_options = dict(backend_options or {})
        # Re-entrant: a signal handler calling close() may land while its thread holds it.
        self._lock = threading.RLock()
        self._starting = threading.Lock()  # held while the loop starts, never with _lock held
        self._portal_cm: AbstractContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        # The loop thread, once started: a call from it would wait for itself. The thread object,
        # not its ident: an ident is reused by a thread started after the loop's has ended, and
        # that thread (calling close() again, or a call after it) is not the loop.
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        # Set once the first close() has finished: a close() meanwhile returns only then.
        self._close_done = threading.Event()
        # Done once close() gave up on the loop stopping (a call blocked in a worker thread): the
        # callers still waiting are released then, with RuntimeClosedError, never left blocked.
        self._abandoned: concurrent.futures.Future[None] = concurrent.futures.Future()
        # The calls taken to the loop and not yet answered: a close() of a borrowed runtime lets
        # them end (within its bound, notified by _idle) before it cancels the rest.
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str],
        *,
        registry: PluginRegistry | None = None,
        environ: Mapping[str, str] | None = None,
        tools: ToolRegistry | None = None,
        backend: str = "asyncio",
    ) -> BlockingRuntime:
        """Build the runtime a config file describes (:func:`load_runtime`) and own it."""
        _check_backend(backend)  # before anything is built: a refusal leaves no runtime to close
        runtime = load_runtime(path, registry=registry, environ=environ, tools=tools)
        return cls(runtime, owned=True, backend=backend)

    # -- the loop -------------------------------------------------------------------------------

    @property
    def runtime(self) -> HarnessRuntime:
        """The wrapped runtime (its coroutines run on this object's loop: use :meth:`call`)."""
        return self._runtime

    @property
    def state(self) -> LifecycleState:
        """The runtime's state: ``open``, ``closing`` or ``closed``."""
        return self._runtime.state

    @property
    def resources(self) -> HarnessResources:
        """The runtime's per-session resources (their methods are async: use :meth:`close_session`)."""
        return self._runtime.resources

    @property
    def memory(self) -> BlockingMemory | None:
        """The runtime's memory manager, blocking (``remember``, ``correct``, ``forget``, ``list`` ...).

        ``None`` when the runtime has no memory, as :attr:`HarnessRuntime.memory`.
        """
        manager = self._runtime.memory
        # A view made on each access: one stored here would hold this object's bound method, a cycle
        # that kept the wrapper and its runtime alive past the host's last reference until a collection.
        return BlockingMemory(manager, self._call_as) if manager is not None else None

    def start(self) -> BlockingRuntime:
        """Start the loop thread now and run :meth:`HarnessRuntime.start` on it; returns ``self``.

        The first call of any method starts the loop otherwise, without that
        warm-up (the embedder's model would then load inside the first
        query's recall budget). Idempotent; ``with BlockingRuntime(...)`` calls it.
        """
        self._call_as("start", self._runtime.start)  # starts the loop first
        return self

    def _refuse_loop_thread(self, operation: str) -> None:
        if self._loop_thread is not None and threading.current_thread() is self._loop_thread:
            raise _refused(
                BlockingCallInLoopError(
                    f"BlockingRuntime.{operation}() was called on the runtime's own event loop thread (a "
                    "tool handler or callback), where it would wait for itself; nothing was done: await "
                    "the HarnessRuntime there"
                )
            )

    def _portal_or_start(self) -> anyio.from_thread.BlockingPortal:
        """The loop's portal (started on first use), the call now counted in flight (until it ends).

        Counted under the same lock as the ``closed`` check: a call admitted here is one a borrowed
        runtime's :meth:`close` waits for, never one it already looked past.
        """
        self._refuse_loop_thread("call")
        while True:
            with self._lock:
                self._refuse_closed()
                if self._portal is not None:
                    self._in_flight += 1
                    return self._portal
            with self._starting:  # one thread starts the loop; the others then take it above
                if self._portal is None:
                    self._start_loop()

    def _refuse_closed(self) -> None:
        if self._closed:
            raise _refused(RuntimeClosedError("the BlockingRuntime is closed; it admits no new operations"))

    def _start_loop(self) -> None:
        """Start the loop, outside ``_lock``: a :meth:`close` meanwhile must not wait for the start.

        That close may be a signal handler run by this very thread, which would wait for itself
        for ever. A loop started after such a close began is stopped again and the call refused.
        """
        cm = anyio.from_thread.start_blocking_portal(
            self._backend, self._backend_options or None, name="agentium-blocking-runtime"
        )
        portal = cm.__enter__()
        loop_thread = portal.call(threading.current_thread)
        with self._lock:
            if not self._closed:
                self._loop_thread, self._portal, self._portal_cm = loop_thread, portal, cm
                return
        cm.__exit__(None, None, None)  # no call reached it: it stops at once
        self._refuse_closed()

    def call(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run ``await func(*args, **kwargs)`` on the runtime's loop and return its result (blocking).

        For any coroutine without a blocking twin here, e.g. one of the
        host's own that awaits the runtime several times:
        ``blocking.call(handle_ticket, blocking.runtime, ticket)``. Exceptions
        are raised in the calling thread as they were raised on the loop. A
        call that meets :meth:`close` stopping the loop before it ran raises
        :class:`RuntimeClosedError`, as a call after it does. ``func`` must be
        a coroutine function (``async def``; a bound method or a
        :func:`functools.partial` of one, or an object whose ``__call__`` is
        one). Anything else raises :class:`InvalidArgumentError` and runs
        nothing: something not callable (a coroutine object, say, instead of
        its function), and a plain function too, even one returning an
        awaitable (``lambda: f(x)``: pass ``f, x`` instead), as whether it
        would return one is only known by running it, and it would run on the
        loop's thread, blocking every other call meanwhile.
        """
        if not callable(func):
            raise _refused(
                InvalidArgumentError(
                    "BlockingRuntime.call() takes a coroutine function and its arguments, got a "
                    f"{type(func).__name__}; nothing was run"
                )
            )
        if not _is_coroutine_function(func):
            raise _refused(
                InvalidArgumentError(
                    "BlockingRuntime.call() takes a coroutine function (async def) and its arguments, "
                    f"got a plain {type(func).__name__}, which would run on the loop's thread and block "
                    "it; nothing was run: pass the coroutine function and its arguments, call(f, x) "
                    "rather than call(lambda: f(x))"
                )
            )
        return self._call_as("call", func, *args, **kwargs)

    def _call_as(self, operation: str, func: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """:meth:`call`, refused from the loop thread with an error naming ``operation`` (the twin's name).

        Positional-only, so a keyword argument of ``func`` named ``operation`` reaches ``func``.
        """
        self._refuse_loop_thread(operation)
        # Counted in flight as it is admitted, before it is handed over (it may start and run
        # before this thread goes on), and uncounted on the loop as it ends, not once this thread
        # has its answer: a close() from this very thread (a signal handler interrupting it while
        # it waits) must not wait for it to return.
        portal = self._portal_or_start()

        async def counted() -> Any:
            try:
                answer = func(*args, **kwargs)
                return await answer if inspect.isawaitable(answer) else answer
            finally:
                self._ended()

        try:
            future: concurrent.futures.Future[T] = portal.start_task_soon(counted)
        except BaseException as exc:
            self._ended()  # never reached the loop
            if not isinstance(exc, RuntimeError) or not self._closed:
                raise
            # close() stopped the loop between our taking the portal and handing it the call
            # (anyio: "This portal is not running"): nothing ran, and the host gets the typed error.
            raise _refused(
                RuntimeClosedError(
                    "the BlockingRuntime closed while the call was being handed to its loop; it did not run"
                )
            ) from exc
        return self._answer(future)

    def _ended(self) -> None:
        """A call admitted by :meth:`_portal_or_start` has ended on the loop (or never reached it).

        A call the loop's stop cancels before it began is never uncounted: only the first
        :meth:`close` waits for the count, and it has stopped waiting by then.
        """
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def _answer(self, future: concurrent.futures.Future[T]) -> T:
        """Wait for the answer of a call handed to the loop, or for :meth:`close` to give up on it."""
        waited: tuple[concurrent.futures.Future[Any], ...] = (future, self._abandoned)
        done, _ = concurrent.futures.wait(waited, return_when="FIRST_COMPLETED")
        if future not in done:
            error = RuntimeClosedError(
                "the BlockingRuntime's loop did not stop within its close bound while the call was "
                "running (blocked in a worker thread?); the call was left behind, and whether it "
                "committed anything is unknown (read the session back)"
            )
            error.commit_state = CommitState.UNKNOWN
            raise error
        try:
            return future.result()
        except concurrent.futures.CancelledError as exc:
            # Only the portal's stop cancels a call it holds (the runtime raises typed errors): the
            # call may have been part way through, so what it committed is not known here.
            if not self._closed:
                raise
            error = RuntimeClosedError(
                "the BlockingRuntime's loop stopped while the call was running; whether it committed "
                "anything is unknown (read the session back)"
            )
            error.commit_state = CommitState.UNKNOWN
            raise error from exc

    # -- the runtime's methods, blocking ---------------------------------------------------------

    def run(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        user_input: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
        grants: Iterable[str] = (),
        sources: Sequence[SourceBlock] = (),
        clarify: Clarifier | None = None,
        completion: CompletionPolicy | bool | None = None,
    ) -> RunResult:
        """:meth:`HarnessRuntime.run`, blocking: one turn, committed (or a typed error saying what was)."""
        return self._call_as(
            "run",
            self._runtime.run,
            identity,
            session_id,
            user_input,
            recall_scope=recall_scope,
            attest_legacy_memory_scope=attest_legacy_memory_scope,
            grants=grants,
            sources=sources,
            clarify=clarify,
            completion=completion,
        )

    def inspect_session(self, identity: VerifiedIdentity, session_id: str) -> SessionView:
        """:meth:`HarnessRuntime.inspect_session`, blocking."""
        return self._call_as("inspect_session", self._runtime.inspect_session, identity, session_id)

    def close_session(self, identity: VerifiedIdentity, session_id: str) -> CleanupReport:
        """``runtime.resources.close_session``, blocking: settle the session and flush it."""
        return self._call_as("close_session", self._runtime.resources.close_session, identity, session_id)

    def settle_summary(self, identity: VerifiedIdentity, session_id: str) -> SummaryReport | None:
        """``runtime.resources.settle_summary``, blocking: wait for the session's summary update."""
        return self._call_as("settle_summary", self._runtime.resources.settle_summary, identity, session_id)

    def drain(self, timeout_s: float | None = None) -> DrainResult:
        """:meth:`HarnessRuntime.drain`, blocking: wait for owned background work and say how it ended."""
        return self._call_as("drain", self._runtime.drain, timeout_s)

    def verify(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        claim: str = "",
        *,
        recall_scope: RecallScope | None = None,
        since: float = 0.0,
    ) -> tuple[VerificationRecord, tuple[Diagnostic, ...]]:
        """:meth:`HarnessRuntime.verify`, blocking."""
        return self._call_as(
            "verify",
            self._runtime.verify,
            identity,
            session_id,
            claim,
            recall_scope=recall_scope,
            since=since,
        )

    def probe(self) -> list[tuple[str, str]]:
        """:meth:`HarnessRuntime.probe`, blocking: each adapter's bounded health check."""
        return self._call_as("probe", self._runtime.probe)

    def migrate_legacy_session(
        self,
        identity: VerifiedIdentity,
        session_id: str,
        *,
        recall_scope: RecallScope | None = None,
        attest_legacy_memory_scope: bool = False,
    ) -> MigrationReport:
        """:meth:`HarnessRuntime.migrate_legacy_session`, blocking."""
        return self._call_as(
            "migrate_legacy_session",
            self._runtime.migrate_legacy_session,
            identity,
            session_id,
            recall_scope=recall_scope,
            attest_legacy_memory_scope=attest_legacy_memory_scope,
        )

    def reconcile_session(self, identity: VerifiedIdentity, session_id: str) -> ReconcileReport:
        """:meth:`HarnessRuntime.reconcile_session`, blocking."""
        return self._call_as("reconcile_session", self._runtime.reconcile_session, identity, session_id)

    # -- closing ---------------------------------------------------------------------------------

    def close_bound_s(self) -> float:
        """How long :meth:`close` waits at most: the runtime's own close bound plus a second."""
        limits = self._runtime.limits
        return limits.settle_timeout_s + 2 * limits.close_timeout_s + CLOSE_SLACK_S

    def close(self) -> None:
        """Close the runtime if owned (``aclose()`` on its loop), then stop the loop; bounded.

        Returns within :meth:`close_bound_s` (plus the same again for the loop
        to stop). Calls still running when the runtime closes get
        :class:`RuntimeClosedError`; later calls raise it too. A borrowed
        runtime's calls in flight get that bound to end. Calls still
        running when the loop stops (a host coroutine of :meth:`call`) are
        cancelled, and calls the loop could not stop within the bound (blocked
        in a worker thread) are left behind: their callers get
        :class:`RuntimeClosedError` with ``commit_state`` ``unknown``. Idempotent: a
        call while another thread's close is under way returns once that one
        has finished (within the same bound), and does nothing more. It
        may be called from any thread, async code included, except the
        runtime's own loop thread: that raises
        :class:`BlockingCallInLoopError` and changes nothing. Raises
        :class:`RuntimeCloseError` when the runtime's close failed or did not
        finish in time (the loop thread, a daemon, is then left to end on its
        own).
        """
        self._refuse_loop_thread("close")
        bound = self.close_bound_s()
        with self._lock:
            first = not self._closed
            self._closed = True
            portal, cm = self._portal, self._portal_cm
            self._portal = self._portal_cm = None
        if not first:
            # Returning at once would tell this caller the runtime is closed while the first close
            # is still draining it (a host exiting on that word would cut its writes).
            self._close_done.wait(2 * bound)
            return
        try:
            self._close(portal, cm, bound)
        finally:
            self._close_done.set()

    def _close(
        self,
        portal: anyio.from_thread.BlockingPortal | None,
        cm: AbstractContextManager[anyio.from_thread.BlockingPortal] | None,
        bound: float,
    ) -> None:
        """The first :meth:`close`: the runtime's ``aclose()`` if owned, then the loop's stop."""
        failures: list[str] = []
        if self._owned:
            try:
                if portal is None:
                    failures.extend(self._close_unstarted(bound))
                else:
                    future = portal.start_task_soon(self._runtime.aclose)
                    try:
                        future.result(timeout=bound)
                    except RuntimeCloseError as exc:
                        failures.extend(exc.failures)
                    except concurrent.futures.TimeoutError:
                        failures.append(
                            f"the runtime did not close within {bound}s (an adapter blocking the event "
                            "loop?); its loop thread was left to end on its own"
                        )
            except Exception as exc:  # reported, not raised bare: the loop below must still stop
                failures.append(f"the runtime's close failed: {type(exc).__name__}: {exc}")
        elif portal is not None:
            # Borrowed: no aclose() settled the calls in flight. They get the bound an owned
            # runtime's close would have taken to end with their own outcome; the rest are cancelled.
            with self._idle:
                self._idle.wait_for(lambda: not self._in_flight, timeout=bound)
        if portal is not None and cm is not None and not self._stop_loop(portal, cm, bound):
            failures.append(f"the runtime's event loop did not stop within {bound}s of its close")
            self._abandoned.set_result(None)
        if failures:
            raise RuntimeCloseError(failures)

    def _close_unstarted(self, bound: float) -> list[str]:
        """Close a runtime whose loop never started, on a loop of its own in a thread; bounded.

        A thread of its own, not ``anyio.run`` here: the caller may be async
        code, whose thread already runs an event loop (``anyio.run`` refuses
        it), and the thread's join is what bounds the wait.
        """
        failures: list[str] = []

        def close_on_own_loop() -> None:
            try:
                anyio.run(self._runtime.aclose, backend=self._backend)
            except RuntimeCloseError as exc:
                failures.extend(exc.failures)
            except Exception as exc:  # handed to the caller as a close failure
                failures.append(f"the runtime's close failed: {type(exc).__name__}: {exc}")

        closer = threading.Thread(target=close_on_own_loop, name="agentium-blocking-close", daemon=True)
        closer.start()
        closer.join(bound)
        if closer.is_alive():
            return [f"the runtime did not close within {bound}s; its closing thread was left to end alone"]
        return failures

    @staticmethod
    def _stop_loop(
        portal: anyio.from_thread.BlockingPortal, cm: AbstractContextManager[Any], bound: float
    ) -> bool:
        # Leaving the portal's context waits for the calls still running (a host coroutine of
        # call() need never end) and joins its thread, both without a bound. The calls left are
        # cancelled first (their callers get RuntimeClosedError, "unknown"), and the rest is done
        # in a helper thread joined for at most ``bound``, so close() always returns.
        def stop() -> None:
            try:
                portal.call(portal.stop, True)
            except RuntimeError:  # the loop has stopped already (it failed, say)
                pass
            cm.__exit__(None, None, None)

        stopper = threading.Thread(target=stop, name="agentium-blocking-stop", daemon=True)
        stopper.start()
        stopper.join(bound)
        return not stopper.is_alive()

    def __enter__(self) -> BlockingRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
