"""Adapter calls the engine runs in its caller's own task, because they wait only for thread hops (R10, R12).

:func:`~.bounded.bounded` runs every adapter call as a task of its own, so
the engine can walk away from one blocked where cancellation cannot reach it.
For a call that awaits nothing but thread hops of
:class:`~agentium_harness.adapters.threaded.ThreadBoundAdapter` (the
built-in SQLite session store's loads, saves and commits and the SQLite
archive's appends, which vouch for it: see
``Ticket.call``'s ``hops_only``), that task and its cancel scope were about
half the engine's cost of the call. :func:`bounded_inline` runs such work in
the caller's task instead, and each of its hops waits for its worker thread
through :meth:`Inline.wait`, which keeps every promise of ``bounded`` itself
(see there): the deadline holds for a thread that never returns, the grace
and ``SETTLE_ITERATIONS`` are the same, and so are abandonment and its
report, and a cancelled caller's exit.
"""

from __future__ import annotations

import contextvars
from asyncio import get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from .bounded import ABANDON_GRACE_S, SETTLE_ITERATIONS, Overrun, bounded, loop_deadlines
from .loops import ThreadSafeEvent, current_library

__all__ = ["Inline", "bounded_inline", "inline_call"]

T = TypeVar("T")


class _Alarm:
    """What ``_Deadlines`` wakes for an inline call: it resolves a hop's future with ``_PAST`` if undone."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future

    def done(self) -> bool:
        return bool(self.future.done())

    def set_result(self, _: None) -> None:
        self.future.set_result(_PAST)


_PAST: Any = object()  # what an alarm resolves a hop's future with: its time came first


class _EndNotice:
    """Stands in for an abandoned inline call's future: the thread's hand-back sets ``event`` instead."""

    __slots__ = ("event",)

    def __init__(self, event: ThreadSafeEvent) -> None:
        self.event = event

    def done(self) -> bool:
        return self.event.is_set()

    def set_result(self, _: object) -> None:
        self.event.set()

    def set_exception(self, _: BaseException) -> None:
        self.event.set()


# The inline bounded call the running code is part of (set in the caller's task, for the work's duration).
_INLINE: contextvars.ContextVar[Inline | None] = contextvars.ContextVar("agentium_inline_call", default=None)


def inline_call() -> Inline | None:
    """In an adapter's thread hop on asyncio: the inline bounded call it is part of, else ``None``."""
    return _INLINE.get()


class Inline:
    """The deadline of a bounded call run in its caller's own task, kept by the one kind of wait it makes.

    :func:`bounded_inline` runs work whose only waits are thread hops of
    :class:`~agentium_harness.adapters.threaded.ThreadBoundAdapter` (the
    engine vouches for it, see ``Ticket.call``). Such a hop waits for its
    thread through :meth:`wait`, which keeps what :func:`bounded` promises,
    without a task and a cancel scope per call: the caller resumes at the
    deadline even if the thread never returns, ``on_deadline`` runs first, the
    thread is told its caller stopped waiting (its job is cancelled if it had
    not started), gets the grace and ``SETTLE_ITERATIONS`` to end, and
    is otherwise abandoned (``on_abandon`` gets an event set when it ends, or
    when the hop would have stopped waiting for it, ``cancel_grace_s`` after
    its cancellation); :class:`Overrun` is raised either way. A cancelled
    caller gives the thread the same grace, then leaves.
    """

    __slots__ = ("grace_s", "on_abandon", "on_deadline", "timeout_s", "until")

    def __init__(
        self,
        until: float,
        timeout_s: float,
        on_deadline: Callable[[], None] | None,
        grace_s: float,
        on_abandon: Callable[[ThreadSafeEvent], None] | None,
    ) -> None:
        self.until = until
        self.timeout_s = timeout_s
        self.on_deadline = on_deadline
        self.grace_s = grace_s
        self.on_abandon = on_abandon

    async def wait(self, loop: Any, hop: Any, job: Any, cancel_grace_s: float) -> Any:
        """Await ``hop.waiter`` (resolved by the thread's hand-back) up to the deadline; see the class.

        ``hop`` has ``waiter`` (the future the thread's hand-back resolves, read
        when it runs on the loop) and ``cancelled``; ``job`` is the pool's
        (``cancel()``, ``done()``).
        """
        deadlines = loop_deadlines(loop)
        waiter = hop.waiter
        alarm = _Alarm(waiter)
        deadlines.add(alarm, self.until)
        try:
            value = await waiter
        except BaseException as exc:
            deadlines.discard(alarm)
            if waiter.done() and not waiter.cancelled() and waiter.exception() is exc:
                raise  # the thread's own error, in time
            # The caller was cancelled (shutdown): as ``_leave``, the thread gets the grace to stop.
            hop.cancelled = True
            job.cancel()
            await self._stop(loop, hop, job, cancel_grace_s)
            raise
        deadlines.discard(alarm)
        if value is not _PAST:
            return value
        if self.on_deadline is not None:
            self.on_deadline()
        hop.cancelled = True
        job.cancel()
        stopped = await self._stop(loop, hop, job, cancel_grace_s)
        raise Overrun(self.timeout_s, abandoned=not stopped)

    async def _stop(self, loop: Any, hop: Any, job: Any, cancel_grace_s: float) -> bool:
        """Wait up to the grace, then ``SETTLE_ITERATIONS`` iterations, for the thread; else abandon it."""
        cancelled_at = loop.time()
        if cancel_grace_s <= 0:
            return True  # the hop does not wait for a thread it abandons on cancellation: it ends at once
        if not job.done():
            ended = hop.waiter = loop.create_future()
            alarm = _Alarm(ended)
            deadlines = loop_deadlines(loop)
            with anyio.CancelScope(shield=True):
                deadlines.add(alarm, cancelled_at + self.grace_s)
                try:
                    await ended
                except BaseException:
                    if not ended.done() or ended.cancelled():
                        raise  # the task itself cancelled (not through anyio): as in ``_Call.stop``
                    # Else the thread's error: only its end matters here.
                finally:
                    deadlines.discard(alarm)
                for _ in range(SETTLE_ITERATIONS):
                    if job.done():
                        break
                    await anyio.lowlevel.cancel_shielded_checkpoint()
        if job.done():
            return True
        # Abandoned: what the thread hands back now only marks its end. The hop gave a thread up
        # ``cancel_grace_s`` after its cancellation at the latest, and so does this call's end.
        event = ThreadSafeEvent()
        hop.waiter = _EndNotice(event)
        loop.call_at(cancelled_at + cancel_grace_s, event.set)
        if self.on_abandon is not None:
            self.on_abandon(event)
        return False


async def bounded_inline(
    work: Callable[[], Awaitable[T]],
    timeout_s: float,
    *,
    on_deadline: Callable[[], None] | None = None,
    grace_s: float = ABANDON_GRACE_S,
    on_abandon: Callable[[ThreadSafeEvent], None] | None = None,
) -> T:
    """:func:`bounded` for work that waits only for thread hops, run in the caller's own task (on asyncio).

    Only for work the engine knows (see ``Ticket.call``): its thread hops
    keep the deadline (:class:`Inline`); anything else it awaited would not be
    bounded. It saves the call's task and cancel scope (about half the cost
    of a call handed to a worker thread).
    """
    if current_library() != "asyncio":  # the hops keep deadlines on asyncio only
        return await bounded(work, timeout_s, on_deadline=on_deadline, grace_s=grace_s, on_abandon=on_abandon)
    until = get_running_loop().time() + timeout_s
    token = _INLINE.set(Inline(until, timeout_s, on_deadline, grace_s, on_abandon))
    try:
        return await work()
    finally:
        _INLINE.reset(token)
