"""``plugin_api.CloseOnce``: one close for every ``aclose()`` caller, one outcome for them all.

Four plugins kept their own copy of this logic, and lost problems: the first
caller natively cancelled (``Task.cancel()`` passes anyio's shield on asyncio)
left the close's failure unheard, and a second caller returned without the
first's failure, as if all had closed.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import pytest

from agentium_harness.plugin_api import CloseOnce


class Refused(Exception):
    """The close's own failure (an adapter raises its typed error)."""


def test_concurrent_callers_run_one_close_and_all_hear_its_failure() -> None:
    once = CloseOnce("test adapter", wait_s=5)
    closes: list[int] = []

    async def close() -> None:
        closes.append(1)
        await anyio.sleep(0.05)
        raise Refused("the client's close failed")

    async def main() -> list[str]:
        heard: list[str] = []

        async def caller() -> None:
            try:
                await once.run(close)
            except Refused as exc:
                heard.append(str(exc))

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(caller)
        return heard

    heard = anyio.run(main)
    assert closes == [1]
    assert heard == ["the client's close failed"] * 3
    assert once.claimed and once.ended


def test_callers_on_other_threads_and_loops_wait_for_the_close_and_hear_it() -> None:
    once = CloseOnce("test adapter", wait_s=5)
    closing, release = threading.Event(), threading.Event()

    async def close() -> None:
        closing.set()
        await anyio.to_thread.run_sync(release.wait, 5)
        raise Refused("late failure")

    outcomes: list[str] = []

    def call(backend: str) -> None:
        try:
            anyio.run(once.run, close, backend=backend)
            outcomes.append("returned")
        except Refused:
            outcomes.append("failed")

    first = threading.Thread(target=call, args=("asyncio",))
    first.start()
    assert closing.wait(5)
    later = [threading.Thread(target=call, args=(backend,)) for backend in ("asyncio", "trio")]
    for thread in later:
        thread.start()
    for thread in later:
        thread.join(0.1)
    assert outcomes == []  # the later callers wait for the first's close
    release.set()
    for thread in [first, *later]:
        thread.join(5)
    assert outcomes == ["failed"] * 3


def test_a_second_caller_after_the_close_hears_its_problem_and_nothing_closes_again() -> None:
    once = CloseOnce("test adapter", wait_s=5)
    closes: list[int] = []

    async def close() -> None:
        closes.append(1)
        raise Refused("pool did not close")

    for _ in range(2):
        with pytest.raises(Refused, match="pool did not close"):
            anyio.run(once.run, close)
    assert closes == [1]


def test_a_clean_close_returns_for_every_caller() -> None:
    once = CloseOnce("test adapter", wait_s=5)
    closes: list[int] = []

    async def close() -> None:
        closes.append(1)

    anyio.run(once.run, close)
    anyio.run(once.run, close, backend="trio")
    assert closes == [1]


def test_a_natively_cancelled_first_caller_leaves_the_problem_logged_and_raised_to_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    once = CloseOnce("test adapter", wait_s=5)
    finished = asyncio.Event()

    async def close() -> None:
        try:
            await asyncio.sleep(0.05)
            raise Refused("secret-id-123 did not close")
        finally:
            finished.set()

    async def main() -> None:
        first = asyncio.get_running_loop().create_task(once.run(close))
        await asyncio.sleep(0.01)
        first.cancel()  # native: passes anyio's shield
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(finished.wait(), 1)  # the close went on
        await asyncio.sleep(0)
        assert once.ended and once._task is None  # its task is let go once it ended
        with pytest.raises(Refused, match="did not close"):
            await once.run(close)

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        asyncio.run(main())
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "test adapter" in record.getMessage() and "Refused" in record.getMessage()
    assert "secret-id-123" not in record.getMessage()  # the type, never the message


def test_a_caller_cancelled_as_the_close_ended_still_logs_the_problem(
    caplog: pytest.LogCaptureFixture,
) -> None:
    once = CloseOnce("test adapter", wait_s=5)

    async def close() -> None:
        raise Refused("failed at once")

    async def main() -> None:
        first = asyncio.get_running_loop().create_task(once.run(close))
        await asyncio.sleep(0)  # the first caller waits for the close's task
        await asyncio.sleep(0)  # the close's task has ended; the caller has not run again yet
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        asyncio.run(main())
    assert once.ended
    assert any("Refused" in r.getMessage() for r in caplog.records)
    with pytest.raises(Refused):
        anyio.run(once.run, close)


def test_under_trio_the_close_runs_in_the_callers_task_shielded() -> None:
    once = CloseOnce("test adapter", wait_s=5)
    seen: list[object] = []

    async def close() -> None:
        import trio

        seen.append(trio.lowlevel.current_task())
        await anyio.sleep(0.05)  # not cut by the caller's cancel scope
        seen.append("closed")
        raise Refused("trio close failed")

    async def main() -> None:
        import trio

        seen.append(trio.lowlevel.current_task())
        with anyio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(Refused):
                await once.run(close)

    anyio.run(main, backend="trio")
    assert seen[0] is seen[1] and seen[2] == "closed"


def test_a_synchronous_failure_of_close_is_the_outcome_too() -> None:
    once = CloseOnce("test adapter", wait_s=5)

    def close() -> asyncio.Future[None]:
        raise Refused("refused before any await")

    for _ in range(2):
        with pytest.raises(Refused):
            anyio.run(once.run, close)
    assert once.ended


def test_a_later_caller_stops_waiting_at_wait_s_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    once = CloseOnce("test adapter", wait_s=0.05)
    release = threading.Event()

    async def close() -> None:
        await anyio.to_thread.run_sync(release.wait, 5)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(once.run, close)
            await anyio.sleep(0.01)
            await once.run(close)
            assert not once.ended
            release.set()

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        anyio.run(main)
    assert any("still running" in r.getMessage() for r in caplog.records)
