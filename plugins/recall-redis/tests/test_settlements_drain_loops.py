"""``Settlements.drain`` gives the work it cancels on other event loops time to unwind, within its bound.

Found by a review of the store's close under trio. ``aclose()`` drains the
settlements, then closes each loop's connection. ``drain`` cancelled what
was left, each task on its own loop, but then waited only for its own
loop's: under trio it runs in a new loop of a worker thread, so every task
is another loop's, and none was given time to unwind (a staging given up, a
WARNING that the settlement was cut off) before the connections closed. The
same on asyncio for a store closed from another loop than its writes'.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import anyio
import pytest

from agentium_recall_redis.writes import Settlements


def _settling_in_another_loop(settlements: Settlements, events: list[str]) -> threading.Event:
    """A settlement in a running loop of another thread that takes 50 ms to unwind once cancelled."""
    started, stop = threading.Event(), threading.Event()

    async def settlement() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # as giving up a staging: a round trip on its loop's connection
            events.append("unwound")
            raise

    async def serve() -> None:
        settlements.start(settlement(), settles_by=time.monotonic() + 10)
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, stop.wait, 5)

    threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()
    assert started.wait(5)
    return stop


def test_a_drain_under_trio_waits_for_other_loops_cancelled_work_to_unwind() -> None:
    settlements = Settlements()
    events: list[str] = []
    stop = _settling_in_another_loop(settlements, events)

    async def close_under_trio() -> None:  # as RedisRecallStore._close_all does under trio
        await anyio.to_thread.run_sync(lambda: asyncio.run(settlements.drain(0.05)))
        events.append("drained: connections close now")

    try:
        began = time.monotonic()
        anyio.run(close_under_trio, backend="trio")
        assert time.monotonic() - began < 1.0  # its 50 ms, not the whole 1 s bound
    finally:
        stop.set()
    assert events == ["unwound", "drained: connections close now"]  # was the other way round


@pytest.mark.anyio
async def test_a_drain_does_not_wait_for_work_of_a_loop_that_does_not_run() -> None:
    settlements = Settlements()
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        settlements.start(asyncio.sleep(60), settles_by=time.monotonic() + 10)

    thread = threading.Thread(target=loop.run_until_complete, args=(begin(),))
    thread.start()
    thread.join(5)
    try:
        began = time.monotonic()
        await settlements.drain(0.0)  # its cancellation cannot run until the loop runs again
        assert time.monotonic() - began < 0.5
    finally:

        def close() -> None:
            loop.run_until_complete(asyncio.sleep(0.01))  # the queued cancellation runs
            loop.close()

        closer = threading.Thread(target=close)
        closer.start()
        closer.join(5)


@pytest.mark.anyio
@pytest.mark.parametrize("closed", [True, False], ids=["closed", "stopped"])
async def test_a_drain_does_not_wait_for_settlements_that_cannot_finish(closed: bool) -> None:
    # Found by the same review: drain waited as an erase does, so a settlement whose loop was closed
    # (dropped, but counted as unsettled for an erase until its bound) or stopped held aclose() up to
    # its bound, though nothing could finish it meanwhile.
    settlements = Settlements()
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        settlements.start(asyncio.sleep(60), settles_by=time.monotonic() + 10)

    def run() -> None:
        loop.run_until_complete(begin())
        if closed:
            loop.close()  # its settlement never ran to its end

    def close() -> None:
        loop.run_until_complete(asyncio.sleep(0.01))  # the drain's queued cancellation runs
        loop.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    try:
        assert (await settlements.wait(0.0)).stranded == 1  # an erase still counts it
        began = time.monotonic()
        await settlements.drain(1.0)
        assert time.monotonic() - began < 0.5  # was the whole 1 s
    finally:
        if not closed:
            closer = threading.Thread(target=close)
            closer.start()
            closer.join(5)


@pytest.mark.anyio
async def test_a_settlement_refused_after_the_drain_says_the_writes_outcome_stays_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Found by the same review: a write cut off while the store closes (its connection closed under
    # it) logs that its settlement goes on in the background and that a WARNING says so if it is
    # cancelled first; start() after the drain dropped that settlement without a word.
    settlements = Settlements()
    await settlements.drain(0.0)
    ran: list[str] = []

    async def settle() -> None:
        ran.append("ran")

    with caplog.at_level(logging.WARNING, "agentium.plugins.recall_redis"):
        settlements.start(settle(), settles_by=time.monotonic() + 5)
        settlements.start(settle())  # cleanup: nothing to say
    await asyncio.sleep(0.01)
    assert ran == []
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert len(said) == 1 and "outcome stays unknown" in said[0] and "closing" in said[0], said
