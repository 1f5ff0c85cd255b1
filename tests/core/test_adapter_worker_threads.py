"""Worker threads running ThreadBoundAdapter calls on asyncio: grown on demand, idle-clean, joined at exit.

On asyncio a call hops to a process-wide pool of worker threads. Whatever
runs that pool must keep doing what these tests pin: calls that block at the
same time each get a thread, an idle worker has no frame of non-library code
on its stack (the verifier contract suite's leak check counts such a thread
as still running a call), and the interpreter exits cleanly, letting a call
still in flight end first. Each runs in a fresh interpreter, where the pool
starts empty.

The thread's result also wakes the engine waiting for the bounded call that
made the adapter call, in the same loop iteration as the call's own task, so
the engine resumes as soon as the call ends: the last tests hold that it still
waits for a call with more to do, and still times it out at its deadline.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from agentium_harness import OperationTimeoutError
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.plugin_api import OpContext, ThreadBoundAdapter

#: Scheduling slack on a loaded two-core machine, stalls included; the call timed out hangs 60 s.
SLACK_S = 9.0

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, threading, time
    import anyio
    from agentium_harness.plugin_api import OpContext, ThreadBoundAdapter

    class Store(ThreadBoundAdapter[object]):
        adapter_name = "test store"
        abandon_on_cancel = True  # a cancelled caller leaves at once (a boto3-style client)

        def open_connection(self) -> object:
            return object()

    def workers() -> int:
        return sum(t.name.startswith("agentium-adapter") for t in threading.enumerate())

    async def main(mode: str, marker: str) -> None:
        if mode == "concurrent":
            barrier = threading.Barrier(20, timeout=20)
            stores = [Store() for _ in range(20)]
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(store.run, OpContext.with_timeout(30), "meet", lambda conn: barrier.wait())
            print("workers", workers())
        elif mode == "idle":
            from agentium_harness.testing._leaks import busy_threads

            assert await Store().run(OpContext.with_timeout(30), "get", lambda conn: 1) == 1
            time.sleep(0.2)  # the worker is back on its queue
            print("workers", workers(), "busy", len(busy_threads()))
        else:
            def slow(conn: object) -> None:
                time.sleep(1.0)
                with open(marker, "w") as f:
                    f.write("done")
            with anyio.move_on_after(0.2):
                await Store().run(OpContext.with_timeout(30), "slow", slow)
            print("left", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _run(mode: str, marker: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )


def test_calls_blocked_at_the_same_time_each_get_a_worker_thread(tmp_path: Path) -> None:
    # Twenty calls wait for each other in their threads: only twenty threads at once let them all meet.
    done = _run("concurrent", tmp_path / "unused")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["workers", "20"]


def test_an_idle_worker_thread_is_not_a_busy_thread_for_the_leak_check(tmp_path: Path) -> None:
    # The verifier contract suite's leak check counts a thread with a frame of non-library code on its
    # stack as still running a call: an idle worker must have none (as an idle ThreadPoolExecutor's).
    done = _run("idle", tmp_path / "unused")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["workers", "1", "busy", "0"]


def test_the_interpreter_exits_after_a_call_in_flight_ends(tmp_path: Path) -> None:
    # The caller left (abandoned) while its thread still runs; the process exits without hanging on the
    # idle worker threads, and only once that call has ended.
    marker = tmp_path / "ended"
    done = _run("exit", marker)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["left"]
    assert marker.read_text() == "done"


class Store(ThreadBoundAdapter[object]):
    adapter_name = "test store"

    def open_connection(self) -> object:
        return object()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_a_call_with_more_to_do_after_its_thread_is_still_waited_for() -> None:
    store, ticket = Store(), Ticket(None, "test", 30.0)

    async def hop_then_wait(ctx: OpContext) -> str:
        value = await store.run(ctx, "get", lambda conn: "from the thread")
        await anyio.sleep(0.3)  # the engine, woken by the thread's result, must wait for this too
        return value + ", then later"

    assert await ticket.call("two steps", hop_then_wait) == "from the thread, then later"


@pytest.mark.anyio
async def test_a_call_with_more_to_do_after_its_thread_still_times_out_at_its_deadline() -> None:
    store, ticket = Store(), Ticket(None, "test", 30.0)

    async def hop_then_hang(ctx: OpContext) -> str:
        await store.run(ctx, "get", lambda conn: "from the thread")
        await anyio.sleep(60)
        return "late"

    started = time.monotonic()
    with pytest.raises(OperationTimeoutError) as info:
        await ticket.call("hang", hop_then_hang, timeout_s=0.8)
    ended = time.monotonic() - started
    assert not info.value.abandoned
    assert 0.8 <= ended < 0.8 + SLACK_S  # not at the thread's result, not past the deadline


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_the_engine_resumes_in_the_loop_iteration_its_call_ends_in() -> None:
    store, ticket = Store(), Ticket(None, "test", 30.0)
    later: list[str] = []

    async def hop(ctx: OpContext) -> str:
        value = await store.run(ctx, "get", lambda conn: "from the thread")
        # Runs in the next loop iteration: the engine must have resumed before it.
        asyncio.get_running_loop().call_soon(later.append, "next iteration")
        return value

    for _ in range(20):
        assert await ticket.call("get", hop) == "from the thread"
        assert later == []
        await asyncio.sleep(0)
        assert later == ["next iteration"]
        later.clear()
