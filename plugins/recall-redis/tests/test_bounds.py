"""Byte bounds: a read fetches at most ``max_read_bytes`` per source; values over the caps are refused.

Also: stored groups damaged behind the store's back are refused, never returned (R17, R18).
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    ArchiveCorruptError,
    Completeness,
    InvalidArgumentError,
    OmittedContext,
    OpContext,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
)
from agentium_harness.plugin_api import ArchiveReceipt
from agentium_harness.testing import rich_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, RedisRecallValueTooLargeError
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def test_a_text_longer_than_the_read_cap_is_read_in_part_and_says_so(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), max_read_bytes=120))
    owner = SourceOwner("cap")
    text = (
        "The kiwi harvest starts in May. "
        + "Filler sentence about nothing at all. " * 40
        + "Correction: June."
    )
    try:
        ref = await store.index_document(owner, "long", text, ctx())
        session = await store.open(Scope("cap", "u", "s"), RecallLimits(), ctx())
        await session.discover("kiwi harvest", 4, ctx())
        await admin.config_resetstat()
        [excerpt] = await session.read([ref], 4096, ctx())  # the excerpt cap is large: the read cap bounds it
        assert excerpt.text.startswith("The kiwi harvest starts in May.")
        assert len(excerpt.text.encode()) <= 120
        assert excerpt.completeness is Completeness.PARTIAL
        assert excerpt.omitted == {OmittedContext.SOURCE, OmittedContext.CORRECTION, OmittedContext.NEGATION}
        stats = await admin.info("commandstats")
        assert stats["cmdstat_getrange"]["calls"] == 1 and "cmdstat_get" not in stats
        await session.close()
    finally:
        await store.aclose()


async def test_values_over_max_value_bytes_are_refused_before_anything_is_written(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix, max_value_bytes=1000))
    key = SessionKey("cap", "u", "s")
    try:
        with pytest.raises(InvalidArgumentError, match="max_value_bytes") as raised:
            await store.index_document(SourceOwner("cap"), "bigQ7", "x" * 1001, ctx())
        assert "bigQ7" not in str(raised.value)  # the id is content: never in the text
        big = rich_group(0, key, "y" * 2000)
        with pytest.raises(InvalidArgumentError, match="max_value_bytes"):
            await store.index_groups(key, [big], [ArchiveReceipt(0, big.digest, "x")], ctx())
        assert [k async for k in admin.scan_iter(match=f"{prefix}:*")] == []
    finally:
        await store.aclose()


async def test_a_stored_group_larger_than_the_read_cap_is_never_returned_in_part(
    server: ServerProcess,
) -> None:
    prefix = new_prefix()
    key = SessionKey("cap", "u", "s")
    groups = [rich_group(0, key, "small"), rich_group(1, key, "z" * 5000)]
    writer = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    reader = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix, max_value_bytes=2000))
    try:
        await writer.index_groups(key, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
        assert list(await reader.seek_groups(key, 0, 1, ctx())) == groups[:1]
        with pytest.raises(RedisRecallValueTooLargeError, match="max_value_bytes"):
            await reader.seek_groups(key, 0, 5, ctx())
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_a_group_damaged_behind_the_stores_back_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    key = SessionKey("dmg", "u", "s")
    group = rich_group(0, key, "plum tree")
    await store.index_groups(key, [group], [ArchiveReceipt(0, group.digest, "x")], ctx())
    data_key = f"{tenant_prefix(store.config.key_prefix, 'dmg')}:c:1"
    data = await admin.get(data_key)
    assert data is not None and b"plum" in data
    await admin.set(data_key, data.replace(b"plum", b"PLUM"))
    with pytest.raises(ArchiveCorruptError, match="digest"):
        await store.seek_groups(key, 0, 5, ctx())


@pytest.mark.parametrize("score", [0.5, float("inf"), 1e20])
async def test_a_group_filed_at_a_seq_the_store_never_writes_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis, score: float
) -> None:
    # A group-set score changed outside the store (not an integer, or past the exact range) raised a
    # bare ValueError from int() in seek_groups.
    key = SessionKey("dmg", "u", "s")
    group = rich_group(0, key, "plum tree")
    await store.index_groups(key, [group], [ArchiveReceipt(0, group.digest, "x")], ctx())
    await admin.zadd(f"{tenant_prefix(store.config.key_prefix, 'dmg')}:g:1", {"1": score})
    with pytest.raises(ArchiveCorruptError, match="damaged seq"):
        await store.seek_groups(key, 0, 5, ctx())


async def test_discovery_never_fetches_titles_past_its_byte_budget(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    owner = SourceOwner("ttl")
    for i in range(5):
        await store.index_document(owner, f"d{i}", "quince jam", ctx(), title="T" * 10_000)
    session = await store.open(Scope("ttl", "u", "s"), RecallLimits(), ctx())
    await admin.config_resetstat()
    found = await session.discover("quince", 5, OpContext.with_timeout(30, remaining_bytes=500))
    assert found == []  # every candidate's title alone is over the budget
    stats = await admin.info("commandstats")
    assert "cmdstat_hget" not in stats  # sizes come from HSTRLEN; no title was read
    assert len(await session.discover("quince", 5, OpContext.with_timeout(30, remaining_bytes=25_000))) == 2
    await session.close()
