"""The worker threads that run ThreadBoundAdapter calls on asyncio: reused, grown on demand, joined at exit.

On asyncio a call hops to a process-wide pool of worker threads fed through a
queue (no ``concurrent.futures.Future`` per call). These tests pin what the
pool must keep doing: a thread is reused while one is idle (sequential calls
run on one thread), calls that block at the same time each get a thread, and
the interpreter exits cleanly, letting a call still in flight end first, as
``ThreadPoolExecutor`` did. Each runs in a fresh interpreter, where the pool
starts empty.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
        if mode == "sequential":
            store = Store()
            for n in range(50):
                assert await store.run(OpContext.with_timeout(30), "get", lambda conn, n=n: n) == n
            print("workers", workers())
        elif mode == "concurrent":
            barrier = threading.Barrier(20, timeout=20)
            stores = [Store() for _ in range(20)]
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(store.run, OpContext.with_timeout(30), "meet", lambda conn: barrier.wait())
            print("workers", workers())
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


def test_sequential_calls_reuse_one_worker_thread(tmp_path: Path) -> None:
    done = _run("sequential", tmp_path / "unused")
    assert done.returncode == 0, done.stderr
    # The thread that ran a call is idle again before its caller learns the outcome,
    # so the caller's next call finds it rather than starting another one.
    assert done.stdout.split() == ["workers", "1"]


def test_calls_blocked_at_the_same_time_each_get_a_worker_thread(tmp_path: Path) -> None:
    # Twenty calls wait for each other in their threads: only twenty threads at once let them all meet.
    done = _run("concurrent", tmp_path / "unused")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["workers", "20"]


def test_the_interpreter_exits_after_a_call_in_flight_ends(tmp_path: Path) -> None:
    # The caller left (abandoned) while its thread still runs; the process exits without hanging on the
    # idle worker threads, and only once that call has ended.
    marker = tmp_path / "ended"
    done = _run("exit", marker)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["left"]
    assert marker.read_text() == "done"
