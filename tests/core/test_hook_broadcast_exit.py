"""A lifecycle hook that never returns does not keep the process from exiting.

The engine broadcasts lifecycle hooks in a thread it abandons at the
broadcast's timeout (``hook_timeout``). That thread must be a daemon: a
non-daemon thread (anyio's worker threads on asyncio are) is joined when the
interpreter exits, and a hook stuck for good would then hold the process for
ever. Each case runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

#: Scheduling slack on a loaded two-core machine; the stuck hook would hold the process for good.
SLACK_S = 20.0

SCRIPT = textwrap.dedent(
    """
    import sys, threading
    import anyio
    from agentium_harness._engine.hooks import broadcast

    class Stuck:
        def broadcast(self, hook, /, **kwargs):
            threading.Event().wait()  # never returns
            return ()

    class Failing:
        def broadcast(self, hook, /, **kwargs):
            return ["plugin x: boom"]

    async def main() -> None:
        notes = await broadcast(Stuck(), "agentium_runtime_closed", 0.3)
        print([n.code for n in notes])
        notes = await broadcast(Failing(), "agentium_runtime_closed", 5.0)
        print([(n.code, n.message) for n in notes], flush=True)

    anyio.run(main, backend=sys.argv[1])
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_hook_that_never_returns_is_reported_and_does_not_hold_the_exit(backend: str) -> None:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, backend],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ.copy(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit: the stuck hook's thread held it")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['hook_timeout']", "[('hook_failed', 'plugin x: boom')]"]
    assert time.monotonic() - started < SLACK_S
