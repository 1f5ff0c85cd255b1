"""Close-path leftovers: a cancelled ``PerLoop.aclose`` caller, trailing work that never ends.

``PerLoop.aclose`` forgets its values before closing them: a native asyncio
``Task.cancel()`` of its caller (which passes anyio's shield) cut the closes
short and left the values unclosed for good. ``LateCalls.trail`` kept every
entry whose work never ended (past its own bound), so the list grew without limit.
"""

from __future__ import annotations

import asyncio

import pytest

from agentium_harness._engine.loops import PerLoop


def test_per_loop_close_goes_on_when_its_caller_is_natively_cancelled() -> None:
    async def main() -> list[object]:
        closed: list[object] = []
        values: PerLoop[object] = PerLoop(object)
        values.get()

        async def close(value: object) -> None:
            await asyncio.sleep(0.1)
            closed.append(value)

        caller = asyncio.get_running_loop().create_task(values.aclose(close, 1.0))
        await asyncio.sleep(0.02)  # the close has begun (the value is forgotten already)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.3)
        return closed

    assert len(asyncio.run(main())) == 1


def test_per_loop_close_still_returns_its_problems() -> None:
    async def main() -> list[str]:
        values: PerLoop[object] = PerLoop(object)
        values.get()

        async def close(value: object) -> None:
            raise ValueError("boom")

        return await values.aclose(close, 1.0)

    problems = asyncio.run(main())
    assert len(problems) == 1 and "failed" in problems[0]
