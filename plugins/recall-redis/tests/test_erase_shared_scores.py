"""Any number of row-set members sharing one score: an erasure still reads past them, at full page size.

The store gives each member of a row set (``P:rows``, ``P:ir:<prefix>``)
its own row number as its score; damage can give many members one score.
The walks read these sets by score, a page of ``SWEEP_PAGE`` (1,024)
members at a time. A full page whose members all shared one score could not
say where the next page goes on without skipping some, so it failed the
erase closed: with 1,024 or more members at one score every erase of the
tenant (or of the user) failed, whatever its deadline, until the set was
repaired by hand. The walks now go on from a (score, member) place, so no
number of members at one score stops them, and each page is still one
bounded script call. Every damage here is written straight into the real
server with redis-py, as corruption would leave it.
"""

from __future__ import annotations

from typing import Final

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA: Final = SourceOwner("acme", "ana")
ANA_IDS: Final = [f"doc/acme/ana/~/~/~/{name}" for name in ("a", "b", "c", "d")]
#: More members at one score than one page of the sweep reads (1,024).
CROWD: Final = 1100


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _four_of_ana(store: RedisRecallStore) -> None:
    for name in ("a", "b", "c", "d"):
        await store.index_document(ANA, name, f"qshared{name}x text", _ctx())
    await store.index_document(SourceOwner("acme", "bob"), "kept", "qbobshared text", _ctx())


async def _erase_all(store: RedisRecallStore, target: EraseTarget) -> list[EraseStatus]:
    statuses = [(await store.erase(target, _ctx())).status]
    while statuses[-1] is not EraseStatus.COMPLETE and len(statuses) < 10:
        statuses.append((await store.erase(target, _ctx())).status)
    return statuses


@pytest.mark.parametrize("where", ["user row set", "tenant row set", "index build"])
async def test_more_members_at_one_score_than_a_page_never_fail_or_hide_a_row(
    server: ServerProcess, admin: aioredis.Redis, where: str
) -> None:
    # Row 4 (ana's "d") is reachable by no id (its P:ids entry gone: damage), and it and 1,100 members
    # that are no row share score 3 in the set the erase reads its rows from. Before: every erase failed
    # (RedisRecallError "more rows at one score than a page reads"), and "d"'s text stayed.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.tenant("acme") if where == "tenant row set" else EraseTarget.user("acme", "ana")
    try:
        await _four_of_ana(store)
        assert await admin.hget(f"{tp}:ids", ANA_IDS[3]) == b"4"
        assert await admin.hdel(f"{tp}:ids", ANA_IDS[3]) == 1
        crowd = {str(100_000 + i): 3 for i in range(CROWD)} | {"4": 3}
        if where == "user row set":
            assert await admin.zadd(f"{tp}:ir:ana/", crowd) == CROWD
        else:
            assert await admin.delete(f"{tp}:n") == 1  # the row set is then what leads to the rows
            assert await admin.zadd(f"{tp}:rows", crowd) == CROWD
        if where == "index build":  # written before the erasure index: none of it, not marked
            index = [k for k in await key_space(admin, tp) if b":ixm" in k or b":is:" in k or b":ir:" in k]
            assert await admin.delete(*index) == len(index) >= 3

        planned = await store.erase(target, _ctx(), dry_run=True)
        assert planned.status is EraseStatus.COMPLETE
        assert planned.count("document") == (5 if where == "tenant row set" else 4)
        assert (await _erase_all(store, target))[-1] is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qshared" not in left and b"/ana/" not in left, left
        assert (b"qbobshared" in left) is (where != "tenant row set")
        if where == "index build":
            assert await admin.get(f"{tp}:ixm") == b"1"
    finally:
        await store.aclose()


@pytest.mark.parametrize("shared", [False, True])
async def test_long_members_at_one_score_are_read_past_or_fail_the_erase_closed(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    # A place keeps 64 bytes of its member. Five members of 73 bytes (no row numbers) share score 3 with
    # row 4, which no id leads to, in pages of three. Different first 64 bytes: read past, row 4 erased.
    # The same first 64 bytes: the next page could only go on from where it began, so the erase fails
    # closed (typed), and row 4, which it did not erase, is not said erased.
    from agentium_recall_redis import RedisRecallError, erase_sweep

    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", 3)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.user("acme", "ana")
    try:
        await _four_of_ana(store)
        assert await admin.hdel(f"{tp}:ids", ANA_IDS[3]) == 1
        names = [("x" * 70 + f"{i:03d}") if shared else (f"{i:03d}" + "x" * 70) for i in range(5)]
        assert await admin.zadd(f"{tp}:ir:ana/", dict.fromkeys(names, 3) | {"4": 3}) == 5
        if shared:
            with pytest.raises(RedisRecallError, match="64 bytes"):
                await store.erase(target, _ctx())
            assert b"qsharedd" in repr(await key_space(admin, tp)).encode()
            return
        assert (await _erase_all(store, target))[-1] is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qshared" not in left and b"/ana/" not in left, left
    finally:
        await store.aclose()


@pytest.mark.parametrize("where", ["user row set", "tenant row set"])
async def test_members_that_are_not_utf8_are_read_past(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A place goes to the client and back as text. Five members of 42 bytes, most not UTF-8 (junk: no row
    # numbers), share score 3 with row 4, which no id leads to, in pages of three. Before: a page ending
    # at one came back with each undecodable byte replaced (3 bytes each), a place the store never makes
    # (over 100 bytes), and every erase failed (RedisRecallError) until someone repaired the set by hand.
    from agentium_recall_redis import erase_sweep

    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", 3)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.tenant("acme") if where == "tenant row set" else EraseTarget.user("acme", "ana")
    try:
        with anyio.fail_after(30):
            await _four_of_ana(store)
            assert await admin.hdel(f"{tp}:ids", ANA_IDS[3]) == 1
            names = [b"3" + b"\x80" * 40 + bytes([0x30 + i]) for i in range(5)]
            key = f"{tp}:ir:ana/" if where == "user row set" else f"{tp}:rows"
            if where == "tenant row set":
                assert await admin.delete(f"{tp}:n") == 1  # the row set is then what leads to the rows
            assert await admin.zadd(key, dict.fromkeys(names, 3) | {"4": 3}) == 5
            assert (await _erase_all(store, target))[-1] is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qshared" not in left and b"/ana/" not in left, left
    finally:
        await store.aclose()
