"""``Settlements`` with work whose event loop stopped or closed, and a drain racing a start.

Found by an adversarial review. A task of a closed loop never ends, yet it
was kept for the store's lifetime (and its loop with it: a leak in a host
that closes a loop per request); it is dropped now, and a write's
settlement dropped so still counts as unsettled for an erase until its
bound. A task of a loop stopped but not closed was waited for by every
erase, which was then refused, for good; now a settlement there counts only
until its bound (as a running one gives up then), cleanup not at all. And
``start`` read the closed flag without the lock ``drain`` closes under, so
work could start after a drain, never cancelled.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import weakref
from typing import Any

import pytest

from agentium_recall_redis.writes import Settlements

pytestmark = pytest.mark.anyio  # on asyncio (conftest's anyio_backend)


def _left_in_a_loop(settlements: Settlements, *, close: bool, **start: Any) -> asyncio.AbstractEventLoop:
    """Start a task sleeping 60 s in a new loop of another thread; that loop then stops (closed if asked)."""
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        settlements.start(asyncio.sleep(60), **start)

    def run() -> None:
        loop.run_until_complete(begin())
        if close:
            loop.close()  # its task never ran to its end

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    return loop


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close a stopped loop a test left behind, its task cancelled first (on a thread: none runs there)."""

    def close() -> None:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    thread = threading.Thread(target=close)
    thread.start()
    thread.join(5)


async def test_a_task_of_a_closed_loop_is_dropped_and_its_loop_freed() -> None:
    settlements = Settlements()
    loop = _left_in_a_loop(settlements, close=True)
    freed = weakref.ref(loop)
    del loop
    assert len(settlements) == 0  # was 1 for the store's lifetime
    gc.collect()
    assert freed() is None  # nothing of the store holds the closed loop any more


async def test_a_settlement_dropped_with_its_closed_loop_counts_as_unsettled_until_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settlements = Settlements()
    bound = time.monotonic() + 0.7
    with caplog.at_level(logging.WARNING, "agentium.plugins.recall_redis"):
        _left_in_a_loop(settlements, close=True, settles_by=bound)
        pending = await settlements.wait(0.05)
    assert (pending.stranded, pending.settling, pending.cleanup) == (1, 0, 0)
    assert "stopped or closed before it finished" in pending.reason()
    assert len(settlements) == 0  # the task itself is not kept, only its bound
    assert any("dropped unfinished" in r.getMessage() for r in caplog.records)
    await asyncio.sleep(max(0.0, bound - time.monotonic()) + 0.02)
    began = time.monotonic()
    assert not await settlements.wait(1.0)  # past its bound: as a running settlement that gave up
    assert time.monotonic() - began < 0.5


async def test_cleanup_on_a_stopped_loop_is_not_waited_for() -> None:
    settlements = Settlements()
    loop = _left_in_a_loop(settlements, close=False)
    try:
        began = time.monotonic()
        assert await settlements.settle(1.0) == 0  # was 1, after waiting all of the 1 s, every time
        assert time.monotonic() - began < 0.5
        assert len(settlements) == 1  # kept: the loop may run again and finish it
    finally:
        _close(loop)


async def test_a_settlement_on_a_stopped_loop_refuses_until_its_bound_then_not() -> None:
    settlements = Settlements()
    bound = time.monotonic() + 0.7
    loop = _left_in_a_loop(settlements, close=False, settles_by=bound)
    try:
        pending = await settlements.wait(0.1)  # the loop did not run all through the wait
        assert (pending.stranded, pending.settling) == (1, 0)
        assert "event loop" in pending.reason() and "still being settled" not in pending.reason()
        await asyncio.sleep(max(0.0, bound - time.monotonic()) + 0.02)
        began = time.monotonic()
        assert await settlements.settle(1.0) == 0  # was 1 for good: every later erase refused
        assert time.monotonic() - began < 0.5
    finally:
        _close(loop)


async def test_a_drain_between_a_start_and_its_task_being_tracked_still_stops_the_work() -> None:
    settlements = Settlements()
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    def drain_meanwhile(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        # Another thread's aclose() drains while start() is between its check and tracking the task.
        drainer = threading.Thread(target=asyncio.run, args=(settlements.drain(0.0),))
        drainer.start()
        drainer.join(5)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop = asyncio.get_running_loop()
    loop.set_task_factory(drain_meanwhile)
    try:
        settlements.start(work())
    finally:
        loop.set_task_factory(None)
    await asyncio.sleep(0.05)
    assert ran == []  # it ran after the drain, unseen by it (never cancelled)
    assert len(settlements) == 0
