"""A second ``aclose()`` waits for the first's close to end (real server).

It returned at once: its caller was told the store was closed while the
first caller's close still had the connections open.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import OpContext
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore

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


def _failing_close(store: RedisRecallStore, closes: list[str]) -> None:
    """The store's connection close, slowed and then failing (as a close that did not finish would)."""

    async def failing_close(conn: object) -> None:
        closes.append("began")
        await asyncio.sleep(0.1)
        raise OSError("the connection did not close")

    store._close_connection = failing_close  # type: ignore[method-assign]


async def test_a_second_aclose_hears_the_first_closes_failure(server: ServerProcess) -> None:
    # The second returned without a word once the first's close had ended: its caller was told the
    # store had closed, while only the first heard that a connection had not.
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    await store._ready(OpContext(), "test")
    closes: list[str] = []
    _failing_close(store, closes)
    first = asyncio.get_running_loop().create_task(store.aclose())
    await asyncio.sleep(0.02)
    with pytest.raises(RedisRecallError, match="did not close"):
        await store.aclose()
    with pytest.raises(RedisRecallError, match="did not close"):
        await first
    assert closes == ["began"]  # closed once


async def test_a_natively_cancelled_first_aclose_leaves_its_failure_logged_and_raised_to_the_next(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # The close went on in its own task, but its failure was heard by no one: nothing logged it,
    # and the next aclose() returned as if the store had closed.
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    await store._ready(OpContext(), "test")
    closes: list[str] = []
    _failing_close(store, closes)
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
        first = asyncio.get_running_loop().create_task(store.aclose())
        await asyncio.sleep(0.02)
        first.cancel()  # native: passes anyio's shield
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(RedisRecallError, match="did not close"):
            await store.aclose()
    assert closes == ["began"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("redis recall store" in m and "RedisRecallError" in m for m in warned), warned
    assert not any(server.url in m for m in warned)  # the type only, not the message naming the server


def test_aclose_under_trio_closes_without_an_asyncio_loop(server: ServerProcess) -> None:
    # The settlement drain is asyncio's: under trio aclose() raised "no running event loop".
    fresh = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    anyio.run(fresh.aclose, backend="trio")
    used = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    anyio.run(used._ready, OpContext(), "test", backend="asyncio")  # a connection of an ended loop
    anyio.run(used.aclose, backend="trio")
    anyio.run(used.aclose, backend="trio")  # idempotent
    with pytest.raises(RedisRecallError, match="closed"):
        anyio.run(used._ready, OpContext(), "test", backend="asyncio")


async def test_a_concurrent_second_aclose_hears_a_close_that_used_its_whole_bound(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The close's bound: settle_timeout_s for the settlements, a second for those cancelled at its
    # end, then _CLOSE_S for the connections. A later caller waited exactly that long, from before
    # the close began: it stopped waiting as the close failed, and returned as if all had closed.
    from agentium_recall_redis import store as store_module

    monkeypatch.setattr(store_module, "_CLOSE_S", 0.2)
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), settle_timeout_s=0.1))
    await store._ready(OpContext(), "test")
    real_close = store._close_connection
    stuck: list[object] = []

    async def stubborn_settlement() -> None:  # a settlement slow to stop once cancelled
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(1.05)
            raise

    async def stuck_close(conn: object) -> None:
        stuck.append(conn)
        await asyncio.sleep(10)

    store._writer.settlements.start(stubborn_settlement())
    store._close_connection = stuck_close  # type: ignore[method-assign]
    heard: list[str] = []

    async def closer() -> None:
        try:
            await store.aclose()
            heard.append("returned")
        except RedisRecallError as exc:
            heard.append(str(exc))

    try:
        await asyncio.gather(closer(), closer())
    finally:
        for conn in stuck:
            await real_close(conn)  # type: ignore[arg-type]
    assert len(heard) == 2 and all("did not finish within 0.2s" in text for text in heard), heard


def test_a_call_past_the_closed_check_as_another_thread_closes_makes_no_connection(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _ready checked "closed", then made this loop's connection: a thread that closed the store in
    # between had collected the connections already, so this one was never closed, and the call ran.
    import threading

    from agentium_recall_redis import store as store_module

    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    real_require = store_module.require_asyncio

    def closed_meanwhile(operation: str) -> None:
        real_require(operation)
        closer = threading.Thread(target=anyio.run, args=(store.aclose,))
        closer.start()
        closer.join(5)

    monkeypatch.setattr(store_module, "require_asyncio", closed_meanwhile)
    with pytest.raises(RedisRecallError, match="closed"):
        anyio.run(store._ready, OpContext(), "test")
    assert store._loops.items() == []  # nothing made after the close collected the connections
