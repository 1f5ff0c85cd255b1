"""One adapter object, several event loops: what a finished loop leaves behind (issue 22, item 3).

The contract suites check that every adapter serves threads that each run
their own loop. This file checks the leftovers: a loop closed the way the
OpenAI Agents SDK's tests close theirs (``loop.close()`` after
``run_until_complete``, tasks still pending) leaves its pool's workers and
connections behind. They are released when the adapter next runs on another
loop, then and there, not by finalizers the garbage collector would run at
any later moment in unrelated code (where they raised 'Event loop is
closed').
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import anyio

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import plain_group, run_in_threads
from agentium_postgres import PostgresArchive, PostgresConfig


def test_a_pool_left_on_a_closed_loop_is_released_without_errors(app_config: PostgresConfig) -> None:
    archive = PostgresArchive(app_config)
    keys = [SessionKey("acme", "ana", f"left-{i}") for i in range(2)]

    async def append(i: int) -> None:
        await archive.append(keys[i], [plain_group(0, f"group {i}")], OpContext.with_timeout(30))

    # A loop that ends with the pool's workers pending, as the SDK's test threads do.
    run_in_threads(append, threads=1, styles=("asyncio-loop",), timeout_s=60)
    reported: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = reported.append
    try:

        async def again() -> int:
            await append(1)  # another loop: the finished loop's pool is released now
            groups = await archive.read_groups(keys[0], 0, 10, OpContext.with_timeout(30))
            await archive.aclose()
            return len(groups)

        assert anyio.run(again) == 1
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [f"{r.exc_type.__name__}: {r.exc_value}" for r in reported] == []
