"""A second ``aclose()`` waits for the first's close to end (real server).

It returned at once: its caller was told the store was closed while the
first caller's close still had the connections open.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import OpContext
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio


async def test_second_aclose_waits_for_the_first(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    await store._ready(OpContext(), "test")  # the loop's connection is open
    real_close = store._close_connection
    ended: list[str] = []

    async def slow_close(conn: object) -> None:  # the first close takes a while on the real client
        await asyncio.sleep(0.3)
        await real_close(conn)  # type: ignore[arg-type]
        ended.append("closed")

    store._close_connection = slow_close  # type: ignore[method-assign]
    first = asyncio.get_running_loop().create_task(store.aclose())
    await asyncio.sleep(0.05)  # the first has begun closing
    await store.aclose()
    assert ended == ["closed"]  # the second returned only once the first's close had ended
    await first
    assert ended == ["closed"]  # closed once


async def test_a_natively_cancelled_first_aclose_still_holds_the_second(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    await store._ready(OpContext(), "test")
    real_close = store._close_connection
    ended: list[str] = []

    async def slow_close(conn: object) -> None:
        await asyncio.sleep(0.3)
        await real_close(conn)  # type: ignore[arg-type]
        ended.append("closed")

    store._close_connection = slow_close  # type: ignore[method-assign]
    first = asyncio.get_running_loop().create_task(store.aclose())
    await asyncio.sleep(0.05)
    first.cancel()  # native: passes anyio's shield
    with pytest.raises(asyncio.CancelledError):
        await first
    await store.aclose()
    assert ended == ["closed"]  # the close went on, and the second waited for it
