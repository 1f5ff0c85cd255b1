"""Round trips counted on the server: discovery is one command in one round trip (target <= 3) (R17).

The server's ``MONITOR`` feed lists every command a client sends (commands
run inside Lua scripts are marked ``lua`` and are not round trips); the
store's own ``round_trips`` counter must agree with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import OpContext, RecallLimits, Scope, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

SENTINEL = "agentium-round-trip-sentinel"


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def client_commands(server: ServerProcess, action: Callable[[], Awaitable[Any]]) -> list[str]:
    """The names of the commands clients sent while ``action`` ran (script-internal ones left out)."""
    watcher = aioredis.Redis.from_url(server.url)
    poke = aioredis.Redis.from_url(server.url)
    seen: list[str] = []
    try:
        async with watcher.monitor() as monitor:
            await poke.echo(f"{SENTINEL}-start")
            while SENTINEL not in (await monitor.next_command())["command"]:
                pass
            await action()
            await poke.echo(SENTINEL)
            with anyio.fail_after(30):
                while True:
                    entry = await monitor.next_command()
                    if SENTINEL in entry["command"]:
                        break
                    if entry["client_type"] != "lua":
                        seen.append(entry["command"].split(" ", 1)[0].upper())
    finally:
        await poke.aclose()
        await watcher.aclose()
    return seen


async def test_discovery_is_one_round_trip_and_read_and_validate_one_each(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        owner, scope = SourceOwner("rt"), Scope("rt", "u", "s")
        for i in range(30):
            await store.index_document(owner, f"d{i}", f"the kiwi harvest report number {i}", ctx())
        session = await store.open(scope, RecallLimits(), ctx())
        found: list[Any] = []

        async def discover() -> None:
            found.extend(await session.discover("kiwi harvest report", 8, ctx()))

        before = store.round_trips
        assert await client_commands(server, discover) == ["EVALSHA"]
        assert store.round_trips - before == 1 and len(found) == 8
        refs = [c.ref for c in found]
        assert await client_commands(server, lambda: session.read(refs, 2048, ctx())) == ["EVALSHA"]
        assert await client_commands(server, lambda: session.validate_current(refs, ctx())) == ["EVALSHA"]
        await session.close()
    finally:
        await store.aclose()


async def test_discovery_after_the_script_cache_is_lost_takes_two(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        await store.index_document(SourceOwner("rt"), "d", "kiwi", ctx())
        session = await store.open(Scope("rt", "u", "s"), RecallLimits(), ctx())
        await admin.script_flush()  # what a restart does to the script cache
        commands = await client_commands(server, lambda: session.discover("kiwi", 8, ctx()))
        assert commands == ["EVALSHA", "EVAL"]
        assert await client_commands(server, lambda: session.discover("kiwi", 8, ctx())) == ["EVALSHA"]
        await session.close()
    finally:
        await store.aclose()


async def test_commandstats_agree_one_evalsha_per_discovery(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    owner, scope = SourceOwner("cs"), Scope("cs", "u", "s")
    await store.index_document(owner, "d", "kiwi harvest", ctx())
    session = await store.open(scope, RecallLimits(), ctx())
    await admin.config_resetstat()
    for _ in range(5):
        await session.discover("kiwi harvest", 8, ctx())
    stats = await admin.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 5
    assert "cmdstat_eval" not in stats  # no NOSCRIPT fallback was needed
    await session.close()


async def test_the_first_call_opens_in_one_round_trip(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        commands = await client_commands(
            server, lambda: store.open(Scope("rt", "u", "s"), RecallLimits(), ctx())
        )
        # redis-py's handshake of a new connection (HELLO, CLIENT SETNAME/SETINFO), then one pipelined
        # round trip of checks. MONITOR never shows CONFIG commands; the store's counter counts the trip.
        checks = [c for c in commands if c not in {"HELLO", "CLIENT"}]
        assert checks == ["INFO", "COMMAND", *["SCRIPT"] * 15]  # every script loaded once
        assert store.round_trips == 1
        assert (
            await client_commands(server, lambda: store.open(Scope("rt", "u", "s"), RecallLimits(), ctx()))
            == []
        )
    finally:
        await store.aclose()
