"""``plugin_api.CloseOnce`` and ``LoopHandle.run_there``: bounded waits, and no caller told "closed" early.

A close returning an awaitable other than a coroutine, a task of a host's
nursery the close leaves running (on trio), two threads finding one cut-off, a
loop stopped (not closed) under the close, one ``wait_s`` for all a caller waits, and a
``run_there`` (and ``PerLoop.aclose``) whose loop closes under the work.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections.abc import Awaitable, Generator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _close_once_support import counting_close, cut_off, hear, warnings_said

from agentium_harness import OperationCancelledError, OperationTimeoutError
from agentium_harness.plugin_api import CloseOnce, LoopHandle, PerLoop


class _Closing:
    """An awaitable that is not a coroutine (an SDK's close handle): each ``await`` runs the close anew."""

    def __init__(self, began: list[int]) -> None:
        self._began = began

    def __await__(self) -> Generator[Any, None, None]:
        return self._close().__await__()

    async def _close(self) -> None:
        self._began.append(1)
        await anyio.lowlevel.checkpoint()


def test_an_awaitable_close_cut_off_before_it_began_is_run_by_the_next_caller() -> None:
    # Only a coroutine was kept to run again: an awaitable object close() returned was dropped, and
    # every later caller was told OperationCancelledError, with nothing ever closed.
    once = CloseOnce("test adapter", wait_s=1)
    began: list[int] = []
    calls: list[int] = []

    def close() -> Awaitable[None]:
        calls.append(1)
        return _Closing(began)

    cut_off(once, close)
    assert began == [] and once.ended
    anyio.run(once.run, close)  # runs it: no error
    anyio.run(once.run, close, backend="trio")  # and once only
    assert began == [1] and calls == [1]


def test_a_future_close_cut_off_before_it_began_is_refused_as_not_runnable_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A future of the loop that cut the close off cannot be awaited again: the later callers and the
    # log said nothing of why (a WARNING that the close "failed after the caller was cancelled").
    once = CloseOnce("test adapter", wait_s=1)
    calls: list[int] = []

    def close() -> Awaitable[None]:
        calls.append(1)
        return asyncio.get_running_loop().create_future()

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        cut_off(once, close)
        with pytest.raises(OperationCancelledError, match="cannot be awaited again"):
            anyio.run(once.run, close)
    assert calls == [1]
    assert warnings_said(caplog) == [
        "test adapter: the close was cut off before it began (CancelledError); what close() returned is not "
        "a coroutine and cannot be run again: the next aclose() raises it"
    ]


def test_on_trio_an_aclose_from_a_task_the_close_left_in_the_callers_nursery_waits_for_the_close() -> None:
    # On trio the close runs in the first caller's own task: a task the close started in a nursery
    # that caller had open (a host's nursery the adapter keeps) counted as waited for by the close,
    # and its aclose() returned at once while the close still ran.
    import trio

    once = CloseOnce("test adapter", wait_s=1)
    told: list[bool] = []
    host: list[trio.Nursery] = []

    def close() -> Awaitable[None]:
        async def elsewhere() -> None:
            await once.run(close)
            told.append(once.ended)  # returned: the close must have ended

        host[0].start_soon(elsewhere)

        async def closed() -> None:
            await trio.sleep(0.1)

        return closed()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            host.append(nursery)
            await once.run(close)

    trio.run(main)
    assert told == [True]


@pytest.mark.parametrize("how", ["gather", "task group"])
def test_an_aclose_from_a_task_the_close_waits_for_still_returns_at_once(how: str) -> None:
    once = CloseOnce("test adapter", wait_s=1)
    steps: list[str] = []

    async def wrapper() -> None:
        await once.run(close)  # the wrapper closes what it wraps: this adapter
        steps.append("wrapper closed")

    async def close() -> None:
        if how == "gather":
            await asyncio.gather(wrapper())
        else:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(wrapper())
        steps.append("closed")

    begun = time.monotonic()
    asyncio.run(once.run(close))
    assert time.monotonic() - begun < 0.5
    assert steps == ["wrapper closed", "closed"]


class _SlowToSayClosed(asyncio.SelectorEventLoop):
    """A loop whose first two "closed" answers (once ``meet`` is set) wait for each other.

    Two threads asking at the same moment, as a thread switch at the wrong time makes them.
    """

    meet: threading.Barrier | None = None

    def is_closed(self) -> bool:
        closed = super().is_closed()
        meet = self.meet
        if closed and meet is not None and meet.n_waiting < meet.parties:
            try:
                meet.wait(0.5)
            except threading.BrokenBarrierError:
                pass
            self.meet = None
        return closed


class _SlowSink(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(0.1)


def test_two_waiters_on_other_threads_log_one_cut_off_once(caplog: pytest.LogCaptureFixture) -> None:
    # Each waiter that found the close's loop closed with the close pending ended it and logged the
    # cut-off: two threads looking at once, two WARNINGs (and two span events) for one cut-off.
    once = CloseOnce("test adapter", wait_s=1.5)
    began: list[int] = []
    close = counting_close(began)

    loop = _SlowToSayClosed()
    loop.create_task(once.run(close))
    loop.call_soon(loop.stop)  # after the first caller's step: the close's task never runs
    loop.run_forever()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the dead loop's tasks never ran
        loop.close()
    loop.meet = threading.Barrier(2)
    heard: list[str] = []
    waiters = [threading.Thread(target=hear, args=(once, close, heard)) for _ in range(2)]
    slow = _SlowSink()  # a log handler writing somewhere slow: the first WARNING takes a while
    logging.getLogger("agentium.adapters").addHandler(slow)
    try:
        with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
            for waiter in waiters:
                waiter.start()
            for waiter in waiters:
                waiter.join(1.5)
    finally:
        loop.meet = None
        logging.getLogger("agentium.adapters").removeHandler(slow)
    assert heard == ["returned"] * 2 and began == [1]
    assert warnings_said(caplog) == [
        "test adapter: the close was cut off before it began (its event loop was closed); "
        "the next aclose() runs it"
    ]


def test_a_close_cut_off_on_a_stopped_loop_is_run_by_the_next_caller_without_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The first caller's loop stopped (never closed) before the close's task ran: a later caller waited
    # its whole wait_s for a loop that never ran again, then heard "still running".
    once = CloseOnce("test adapter", wait_s=1.5)
    began: list[int] = []
    close = counting_close(began)

    loop = asyncio.new_event_loop()
    try:
        first = loop.create_task(once.run(close))
        loop.call_soon(loop.stop)
        loop.run_forever()
        begun = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
            anyio.run(once.run, close)  # runs it: nothing else ever would
        assert time.monotonic() - begun < 0.6
        assert began == [1] and once.ended
        assert any("cut off before it began (its event loop stopped)" in m for m in warnings_said(caplog))
        loop.run_until_complete(first)  # the loop runs again: its old task does not close a second time
        assert began == [1] and first.exception() is None
    finally:
        loop.close()


def test_a_close_suspended_on_a_stopped_loop_is_not_waited_for_its_whole_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The close began, then its loop stopped (not closed): a later caller waited all of wait_s.
    once = CloseOnce("test adapter", wait_s=1.5)

    async def close() -> None:
        await asyncio.sleep(10)

    loop = asyncio.new_event_loop()
    try:
        first = loop.create_task(once.run(close))
        loop.run_until_complete(asyncio.sleep(0.01))  # the close began; its loop stops after this
        begun = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
            with pytest.raises(
                OperationTimeoutError, match="its event loop stopped with it pending"
            ) as caught:
                anyio.run(once.run, close)
        assert time.monotonic() - begun < 0.6
        assert "after 1.5s" not in str(caught.value)  # it did not wait its wait_s, and does not say so
        assert not once.ended and not first.done()  # not "closed": it may go on if its loop runs again
        assert any("still running" in m for m in warnings_said(caplog))
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            loop.close()


def test_a_callers_whole_wait_is_bounded_by_one_wait_s() -> None:
    # A waiter waited wait_s for the first run, up to wait_s more for the loop that cut it off to
    # finish, then the whole run again: about three times its bound.
    once = CloseOnce("test adapter", wait_s=0.4)
    began: list[int] = []
    close = counting_close(began, 0.3)

    heard: list[BaseException | None] = []
    took: list[float] = []
    waiting = threading.Event()
    # The loop that cuts the close off finishes only once the waiter is done (not after a fixed time
    # that a slow thread start on a loaded machine could outlast).
    finishing = threading.Event()

    def later() -> None:
        begun = time.monotonic()
        try:
            anyio.run(once.run, close)
            heard.append(None)
        except Exception as exc:
            heard.append(exc)
        finally:
            took.append(time.monotonic() - begun)
            finishing.set()

    waiter = threading.Thread(target=later)
    kept: list[asyncio.Task[None]] = []

    def start_the_waiter_then_block() -> None:  # after the first caller's step, before the close's task
        waiter.start()
        attempt = once._attempt
        deadline = time.monotonic() + 5
        while attempt is not None and not attempt.done._waiters and time.monotonic() < deadline:
            time.sleep(0.001)  # until the waiter waits for the close
        waiting.set()
        time.sleep(0.3)  # the first loop busy: the waiter's first phase

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, finishing.wait, 5)  # asyncio.run waits for it as it shuts down
        kept.append(loop.create_task(once.run(close)))
        loop.call_soon(start_the_waiter_then_block)

    asyncio.run(main())
    waiter.join(5)
    assert waiting.is_set() and len(took) == 1
    assert took[0] < 0.8, took  # one wait_s (0.4 s) and slack: not a wait_s per phase (1 s and more)
    [problem] = heard
    assert isinstance(problem, OperationTimeoutError) and "nothing was closed yet" in str(problem)
    assert began == []
    anyio.run(once.run, close)  # the next caller runs it, the loop that cut it off having finished
    assert began == [1]


@pytest.mark.parametrize("how", ["closed under it", "cancelled by asyncio.run"])
def test_run_there_ends_promptly_when_the_target_loop_finishes_under_the_work(how: str) -> None:
    # A loop closed with the work pending: the caller waited its whole timeout. A loop whose
    # asyncio.run cancelled the work as it returned: True, "finished in time".
    handles: list[LoopHandle] = []
    running = threading.Event()

    async def target() -> None:
        handles.append(LoopHandle.current())
        running.set()
        await asyncio.sleep(0.3)

    def run_target() -> None:
        if how == "cancelled by asyncio.run":
            asyncio.run(target())
            return
        loop = asyncio.new_event_loop()
        loop.run_until_complete(target())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            loop.close()  # the work's task still pending: never run again

    thread = threading.Thread(target=run_target)
    thread.start()
    assert running.wait(5)
    begun = time.monotonic()
    finished = anyio.run(handles[0].run_there, lambda: asyncio.sleep(10), 1.5)
    thread.join(5)
    assert finished is False
    assert time.monotonic() - begun < 0.8


def test_per_loop_close_of_a_value_whose_loop_closes_under_it_is_dropped_at_once() -> None:
    # The value's loop closed with its close pending: PerLoop.aclose waited its whole timeout, said
    # "is that loop still running?", and left the value neither closed nor dropped.
    released: list[str] = []
    running = threading.Event()
    values: PerLoop[object] = PerLoop(object, discard=lambda value: released.append("dropped"))

    async def target() -> None:
        values.get()
        running.set()
        await asyncio.sleep(0.3)

    def run_target() -> None:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(target())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            loop.close()  # the value's close still pending there

    async def close(value: object) -> None:
        await asyncio.sleep(10)

    thread = threading.Thread(target=run_target)
    thread.start()
    assert running.wait(5)
    begun = time.monotonic()
    problems = anyio.run(values.aclose, close, 1.5)
    thread.join(5)
    assert time.monotonic() - begun < 0.8
    assert problems == []  # released, not a problem (a WARNING says so: test_per_loop_finished_loops)
    assert released == ["dropped"]
