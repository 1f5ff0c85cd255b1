"""Event loops and threads: what lets one runtime or one adapter serve several loops at once.

anyio's synchronisation objects (``Event``, ``Lock``, ``CapacityLimiter``,
``CancelScope``) belong to the event loop that first uses them: waking a
waiter of another loop from here is not thread-safe, and a cancel scope may
only be cancelled from its own loop's thread. A runtime shared by threads that
each run their own loop (or by successive ``anyio.run`` calls) therefore keeps
nothing loop-bound across calls. This module holds the three pieces that make
that possible, each working under asyncio and trio:

- :class:`LoopHandle`: the running loop, so any thread can hand it a callback
  (``call_soon_threadsafe`` on asyncio, the trio token's ``run_sync_soon``);
- :class:`ThreadSafeEvent`: an event any thread may set and any loop may wait
  for (each waiter is woken on its own loop);
- :class:`PerLoop`: one value per running loop (a capacity limiter, a
  client whose connections are bound to their loop), created on first use in
  that loop, dropped once that loop has finished, and closed each on its own
  loop by :meth:`PerLoop.aclose`.
"""

from __future__ import annotations

import asyncio
import asyncio.tasks
import logging
import sys
import threading
from asyncio import current_task as _asyncio_task
from asyncio import get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import sniffio

from .._observe.logs import one_line
from .._observe.spans import current_span_event
from .._observe.state import error_type
from .._text import error_text

__all__ = ["LoopHandle", "PerLoop", "ThreadSafeEvent", "cancel_scope", "current_library"]

T = TypeVar("T")

# Python 3.11's ``asyncio.current_task`` is a Python function reading this dict (the C tasks' own);
# read directly it costs no Python call. From 3.12 ``current_task`` itself is C.
_CURRENT_TASKS: dict[Any, Any] | None = (
    getattr(asyncio.tasks, "_current_tasks", None) if sys.version_info < (3, 12) else None
)

_log = logging.getLogger("agentium.engine")

# How often run_there looks whether the loop it waits for has finished under the work.
_LOOK_S = 0.1

# Tasks started on a loop from another thread, kept referenced until they end (asyncio holds weak ones).
_STARTED: set[Any] = set()


def current_library() -> str:
    """The async library running in this thread: what ``sniffio.current_async_library()`` says, cheaper.

    Every adapter call asks (several times); sniffio imports ``asyncio``
    inside the function on each asyncio call. The same checks in the same
    order: the library's own declaration first (trio sets it, also in guest
    mode), then a running asyncio task. Raises
    ``sniffio.AsyncLibraryNotFoundError`` outside async code, as sniffio does.
    """
    name = sniffio.thread_local.name or sniffio.current_async_library_cvar.get()
    if name is not None:
        return name
    try:
        loop = get_running_loop()
    except RuntimeError:  # no running loop in this thread
        return sniffio.current_async_library()
    task = _asyncio_task(loop) if _CURRENT_TASKS is None else _CURRENT_TASKS.get(loop)
    return "asyncio" if task is not None else sniffio.current_async_library()


# The running library's CancelScope class, by library (see :func:`cancel_scope`).
_SCOPE_CLASSES: dict[str, Callable[..., anyio.CancelScope]] = {}


def cancel_scope(library: str, *, shield: bool = False) -> anyio.CancelScope:
    """A new ``anyio.CancelScope(shield=shield)`` for the running ``library`` (:func:`current_library`).

    ``anyio.CancelScope()`` looks the backend up through sniffio and then
    initialises the scope twice (its ``__new__`` returns the backend's scope,
    which ``type.__call__`` initialises again); the backend's class, made
    once per library, builds the same scope at a fifth of the cost.
    """
    make = _SCOPE_CLASSES.get(library)
    if make is None:
        make = _SCOPE_CLASSES[library] = type(anyio.CancelScope())
    return make(shield=shield)


class LoopHandle:
    """The event loop running in the current thread (asyncio or trio), usable from any thread."""

    __slots__ = ("__weakref__", "_library", "_native")

    def __init__(self, library: str, native: Any) -> None:
        self._library = library
        # The asyncio loop itself, or trio's token for the run.
        self._native = native

    @classmethod
    def current(cls) -> LoopHandle:
        """The running loop; raises ``RuntimeError`` when no asyncio or trio loop runs in this thread."""
        try:
            library = current_library()
        except sniffio.AsyncLibraryNotFoundError:
            raise RuntimeError("no event loop is running in this thread") from None
        if library == "asyncio":
            return cls(library, get_running_loop())
        if library == "trio":
            import trio

            return cls(library, trio.lowlevel.current_trio_token())
        raise RuntimeError(f"Agentium needs asyncio or trio, not {library}")  # pragma: no cover

    @classmethod
    def current_or_none(cls) -> LoopHandle | None:
        """The running loop, or ``None`` outside one (a worker thread, plain synchronous code)."""
        try:
            return cls.current()
        except RuntimeError:
            return None

    @property
    def library(self) -> str:
        """``"asyncio"`` or ``"trio"``."""
        return self._library

    @property
    def key(self) -> Any:
        """A hashable, weakly referenceable object identifying the loop (the loop, or trio's token)."""
        return self._native

    def is_current(self) -> bool:
        """True when called on this loop, in its own thread."""
        other = LoopHandle.current_or_none()
        return other is not None and other._native is self._native

    def call_soon(self, callback: Callable[[], None]) -> bool:
        """Schedule ``callback`` on this loop from any thread; False when the loop has finished.

        A loop that is stopped but not closed (between two
        ``run_until_complete`` calls) runs it when it runs again.
        """
        try:
            if self._library == "asyncio":
                self._native.call_soon_threadsafe(callback)
            else:
                self._native.run_sync_soon(callback)
        except RuntimeError:  # asyncio: "Event loop is closed"; trio: RunFinishedError
            return False
        return True

    def run_soon(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` now if this is the current loop, else schedule it there (:meth:`call_soon`)."""
        if self.is_current():
            callback()
            return True
        return self.call_soon(callback)

    def start(self, work: Callable[[], Awaitable[None]]) -> bool:
        """Start ``work()`` as a task of this loop, from any thread; False when the loop has finished.

        ``work`` must not raise anything but a cancellation (on trio it runs
        as a system task, where an escaping exception ends the run).
        """

        def begin() -> None:
            if self._library == "asyncio":
                task = self._native.create_task(work())
                _STARTED.add(task)
                task.add_done_callback(_STARTED.discard)
            else:
                import trio

                trio.lowlevel.spawn_system_task(work)

        return self.call_soon(begin)

    async def run_there(self, work: Callable[[], Awaitable[object]], timeout_s: float) -> bool:
        """Run ``work()`` on this loop and wait up to ``timeout_s`` here; True if it finished in time.

        An exception ``work`` raises is re-raised here. Past ``timeout_s`` the
        work is left running on its loop. A loop that finishes first (closed,
        or cancelling the work as ``asyncio.run`` does when it returns) ends the
        wait within a tenth of a second of its closing: False, the work did not
        finish.
        """
        return await self._run_there(work, timeout_s) == "finished"

    async def _run_there(self, work: Callable[[], Awaitable[object]], timeout_s: float) -> str:
        """:meth:`run_there`, saying how it ended: "finished", "cut" (by its loop) or "timed out"."""
        done = ThreadSafeEvent()
        failure: list[BaseException] = []
        cut = False  # cancelled (or interrupted) there: it did not finish

        async def run() -> None:
            nonlocal cut
            try:
                await work()
            except Exception as exc:  # handed to the waiter
                failure.append(exc)
            except BaseException:
                cut = True
                raise
            finally:
                done.set()

        if not self.start(run):
            return "cut"  # the loop has finished: nothing more runs there
        with anyio.move_on_after(timeout_s):
            # In slices: a loop closed under the work never runs it to its end, nor says so.
            while not done.is_set() and not self.finished:
                with anyio.move_on_after(_LOOK_S):
                    await done.wait()
            # Cancelled there: asyncio.run returning cancels the tasks left, then may go on a while
            # (its default executor's jobs) before its loop is closed. Not "timed out" then.
            while cut and not self.finished:  # noqa: ASYNC110
                await anyio.sleep(_LOOK_S)
        if failure:
            raise failure[0]
        if done.is_set() and not cut:
            return "finished"
        return "cut" if self.finished else "timed out"

    @property
    def finished(self) -> bool:
        """True once the loop can run nothing more (an asyncio loop closed, a trio run ended)."""
        if self._library == "asyncio":
            return bool(self._native.is_closed())
        return not self.call_soon(lambda: None)


class ThreadSafeEvent:
    """A one-shot event: :meth:`set` from any thread, :meth:`wait` from any asyncio or trio loop.

    Waiters are woken on their own loops (through :meth:`LoopHandle.call_soon`),
    so a run on one loop may wait for an operation admitted on another, and a
    loop that has ended leaves nothing behind that a later ``set`` could trip on.
    """

    __slots__ = ("_flag", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flag = False
        self._waiters: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        """True once :meth:`set` was called."""
        return self._flag

    def set(self) -> None:
        """Set the event and wake every waiter, whichever loop and thread it waits on."""
        with self._lock:
            if self._flag:
                return
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()

    async def wait(self) -> None:
        """Wait until the event is set (a checkpoint even when it already is)."""
        if self._flag:
            await anyio.lowlevel.checkpoint()
            return
        loop = LoopHandle.current()
        local = anyio.Event()

        def wake() -> None:
            loop.call_soon(local.set)

        with self._lock:
            registered = not self._flag
            if registered:
                self._waiters.append(wake)
        if not registered:
            await anyio.lowlevel.checkpoint()
            return
        try:
            await local.wait()
        finally:
            with self._lock:
                if wake in self._waiters:
                    self._waiters.remove(wake)


class PerLoop(Generic[T]):
    """One value per running event loop, made by ``factory`` on first use in that loop.

    For objects that belong to the loop that made them: an anyio
    ``CapacityLimiter``, an ``asyncio.Lock``, a client whose connections are
    streams of one loop (a ``redis.asyncio`` client, an ``httpx.AsyncClient``,
    a ``psycopg_pool.AsyncConnectionPool``). Thread-safe: two loops asking at
    once each get their own value.

    A value whose loop has finished (an asyncio loop closed, a trio run
    ended) can never be used or closed properly again: whenever a new value is
    made, such values are dropped, each passed to ``discard`` first (a
    synchronous, best-effort release, for example closing raw sockets; it must
    not raise: one that does is a WARNING on ``agentium.engine``, never an
    error of the caller). :meth:`aclose` closes every value on its own loop.
    """

    __slots__ = ("_discard", "_factory", "_lock", "_values")

    def __init__(self, factory: Callable[[], T], *, discard: Callable[[T], None] | None = None) -> None:
        self._factory = factory
        self._discard = discard
        self._lock = threading.Lock()
        self._values: dict[Any, tuple[LoopHandle, T]] = {}

    def get(self) -> T:
        """The running loop's value, made now if this loop has none yet (call from async code)."""
        try:
            # On asyncio the loop itself is the key: found without building a LoopHandle.
            key = get_running_loop() if current_library() == "asyncio" else None
        except sniffio.AsyncLibraryNotFoundError:
            key = None
        # A single dict read needs no lock (the GIL makes it atomic); changes of the dict take it.
        held = None if key is None else self._values.get(key)
        if held is not None:
            return held[1]
        loop = LoopHandle.current()
        held = self._values.get(loop.key)
        if held is not None:
            return held[1]
        self._sweep()
        with self._lock:
            held = self._values.get(loop.key)
            if held is None:
                held = self._values[loop.key] = (loop, self._factory())
            return held[1]

    def peek(self) -> T | None:
        """The running loop's value if it has one, without making it (``None`` outside a loop too)."""
        loop = LoopHandle.current_or_none()
        if loop is None:
            return None
        with self._lock:
            held = self._values.get(loop.key)
        return None if held is None else held[1]

    def items(self) -> list[tuple[LoopHandle, T]]:
        """Every value held now with its loop (values of finished loops are dropped first)."""
        self._sweep()
        with self._lock:
            return list(self._values.values())

    def _sweep(self) -> None:
        with self._lock:
            held = list(self._values.items())
        dead = [(key, value) for key, (loop, value) in held if loop.finished]
        if not dead:
            return
        with self._lock:
            for key, _value in dead:
                self._values.pop(key, None)
        for _key, value in dead:
            self._release(value)

    def _release(self, value: T) -> None:
        """Pass ``value`` (its loop gone) to ``discard``; one that raises is a WARNING, never a problem.

        Best effort: the loop that owned it is gone, and ``discard`` must not raise. One that does
        raise is said (the value's and the error's class), not left to make every later
        :meth:`aclose` fail (an adapter raising ``aclose``'s problems from its ``CloseOnce`` close).
        """
        if self._discard is None:
            return
        try:
            self._discard(value)
        except Exception as exc:
            _log.warning(
                "discarding a per-loop value of a finished event loop failed: %s (%s)",
                _kind(value),
                error_type(exc),
            )

    async def aclose(self, close: Callable[[T], Awaitable[None]], timeout_s: float) -> list[str]:
        """Close every value on its own loop and forget it; returns the problems (empty when all closed).

        This loop's value is closed here; a value of another loop that still
        runs (another thread's) is closed there, scheduled thread-safe, and
        waited for. A value whose loop finished before its close is released
        (given to ``discard``) as :meth:`get` drops such values: nothing is said.
        One whose close its loop's end cut short there (``asyncio.run``
        returning cancels it) is released too, with one WARNING
        (``agentium.engine``: their count and classes) and the span event
        ``agentium.per_loop.released`` for them all: a close begun and not
        finished. Neither is returned as a problem (an adapter raising it from
        its ``CloseOnce`` close raised it again on every later ``aclose()``,
        and no later close could close it better). The values are
        closed concurrently, each bounded by ``timeout_s``, so the whole close
        takes about ``timeout_s`` however many loops are stuck (not one bound
        per loop). Shielded from the caller's cancellation; on asyncio the closes
        run in a task of their own, so a native ``Task.cancel()`` of the caller
        (which passes anyio's shield) stops its wait, not the closes, whose
        problems are then logged as a WARNING (``agentium.engine``) instead: their
        count and kinds (each value's class and the error's class, escaped), never
        their text, which quotes the adapter's error (a server's message, a host name).
        """
        with self._lock:
            held = list(self._values.values())
            self._values.clear()
        # Each problem twice: its whole text (for the caller) and its kind (for the log).
        problems: list[tuple[str, str]] = []
        # The kinds of the values whose close their loop's end cut short (released, said once).
        released: list[str] = []

        def release(value: T, cut: bool) -> None:
            # Its loop finished: not a problem for the caller (no later close can do better, and an
            # adapter raising it from its CloseOnce close raised it again on every retry of its
            # aclose()). Finished before the close: dropped as get() drops such values, silently (the
            # values of a host's earlier asyncio.run calls are); a close begun and cut short is said.
            self._release(value)
            if cut:
                released.append(_kind(value))

        async def close_one(loop: LoopHandle, value: T) -> None:
            name = type(value).__name__
            try:
                if loop.is_current():
                    with anyio.fail_after(timeout_s):
                        await close(value)
                elif loop.finished:
                    release(value, cut=False)
                elif (ended := await loop._run_there(lambda: close(value), timeout_s)) == "cut":
                    release(value, cut=True)  # what the close left is released here
                elif ended != "finished":
                    problems.append(
                        (
                            f"closing a {name} of another event loop did not finish within "
                            f"{timeout_s}s (is that loop still running?)",
                            f"{_kind(value)} of another loop timed out",
                        )
                    )
            except TimeoutError:
                problems.append(
                    (f"closing a {name} did not finish within {timeout_s}s", f"{_kind(value)} timed out")
                )
            except Exception as exc:
                problems.append(
                    (
                        f"closing a {name} failed: {error_text(exc)}",
                        f"{_kind(value)} failed ({error_type(exc)})",
                    )
                )

        async def close_all() -> list[tuple[str, str]]:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:
                    for loop, value in held:
                        tg.start_soon(close_one, loop, value)
            if released:  # said here, once: the caller may have stopped waiting (natively cancelled)
                _warn_released(released)
            return problems

        if current_library() != "asyncio":  # trio: its cancellations respect the shield
            return [text for text, _kind_of in await close_all()]
        # The values are forgotten already: a native ``Task.cancel()`` of the caller passes anyio's
        # shield, and cut the closes short (nothing would close them again). They run in a task of
        # their own, each within ``timeout_s``; a cancelled caller stops waiting, the closes go on.
        left = False  # the caller stopped waiting: no one hears the problems but the log

        async def close_all_then_say() -> list[tuple[str, str]]:
            found = await close_all()
            if left and found:
                _warn_unheard(found)
            return found

        task = get_running_loop().create_task(close_all_then_say())
        _STARTED.add(task)
        task.add_done_callback(_STARTED.discard)
        found: list[tuple[str, str]] = []
        try:
            with anyio.CancelScope(shield=True):
                found = await asyncio.shield(task)
        except BaseException:
            left = True  # one loop thread: the task has not returned yet, or did just now (below)
            if task.done() and not task.cancelled() and task.exception() is None and task.result():
                _warn_unheard(task.result())
            raise
        return [text for text, _kind_of in found]


def _kind(value: object) -> str:
    """A value's class name, escaped for a log line (a plugin's class: ``type()`` takes any string)."""
    return one_line(type(value).__qualname__)


def _warn_unheard(problems: list[tuple[str, str]]) -> None:
    """Problems of a close whose caller stopped waiting (natively cancelled): logged, not lost.

    Their kinds and count only: their texts quote the adapter's errors (a
    server's message, a host name), which no record carries without capture.
    """
    _log.warning(
        "closing per-loop values after the caller stopped waiting: %d problem(s): %s",
        len(problems),
        "; ".join(kind for _text, kind in problems),
    )


def _warn_released(kinds: list[str]) -> None:
    """Values given to ``discard`` unclosed, their close cut short by their loop's end: WARNING, span event.

    Their count and classes only (no ids). Once per :meth:`PerLoop.aclose`,
    which forgets them: a later ``aclose()`` has nothing to say about them.
    """
    _log.warning(
        "per-loop values released without being closed (their event loop finished under their close): %d: %s",
        len(kinds),
        "; ".join(kinds),
    )
    current_span_event("agentium.per_loop.released", {"agentium.per_loop.released": len(kinds)})
