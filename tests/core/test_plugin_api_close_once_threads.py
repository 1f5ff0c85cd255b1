"""``plugin_api.CloseOnce``: an ``aclose()`` from a worker thread the close hands work to.

A close may close something through a thread (``to_thread``) that closes this
adapter again (a synchronous wrapper's close, ``anyio.run(adapter.aclose)``, or
``from_thread.run`` back on the close's loop). The close waits for that thread:
its ``aclose()`` must return at once, not wait for the close that waits for it.
A thread (or task) the close starts and leaves running still waits for the close.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from _close_once_support import hear

from agentium_harness.plugin_api import CloseOnce, PerLoop


@pytest.mark.parametrize(
    ("backend", "how"),
    [
        ("asyncio", "anyio.run on asyncio"),
        ("asyncio", "anyio.run on trio"),
        ("asyncio", "asyncio.to_thread, asyncio.run"),
        ("asyncio", "from_thread.run"),
        ("trio", "anyio.run on asyncio"),
        ("trio", "anyio.run on trio"),
    ],
)
def test_an_aclose_from_a_thread_the_close_waits_for_returns_at_once(backend: str, how: str) -> None:
    # The thread's aclose() waited for the close, which waited for the thread: wait_s, then an
    # OperationTimeoutError out of the close (and a WARNING that it was "still running").
    once = CloseOnce("test adapter", wait_s=1)
    steps: list[str] = []

    def close_again() -> None:  # a synchronous wrapper's close, closing this adapter again
        if how == "from_thread.run":
            anyio.from_thread.run(once.run, close)
        elif how == "asyncio.to_thread, asyncio.run":
            asyncio.run(once.run(close))
        else:
            anyio.run(once.run, close, backend=how.rsplit(" ", 1)[-1])
        steps.append("wrapper closed")

    async def close() -> None:
        if how == "asyncio.to_thread, asyncio.run":
            await asyncio.to_thread(close_again)
        else:
            await anyio.to_thread.run_sync(close_again)
        steps.append("closed")

    begun = time.monotonic()
    anyio.run(once.run, close, backend=backend)
    assert steps == ["wrapper closed", "closed"]
    assert time.monotonic() - begun < 0.8


@pytest.mark.parametrize("where", ["a task", "a thread"])
def test_an_aclose_from_a_task_or_thread_the_close_left_running_waits_for_the_close(where: str) -> None:
    # A task the close started and did not wait for was "inside the close": its aclose() returned at
    # once, while the close still ran, and its caller went on as if the adapter were closed. A thread
    # it left running is not waited for by the close either: its aclose() must not be told "closed"
    # while the close runs.
    once = CloseOnce("test adapter", wait_s=1)
    told: list[bool] = []
    background: list[asyncio.Task[None]] = []

    async def in_a_task() -> None:
        await once.run(close)
        told.append(once.ended)  # returned: the close must have ended

    def in_a_thread() -> None:
        anyio.run(once.run, close)
        told.append(once.ended)

    def close() -> Awaitable[None]:
        elsewhere = in_a_task() if where == "a task" else asyncio.to_thread(in_a_thread)
        background.append(asyncio.get_running_loop().create_task(elsewhere))

        async def closed() -> None:
            await asyncio.sleep(0.1 if where == "a task" else 0.2)

        return closed()

    async def main() -> None:
        await once.run(close)
        await background[0]

    asyncio.run(main())
    assert told == [True]


def test_per_loop_close_of_a_value_whose_loop_cancels_it_as_asyncio_run_returns_drops_it() -> None:
    # asyncio.run cancelled the value's close as it returned, and was still finishing (a job of its
    # default executor): PerLoop.aclose said "did not finish within 1.5s (is that loop still
    # running?)" at once, and the value was neither closed nor dropped.
    released: list[str] = []
    running = threading.Event()
    values: PerLoop[object] = PerLoop(object, discard=lambda value: released.append("dropped"))

    async def target() -> None:
        values.get()
        asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.4)  # asyncio.run waits for it
        running.set()
        await asyncio.sleep(0.2)

    async def close(value: object) -> None:
        await asyncio.sleep(10)

    thread = threading.Thread(target=asyncio.run, args=(target(),))
    thread.start()
    assert running.wait(5)
    begun = time.monotonic()
    problems = anyio.run(values.aclose, close, 1.5)
    thread.join(5)
    assert time.monotonic() - begun < 1.2
    assert problems == []  # released, not a problem (a WARNING says so: test_per_loop_finished_loops)
    assert released == ["dropped"]


class _BlinkingLoop(asyncio.SelectorEventLoop):
    """A loop that, once ``blink`` is set, says "not running" once: asked between two of its runs."""

    blink = False

    def is_running(self) -> bool:
        if self.blink:
            self.blink = False
            return False
        return super().is_running()


def test_a_loop_seen_stopped_once_by_a_caller_is_not_taken_for_stopped_by_an_earlier_callers_look() -> None:
    # An earlier caller's "first seen stopped" was kept on the close: a later caller looking once, as
    # the close's loop was between two runs, found it "stopped for 0.1 s" at once, and stopped waiting
    # (OperationTimeoutError) for a close that then finished.
    once = CloseOnce("test adapter", wait_s=1.5)
    heard: list[str] = []

    async def close() -> None:
        await asyncio.sleep(0.5)

    def later() -> None:
        hear(once, close, heard, "closed")

    loop = _BlinkingLoop()
    try:
        first = loop.create_task(once.run(close))
        loop.run_until_complete(asyncio.sleep(0.01))  # the close began; its loop stops after this
        later()  # its loop stopped for good, as far as this caller can tell: it stops waiting
        assert heard == ["OperationTimeoutError"]
        runs = threading.Thread(target=loop.run_until_complete, args=(first,))
        runs.start()  # the loop runs again, until the close ends
        while not loop.is_running():
            time.sleep(0.001)
        loop.blink = True  # the next caller's first look finds it between two runs
        later()
        runs.join(5)
        assert heard == ["OperationTimeoutError", "closed"]
    finally:
        loop.close()


def test_a_close_on_a_loop_run_now_and_then_is_waited_for_not_taken_for_stopped() -> None:
    # A GUI host runs its loop a pass at a time (stop(), then run_forever(), between its own work):
    # seen "not running" twice 0.1 s apart, a later caller took it for stopped and raised
    # OperationTimeoutError (with a WARNING) 0.1 s into a close that went on and finished.
    once = CloseOnce("test adapter", wait_s=3)
    began = threading.Event()
    ended = threading.Event()

    async def close() -> None:
        began.set()
        await asyncio.sleep(0.4)

    loop = asyncio.new_event_loop()

    def pumped() -> None:
        first = loop.create_task(once.run(close))
        while not ended.is_set():
            loop.call_soon(loop.stop)
            loop.run_forever()  # one pass of what is ready
            time.sleep(0.02)  # the host's own work between passes
        loop.run_until_complete(first)

    pump = threading.Thread(target=pumped)
    pump.start()
    try:
        assert began.wait(5)
        anyio.run(once.run, close)  # waits for the close and hears it closed
        assert once.ended
    finally:
        ended.set()
        pump.join(5)
        loop.close()


class _Settings:
    """An attribute-style mapping, as hosts keep settings in: a missing attribute is a KeyError."""

    def __init__(self, **values: object) -> None:
        self._values = values

    def __getattr__(self, name: str) -> object:
        return self.__dict__["_values"][name]


@pytest.mark.parametrize("how", ["a closure", "a partial"])
def test_a_done_callback_holding_an_object_that_refuses_attributes_does_not_fail_the_aclose(how: str) -> None:
    # Following who waits for whom read attributes of whatever a done callback holds: one whose
    # __getattr__ raised a KeyError made the aclose() from inside the close raise that KeyError.
    once = CloseOnce("test adapter", wait_s=1)
    settings = _Settings(name="x")
    steps: list[str] = []

    def noted(settings: _Settings, task: asyncio.Task[None]) -> None:
        steps.append(f"noted {settings.name}")

    async def wrapper() -> None:
        await once.run(close)  # the wrapper closes what it wraps: this adapter
        steps.append("wrapper closed")

    async def close() -> None:
        task = asyncio.get_running_loop().create_task(wrapper())
        if how == "a closure":
            task.add_done_callback(lambda task: noted(settings, task))
        else:
            task.add_done_callback(functools.partial(noted, settings))
        await task
        steps.append("closed")

    begun = time.monotonic()
    asyncio.run(once.run(close))
    assert steps == ["wrapper closed", "noted x", "closed"]
    assert time.monotonic() - begun < 0.5
