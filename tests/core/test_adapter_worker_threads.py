"""Worker threads running ThreadBoundAdapter calls on asyncio: grown on demand, idle-clean, bounded at exit.

On asyncio a call hops to a process-wide pool of worker threads. Whatever
runs that pool must keep doing what these tests pin: calls that block at the
same time each get a thread, an idle worker has no frame of non-library code
on its stack (the verifier contract suite's leak check counts such a thread
as still running a call), and the interpreter exits cleanly, letting a call
still in flight end first — but only up to AGENTIUM_ADAPTER_EXIT_TIMEOUT: a
call that never ends is left behind (the threads are daemons) with a WARNING.
Each runs in a fresh interpreter, where the pool starts empty.

The thread's result also wakes the engine waiting for the bounded call that
made the adapter call, in the same loop iteration as the call's own task, so
the engine resumes as soon as the call ends: the last tests hold that it still
waits for a call with more to do, and still times it out at its deadline.
"""

from __future__ import annotations

import asyncio
import logging
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
from agentium_harness.adapters._worker_pool import DEFAULT_EXIT_TIMEOUT_S, ENV_EXIT_TIMEOUT, exit_timeout
from agentium_harness.plugin_api import OpContext, ThreadBoundAdapter

#: Scheduling slack on a loaded two-core machine, stalls included; the call timed out hangs 60 s.
SLACK_S = 9.0

SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys, threading, time
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
        elif mode in ("stuck", "stuck-closed", "stuck-fork"):
            never = threading.Event()  # never set: the call blocks for good, as on a dead network read
            store = Store()
            with anyio.move_on_after(0.5):
                await store.run(OpContext.with_timeout(30), "stuck", lambda conn: never.wait())
            if mode == "stuck-closed":
                store.close_timeout_s = 0.5
                try:
                    await store.aclose()
                except Exception as exc:
                    print("close", type(exc).__name__)
            print("left", flush=True)
        else:
            def slow(conn: object) -> None:
                time.sleep(1.0)
                with open(marker, "w") as f:
                    f.write("done")
            with anyio.move_on_after(0.2):
                await Store().run(OpContext.with_timeout(30), "slow", slow)
            print("left", flush=True)

    logging.basicConfig()  # as a host would: the library's WARNINGs reach stderr
    if len(sys.argv) > 3:
        anyio.run(main, sys.argv[1], sys.argv[2], backend=sys.argv[3])
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    if sys.argv[1] == "stuck-fork":
        import os, warnings

        warnings.simplefilter("ignore")  # forking with threads running: what is tested here
        child = os.fork()
        if child:
            os.waitpid(child, 0)
        else:
            print("child", flush=True)  # then exits as usual: its exit hook must not see the parent's call
    """
)


def _run(mode: str, marker: Path, *backend: str, exit_timeout: str = "") -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    env.pop("AGENTIUM_ADAPTER_EXIT_TIMEOUT", None)
    if exit_timeout:
        env["AGENTIUM_ADAPTER_EXIT_TIMEOUT"] = exit_timeout
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(marker), *backend],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
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


def test_the_interpreter_exits_past_the_bound_while_an_abandoned_call_never_ends(tmp_path: Path) -> None:
    # A call blocked for good (a sync client stuck on a network read), abandoned by its caller: exit waits
    # for it only up to AGENTIUM_ADAPTER_EXIT_TIMEOUT (1 s here), says so, and the process exits cleanly.
    started = time.monotonic()
    done = _run("stuck", tmp_path / "unused", exit_timeout="1")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20  # the 1 s bound plus slack; without it the run hangs 60 s
    assert done.stdout.split() == ["left"]
    assert "interpreter exit: 1 adapter call(s) still running in worker threads after 1s" in done.stderr


def test_an_adapter_closed_while_its_call_never_ends_does_not_hold_the_exit_either(tmp_path: Path) -> None:
    # aclose gives up at close_timeout_s; the thread it waited in (anyio's, not a daemon) must stop too.
    started = time.monotonic()
    done = _run("stuck-closed", tmp_path / "unused", exit_timeout="1")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20
    assert done.stdout.split() == ["close", "AgentiumError", "left"]
    assert "1 adapter call(s) still running" in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_wait_at_exit_for_its_parents_calls(tmp_path: Path) -> None:
    # The child has none of the parent's worker threads: only the parent waits for its stuck call.
    done = _run("stuck-fork", tmp_path / "unused", exit_timeout="1")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["child", "left"]
    assert done.stderr.count("adapter call(s) still running") == 1, done.stderr


def test_on_trio_the_interpreter_exits_while_an_abandoned_call_never_ends(tmp_path: Path) -> None:
    # On trio calls run in trio's worker threads (anyio.to_thread), which are daemons: nothing waits.
    done = _run("stuck", tmp_path / "unused", "trio", exit_timeout="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["left"]


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


@pytest.mark.parametrize(("raw", "bound"), [(None, 10.0), ("", 10.0), ("2.5", 2.5), ("86400", 86400.0)])
def test_the_exit_bound_is_the_variables_else_ten_seconds(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, bound: float
) -> None:
    if raw is None:
        monkeypatch.delenv(ENV_EXIT_TIMEOUT, raising=False)
    else:
        monkeypatch.setenv(ENV_EXIT_TIMEOUT, raw)
    assert exit_timeout() == bound


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "nan", "inf", "86401"])
def test_an_invalid_exit_bound_is_logged_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, raw: str
) -> None:
    # Read while the process exits: nobody is left to raise to, so it warns and keeps the default.
    monkeypatch.setenv(ENV_EXIT_TIMEOUT, raw)
    with caplog.at_level(logging.WARNING, logger="agentium.engine.lifecycle"):
        assert exit_timeout() == DEFAULT_EXIT_TIMEOUT_S
    assert [r.getMessage() for r in caplog.records] == [
        f"{ENV_EXIT_TIMEOUT} must be a number of seconds in (0, 86400], got {raw!r}; using 10s"
    ]
