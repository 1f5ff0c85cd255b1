"""Run one async callable from several threads, each on an event loop of its own (any-loop tests).

This is the concurrent-access pattern of the OpenAI Agents SDK's session
tests: one shared object (an adapter, a runtime) used at the same time from
threads that each start their own event loop, and from event loops that end
between calls. Every Agentium adapter and the runtime must pass it
(docs/runtime.md, "Event loops and threads"); plugin tests use it against
their real servers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import anyio

from .._errors import InvalidArgumentError
from .._validators import check_count, check_duration

__all__ = ["LoopStyle", "run_in_threads", "run_in_turn"]

T = TypeVar("T")

#: How a thread runs its loop: ``"asyncio"`` is ``anyio.run`` on asyncio; ``"asyncio-loop"`` is the
#: SDK tests' own way (``asyncio.new_event_loop()``, ``run_until_complete``, ``close()``, which
#: cancels nothing still pending); ``"trio"`` is ``anyio.run`` on trio.
LoopStyle = Literal["asyncio", "asyncio-loop", "trio"]
_STYLES: tuple[LoopStyle, ...] = ("asyncio", "asyncio-loop", "trio")


def _checked(work: object, styles: object, count: object, what: str) -> tuple[tuple[LoopStyle, ...], int]:
    """``(styles, count)`` checked, else :class:`InvalidArgumentError`: nothing has run yet.

    An unknown style ran as "asyncio" (a typo tested another loop than the one meant), no
    styles raised ZeroDivisionError, and no calls passed having run nothing.
    """
    if not callable(work):
        raise InvalidArgumentError(
            f"work must be an async callable taking the index, got {type(work).__name__}"
        )
    if isinstance(styles, str) or not isinstance(styles, tuple | list) or not styles:
        raise InvalidArgumentError(
            f"styles must be a non-empty tuple of {', '.join(_STYLES)}, got {styles!r}"
        )
    unknown = [s for s in styles if s not in _STYLES]
    if unknown:
        raise InvalidArgumentError(f"unknown loop style(s) {unknown!r}; use {', '.join(_STYLES)}")
    return tuple(styles), check_count(count, what)


def _run_on_new_loop(style: LoopStyle, work: Callable[[int], Awaitable[T]], index: int) -> T:
    async def main() -> T:
        return await work(index)

    if style == "asyncio-loop":
        loop = asyncio.new_event_loop()
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(main())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return anyio.run(main, backend="trio" if style == "trio" else "asyncio")


def run_in_threads(
    work: Callable[[int], Awaitable[T]],
    *,
    threads: int = 4,
    styles: tuple[LoopStyle, ...] = ("asyncio",),
    timeout_s: float = 60.0,
) -> list[T]:
    """Run ``work(i)`` for ``i`` in ``range(threads)`` at once, each in its own thread and event loop.

    Thread ``i`` runs its loop in the style ``styles[i % len(styles)]``, so
    ``styles=("asyncio", "trio")`` mixes both libraries on one shared object.
    The threads start together (a barrier), so their calls overlap. Returns
    the results in order of ``i``; re-raises the first exception a thread
    raised (the others' are attached as notes), and raises ``AssertionError``
    if a thread is still running after ``timeout_s`` (a hang is a failure,
    never a silent wait). A bad argument (no threads, an unknown loop style, a
    ``timeout_s`` that is not a duration) is :class:`InvalidArgumentError`.
    """
    styles, threads = _checked(work, styles, threads, "threads")
    timeout_s = check_duration(timeout_s, "timeout_s")
    barrier = threading.Barrier(threads)
    results: dict[int, T] = {}
    errors: dict[int, BaseException] = {}

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout_s)
            results[i] = _run_on_new_loop(styles[i % len(styles)], work, i)
        except BaseException as exc:  # reported to the caller below, never lost in the thread
            errors[i] = exc

    workers = [threading.Thread(target=worker, args=(i,), name=f"any-loop-{i}") for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout_s)
    stuck = [t.name for t in workers if t.is_alive()]
    if stuck:
        raise AssertionError(f"threads {stuck} were still running after {timeout_s}s (a hang)")
    if errors:
        first = errors[min(errors)]
        for i, exc in sorted(errors.items()):
            if exc is not first:
                first.add_note(f"thread {i} also raised {type(exc).__name__}: {exc}")
        raise first
    return [results[i] for i in range(threads)]


def run_in_turn(
    work: Callable[[int], Awaitable[T]],
    *,
    calls: int = 3,
    styles: tuple[LoopStyle, ...] = ("asyncio",),
) -> list[T]:
    """Run ``work(i)`` for ``i`` in ``range(calls)`` one after another, each on a new event loop.

    This is what a synchronous host does when it calls ``anyio.run`` per
    request: every call's loop has ended before the next one starts. Call
    ``i`` uses ``styles[i % len(styles)]``. Returns the results in order.
    """
    styles, calls = _checked(work, styles, calls, "calls")
    return [_run_on_new_loop(styles[i % len(styles)], work, i) for i in range(calls)]
