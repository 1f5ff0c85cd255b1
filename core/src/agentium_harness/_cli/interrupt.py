"""Ctrl-C for the ``agentium`` command: one short message and status 130, however many SIGINTs arrive.

Python's own handling gave a traceback: ``asyncio``'s runner turns the first
SIGINT into a cancellation of the command's task and then re-raises it as
``KeyboardInterrupt`` out of ``anyio.run``, which no command caught; a second
SIGINT, while the runtime was closing, raised ``KeyboardInterrupt`` in
whatever cleanup code was running (an adapter's close, the loop's own
shutdown), so that cleanup was cut short too.

:func:`interrupts` (around the whole command, in ``main()``) installs a
handler that is never re-entered into a traceback:

- the first SIGINT cancels the command's work when an event loop runs it
  (:func:`run_async`, every core command's ``anyio.run``): the runtime
  closes as on any cancellation, bounded by the engine's close limits; outside
  a loop (reading a config, a plugin command's wait) it raises
  ``KeyboardInterrupt`` once, which ``main()`` reports;
- every later SIGINT is ignored: the command is already shutting down;
- the process exits at most :data:`SHUTDOWN_GRACE_S` after the first one,
  status :data:`EXIT_INTERRUPTED`, whatever is still running (a watchdog
  thread: a close blocked in a worker thread cannot hold the command).

``main()`` returns to whoever called it (a test, a host embedding it), so
once the command ends the previous handler is back and the watchdog is
stopped: left behind, they ignored the host's own Ctrl-C for good and ended
the host 20 s later, whatever it did by then. Only the console script
(:func:`exiting`), whose process exits as ``main()`` returns, keeps both
through that exit: a worker thread still blocked in a close holds the
interpreter's exit (it joins them), and the watchdog bounds that too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType
from typing import Final, TypeVar, TypeVarTuple

import anyio

__all__ = ["EXIT_INTERRUPTED", "SHUTDOWN_GRACE_S", "exiting", "interrupted", "interrupts", "run_async"]

#: A command interrupted by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED: Final = 130

#: Seconds an interrupted command has, from the first Ctrl-C, to close its runtime before the
#: process exits without it: above the engine's default bounds of a close (``close_timeout_s``,
#: 5 s) and of a summary settle, so a close that keeps them ends on its own first.
SHUTDOWN_GRACE_S: Final = 20.0

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _State:
    """The SIGINTs of this command so far, the watchdog the first one started, and what it cancels."""

    __slots__ = ("cancel", "command", "count", "exiting", "watchdog")

    def __init__(self) -> None:
        self.command = ""
        self.count = 0
        #: The process exits once the command ends (:func:`exiting`): an interrupted one keeps
        #: ignoring SIGINT and its watchdog through that exit.
        self.exiting = False
        #: Cancels the running :func:`run_async`'s scope, from the signal handler; ``None`` outside
        #: :func:`run_async` (the handler then raises ``KeyboardInterrupt``).
        self.cancel: Callable[[], object] | None = None
        self.watchdog: threading.Timer | None = None


_STATE: Final = _State()


def interrupted() -> bool:
    """Whether a SIGINT reached the running command."""
    return _STATE.count > 0


def exiting() -> None:
    """Say that the process exits as soon as the command ends (the console script's entry, only).

    After a Ctrl-C, :func:`interrupts` then leaves SIGINT ignored and the watchdog running once
    the command ends, so that the exit itself (joining a worker thread a close left blocked)
    stays bounded by :data:`SHUTDOWN_GRACE_S`; called in-process, ``main()`` restores both.
    """
    _STATE.exiting = True


def _expire() -> None:
    """The grace is over: say so and exit now (a thread: the main one may be the one that hangs).

    Written to the file descriptor, not ``sys.stderr``: the main thread may hang holding its lock.
    """
    try:
        message = (
            f"agentium {_STATE.command}: interrupted; shutdown did not finish within "
            f"{SHUTDOWN_GRACE_S:g}s, exiting without it\n"
        )
        os.write(2, message.encode("utf-8", "backslashreplace"))
    finally:
        os._exit(EXIT_INTERRUPTED)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """The handler: the first SIGINT cancels or interrupts, later ones are ignored (module docs)."""
    _STATE.count += 1
    if _STATE.count > 1:
        return  # shutting down already; the watchdog bounds it
    watchdog = threading.Timer(SHUTDOWN_GRACE_S, _expire)
    watchdog.daemon = True
    watchdog.start()
    _STATE.watchdog = watchdog
    cancel = _STATE.cancel
    if cancel is None:
        raise KeyboardInterrupt
    # Called back by the loop, not here: this handler runs between any two bytecodes of the
    # main thread, the loop's own bookkeeping included; the call also wakes a loop in select().
    cancel()


@contextmanager
def interrupts(command: str) -> Iterator[None]:
    """Handle SIGINT as the module docs say while the body runs ``command``.

    Only in the main thread (the only one Python runs signal handlers in). Left as it was
    afterwards, the watchdog stopped, unless a SIGINT came to a process that is exiting
    (:func:`exiting`): then later ones stay ignored and the watchdog keeps running, so that
    the process exits at once and within the grace.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    _STATE.command, _STATE.count, _STATE.cancel, _STATE.watchdog = command, 0, None, None
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        _STATE.cancel = _counted  # a SIGINT from here on is counted, not raised into this cleanup
        if _STATE.count and _STATE.exiting:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        else:
            # ``None``: a handler not set from Python; SIG_DFL is the closest it can be put back as.
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
            watchdog, _STATE.watchdog = _STATE.watchdog, None
            if watchdog is not None:
                watchdog.cancel()
                # Returns at once once cancelled (no thread outlives main()); bounded all the same,
                # for a watchdog that fired just now and is writing to a stderr nobody reads.
                watchdog.join(1.0)


def run_async(func: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """``anyio.run(func, *args)`` in a cancel scope the first SIGINT cancels.

    An anyio cancellation, not the task's: the engine's shielded scopes (a commit under way)
    keep it out as from any other cancellation. Ended by it, raises ``KeyboardInterrupt``
    (``main()`` reports it); a SIGINT that came before the loop started ends it at once.
    """

    async def root() -> tuple[T] | None:
        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope:
            _STATE.cancel = partial(loop.call_soon_threadsafe, scope.cancel)
            try:
                if _STATE.count:
                    scope.cancel()
                return (await func(*args),)
            finally:
                _STATE.cancel = _counted
        return None  # cancelled by the scope: by a SIGINT

    # While the loop starts or winds down around ``root``, a SIGINT is counted, not raised:
    # raised there, it cut the loop's own teardown short. ``root`` ends at once if it came first.
    _STATE.cancel = _counted
    try:
        done = anyio.run(root)
    finally:
        _STATE.cancel = None
    if done is None:
        raise KeyboardInterrupt
    return done[0]


def _counted() -> None:
    """What a SIGINT does while the loop starts or winds down: nothing but being counted."""
