"""``Settlements.settle`` (what an erase waits on) with work of other event loops.

One store serves several loops, and each background settlement is a task of
the loop its write ran on. ``settle`` waited on every task with
``asyncio.wait`` in the caller's loop: a task of another loop ended unseen
(its done callback woke no one), so the wait ran to its bound; and a task of
a loop closed with it pending never ended at all, so every later erase waited
its whole bound and was refused ("a write cut off earlier is still being
settled") for good. ``drain`` already watched other loops' tasks; ``settle``
now does the same.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentium_recall_redis.writes import Settlements

pytestmark = pytest.mark.anyio  # on asyncio (conftest's anyio_backend)


def _in_other_loop(settlements: Settlements, sleep_s: float, *, close_pending: bool) -> threading.Thread:
    """Start a task sleeping ``sleep_s`` in a loop of another thread; close that loop early if asked."""
    started = threading.Event()

    def run() -> None:
        loop = asyncio.new_event_loop()

        async def begin() -> None:
            settlements.start(asyncio.sleep(sleep_s))
            started.set()

        loop.run_until_complete(begin())
        if close_pending:
            loop.close()  # its task never ran to its end
            return
        loop.run_until_complete(asyncio.sleep(sleep_s + 0.2))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(5)
    return thread


async def test_a_task_of_a_loop_closed_with_it_pending_is_not_waited_for() -> None:
    settlements = Settlements()
    _in_other_loop(settlements, 60.0, close_pending=True).join(5)
    began = time.monotonic()
    assert await settlements.settle(1.0) == 0
    assert time.monotonic() - began < 0.5


async def test_a_task_of_another_loop_is_waited_for_until_it_ends_not_to_the_bound() -> None:
    settlements = Settlements()
    thread = _in_other_loop(settlements, 0.1, close_pending=False)
    began = time.monotonic()
    assert await settlements.settle(1.5) == 0
    assert time.monotonic() - began < 1.0
    thread.join(5)
