"""Damaged scores in the erasure index: an erasure still finds every id and row of its target.

An id set (``P:is:<prefix>``) is read by lexicographic range (``ZRANGEBYLEX``),
which is defined only while every member has the same score (the store writes
0). A member whose score was changed behind the store's back sorts after (or
before) the others, and a page resumed after the last id read stepped past it
(or read the same page again for ever): a deletion tombstone listed only there
stayed in ``P:rev`` while the erase reported complete. A row set
(``P:ir:<prefix>``) is read by score from 1 up: a row whose score was moved
below 1 or to 1e15 and up was never swept. Each damage is written straight
into the real server with redis-py, as corruption would leave it.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest
import redis.asyncio as aioredis
from keyspace import key_space, marked, unmarked
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA: Final = SourceOwner("acme", "ana")
ANA_IDS: Final = [f"doc/acme/ana/~/~/~/{name}" for name in ("a", "b", "c", "d")]


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _four_of_ana(store: RedisRecallStore) -> None:
    """Ana's documents a to d, "a" deleted (a tombstone in ``P:rev``, listed in ``P:is:ana/`` only)."""
    for name in ("a", "b", "c", "d"):
        await store.index_document(ANA, name, f"qscore{name}x text", _ctx())
    assert await store.delete_document(ANA, "a", _ctx())
    await store.index_document(SourceOwner("acme", "bob"), "kept", "qbobscore text", _ctx())


@pytest.mark.parametrize("score", [1.0, 0.5])
async def test_an_id_set_with_a_damaged_score_still_gives_up_every_id(
    server: ServerProcess,
    admin: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    score: float,
) -> None:
    # Pages of three ids: with "a" moved after b, c and d (score 1), the second page started after "d"
    # and found nothing, so the tombstone of "a" stayed and the erase reported complete.
    from agentium_recall_redis import erase_index

    monkeypatch.setattr(erase_index, "_IX_PAGE", 3)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _four_of_ana(store)
        assert await admin.get(f"{tp}:ixm") == b"1"
        assert await admin.zadd(f"{tp}:is:ana/", {ANA_IDS[0]: score}, xx=True, ch=True) == 1
        assert (await admin.hget(f"{tp}:rev", ANA_IDS[0]) or b"").startswith(b"-")

        planned = await store.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=True)
        assert planned.count("document") == 3  # b, c, d (a dry run writes nothing, repairs nothing)
        with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 3
        space = await key_space(admin, tp)
        left = repr(space).encode()
        assert b"/ana/" not in left and b"qscore" not in left, left  # the tombstone of "a" went too
        assert b"qbobscore" in left  # bob's document stays
        assert "score" in caplog.text  # the damage is logged
    finally:
        await store.aclose()


@pytest.mark.parametrize("score", [0.0, -5.0, 1e15])
async def test_a_row_set_with_a_damaged_score_still_gives_up_every_row(
    server: ServerProcess, admin: aioredis.Redis, score: float
) -> None:
    # A row the index's ids no longer lead to (its P:ids entry gone, damage) is found by the sweep of
    # ana's row set, read by score from 1: a score moved out of that range hid the row, its text stayed.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _four_of_ana(store)
        n = await admin.hget(f"{tp}:ids", ANA_IDS[1])
        assert n is not None
        assert await admin.hdel(f"{tp}:ids", ANA_IDS[1]) == 1
        assert await admin.zadd(f"{tp}:ir:ana/", {n: score}, xx=True, ch=True) == 1

        reports = [await store.erase(EraseTarget.user("acme", "ana"), _ctx())]
        while reports[-1].status is not EraseStatus.COMPLETE and len(reports) < 10:
            reports.append(await store.erase(EraseTarget.user("acme", "ana"), _ctx()))
        assert reports[-1].status is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qscoreb" not in left and b"/ana/" not in left, left
        assert b"qbobscore" in left
    finally:
        await store.aclose()


@pytest.mark.parametrize("page", [3, 2])
async def test_members_sharing_a_row_score_never_hide_it_past_a_full_page(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    # Scores in the row set's range but not their members' own numbers (no rows: 12 scored 3, 10 and 11
    # scored 4; damage) pass the range check. Row 4, which its P:ids entry no longer leads to, sorts after
    # 10 and 11 at score 4: a full page (12, 10, 11 by threes; 10, 11 by twos) ended at score 4 and the
    # next began at 5, past row 4, so its text stayed while the erase said complete. Now a page stops
    # after its last (score, member) and the next goes on from there (erase_walk), so a full page all at
    # one number (by twos) reads on too: it failed the erase closed before (test_erase_shared_scores.py).
    from agentium_recall_redis import erase_sweep

    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", page)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _four_of_ana(store)
        rows = [await admin.hget(f"{tp}:ids", sid) for sid in ANA_IDS[1:]]
        assert [int(n or 0) for n in rows] == [2, 3, 4], rows
        assert await admin.hdel(f"{tp}:ids", ANA_IDS[3]) == 1
        assert await admin.zadd(f"{tp}:ir:ana/", {"12": 3, "10": 4, "11": 4}) == 3

        reports = [await store.erase(EraseTarget.user("acme", "ana"), _ctx())]
        while reports[-1].status is not EraseStatus.COMPLETE and len(reports) < 10:
            reports.append(await store.erase(EraseTarget.user("acme", "ana"), _ctx()))
        assert reports[-1].status is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qscored" not in left and b"/ana/" not in left, left
        assert b"qbobscore" in left
    finally:
        await store.aclose()


@pytest.mark.parametrize("walk", ["tenant sweep", "index build"])
async def test_the_tenant_row_set_read_past_a_lost_counter_skips_no_row_sharing_a_score(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, walk: str
) -> None:
    # The same paging reads the tenant's row set P:rows once its row counter is lost: a tenant target's
    # sweep, and the rows of an index build (a user erasure of a tenant not indexed). Members scored
    # below row 4 (its P:ids entry gone) and 10 scored 4 (damage) filled a page of three (the build: rows
    # 2 and 3, then 10; the tenant's sweep, after its first pass took every other row: 12 and 13 at 3,
    # then 10), which ended at 4, and the next page began at 5, past row 4, whose text then outlived an
    # erasure said complete (the build marked the tenant without listing it).
    from agentium_recall_redis import erase_sweep

    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", 3)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.tenant("acme") if walk == "tenant sweep" else EraseTarget.user("acme", "ana")
    try:
        await _four_of_ana(store)
        assert await admin.hget(f"{tp}:ids", ANA_IDS[3]) == b"4"
        assert await admin.hdel(f"{tp}:ids", ANA_IDS[3]) == 1
        assert await admin.delete(f"{tp}:n") == 1
        junk = {"10": 4} if walk == "index build" else {"12": 3, "13": 3, "10": 4}
        assert await admin.zadd(f"{tp}:rows", junk) == len(junk)
        if walk == "index build":  # written before the erasure index: none of it, not marked
            index = [k for k in await key_space(admin, tp) if b":ixm" in k or b":is:" in k or b":ir:" in k]
            assert await admin.delete(*index) == len(index) >= 3
        reports = [await store.erase(target, _ctx())]
        while reports[-1].status is not EraseStatus.COMPLETE and len(reports) < 10:
            reports.append(await store.erase(target, _ctx()))
        assert reports[-1].status is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qscored" not in left and b"/ana/" not in left, left
        assert (b"qbobscore" in left) is (walk == "index build")
        if walk == "index build":
            assert await admin.get(f"{tp}:ixm") == b"1"
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["is", "ir"])
async def test_a_score_damaged_after_the_check_fails_the_erase_closed(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # The check (and repair) runs once, before the sets are read: a score damaged right after it is caught
    # by the page that reads the set, which fails the call before it removes anything.
    from agentium_recall_redis import RedisRecallError, erase_index
    from agentium_recall_redis.store import RedisRecallStore as StoreClass

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    original = StoreClass._script
    armed = [False]
    member: list[str | bytes] = [ANA_IDS[2]]

    async def script(self: StoreClass, which: object, *args: object, **kwargs: object) -> object:
        reply = await original(self, which, *args, **kwargs)  # type: ignore[arg-type]
        if armed[0] and which is erase_index.IX_MARKED:
            await admin.zadd(f"{tp}:{kind}:ana/", {member[0]: 0.5}, xx=True)
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)  # before the store: it binds its method at init
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _four_of_ana(store)
        if kind == "ir":  # the row is reached by the sweep only (its P:ids entry gone, as damage leaves it)
            n = await admin.hget(f"{tp}:ids", ANA_IDS[2])
            assert n is not None and await admin.hdel(f"{tp}:ids", ANA_IDS[2]) == 1
            member[0] = n
        armed[0] = True
        before = {k: v for k, v in (await key_space(admin, tp)).items() if b":w:" not in k}
        with pytest.raises(RedisRecallError, match="damaged score"):
            await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        after = {k: v for k, v in (await key_space(admin, tp)).items() if b":w:" not in k}
        if kind == "is":
            # Nothing erased (only the damage, and the fence raise's mark for older writers).
            assert marked(after) and _without_score(unmarked(after)) == _without_score(before)
        else:  # the first pass erased what its ids led to; the row behind the damaged score is still there
            assert b"qscorec" in repr(after).encode()
        armed[0] = False
        reports = [await store.erase(EraseTarget.user("acme", "ana"), _ctx())]  # repaired, then erased
        while reports[-1].status is not EraseStatus.COMPLETE and len(reports) < 10:
            reports.append(await store.erase(EraseTarget.user("acme", "ana"), _ctx()))
        left = repr(await key_space(admin, tp)).encode()
        assert b"/ana/" not in left and b"qscore" not in left, left
    finally:
        await store.aclose()


def _without_score(space: dict[bytes, object]) -> dict[bytes, object]:
    """A key space with ana's id set's scores dropped (the one thing the test itself changed)."""
    out = dict(space)
    key = next((k for k in out if k.endswith(b":is:ana/")), None)
    if key is not None:
        kind, members = out[key]  # type: ignore[misc]
        out[key] = (kind, sorted(m for m, _ in members))
    return out
