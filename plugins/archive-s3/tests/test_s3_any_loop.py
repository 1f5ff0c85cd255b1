"""One S3 adapter object serves several event loops at once (issue 22, item 3).

A host shares one runtime, and so one archive, between threads that each run
their own event loop, or calls it from successive ``anyio.run`` calls. The
link's capacity limiter belongs to one loop: with one shared limiter, a call
waiting for a slot on one loop is woken (not thread-safely) by a call that
releases it on another, and hangs or fails. With ``max_concurrency=1`` every
call contends, so this test fails without one limiter per loop.
"""

from __future__ import annotations

import anyio
import attrs

from agentium_archive_s3 import S3Archive, S3Config
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import plain_group, run_in_threads


def test_one_archive_with_one_slot_serves_threads_each_with_its_own_loop(config: S3Config) -> None:
    archive = S3Archive(attrs.evolve(config, max_concurrency=1))
    keys = [SessionKey("acme", "ana", f"any-loop-{i}") for i in range(4)]

    async def work(i: int) -> list[int]:
        for seq in range(4):
            await archive.append(
                keys[i], [plain_group(seq, f"thread {i} group {seq}")], OpContext.with_timeout(60)
            )
        groups = await archive.read_groups(keys[i], 0, 10, OpContext.with_timeout(60))
        return [g.seq for g in groups]

    try:
        results = run_in_threads(work, threads=4, styles=("asyncio-loop", "asyncio"), timeout_s=120)
        assert results == [[0, 1, 2, 3]] * 4
    finally:
        anyio.run(archive.aclose)
