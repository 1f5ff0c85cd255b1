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
import time
import traceback
from collections.abc import Awaitable

import anyio
import anyio.lowlevel
import pytest

from agentium_harness import OperationCancelledError, OperationTimeoutError
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
        attempt = once._attempt
        assert once.ended and attempt is not None and attempt.task is None  # its task is let go once it ended
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


def test_a_later_caller_that_stops_waiting_at_wait_s_is_told_the_close_has_not_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It returned (a WARNING only): its caller was told "closed" while the close still ran, what
    # CloseOnce is there to prevent.
    once = CloseOnce("test adapter", wait_s=0.05)
    release = threading.Event()

    async def close() -> None:
        await anyio.to_thread.run_sync(release.wait, 5)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(once.run, close)
            await anyio.sleep(0.01)
            with pytest.raises(OperationTimeoutError, match=r"still running after 0\.05s") as caught:
                await once.run(close)
            assert caught.value.operation == "aclose" and caught.value.timeout_s == 0.05
            assert not once.ended
            release.set()
        await once.run(close)  # once it has ended (cleanly), a caller returns

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        anyio.run(main)
    assert any("still running" in r.getMessage() for r in caplog.records)


def test_a_close_cut_off_by_the_end_of_its_loop_is_not_reported_as_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio.run returning cancels every task left, the close's own among them: what it had not
    # closed stayed open, and later callers (other loops) were told it had closed, with no log line.
    once = CloseOnce("test adapter", wait_s=1)
    started = threading.Event()

    async def close() -> None:
        started.set()
        await asyncio.sleep(10)

    async def main() -> None:
        first = asyncio.get_running_loop().create_task(once.run(close))
        await asyncio.sleep(0.01)
        assert started.is_set() and not first.done()

    with caplog.at_level(logging.WARNING, logger="agentium.adapters"):
        asyncio.run(main())
    assert once.ended
    assert any("CancelledError" in r.getMessage() for r in caplog.records)
    for backend in ("asyncio", "trio"):
        with pytest.raises(OperationCancelledError, match="test adapter: its close did not finish"):
            anyio.run(once.run, close, backend=backend)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_close_interrupted_by_a_base_exception_is_not_reported_as_closed(backend: str) -> None:
    once = CloseOnce("test adapter", wait_s=1)

    async def close() -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # the first caller hears the interruption itself
        anyio.run(once.run, close, backend=backend)
    assert once.ended
    with pytest.raises(OperationCancelledError, match=r"did not finish \(KeyboardInterrupt\)"):
        anyio.run(once.run, close, backend=backend)


def test_a_base_exception_before_the_close_starts_ends_it_for_later_callers() -> None:
    # close() raising at once (before any await) left the close claimed but never ended: each later
    # caller waited wait_s, then returned with a WARNING that the close was still running.
    once = CloseOnce("test adapter", wait_s=5)

    def close() -> asyncio.Future[None]:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        anyio.run(once.run, close)
    assert once.ended
    begun = time.monotonic()
    with pytest.raises(OperationCancelledError, match=r"\(SystemExit\)"):
        anyio.run(once.run, close)
    assert time.monotonic() - begun < 1  # not a wait of wait_s for a close that had ended


def test_each_caller_gets_its_own_exception_not_another_callers_context_or_frames() -> None:
    # One exception object re-raised to every caller took, at each raise, the exception that caller
    # was handling as its __context__ (replacing the close's own), and kept that caller's frames in
    # its traceback: the next caller saw another caller's exception (its message, its frames).
    once = CloseOnce("test adapter", wait_s=5)

    async def close() -> None:
        try:
            raise OSError("socket reset")
        except OSError:
            raise Refused("pool did not close")  # noqa: B904 - its implicit context is the point

    async def main() -> list[Refused]:
        heard: list[Refused] = []
        for caller in range(3):
            try:
                raise KeyError(f"caller {caller}'s own problem")
            except KeyError:
                try:
                    await once.run(close)
                except Refused as exc:
                    heard.append(exc)
        return heard

    heard = anyio.run(main)
    assert all(type(exc) is Refused and str(exc) == "pool did not close" for exc in heard)
    assert [type(exc.__context__) for exc in heard] == [KeyError] * 3  # each its own caller's
    assert [str(exc.__context__) for exc in heard] == [f'"caller {n}\'s own problem"' for n in range(3)]
    assert len({id(exc) for exc in heard}) == 3
    # A caller's frames are in its own traceback only, over the close's (where it failed).
    depths = [len(traceback.extract_tb(exc.__traceback__)) for exc in heard]
    assert depths[0] == depths[1] == depths[2]
    assert traceback.extract_tb(heard[2].__traceback__)[-1].name == "close"
    # What the close kept is as the close raised it: its own context, not a caller's.
    kept = once._attempt.problem if once._attempt is not None else None
    assert kept is not None and type(kept.__context__) is OSError


def test_a_close_whose_loop_was_closed_under_it_is_reported_at_once_not_waited_for() -> None:
    # A loop closed with the close's task still pending (run_until_complete, then close()): the close
    # can never end. Each later caller waited wait_s, then returned with "it is still running".
    once = CloseOnce("test adapter", wait_s=1.5)

    async def close() -> None:
        await asyncio.sleep(10)

    loop = asyncio.new_event_loop()
    try:
        first = loop.create_task(once.run(close))
        loop.run_until_complete(asyncio.sleep(0.01))
        assert not first.done()
    finally:
        loop.close()
    for backend in ("asyncio", "trio"):
        begun = time.monotonic()
        with pytest.raises(OperationCancelledError, match="its event loop was closed"):
            anyio.run(once.run, close, backend=backend)
        assert time.monotonic() - begun < 0.5
    assert once.ended


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_aclose_from_inside_the_close_returns_at_once(backend: str) -> None:
    # A close that closes a wrapper which closes the adapter again: that aclose() waited wait_s for the
    # close it was part of, then raised OperationTimeoutError into the close.
    once = CloseOnce("test adapter", wait_s=1)
    steps: list[str] = []

    async def aclose() -> None:
        await once.run(close)

    async def close_wrapper() -> None:
        await aclose()  # the wrapper closes what it wraps: this adapter
        steps.append("wrapper closed")

    async def close() -> None:
        steps.append("closing")
        await close_wrapper()
        async with anyio.create_task_group() as tasks:  # a task the close started, same answer
            tasks.start_soon(aclose)
        steps.append("closed")

    begun = time.monotonic()
    anyio.run(aclose, backend=backend)
    assert time.monotonic() - begun < 0.5
    assert steps == ["closing", "wrapper closed", "closed"] and once.ended


def test_an_aclose_from_outside_still_waits_while_one_from_inside_returns() -> None:
    # Only the close's own context returns at once: another task's aclose() hears the close's outcome.
    once = CloseOnce("test adapter", wait_s=5)
    heard: list[str] = []

    async def close() -> None:
        await once.run(close)  # from inside: returns at once
        heard.append("inside returned")
        await anyio.sleep(0.05)
        raise Refused("pool did not close")

    async def outside() -> None:
        with pytest.raises(Refused):
            await once.run(close)
        heard.append("outside heard it")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(outside)
            await anyio.lowlevel.checkpoint()
            with pytest.raises(Refused):
                await once.run(close)
            heard.append("first heard it")

    anyio.run(main)
    assert heard[0] == "inside returned" and sorted(heard[1:]) == ["first heard it", "outside heard it"]


def test_a_task_started_by_the_synchronous_part_of_close_is_inside_the_close_on_asyncio_too() -> None:
    # On trio the synchronous part of close() ran marked as the close; on asyncio it ran unmarked in
    # the caller: a task it started to close a wrapper (which closes this adapter again), awaited by
    # the close, waited wait_s for the close it was part of, then raised OperationTimeoutError into it.
    once = CloseOnce("test adapter", wait_s=1)
    steps: list[str] = []

    def close() -> Awaitable[None]:
        async def close_wrapper() -> None:
            await once.run(close)  # the wrapper closes what it wraps: this adapter
            steps.append("wrapper closed")

        wrapper = asyncio.get_running_loop().create_task(close_wrapper())

        async def closed() -> None:
            await wrapper
            steps.append("closed")

        return closed()

    begun = time.monotonic()
    asyncio.run(once.run(close))
    assert time.monotonic() - begun < 0.5
    assert steps == ["wrapper closed", "closed"] and once.ended
