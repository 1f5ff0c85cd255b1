"""Owned memory work and its truthful drain (R40).

Extraction and final writes that a :class:`~agentium_harness._engine.memory.manager.MemoryManager`
starts run as background tasks of the event loop (like the runtime's summary
updates, :mod:`agentium_harness._engine.owned_work`), each with its own cancel
scope and a name. Work that another component owns — the runtime's summary
updates — is covered through a :class:`WorkSource`, so one ``drain`` waits
for all of it.

:meth:`WorkTracker.drain` waits up to its timeout, cancels what is still
running, gives it a bounded grace to stop, and returns a :class:`DrainResult`
naming every item as completed, failed or cancelled. An item that did not
stop even after cancellation is reported as cancelled with that said, and
stays tracked, so the next drain looks at it again.

Work runs on the event loop that started it; a drain may run on any loop
and thread (it waits on thread-safe events and cancels each item on its own
loop). Work whose loop ends before it finishes (``anyio.run`` per call) is
cancelled with that loop and reported as cancelled, saying so.

What a drain reports is in :mod:`.drain_result`, the work sources and drain
scopes in :mod:`.work_sources`, an item's cancel signal in :mod:`.work_signal`;
their names are imported from here too.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..._errors import ErasureInProgressError, InvalidArgumentError
from ..._observe import spans as observe
from ..._observe.turn import observed_drain
from ..._ports import CancelSignal
from ..._text import error_text
from ..._validators import MAX_DURATION_S, exact_number, shown_number
from ..bounded import spawn
from ..loops import LoopHandle, ThreadSafeEvent
from .drain_result import DrainItem, DrainResult, DrainStatus
from .work_signal import bind_work_signal, current_work_signal, outside_owned_work
from .work_sources import AllBut, OwnedWorkSource, WorkSource, belongs, covers, let_go, weak_owner

__all__ = [
    "AllBut",
    "DrainItem",
    "DrainResult",
    "DrainStatus",
    "OwnedWorkSource",
    "WorkSource",
    "WorkTracker",
    "current_work_signal",
    "outside_owned_work",
]

#: Longest a drain waits for cancelled work to stop, on top of its timeout.
CANCEL_GRACE_S = 2.0

#: Most ended items kept between two drains. A long-lived agent that never drains would otherwise
#: keep one item per extraction forever; past this, the oldest completed item is dropped first (then
#: the oldest of any status) and only counted, so the next drain still reports every item truthfully.
MAX_ENDED_ITEMS = 1000


class _Item:
    __slots__ = (
        "detail",
        "done",
        "fact_ids",
        "kind",
        "loop",
        "name",
        "owner",
        "scope",
        "seq",
        "signal",
        "status",
        "task",
    )

    def __init__(self, name: str, kind: str, owner: object = None) -> None:
        self.name = name
        self.kind = kind
        self.owner = weak_owner(owner)  # the runtime whose operation started it, if any
        self.loop = LoopHandle.current()
        self.done = ThreadSafeEvent()
        self.scope = anyio.CancelScope()
        # Set with the scope: the item's calls' signals are its children (``current_work_signal``).
        self.signal = CancelSignal()
        self.status: DrainStatus | None = None
        self.detail = ""
        self.fact_ids: tuple[str, ...] = ()  # a failed take-back's facts, left to forget
        self.task: Any = None  # the asyncio task, kept referenced so it is not collected
        self.seq = 0  # order of ending, so kept items are reported in the order they ended

    def cancel(self, detail: str) -> None:
        """Cancel from any thread: its signal first (threads see it), then its scope on its own loop; once."""
        if not self.scope.cancel_called:
            self.detail = detail
            self.signal.cancel(detail)
            self.loop.run_soon(self.scope.cancel)

    def item(self, stopped: bool = True) -> DrainItem:
        status = self.status or DrainStatus.CANCELLED
        return DrainItem(self.name, self.kind, status, self.detail, stopped, self.fact_ids)


class WorkTracker:
    """Owned background work by name, plus the :class:`WorkSource` objects it also drains."""

    def __init__(self) -> None:
        # Work starts, ends and is drained on several loops' threads: changes and iterations of the
        # collections below happen under this lock.
        self._lock = threading.Lock()
        self._running: dict[str, _Item] = {}
        # Ended items since the last drain, bounded by MAX_ENDED_ITEMS: completed ones apart from the
        # rest so the oldest completed item is dropped first; dropped ones are only counted.
        self._ended_ok: collections.deque[_Item] = collections.deque()
        self._ended_bad: collections.deque[_Item] = collections.deque()
        # By owner, so a runtime's own drain takes its own: the owner held weakly (by id, with its
        # reference), never kept alive by the shared manager's counts. ``None``: work no runtime's
        # operation started, and the counts of owners that are gone (:meth:`_fold_gone`).
        self._dropped: dict[int | None, tuple[Callable[[], object] | None, dict[DrainStatus, int]]] = {}
        self._ended_seq = 0
        self._sources: list[WorkSource] = []
        self._counter = 0

    def _end(self, item: _Item) -> None:
        """Record ``item`` as ended (caller holds the lock), dropping the oldest past the bound."""
        self._ended_seq += 1
        item.seq = self._ended_seq
        (self._ended_ok if item.status is DrainStatus.COMPLETED else self._ended_bad).append(item)
        while len(self._ended_ok) + len(self._ended_bad) > max(1, MAX_ENDED_ITEMS):
            oldest = self._ended_ok.popleft() if self._ended_ok else self._ended_bad.popleft()
            self._fold_gone()
            self._counts(oldest.owner)[oldest.status or DrainStatus.CANCELLED] += 1

    def _counts(self, ref: Callable[[], object] | None) -> dict[DrainStatus, int]:
        """The dropped counts of the owner ``ref`` refers to (caller holds the lock); gone: the unowned."""
        owner = ref() if ref is not None else None
        key, ref = (None, None) if owner is None else (id(owner), ref)
        return self._dropped.setdefault(key, (ref, dict.fromkeys(DrainStatus, 0)))[1]

    def _fold_gone(self) -> None:
        """Move the counts of owners that are gone into the unowned ones (caller holds the lock).

        Keeps one entry per live owner only (bounded), and an id reused by a new
        object never inherits a gone owner's counts: each entry is checked first.
        """
        for key, (ref, counts) in list(self._dropped.items()):
            if key is not None and (ref is None or ref() is None):
                del self._dropped[key]
                unowned = self._counts(None)
                for status, n in counts.items():
                    unowned[status] += n

    def track(self, source: WorkSource) -> None:
        """Cover ``source``'s work in every drain from now on (idempotent)."""
        if not isinstance(source, WorkSource):
            raise InvalidArgumentError(
                f"track() takes a WorkSource (pending() and settle()), got {type(source).__name__}; "
                "wrap a runtime's OwnedWork in OwnedWorkSource"
            )
        with self._lock:  # runtimes are built and closed on several threads (:meth:`_let_go`)
            if not any(s is source for s in self._sources):
                self._sources.append(source)

    def retire(self, owner: object) -> None:
        """``owner`` (a runtime) closed: its sources go once none owes a drain anything (now, or later)."""
        for source in self._sources:
            if isinstance(source, OwnedWorkSource) and source.owner is owner:
                source.retired = True
        self._let_go()

    def _let_go(self) -> None:
        """Stop tracking the retired sources with nothing left to drain (none running, no report owed)."""
        done = [s for s in self._sources if isinstance(s, OwnedWorkSource) and let_go(s)]
        with self._lock:
            self._sources = [s for s in self._sources if not any(s is d for d in done)]

    def busy(self, owner: object) -> bool:
        """Whether owned items of ``owner`` (whose operations or agent started them) are running."""
        return bool(self._snapshot(owner))

    def _snapshot(self, only: object = None) -> list[_Item]:
        with self._lock:
            running = [item for item in self._running.values() if belongs(item.owner, only)]
        alive = []
        for item in running:
            if item.loop.finished and not item.done.is_set():
                # Its loop was closed with it pending (loop.close() cancels nothing): it can never run again.
                with self._lock:
                    if self._running.get(item.name) is item:
                        del self._running[item.name]
                        item.status = DrainStatus.CANCELLED
                        item.detail = "cancelled: the event loop it ran on was closed before it finished"
                        self._end(item)
                item.done.set()
            else:
                alive.append(item)
        return alive

    def running(self) -> tuple[str, ...]:
        """Names of the owned items running now, and those of every tracked source."""
        names = [item.name for item in self._snapshot()]
        for source in self._sources:
            names.extend(source.pending())
        return tuple(names)

    def start(self, name: str, kind: str, work: Callable[[], Awaitable[object]], owner: object = None) -> str:
        """Run ``work`` in the background as ``name``; returns the name used (made unique).

        ``owner``: the runtime whose operation starts it (a drain of that runtime's work covers it).
        """
        with self._lock:
            self._counter += 1
            unique = name if name not in self._running else f"{name} #{self._counter}"
            item = _Item(unique, kind, owner)
            self._running[unique] = item

        async def run() -> None:
            bind_work_signal(item.signal)  # in this task's own context (spawn gives it a copy)
            try:
                with item.scope:
                    try:
                        await work()
                        item.status = DrainStatus.COMPLETED
                    except Exception as exc:
                        item.status = DrainStatus.FAILED
                        item.detail = error_text(exc)
                        if isinstance(exc, ErasureInProgressError):  # ids named in detail only with capture
                            item.fact_ids = exc.fact_ids
                if item.status is None:
                    item.status = DrainStatus.CANCELLED
                    item.detail = item.detail or "cancelled"
            finally:
                if item.status is None:
                    # Cancelled from outside its own scope: the event loop it ran on ended.
                    item.status = DrainStatus.CANCELLED
                    item.detail = "cancelled because the event loop it ran on ended before it finished"
                with self._lock:
                    self._running.pop(unique, None)
                    self._end(item)
                item.done.set()

        item.task = spawn(run)
        return unique

    async def drain(
        self, timeout_s: float, grace_s: float = CANCEL_GRACE_S, only: object = None
    ) -> DrainResult:
        """Wait up to ``timeout_s`` for all work, cancel what is left, and say what happened to each item.

        With ``only`` (a runtime), just that runtime's work: the items its
        operations started and its tracked :class:`OwnedWorkSource`; the rest,
        and the rest's reports, are left for another drain. With an
        :class:`AllBut`, all the work except its owners' (their own drains'). Every drain is
        logged (``agentium.engine.lifecycle``: WARNING when an item failed or
        was cancelled) and counted (``agentium.drain.items``).
        """
        started = time.perf_counter()
        with observe.stage("drain") as span:
            result = await self._drain(timeout_s, grace_s, only)
            counts = {
                "agentium.drain.completed": result.count(DrainStatus.COMPLETED),
                "agentium.drain.failed": result.count(DrainStatus.FAILED),
                "agentium.drain.cancelled": result.count(DrainStatus.CANCELLED),
            }
            for key, count in counts.items():
                span.set(key, count)
            if not result.ok:
                span.fail("drain_incomplete")
                # The degraded outcome is an event as well as the WARNING below: counts only, no names.
                span.event("agentium.drain.incomplete", counts)
        observed_drain(result, time.perf_counter() - started)
        return result

    async def _drain(self, timeout_s: float, grace_s: float, only: object) -> DrainResult:
        # Numbers' subclasses as their numbers (the rest of the drain uses these): their own
        # comparisons are not trusted.
        timeout = exact_number(timeout_s)
        if timeout is None or not timeout >= 0:
            raise InvalidArgumentError(
                f"drain timeout must be a number of seconds >= 0, got {shown_number(timeout_s)}"
            )
        if timeout > MAX_DURATION_S:
            # Every other wait stops at MAX_DURATION_S; 1e300 or 2**200 was taken, a drain that never ends.
            raise InvalidArgumentError(
                f"drain timeout must be at most {MAX_DURATION_S:g} seconds (a drain always ends), "
                f"got {shown_number(timeout_s)}"
            )
        grace = exact_number(grace_s)
        if grace is None or not 0 <= grace <= MAX_DURATION_S:
            # nan or a str would fail inside the drain's task group, as a bare error (ExceptionGroup)
            raise InvalidArgumentError(
                f"drain grace must be a number of seconds from 0 to {MAX_DURATION_S:g}, "
                f"got {shown_number(grace_s)}"
            )
        timeout_s, grace_s = timeout, grace
        from_sources: list[DrainItem] = []
        source_dropped: dict[DrainStatus, int] = dict.fromkeys(DrainStatus, 0)

        def cancel_running() -> list[_Item]:
            running = self._snapshot(only)
            for item in running:
                item.cancel(f"did not finish within {timeout_s}s; cancelled")
            return running

        async def own() -> None:
            # Work started while the drain waits (an extraction queuing its final
            # write) is waited for too, then cancelled with the rest.
            with anyio.move_on_after(timeout_s):
                while running := self._snapshot(only):
                    await running[0].done.wait()
            with anyio.move_on_after(grace_s):
                while running := cancel_running():
                    await running[0].done.wait()
            cancel_running()

        async def source(src: WorkSource) -> None:
            if isinstance(src, OwnedWorkSource):
                # The runtime's summary updates get the same grace as owned items once cancelled.
                settled, counts = await src.settle_counted(timeout_s, grace_s)
                from_sources.extend(settled)
                for status, n in counts.items():
                    source_dropped[status] += n
            else:
                from_sources.extend(await src.settle(timeout_s))

        async with anyio.create_task_group() as tg:
            tg.start_soon(own)
            for src in self._sources:
                if covers(only, getattr(src, "owner", None)):
                    tg.start_soon(source, src)
        self._let_go()  # a closed runtime's updates that ended: settled above, reports taken
        with self._lock:
            ended = sorted(
                [i for i in (*self._ended_ok, *self._ended_bad) if belongs(i.owner, only)],
                key=lambda i: i.seq,
            )
            taken = {id(i) for i in ended}
            self._ended_ok = collections.deque(i for i in self._ended_ok if id(i) not in taken)
            self._ended_bad = collections.deque(i for i in self._ended_bad if id(i) not in taken)
            # Items dropped unlisted past MAX_ENDED_ITEMS, counted by owner: all of them, or ``only``'s.
            self._fold_gone()
            if only is None or isinstance(only, AllBut):
                but = {id(o) for o in only.owners} if isinstance(only, AllBut) else set()
                owners = [key for key in self._dropped if key not in but]
            else:
                owners = [id(only)]
            counted = [self._dropped.pop(owner, (None, {}))[1] for owner in owners]
        dropped = source_dropped
        for counts in counted:
            for status, n in counts.items():
                dropped[status] += n
        items = [i.item() for i in ended]
        for item in self._snapshot(only):
            item.detail = "did not stop after cancellation; still tracked"
            items.append(item.item(stopped=False))
        items.extend(from_sources)
        return DrainResult(
            tuple(items),
            float(timeout_s),
            dropped_completed=dropped[DrainStatus.COMPLETED],
            dropped_failed=dropped[DrainStatus.FAILED],
            dropped_cancelled=dropped[DrainStatus.CANCELLED],
        )
