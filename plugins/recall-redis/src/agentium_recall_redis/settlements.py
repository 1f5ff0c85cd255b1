"""Work left running after a write returned, on the loops the store serves; what an erase waits for.

A write whose reply was lost is settled in the background (a *settlement*:
:mod:`agentium_recall_redis.writes`); a staging given up and garbage
collected also run there (*cleanup*). Each is an asyncio task of the loop
the write ran on, and one store serves several loops, so :class:`Settlements`
tracks them under a thread lock.

**A loop that no longer runs.** A task can only finish while its loop runs.
A closed loop never runs again: its tasks are dropped at once, finished or
not, and an unfinished one's coroutine closed there and then (a host that
closes a loop per request would otherwise keep each request's leftovers,
and so its loop, for the store's lifetime). A settlement's loop is watched
for that: closing the loop drops its tasks in ``loop.close()`` itself, with
the WARNING that the write's outcome stays unknown
(:meth:`Settlements._watch`); otherwise the store's next call does. A loop that stopped
but is not closed may run again (``run_until_complete`` called again), so its
tasks are kept. Either way the task cannot settle while its loop does not
run: such a settlement is *stranded*. An erase refuses while a settlement is
running or stranded, because the write it settles may still land after the
erase; a stranded one stops counting at its bound (``settle_timeout_s``
after the write was cut off), the time a running settlement gives up at too
(the outcome unknown), so a loop the host abandoned does not block erasure
for good.

**What an erase waits for.** Each task is started with its *scope*, the
tenant key prefix it writes under (a settlement's tokens and every key its
scripts touch carry it; cleanup is one tenant's too), and an erase waits
only for the settlements of its own tenant (:meth:`Settlements.wait` with
``scope``): another tenant's cannot write into it, and waiting for them made
every erase wait its whole bound and be refused under steady traffic of
other tenants. A task started without a scope counts for every erase. A
token names its tenant only, so a settlement is also started with the owner
keys of the sources its write is of, where the writer knows them
(``owners``): a user's or session's erase (``under``, the owner-key prefix
its erasure fence covers) then waits only for those of its own owners, the
owners its fence refuses the writes of; one started without owners counts
for every erase of its tenant. An erase's own call cut off (its ``ERASE``
only removes rows) is started with its target as its owners, an owner-key
prefix (:mod:`agentium_recall_redis.erase_rows`): it counts for an erase
whose target covers it or is covered by it, not for another user's or
session's. An erase does not wait for cleanup
(``cleanup=False``) at all: a staging given up (``ABORT``) and garbage
collected (``COLLECT``) only remove postings and move a staging from the
pending set to the garbage queue, never write words;
the erase gives up its target's stagings and collects the tenant's garbage
itself, and a background ``ABORT`` landing after that finds the target's
stagings already gone (:mod:`agentium_recall_redis.erase`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Coroutine
from typing import Any, Final

import attrs

__all__ = ["Pending", "Settlements"]

#: The same logger as the store's.
logger = logging.getLogger("agentium.plugins.recall_redis")

#: How often a wait looks whether another loop's work has ended (its end wakes no one here).
_WATCH_S: Final = 0.02

#: How long :meth:`Settlements.drain` gives the work it cancelled to unwind, on any loop.
_UNWIND_S: Final = 1.0

#: The delay of the timer that watches a settlement's loop close (:meth:`Settlements._watch`): a day,
#: past any settlement's bound, so it never fires while the settlement runs.
_WATCH_CLOSE_S: Final = 86400.0


def _watching() -> None:
    """The watch timer's callback: nothing (only the timer's release matters)."""


def _loop_closed(owner: weakref.ref[Settlements], loop: weakref.ref[asyncio.AbstractEventLoop]) -> None:
    """A watch timer was released: if by its loop's close, drop that loop's work now (WARNING and all)."""
    settlements, released = owner(), loop()
    if settlements is not None and released is not None and released.is_closed():
        with contextlib.suppress(Exception):  # raised in a weakref callback, it would only be printed
            settlements._sweep(lock_s=_UNWIND_S)


def _close_dropped(tasks: list[asyncio.Task[Any]]) -> None:
    """Close the coroutines of a closed loop's unfinished tasks now, on a thread with no event loop.

    Left to the garbage collector, each task logged "Task was destroyed but it
    is pending!" at ERROR (the store says it at WARNING) and its coroutine's
    cleanup (a shielded disconnect, a tenant's collection marked done) ran
    whenever and on whichever thread the collector ran: inside another loop's
    task, or failing there ("Exception ignored in"). Its loop is gone, so
    what needs it fails at once; nothing else is released there.
    """

    def close() -> None:
        for task in tasks:
            with contextlib.suppress(AttributeError):  # asyncio's own flag for a task dropped on purpose
                task._log_destroy_pending = False  # type: ignore[attr-defined]
            coro = task.get_coro()
            if coro is not None:
                with contextlib.suppress(Exception):  # cleanup that needed the closed loop
                    coro.close()

    closer = threading.Thread(target=close, name="agentium-recall-redis-dropped", daemon=True)
    try:
        closer.start()
    except RuntimeError:  # no new thread: at interpreter shutdown (an atexit handler closing a loop)
        # Raised from here, the sweep lost its WARNING (swallowed in a loop's close, or failing a store
        # call) with the bounds already kept. Closed here when no loop runs on this thread, as at exit;
        # else left to the collector.
        if asyncio._get_running_loop() is None:
            close()
        return
    closer.join(1.0)  # our coroutines' cleanup does no I/O without a loop: this ends at once


@attrs.frozen
class Pending:
    """What is still unfinished after :meth:`Settlements.wait`, by cause; true when anything is."""

    #: Settlements of cut-off writes still running on a running loop.
    settling: int = 0
    #: Settlements of cut-off writes whose loop stopped or closed before they finished, within their bound.
    stranded: int = 0
    #: Cleanup (a staging given up, garbage collected) still running on a running loop.
    cleanup: int = 0

    @property
    def total(self) -> int:
        """How many in all."""
        return self.settling + self.stranded + self.cleanup

    def __bool__(self) -> bool:
        return self.total > 0

    def reason(self) -> str:
        """Why an erase is refused, as it is (empty when nothing is pending); no ids, no content."""
        why = []
        if self.settling:
            why.append(
                f"{self.settling} write(s) cut off earlier are still being settled, so a copy could still "
                "land after the erase"
            )
        if self.stranded:
            why.append(
                f"{self.stranded} write(s) cut off earlier could not be settled: the event loop their "
                "settlement ran on stopped or closed before it finished, so a copy could still land after "
                "the erase (such a settlement is waited for until settle_timeout_s after its write was cut "
                "off; the write may land even later)"
            )
        if self.cleanup:
            why.append(
                f"{self.cleanup} background cleanup task(s) of earlier writes (giving up a staging, "
                "collecting garbage) are still running"
            )
        return "; ".join(why)


@attrs.define
class _Entry:
    """A tracked task: ``settles_by`` is a settlement's bound (monotonic clock), ``None`` for cleanup.

    ``scope`` is the tenant key prefix it writes under (``None``: unknown, so it counts for every erase);
    ``owners`` the owner keys of what it writes, or owner-key prefixes (an erase's own call: its target),
    ``None`` when unknown: it counts for every erase of the tenant.
    """

    settles_by: float | None
    scope: str | None = None
    owners: frozenset[str] | None = None
    #: The weak reference (with its callback) to its loop's watch timer (a settlement's, see
    #: :meth:`Settlements._watch`); the callback runs only while this holds it.
    closing: weakref.ref[asyncio.TimerHandle] | None = None

    def unwatch(self) -> None:
        """Stop watching its loop: drop the weak reference, and cancel the timer if it is still scheduled.

        Called on the task's loop (its done callback): a timer is not cancelled from another thread.
        """
        watch, self.closing = self.closing, None
        timer = watch() if watch is not None else None
        if timer is not None:
            timer.cancel()

    def counted(self, scope: str | None, under: str) -> bool:
        """Whether it counts for a wait of ``scope`` (``None``: every task) and owner-key prefix ``under``."""
        if scope is None or self.scope is None:
            return True
        if self.scope != scope:
            return False
        # Owner keys are segments joined by "/" (none holds one): a prefix "u/" or "u/s/" names exactly
        # that user's or session's owners, as the erasure fence reads it. An owner of the task may be such
        # a prefix too (an erase's own call, of its target): counted when either covers the other.
        return not under or self.owners is None or any(_nested(o, under) for o in self.owners)


def _nested(owner: str, under: str) -> bool:
    """Whether owner key (or owner-key prefix) ``owner`` and owner-key prefix ``under`` overlap."""
    return owner.startswith(under) or under.startswith(owner)


class Settlements:
    """Work that goes on after its write returned: settling, giving up stagings, collecting garbage.

    A write is settled in the background when it was cancelled or could not
    be settled by its deadline. Each is an asyncio task of the loop the write
    ran on (one store serves several loops), bounded by its own deadline;
    :meth:`drain` waits for the ones still running (and those they start), at
    most ``within_s`` seconds in all, cancels the rest, each on its own loop,
    and starts nothing more. A task whose loop has closed is dropped; see the
    module for a loop that does not run.
    """

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], _Entry] = {}
        # Settlements dropped with their closed loop: unsettled until their bound (no task is kept).
        self._lost: list[_Entry] = []
        self._lock = threading.Lock()  # tasks of several loops start and end on their threads
        self._closed = False

    def __len__(self) -> int:
        """How many tasks are tracked (a closed loop's are dropped first)."""
        self._sweep()
        with self._lock:
            return len(self._tasks)

    def start(
        self,
        work: Coroutine[Any, Any, Any],
        *,
        settles_by: float | None = None,
        scope: str | None = None,
        owners: frozenset[str] | None = None,
    ) -> None:
        """Run ``work`` in the background (a task of the running loop), tracked until it ends.

        ``settles_by`` (on the :func:`time.monotonic` clock) marks ``work`` as
        a write's settlement with that bound; without it, it is cleanup.
        ``scope`` is the tenant key prefix ``work`` writes under (an erase of
        another tenant does not wait for it); without it, every erase does.
        ``owners``: the owner keys of the sources it writes, or owner-key
        prefixes (``u/``, ``u/s/``: every owner of that user or session; an
        erase's own call is started with its target's); an erase of other
        owners of the tenant does not wait for it. Without it, every erase
        of the tenant does.
        Once :meth:`drain` has begun closing, ``work`` is not run.
        """
        with self._lock:
            closed = self._closed
        if closed:
            work.close()  # drained: the store is closing, and later writes collect what is left
            self._refused(settles_by)
            return
        # Created outside the lock (an eager task factory runs the first step of `work` here, which may
        # start more work), then added under it only if drain has not closed meanwhile: drain closes and
        # reads what to cancel under the same lock, so no task starts unseen by it.
        task = asyncio.get_running_loop().create_task(work)
        entry = _Entry(settles_by, scope, owners)
        with self._lock:
            closed = self._closed
            if not closed:
                self._tasks[task] = entry
        if closed:
            task.cancel()  # as a rule before its first step: a settlement's own WARNING is not reached
            self._refused(settles_by)
            return
        if settles_by is not None:
            self._watch(task, entry)
        task.add_done_callback(self._forget)
        self._sweep()  # a request's loop closed since: drop its leftovers here too, not only on erase

    @staticmethod
    def _refused(settles_by: float | None) -> None:
        """A settlement not run because the store is closing: its write's WARNING said one goes on."""
        if settles_by is not None:
            logger.warning(
                "recall: the background settlement of a cut-off write was not started: the store is "
                "closing; the write's outcome stays unknown"
            )

    def _watch(self, task: asyncio.Task[Any], entry: _Entry) -> None:
        """Drop ``task`` (a settlement) as soon as its loop closes with it unfinished, saying so then.

        A closed loop runs nothing more, so neither the task nor its done
        callback can tell; only the store's next write, erase or close swept
        it, and the WARNING that its write's outcome stays unknown came that
        late (or never). But closing a loop discards the callbacks it has
        scheduled: a timer of no other use, scheduled on the task's loop and
        held nowhere else, is released in ``loop.close()`` itself, and the
        callback of the entry's weak reference to it sweeps there. The timer
        is cancelled when the task ends. A loop whose timers take no weak
        reference is swept at the next call, as before.

        Not a ``weakref.finalize``: once its exit hook has run, no finalizer
        runs, and a host's ``atexit`` handler registered before it (so run
        after it) closed its loop with nothing said and nothing dropped.
        """
        loop = task.get_loop()
        timer = loop.call_later(_WATCH_CLOSE_S, _watching)
        owner, of = weakref.ref(self), weakref.ref(loop)
        try:
            entry.closing = weakref.ref(timer, lambda _: _loop_closed(owner, of))
        except TypeError:  # not weakly referenceable (another loop implementation's timer)
            timer.cancel()

    def _forget(self, task: asyncio.Task[Any]) -> None:
        with self._lock:
            entry = self._tasks.pop(task, None)
        if entry is not None:
            entry.unwatch()  # on the task's loop: its done callback

    def _sweep(self, *, lock_s: float = -1) -> None:
        """Drop the tasks of closed loops (they never end); keep each dropped settlement's bound.

        ``lock_s``: how long to wait for the lock (``-1``: as long as it takes); a loop's close that
        cannot get it by then (a watch callback run on a thread holding it) leaves its work to the next sweep.
        """
        now = time.monotonic()
        if not self._lock.acquire(timeout=lock_s):
            return
        try:
            # Finished ones too: a task that ended in its loop's last iteration never ran the done
            # callback that forgets it (it was kept, and its loop, for the store's lifetime).
            gone = [(t, e) for t, e in self._tasks.items() if t.get_loop().is_closed()]
            for task, entry in gone:
                del self._tasks[task]
                if not task.done() and entry.settles_by is not None and entry.settles_by > now:
                    self._lost.append(entry)
            self._lost = [
                lost for lost in self._lost if lost.settles_by is not None and lost.settles_by > now
            ]
        finally:
            self._lock.release()
        unfinished = [(t, e) for t, e in gone if not t.done()]
        if unfinished:
            _close_dropped([task for task, _ in unfinished])
        settlements = sum(entry.settles_by is not None for _, entry in unfinished)
        if settlements:
            logger.warning(
                "recall: %d background settlement(s) of cut-off writes were dropped unfinished: their event "
                "loop was closed first; those writes' outcomes stay unknown",
                settlements,
                extra={"agentium_dropped": settlements},
            )

    def _pending(
        self, scope: str | None = None, *, under: str = "", cleanup: bool = True
    ) -> tuple[Pending, set[asyncio.Task[Any]]]:
        """What is unfinished now, and the tasks that can still finish (their loop runs).

        Only what counts for ``scope`` and ``under`` (:meth:`wait`), and cleanup only if ``cleanup``.
        """
        self._sweep()
        now = time.monotonic()
        settling = stranded = cleaning = 0
        running: set[asyncio.Task[Any]] = set()
        with self._lock:
            stranded = sum(lost.counted(scope, under) for lost in self._lost)
            for task, entry in self._tasks.items():
                if task.done() or not entry.counted(scope, under):
                    continue
                if entry.settles_by is None and not cleanup:
                    continue
                if task.get_loop().is_running():
                    running.add(task)
                    if entry.settles_by is None:
                        cleaning += 1
                    else:
                        settling += 1
                elif entry.settles_by is not None and entry.settles_by > now:
                    stranded += 1
        return Pending(settling, stranded, cleaning), running

    async def wait(
        self, within_s: float, *, scope: str | None = None, under: str = "", cleanup: bool = True
    ) -> Pending:
        """Wait at most ``within_s`` seconds for the unfinished work (and what it starts); what is left.

        Unlike :meth:`drain` nothing is cancelled and later work may start.
        Erasure waits here, so a write cut off earlier is applied or fenced
        before the erase reads what to remove (or the erase is refused, saying
        why: :meth:`Pending.reason`). With ``scope`` (a tenant key prefix),
        only for the work of that tenant (and work started without a scope);
        with ``under`` too (an owner-key prefix: ``u/``, ``u/s/``), only for
        its work of owners under it (and work started without owners);
        without ``cleanup``, for settlements only (see the module).
        """
        await self._wait(within_s, stranded=True, scope=scope, under=under, cleanup=cleanup)
        return self._pending(scope, under=under, cleanup=cleanup)[0]

    async def _wait(
        self,
        within_s: float,
        *,
        stranded: bool,
        scope: str | None = None,
        under: str = "",
        cleanup: bool = True,
    ) -> None:
        """Wait at most ``within_s`` seconds while work is unfinished (``stranded``: that too) or running."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while loop.time() < deadline:
            pending, running = self._pending(scope, under=under, cleanup=cleanup)
            left = pending.total if stranded else len(running)
            if not left:
                return
            mine = {t for t in running if t.get_loop() is loop}
            if running and len(mine) == left:
                await asyncio.wait(mine, timeout=deadline - loop.time())
            else:  # another loop's task (its end wakes no one here), or a stopped loop that may run again
                await asyncio.sleep(min(_WATCH_S, max(0.0, deadline - loop.time())))

    async def settle(self, within_s: float) -> int:
        """:meth:`wait`, and how many are still unfinished."""
        return (await self.wait(within_s)).total

    async def drain(self, within_s: float) -> None:
        """Wait at most ``within_s`` seconds for the running work; cancel what is left; start no more.

        Work whose loop does not run (stopped or closed) is not waited for: it
        cannot finish meanwhile.

        What it cancelled gets up to a second more to unwind, on whichever
        loop it runs (one that does not run is not waited for).
        """
        loop = asyncio.get_running_loop()
        # Only what can finish meanwhile: a settlement whose loop stopped or closed (which an erase still
        # counts until its bound) held the close up to that bound for nothing.
        await self._wait(within_s, stranded=False)
        self._sweep()
        with self._lock:
            self._closed = True  # under the lock start() adds under: nothing starts after this read
            pending = {t for t in self._tasks if not t.done()}
        for task in pending:
            if task.get_loop() is loop:
                task.cancel()
            else:
                with contextlib.suppress(RuntimeError):  # that loop closed meanwhile
                    task.get_loop().call_soon_threadsafe(task.cancel)
        # Each cancelled task unwinds (a staging given up, its WARNING) before aclose() closes its loop's
        # connection, whichever loop it runs on: only this loop's were waited for, and under trio (drained
        # from a worker thread's new loop) every one is another loop's. A loop that does not run cannot
        # unwind it: not waited for.
        deadline = loop.time() + _UNWIND_S
        while (
            left := {t for t in pending if not t.done() and t.get_loop().is_running()}
        ) and loop.time() < deadline:
            mine = {t for t in left if t.get_loop() is loop}
            if len(mine) == len(left):
                await asyncio.wait(mine, timeout=deadline - loop.time())
            else:  # another loop's task: its end wakes no one here
                await asyncio.sleep(min(_WATCH_S, max(0.0, deadline - loop.time())))
