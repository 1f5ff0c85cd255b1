"""``CloseOnce.run`` lets go of the close's task once it has ended.

It kept the finished task (and with it any traceback it ended with, the
frames and the clients they reference) for the provider's lifetime.
"""

from __future__ import annotations

import asyncio

import pytest

from agentium_provider_openai._closing import CloseOnce


def test_the_close_task_is_let_go_once_the_close_has_ended() -> None:
    async def main() -> object:
        once = CloseOnce()
        assert once.begin()

        async def work() -> str:
            await asyncio.sleep(0)
            return "closed"

        assert await once.run(work) == "closed"
        return once._task

    assert asyncio.run(main()) is None


def test_a_failed_close_task_is_let_go_too() -> None:
    async def main() -> object:
        once = CloseOnce()

        async def work() -> None:
            raise OSError("refused")

        with pytest.raises(OSError):
            await once.run(work)
        return once._task

    assert asyncio.run(main()) is None


def test_the_task_a_cancelled_caller_left_is_let_go_when_it_ends() -> None:
    async def main() -> tuple[object, object, bool]:
        once = CloseOnce()
        finished = asyncio.Event()

        async def work() -> None:
            await asyncio.sleep(0.05)
            finished.set()

        caller = asyncio.get_running_loop().create_task(once.run(work))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        during = once._task
        await asyncio.wait_for(finished.wait(), 1.0)
        await asyncio.sleep(0)
        return during, once._task, once._done.is_set()

    during, after, ended = asyncio.run(main())
    assert during is not None  # held while the close runs (asyncio keeps only weak references)
    assert after is None and ended
