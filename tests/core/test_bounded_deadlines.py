"""Every adapter call ends by its own deadline, however the deadlines of concurrent calls interleave.

On asyncio the engine wakes the callers of one loop through one timer armed
for the earliest deadline (not a timer per call); these tests make the
orders that could go wrong: a later call with an earlier deadline, and the
earliest call ending long before its deadline so the timer fires for nothing
and must re-arm for the next one. A call that ends in time returns its value.

On asyncio the caller first gives the call's task one loop iteration and
sets up its deadline only if the call has not ended by then; the deadline is
still counted from the call's start, and a caller cancelled in that first
iteration still cancels its call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
import pytest

from agentium_harness import OperationTimeoutError
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports import OpContext

pytestmark = pytest.mark.anyio

#: Scheduling slack on a loaded two-core machine (a hanging call hangs 60 s).
SLACK_S = 20.0
#: The guard around a test's calls: far past any deadline here, well under the 60 s hang.
GUARD_S = 30.0


def quick_deadline(backend: str, seconds: float) -> float:
    """The deadline of a call that ends at once: ``seconds`` on asyncio, ``GUARD_S`` on trio.

    On asyncio the deadlines of one loop share a timer, which is what these
    tests are about, and a call that ends in its first step has ended before
    any deadline is looked at, however long the machine stalls. On trio each
    call has a cancel scope of its own (nothing shared to get wrong), and a
    short deadline on a quick call is only a stall away from failing it.
    """
    return seconds if backend == "asyncio" else GUARD_S


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def hang(ctx: OpContext) -> str:
    await anyio.sleep(60)
    return "late"


async def quick(ctx: OpContext) -> str:
    return "now"


async def timed_out_after(
    ticket: Ticket, timeout_s: float, ended: dict[float, float], started: float
) -> None:
    with pytest.raises(OperationTimeoutError) as info:
        await ticket.call("hang", hang, timeout_s=timeout_s)
    assert not info.value.abandoned  # it stopped when cancelled
    ended[timeout_s] = time.monotonic() - started


async def watch_the_loop(worst: list[float]) -> None:
    """Note in ``worst[0]`` the longest time the loop took to come back to this task past a 10 ms sleep."""
    while True:
        before = time.monotonic()
        await anyio.sleep(0.01)
        worst[0] = max(worst[0], time.monotonic() - before - 0.01)


#: A stall of the loop at least this long (measured) can span the gap between the two deadlines of
#: the ordering test (0.35 s and 1.2 s after its start): both then fire in one loop iteration, in
#: either order, and that attempt says nothing about the order. Half the gap, to be sure.
SPANNING_STALL_S = (1.2 - 0.35) / 2


async def later_call_with_an_earlier_deadline(anyio_backend: str) -> tuple[dict[float, float], float]:
    """Race a 1.2 s call and, 50 ms later, a 0.3 s one: when each timed out, and the longest stall seen."""
    ticket = Ticket(None, "test", 30.0)
    ended: dict[float, float] = {}
    worst = [0.0]
    started = time.monotonic()
    with anyio.fail_after(GUARD_S):
        async with anyio.create_task_group() as watching:
            watching.start_soon(watch_the_loop, worst)
            async with anyio.create_task_group() as tg:
                tg.start_soon(timed_out_after, ticket, 1.2, ended, started)
                await anyio.sleep(0.05)
                tg.start_soon(timed_out_after, ticket, 0.3, ended, started)
                assert (
                    await ticket.call("quick", quick, timeout_s=quick_deadline(anyio_backend, 0.1)) == "now"
                )
            watching.cancel_scope.cancel()
    return ended, worst[0]


async def test_a_later_call_with_an_earlier_deadline_times_out_first(anyio_backend: str) -> None:
    # Run again (three runs at most) only when the machine stalled long enough to make the order a
    # coin toss; a wrong order without such a stall fails at once.
    for _ in range(3):
        ended, stalled = await later_call_with_an_earlier_deadline(anyio_backend)
        if stalled < SPANNING_STALL_S:
            break
    assert 0.3 <= ended[0.3] < 0.3 + 0.05 + SLACK_S
    assert 1.2 <= ended[1.2] < 1.2 + SLACK_S
    assert ended[0.3] < ended[1.2], (ended, stalled)


async def test_a_deadline_after_an_earlier_call_ended_in_time_still_comes(anyio_backend: str) -> None:
    ticket = Ticket(None, "test", 30.0)
    ended: dict[float, float] = {}
    started = time.monotonic()
    with anyio.fail_after(GUARD_S):
        # The earliest deadline belongs to a call that ends at once; the next one's must still come.
        assert await ticket.call("quick", quick, timeout_s=quick_deadline(anyio_backend, 0.2)) == "now"
        await timed_out_after(ticket, 0.6, ended, started)
    assert 0.6 <= ended[0.6] < 0.6 + SLACK_S


async def test_many_calls_ending_in_time_leave_no_deadline_behind(anyio_backend: str) -> None:
    ticket = Ticket(None, "test", 30.0)
    for _ in range(200):
        assert await ticket.call("quick", quick, timeout_s=quick_deadline(anyio_backend, 0.05)) == "now"
    # Well past all their deadlines (asyncio): nothing fires for them, and a new call still gets its own.
    await anyio.sleep(0.1)
    started = time.monotonic()
    ended: dict[float, float] = {}
    with anyio.fail_after(GUARD_S):
        await timed_out_after(ticket, 0.3, ended, started)
    assert 0.3 <= ended[0.3] < 0.3 + SLACK_S


async def test_the_deadline_counts_from_the_start_even_when_the_first_step_holds_the_loop() -> None:
    ticket = Ticket(None, "test", 30.0)
    first_step_s, timeout_s = 1.5, 1.6

    async def slow_start(ctx: OpContext) -> str:
        time.sleep(first_step_s)  # noqa: ASYNC251 - synchronous work before the first await: nothing interrupts it
        await anyio.sleep(60)
        return "late"

    started = time.monotonic()
    with pytest.raises(OperationTimeoutError) as info:
        await ticket.call("slow start", slow_start, timeout_s=timeout_s)
    ended = time.monotonic() - started
    assert not info.value.abandoned
    # Counted from the start: 1.6 s, not 1.6 s after the 1.5 s first step (3.1 s at the least). The
    # bound gives a stalled machine all the slack short of that.
    assert timeout_s <= ended < first_step_s + timeout_s - 0.1


async def test_a_caller_cancelled_as_its_call_starts_cancels_the_call() -> None:
    ticket = Ticket(None, "test", 30.0)
    stopped = threading.Event()

    async def waits(ctx: OpContext) -> str:
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            stopped.set()
            raise
        return "late"

    with anyio.fail_after(GUARD_S):
        with anyio.CancelScope() as scope:
            scope.cancel()  # the caller's cancellation arrives while the call takes its first step
            await ticket.call("waits", waits)
        assert scope.cancelled_caught
        # The call was cancelled before the caller left (it waited for it within the grace).
        assert stopped.is_set()


def test_a_closed_loops_deadlines_are_freed_without_the_cycle_collector() -> None:
    # A thread that ran bounded calls on one asyncio loop, closed it while a deadline timer was
    # still armed, and then runs them on another: the first loop's deadline keeper (its timer
    # refers back to it) must not be left for the cycle collector.
    import asyncio
    import gc

    async def short(ctx: OpContext) -> str:
        await anyio.sleep(0.01)
        return "soon"

    async def calls() -> None:
        # A call that outlives its first loop iteration arms the keeper's timer for its deadline;
        # ending early only forgets the waiter, so the timer is still armed when the loop closes.
        assert await Ticket(None, "test", 30.0).call("short", short, timeout_s=30.0) == "soon"

    def kept() -> list[object]:
        return [o for o in gc.garbage if type(o).__qualname__ == "_Deadlines"]

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(2):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(calls())
            finally:
                loop.close()
        gc.collect()
        assert kept() == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _kept_deadline_keepers(run: Callable[[], None]) -> list[object]:
    """The deadline keepers ``run`` left to the cycle collector (``run`` makes, runs and closes its loops)."""
    import gc

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [o for o in gc.garbage if type(o).__qualname__ == "_Deadlines"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _armed_call() -> None:
    """A call that outlives its first loop iteration: the keeper's timer stays armed for its deadline."""

    async def short(ctx: OpContext) -> str:
        await anyio.sleep(0.01)
        return "soon"

    assert await Ticket(None, "test", 30.0).call("short", short, timeout_s=30.0) == "soon"


def test_a_loop_closed_after_its_thread_moved_on_frees_its_deadlines_without_the_cycle_collector() -> None:
    # One thread runs two loops in turn and closes the first only after running the second (as a
    # host keeping a loop per component does): the first loop's keeper was let go of while its loop
    # was open, so nothing released its armed timer, which referred back to it.
    import asyncio

    def run() -> None:
        first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
        try:
            first.run_until_complete(_armed_call())
            second.run_until_complete(_armed_call())
        finally:
            first.close()
            second.close()

    assert _kept_deadline_keepers(run) == []


def test_a_loop_closed_after_its_thread_ended_frees_its_deadlines_without_the_cycle_collector() -> None:
    # The common pattern of a loop run in a thread of its own: run_forever there, stop, join, and
    # close it from the thread that made it. The thread ended while its loop was open.
    import asyncio

    def run() -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(_armed_call(), loop).result(GUARD_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(GUARD_S)
            loop.close()

    assert _kept_deadline_keepers(run) == []


def test_a_later_deadline_still_fires_after_an_earlier_one_took_the_timer() -> None:
    # A call waiting under a long deadline, then one under a short deadline: the short one takes
    # the loop's timer, fires, and the long one is still woken at its own deadline (the timer is
    # armed for it again). Several loops in turn in one thread, each closed while the previous
    # keeper's timer was armed, so a released keeper must never lose one of its callers.
    import asyncio

    async def hangs(ctx: OpContext) -> str:
        await anyio.sleep(60)
        return "late"

    async def both() -> list[str]:
        async def one(timeout_s: float) -> str:
            try:
                await Ticket(None, "test", 30.0).call("hangs", hangs, timeout_s=timeout_s)
            except OperationTimeoutError:
                return f"timed out {timeout_s}"
            return "no timeout"

        long = asyncio.ensure_future(one(0.4))
        await asyncio.sleep(0.01)
        short = await one(0.05)
        return [short, await long]

    for _ in range(3):
        loop = asyncio.new_event_loop()
        try:
            got = loop.run_until_complete(asyncio.wait_for(both(), GUARD_S))
        finally:
            loop.close()
        assert got == ["timed out 0.05", "timed out 0.4"]
