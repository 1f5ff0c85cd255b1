"""A call that did unwind is not reported abandoned because the machine stalled (``Overrun.abandoned``).

Past its deadline a call is cancelled and given a grace
(``ABANDON_GRACE_S``, 0.1 s) to unwind; ``abandoned`` tells the host
whether it was still running after that. The grace was judged by the clock
alone: a stall of the machine longer than the grace, between the call's
cancellation and its unwinding, let the grace run out before the loop ran
the call's task at all, and a cooperative call that unwound a moment later
was reported abandoned (on trio, the order of one loop batch decided it).
The engine now gives the call's task a few loop iterations past the grace
before it judges, so a call whose unwinding was only held up by the stall
ends in them; a call blocked in a worker thread does not, and is still
abandoned at once.

The stall is injected: a task woken at the deadline (``on_deadline``, just
before the call is cancelled) blocks the loop for three graces, so the
grace's timer is due before the call's task runs again; the call then needs
a few loop iterations to unwind (a shielded cleanup), which a stall-free
loop gives it well within the grace. On trio the stall is also injected where
a machine's would fall (between two batches of tasks, through an
instrument), for a call that unwinds at once: the fault of the flake audit,
a coin toss per attempt, so the test makes eight.
"""

from __future__ import annotations

import threading
import time

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from agentium_harness._engine.bounded import ABANDON_GRACE_S, Overrun, bounded

pytestmark = pytest.mark.anyio

GENEROUS = 30.0
#: The deadline of the one call meant to time out.
SHORT = 0.3
#: The loop iterations the call's cleanup takes to unwind once cancelled (each a checkpoint).
CLEANUP_STEPS = 3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _stall_at(deadline: anyio.Event) -> None:
    """Block the loop (as a stalled machine would) for three graces once ``deadline`` is set."""
    await deadline.wait()
    time.sleep(3 * ABANDON_GRACE_S)  # noqa: ASYNC251 - the stall is the point: nothing may run meanwhile


async def test_a_call_that_unwinds_after_a_stall_past_the_grace_is_not_abandoned() -> None:
    unwound = threading.Event()

    async def cooperative() -> str:
        try:
            await anyio.sleep(60)
        finally:
            with anyio.CancelScope(shield=True):  # a cleanup that awaits: unwinds over a few iterations
                for _ in range(CLEANUP_STEPS):
                    await anyio.lowlevel.checkpoint()
            unwound.set()
        return "late"

    deadline = anyio.Event()
    with anyio.fail_after(GENEROUS):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stall_at, deadline)
            with pytest.raises(Overrun) as info:
                await bounded(cooperative, SHORT, on_deadline=deadline.set)
    assert not info.value.abandoned, "the call unwound; only the machine's stall held it past the grace"
    assert unwound.is_set()  # and it had, when the engine said so


class _StallBetweenBatches:
    """A trio instrument: once ``armed``, the loop stalls for three graces before its next wait for I/O.

    That is between two batches of tasks, after the engine cancelled the call (rescheduling its task)
    and set the grace's deadline: the deadline has passed when the next batch is made, and the call's
    task and its waiter run in it in either order, as on a machine that stalled just then.
    """

    def __init__(self) -> None:
        self.armed = False
        self.stalls = 0

    def before_io_wait(self, timeout: float) -> None:
        if self.armed:
            self.armed = False
            self.stalls += 1
            time.sleep(3 * ABANDON_GRACE_S)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_a_call_that_unwinds_at_once_after_a_stall_is_never_abandoned() -> None:
    """The call unwinds in the step its cancellation is delivered in; the batch's order decided it."""
    import trio.lowlevel

    stall = _StallBetweenBatches()
    trio.lowlevel.add_instrument(stall)
    try:
        # Each attempt is a coin toss without the iterations past the grace: eight of them all
        # landing right would hide the fault once in 256 runs.
        for attempt in range(8):
            with anyio.fail_after(GENEROUS), pytest.raises(Overrun) as info:
                await bounded(hang, SHORT, on_deadline=lambda: setattr(stall, "armed", True))
            assert stall.stalls == attempt + 1  # the stall happened where it should
            assert not info.value.abandoned, f"attempt {attempt}: the call unwound at once"
    finally:
        trio.lowlevel.remove_instrument(stall)


async def hang() -> str:
    await anyio.sleep(60)
    return "late"


async def test_a_call_blocked_in_its_thread_is_still_abandoned_at_once_after_a_stall() -> None:
    gate, returned = threading.Event(), threading.Event()

    def blocks() -> None:
        gate.wait(GENEROUS)
        returned.set()

    async def stuck() -> None:
        await anyio.to_thread.run_sync(blocks)  # not abandonable: cancellation cannot reach it

    deadline = anyio.Event()
    try:
        with anyio.fail_after(GENEROUS):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stall_at, deadline)
                with pytest.raises(Overrun) as info:
                    await bounded(stuck, SHORT, on_deadline=deadline.set)
        assert info.value.abandoned
        # The engine walked away while the thread was still blocked, not when the thread returned.
        assert not returned.is_set()
    finally:
        gate.set()
        await anyio.to_thread.run_sync(returned.wait, GENEROUS)
