"""A row counter damaged to about 10^14: the erase's walk by row number is bounded by the rows there are.

A tenant target, and any erase of a tenant not yet indexed (its index
build), walk the tenant's rows by number from 1 up to its counter ``P:n``
(one script call per 1,024 numbers), then the row set ``P:rows`` past it.
A counter damaged upward to 10^14 (one junk row-set entry used to push it
there; an edit still can) made every such erase walk 10^11 calls: it ran
until its deadline, and no erasure of the tenant ever completed. Every row
written since the row set exists is listed in it, so only rows written
before it need the walk by number, and they are numbered below every row
it lists: the walk by number now stops below the lowest row the set lists,
and goes on through the set. A walk by number still longer than
``MAX_NUMBER_WALK`` (no row listed to bound it) fails the erase closed:
``RedisRecallDamagedError``, logged at WARNING, the swept rows not erased.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallDamagedError, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA: Final = SourceOwner("acme", "ana")
DAMAGED: Final = 10**14


def _ctx() -> OpContext:
    # Long enough for any bounded erase here; the unbounded walk met it (OperationCancelledError).
    return OpContext.with_timeout(8)


async def _index_keys(admin: aioredis.Redis, tp: str) -> list[bytes]:
    """The erasure index's keys under ``tp``: deleting them leaves the tenant as an older store wrote it."""
    return [k for k in await key_space(admin, tp) if b":ixm" in k or b":is:" in k or b":ir:" in k]


async def _rows(store: RedisRecallStore) -> None:
    for name in ("a", "b", "c"):
        await store.index_document(ANA, name, f"qcounter{name}x text", _ctx())
    await store.index_document(SourceOwner("acme", "bob"), "kept", "qbobcounter text", _ctx())


@pytest.mark.parametrize(
    "walk", ["tenant sweep", "tenant sweep, ids whole", "index build", "tenant sweep after a write"]
)
async def test_a_counter_damaged_upward_costs_the_rows_there_are(
    server: ServerProcess, admin: aioredis.Redis, walk: str
) -> None:
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.user("acme", "ana") if walk == "index build" else EraseTarget.tenant("acme")
    try:
        with anyio.fail_after(30):
            await _rows(store)
            # Row 3 ("c") is reachable by no id (damage): only the walk of the rows finds it. With the ids
            # whole, the first pass erases every listed row before the walk: its bound is read before.
            assert await admin.hget(f"{tp}:ids", "doc/acme/ana/~/~/~/c") == b"3"
            if walk != "tenant sweep, ids whole":
                assert await admin.hdel(f"{tp}:ids", "doc/acme/ana/~/~/~/c") == 1
            await admin.set(f"{tp}:n", str(DAMAGED))
            if walk == "tenant sweep after a write":  # the new row takes 10^14 + 1: the counter looks whole
                await store.index_document(ANA, "d", "qcounterdx text", _ctx())
                assert await admin.hget(f"{tp}:ids", "doc/acme/ana/~/~/~/d") == str(DAMAGED + 1).encode()
            if walk == "index build":  # written before the erasure index: none of it, not marked
                index = [
                    k for k in await key_space(admin, tp) if b":ixm" in k or b":is:" in k or b":ir:" in k
                ]
                assert await admin.delete(*index) == len(index) >= 3
            report = await store.erase(target, _ctx())
        assert report.status is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qcounter" not in left and b"/ana/" not in left, left
        assert (b"qbobcounter" in left) is (walk == "index build")
    finally:
        await store.aclose()


@pytest.mark.parametrize("target", [EraseTarget.tenant("acme"), EraseTarget.user("acme", "ana")])
async def test_a_damaged_counter_no_row_bounds_fails_the_erase_closed_and_is_logged(
    server: ServerProcess, admin: aioredis.Redis, caplog: pytest.LogCaptureFixture, target: EraseTarget
) -> None:
    # No row set (rows written before it existed, as an older store leaves them): nothing bounds the walk
    # by number but the counter, so a counter of 10^14 is refused as damage instead of walked for ever.
    from agentium_recall_redis import RedisRecallDamagedError

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await _rows(store)
            assert await admin.hdel(f"{tp}:ids", "doc/acme/ana/~/~/~/c") == 1
            index = await _index_keys(admin, tp)
            # An older store wrote neither the row set nor the marker of where it began (P:rb).
            assert await admin.delete(f"{tp}:rows", f"{tp}:rb", *index) == len(index) + 2
            await admin.set(f"{tp}:n", str(DAMAGED))
            with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
                with pytest.raises(RedisRecallDamagedError, match="row counter"):
                    await store.erase(target, _ctx())
        assert "row counter" in caplog.text
        # Refused before the erase's first pass: nothing was erased (nor said erased).
        left = repr(await key_space(admin, tp)).encode()
        assert all(f"qcounter{name}x".encode() in left for name in "abc"), left
        assert await admin.get(f"{tp}:n") == str(DAMAGED).encode()  # left for the operator (README)
    finally:
        await store.aclose()


async def test_a_walk_within_the_bound_still_reads_every_number(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # Below MAX_NUMBER_WALK the walk by number reads every number, as before: row 3, removed from the row
    # set and from its id (damage twice over), with rows 1 and 2 still listed below it, is still erased.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await _rows(store)
            assert await admin.hdel(f"{tp}:ids", "doc/acme/ana/~/~/~/c") == 1
            assert await admin.zrem(f"{tp}:rows", "3") == 1
            report = await store.erase(EraseTarget.tenant("acme"), _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert b"qcounter" not in repr(await key_space(admin, tp)).encode()
    finally:
        await store.aclose()


@pytest.mark.parametrize("began", ["by this store", "by an earlier version"])
async def test_a_tenant_whose_first_row_numbers_are_all_gone_is_still_erased(
    server: ServerProcess, admin: aioredis.Redis, began: str
) -> None:
    # No damage: ana's row was erased, then the counter stands for 20,000,000 row numbers used since and
    # all gone (each write takes the next; erasures and rewrites free none), and bob's row takes the
    # next. The walk by number is bounded by bob's row, 20,000,001: past MAX_NUMBER_WALK. Rows below it
    # that the row set does not list could be older than the set, so it was refused as damage. The
    # tenant's first write now marks where its row set began (P:rb, "0": every row is listed), and the
    # set alone is read. A tenant an earlier version began has no marker: refused as before (its rows
    # below the lowest listed one may be unlisted), and setting the counter to the highest row (the
    # message's repair) does not help it.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(ANA, "a", "qcounteranax text", _ctx())
            assert await admin.get(f"{tp}:rb") == b"0"
            assert (await store.erase(EraseTarget.user("acme", "ana"), _ctx())).status is EraseStatus.COMPLETE
            await admin.set(f"{tp}:n", "20000000")
            await store.index_document(SourceOwner("acme", "bob"), "kept", "qbobcounter text", _ctx())
            assert await admin.zrange(f"{tp}:rows", 0, -1) == [b"20000001"]
            if began == "by an earlier version":
                assert await admin.delete(f"{tp}:rb") == 1
                before = repr(await key_space(admin, tp))
                with pytest.raises(RedisRecallDamagedError, match="row counter"):
                    await store.erase(EraseTarget.tenant("acme"), _ctx())
                assert repr(await key_space(admin, tp)) == before  # nothing erased
                return
            report = await store.erase(EraseTarget.tenant("acme"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        left = [k for k in await key_space(admin, tp) if b":w:" not in k]  # settlement tokens expire
        assert left == []  # the marker went with the tenant
    finally:
        await store.aclose()
