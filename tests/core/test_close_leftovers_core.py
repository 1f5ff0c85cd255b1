"""Close-path leftovers: a cancelled ``PerLoop.aclose`` caller, trailing work that never ends.

``PerLoop.aclose`` forgets its values before closing them: a native asyncio
``Task.cancel()`` of its caller (which passes anyio's shield) cut the closes
short and left the values unclosed for good. ``LateCalls.trail`` kept every
entry whose work never ended (past its own bound), so the list grew without limit.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from agentium_harness._engine.late_calls import LateCalls
from agentium_harness._engine.loops import PerLoop, ThreadSafeEvent


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


def test_trailing_work_past_its_bound_is_dropped_and_still_counted() -> None:
    late = LateCalls()
    late.trail(ThreadSafeEvent(), 0.01)  # never set: work that cannot end
    time.sleep(0.03)
    ended = ThreadSafeEvent()
    ended.set()
    late.trail(ended, 1.0)
    assert len(late._trailing) == 1  # the unended entry past its bound is gone (kept, it grew forever)

    async def wait() -> int:
        return await late.wait_trailing(0.5)

    assert asyncio.run(wait()) == 1  # reported as left running all the same


def test_trailing_work_within_its_bound_is_kept() -> None:
    late = LateCalls()
    running = ThreadSafeEvent()
    late.trail(running, 5.0)
    late.trail(ThreadSafeEvent(), 5.0)
    assert len(late._trailing) == 2


def test_per_loop_close_problems_are_logged_when_its_caller_was_natively_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        values: PerLoop[object] = PerLoop(object)
        values.get()

        async def close(value: object) -> None:
            await asyncio.sleep(0.1)
            raise ValueError("boom")

        caller = asyncio.get_running_loop().create_task(values.aclose(close, 1.0))
        await asyncio.sleep(0.02)  # the close has begun
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.3)  # the close has failed by now, its caller long gone

    with caplog.at_level(logging.WARNING, logger="agentium.engine"):
        asyncio.run(main())
    # The failure was lost: no one waited for the close's result any more.
    assert any("failed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_trailing_work_that_ends_late_is_not_counted_as_left_running() -> None:
    late = LateCalls()
    slow = ThreadSafeEvent()  # its loop was blocked: it ends past its own bound
    late.trail(slow, 0.01)
    time.sleep(0.03)
    late.trail(ThreadSafeEvent(), 5.0)  # a later trail finds ``slow`` past its bound
    slow.set()

    async def wait() -> int:
        return await late.wait_trailing(0.05)

    assert asyncio.run(wait()) == 1  # only the later one runs (``slow`` was counted for good)


def test_overdue_trailing_work_is_kept_bounded_and_all_counted() -> None:
    late = LateCalls()
    for _ in range(100):
        late.trail(ThreadSafeEvent(), 0.0)  # each past its bound at the next trail
    late.trail(ThreadSafeEvent(), 0.0)
    assert len(late._overdue) <= 64  # bounded however much never ends

    async def wait() -> int:
        return await late.wait_trailing(0.05)

    assert asyncio.run(wait()) == 101


#: A class name that would forge a record and colour the terminal (an adapter chooses its class names).
_ODD = "Gone\nCRITICAL agentium.engine forged \x1b[31mred"


def test_an_unheard_per_loop_close_logs_kinds_and_count_not_the_error_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The error text quotes the server (a host name, its message): the host gets it, the log does not."""
    failures: list[list[str]] = []

    async def main() -> None:
        values: PerLoop[object] = PerLoop(object)
        values.get()

        async def close(value: object) -> None:
            await asyncio.sleep(0.05)
            raise type(_ODD, (OSError,), {})("db-7.internal:5432 refused: password for 'ana' expired")

        caller = asyncio.get_running_loop().create_task(values.aclose(close, 1.0))
        await asyncio.sleep(0.01)  # the close has begun
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.15)  # the close has failed by now, its caller long gone

        # A caller that waits still gets the whole text.
        again: PerLoop[object] = PerLoop(object)
        again.get()
        failures.append(await again.aclose(close, 1.0))

    with caplog.at_level(logging.WARNING, logger="agentium.engine"):
        asyncio.run(main())
    [record] = [r for r in caplog.records if "stopped waiting" in r.getMessage()]
    message = record.getMessage()
    assert "db-7.internal" not in message and "password" not in message and "ana" not in message
    assert message.isprintable(), message  # one record, one line
    assert (
        "1 problem(s)" in message and "object failed (Gone\\x0aCRITICAL" in message and "\\x1b[31m" in message
    )
    [[text]] = failures
    assert "db-7.internal:5432 refused" in text
