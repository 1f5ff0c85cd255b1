"""A staged write whose owner no erasure touched publishes: its bucket stays its owner's until COMMIT.

``COMMIT`` gives up a staging whose bucket its owner no longer holds (``P:bk[owner] ~= bucket``), and
an erase that walked the bucket map gives up the stagings whose bucket no owner holds
(``PEND_ORPHAN``): both for a staging an erase of its owner left behind (``test_erase_fence_lapse.py``).
Here the staging's owner is never erased, and each way its bucket might seem to change between its
``BEGIN`` and its ``COMMIT`` is run against a real server: a second writer of the owner, erasures of
other owners (also in a tenant whose buckets predate their reverse entries, so the erase walks the
map), a restart of an AOF server, and a server that came back from its last snapshot (a crash) between
the erase's walk of the bucket map and its give-up of ownerless stagings. The writer is held between
``BEGIN`` and ``COMMIT`` by events (``HeldWriter``), so the erase runs inside that window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from redis_erase_rows import KEY, discovered
from redis_servers import ServerProcess
from test_erase_fence_lapse import _begin_in_a_lapse
from test_erase_races import BIG, OWNER, HeldWriter, _ctx, _eraser_and_writer

from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EraseStatus,
    EraseTarget,
    SeqRange,
    SessionKey,
    SourceOwner,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore

pytestmark = pytest.mark.anyio

DOC = "doc/acme/ana/s1/~/~/big"
ANA = "ana/s1/~/~"


async def _published(admin: aioredis.Redis, tp: str, sid: str = DOC) -> bool:
    return await admin.hget(f"{tp}:ids", sid) is not None


async def test_a_second_writer_of_the_owner_shares_the_bucket_the_first_made(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner has no bucket yet: the held writer's BEGIN makes it, a second writer of the owner stages
    # and publishes into it meanwhile, and the first then publishes too.
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, other, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(30):
                tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
                await held.begun.wait()
                bucket = await admin.hget(f"{tp}:bk", ANA)
                assert bucket is not None
                await other.index_document(OWNER, "big2", BIG + " qsecondw", _ctx())
                await other.index_document(OWNER, "small", "qsmallw text", _ctx())
                assert await admin.hget(f"{tp}:bk", ANA) == bucket
                held.release()
                await held.done.wait()
        assert held.error is None
        assert await _published(admin, tp) and await _published(admin, tp, "doc/acme/ana/s1/~/~/big2")
        assert await admin.zcard(f"{tp}:pend") == 0


@pytest.mark.parametrize("reverse_map", [True, False], ids=["reverse-map", "older-buckets"])
@pytest.mark.parametrize(
    ("target", "dropped"),
    [
        (EraseTarget.user("acme", "bob"), "bob/~/~/~"),
        (EraseTarget.session("acme", "ana", "s2"), "ana/s2/~/~"),
        (EraseTarget.groups_of(SessionKey("acme", "ana", "s2"), [SeqRange(0, 1)]), "ana/s2/~/~"),
        (EraseTarget.session("acme", "bob", "s9"), "bob/s9/~/~"),
    ],
    ids=["other-user", "same-user-other-session", "other-session-groups", "other-user-session"],
)
async def test_an_erase_of_other_owners_leaves_a_held_staging_to_publish(
    server: ServerProcess,
    admin: aioredis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    target: EraseTarget,
    dropped: str,
    reverse_map: bool,
) -> None:
    # Another owner's bucket is emptied and dropped (bk, kb, bn) while ana/s1's staging is held; without
    # reverse entries the erase walks the bucket map and gives up the stagings whose bucket no owner holds.
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qanakept text", _ctx())
        for owner in (SourceOwner("acme", "bob"), SourceOwner("acme", "bob", "s9")):
            await eraser.index_document(owner, "d", "qothergone text", _ctx())
        group = plain_group(0, " qgroupgone text")
        receipt = ArchiveReceipt(0, group.digest, "x")
        await eraser.index_groups(SessionKey("acme", "ana", "s2"), [group], [receipt], _ctx())
        assert await admin.hget(f"{tp}:bk", dropped) is not None
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(30):
                tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
                await held.begun.wait()
                if not reverse_map:
                    await admin.delete(f"{tp}:kb")  # as an older store left the tenant
                report = await eraser.erase(target, _ctx())
                assert report.status is EraseStatus.COMPLETE
                assert report.count("document") + report.count("group") == (
                    2 if dropped == "bob/~/~/~" else 1
                )
                assert await admin.hget(f"{tp}:bk", dropped) is None  # its emptied bucket went
                assert await admin.zcard(f"{tp}:pend") == 1  # ana's staging: not given up
                held.release()
                await held.done.wait()
        assert held.error is None
        assert await _published(admin, tp)
        assert await admin.zcard(f"{tp}:pend") == 0
        assert DOC in await discovered(writing, KEY, "qsecret7x")


async def test_a_restart_between_begin_and_commit_leaves_the_staging_to_publish(
    aof_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = aioredis.Redis.from_url(aof_server.url)
    async with _eraser_and_writer(aof_server, max_terms_per_call=64) as (prefix, eraser, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        try:
            await eraser.index_document(OWNER, "small", "qanakept text", _ctx())
            async with anyio.create_task_group() as tg:
                with anyio.fail_after(30):
                    tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
                    await held.begun.wait()
                    aof_server.stop()
                    aof_server.restart()
                    await writing.health(_ctx())  # its link reconnects (a broken round trip is settled)
                    held.release()
                    await held.done.wait()
            assert held.error is None
            assert await _published(admin, tp)
        finally:
            await admin.aclose()


async def test_a_snapshot_reloaded_after_the_bucket_map_walk_gives_up_no_other_owners_staging(
    make_server: Callable[..., ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tenant whose buckets predate their reverse entries: bob's staging (its writer held between BEGIN
    # and COMMIT) is one the erase of ana cannot place, so it walks the bucket map, writing the reverse
    # entries, then gives up the stagings whose bucket no owner holds. The server crashes between the two
    # and comes back from its last snapshot (RDB), taken before the walk: the entries the walk wrote are
    # gone. Before: the give-up read no reverse entry for bob's bucket and gave bob's staging up, and bob's
    # writer, whose owner no erasure touched, was refused.
    from agentium_recall_redis.store import RedisRecallStore as StoreClass

    srv = make_server()
    original = StoreClass._script
    crashes: list[int] = []

    async def script(self: StoreClass, which: Any, keys: Any, args: Any, *rest: Any) -> Any:
        reply = await original(self, which, keys, args, *rest)
        if which.name == "erase_stagings_scan" and reply[0] in (b"0", "0") and not crashes:
            crashes.append(1)  # the walk of the bucket map has ended, its reverse entries written
            srv.kill()  # SIGKILL: no save; the restart loads the snapshot taken before the erase
            srv.restart()
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)
    admin = aioredis.Redis.from_url(srv.url)
    settings = RedisRecallConfig(url=srv.url, key_prefix="snap", max_terms_per_call=64)
    eraser, writing = RedisRecallStore(settings), RedisRecallStore(settings)
    tp = "snap:{acme}"
    bob = SourceOwner("acme", "bob")
    held = HeldWriter(writing, monkeypatch)
    try:
        await eraser.index_document(OWNER, "small", "qanagone text", _ctx())
        await eraser.index_document(bob, "small", "qbobkept text", _ctx())
        await admin.delete(f"{tp}:kb")  # as an older store left the tenant: no reverse map
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(30):
                tg.start_soon(held.run, lambda: writing.index_document(bob, "big", BIG, _ctx()))
                await held.begun.wait()
                assert await admin.save()
                await eraser.erase(EraseTarget.user("acme", "ana"), _ctx())
                assert crashes == [1]
                assert await admin.zcard(f"{tp}:pend") == 1  # bob's staging: not given up
                await writing.health(_ctx())
                held.release()
                await held.done.wait()
        assert held.error is None
        assert await _published(admin, tp, "doc/acme/bob/~/~/~/big")
    finally:
        await writing.aclose()
        await eraser.aclose()
        await admin.aclose()


async def test_a_commit_refused_for_a_dropped_bucket_says_index_again_and_the_retry_publishes(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refusal b5a1ab0d added (a staging begun in a lapse of the erase's fence, its bucket dropped by a
    # partial call): a typed error that says to index again, nothing half-published, and the retry, with
    # no erasure running, publishes into a bucket the owner holds again, where recall finds it.
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())
        await eraser.index_document(SourceOwner("acme", "ana", "s2"), "other", "qothers2 text", _ctx())
        await writing.health(_ctx())
        async with anyio.create_task_group() as tg:
            _begin_in_a_lapse(monkeypatch, admin, tp, tg, held, writing)
            with anyio.fail_after(30):
                report = await eraser.erase(EraseTarget.user("acme", "ana"), _ctx(), max_items=1)
                assert report.status is EraseStatus.PARTIAL
                held.release()
                await held.done.wait()
        assert isinstance(held.error, RedisRecallError) and "Index it again" in str(held.error)
        assert not await _published(admin, tp) and await admin.zcard(f"{tp}:pend") == 0
        assert await admin.hget(f"{tp}:rev", DOC) is None
        with anyio.fail_after(30):
            ref = await writing.index_document(OWNER, "big", BIG, _ctx())
        assert ref.source_id == DOC
        assert await _published(admin, tp)
        bucket = await admin.hget(f"{tp}:bk", ANA)
        assert bucket is not None and await admin.hget(f"{tp}:kb", bucket) == ANA.encode()
        assert DOC in await discovered(writing, KEY, "qsecret7x")
