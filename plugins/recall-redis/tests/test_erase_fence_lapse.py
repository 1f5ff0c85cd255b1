"""A staging begun while an erase call's fence had lapsed, in the bucket the call then empties.

The fence holds :data:`~agentium_recall_redis.erase_fence.FENCE_MS` after its last raise; a call raises
it again between round trips, so a round trip longer than three quarters of its life (a stalled
process, a server busy that long) lets it lapse, and a write of the target's owner lands meanwhile. The
erase gives up its target's stagings again after its sweep for that reason. Here a ``BEGIN`` lands in
such a lapse after the call's first give-up and before its ``ERASE`` empties the owner's bucket, which
``ERASE`` then drops (it no longer reads every staging to keep it). Both clocks are stood in for (the
fence's end in Redis moved to the past, the call's monotonic clock moved on), as in
``test_erase_races.py``; the staged write is held between its ``BEGIN`` and its ``COMMIT`` by events.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from anyio.abc import TaskGroup
from redis_servers import ServerProcess
from test_erase_races import BIG, OWNER, HeldWriter, _ctx, _eraser_and_writer, _raw

import agentium_recall_redis.erase as erase_module
import agentium_recall_redis.erase_fence as erase_fence
from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallError, RedisRecallStore

pytestmark = pytest.mark.anyio


def _begin_in_a_lapse(
    monkeypatch: pytest.MonkeyPatch,
    admin: aioredis.Redis,
    tp: str,
    tg: TaskGroup,
    held: HeldWriter,
    writing: RedisRecallStore,
) -> None:
    """After the erase call's first give-up: its fence lapses, and ``held``'s ``BEGIN`` of ana/s1 runs."""
    now = {"t": 1000.0}
    monkeypatch.setattr(erase_fence, "_clock", lambda: now["t"])
    original = erase_module.abort_stagings
    calls = {"n": 0}

    async def abort_then_lapse(*args: Any, **kwargs: Any) -> int:
        given = await original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:  # after the call's first give-up, before its ERASE
            for key in (f"{tp}:ef", f"{tp}:efh"):
                for field in await admin.hkeys(key):
                    await admin.hset(key, field, "1")  # the fence ended (server clock)
            now["t"] += erase_fence.FENCE_MS / 1000  # and the call's clock says so: it raises it again
            tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
            with anyio.fail_after(30):
                await held.begun.wait()
            assert held.error is None  # BEGIN ran: the staging writes into ana/s1's bucket
        return given

    monkeypatch.setattr(erase_module, "abort_stagings", abort_then_lapse)


async def test_a_staging_begun_in_a_lapse_of_the_fence_is_given_up_with_the_bucket_it_wrote_into(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: ERASE dropped the emptied bucket (bk/kb/bn) while the staging still wrote into it; the
    # give-up after the sweep then found no owner for the staging's bucket and left it, and its COMMIT
    # after the erase published the erased owner's words into a bucket no owner holds (recall never reads
    # it, and indexing the same revision again says it is there): the writer was told it was written.
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())
        await writing.health(_ctx())
        async with anyio.create_task_group() as tg:
            _begin_in_a_lapse(monkeypatch, admin, tp, tg, held, writing)
            with anyio.fail_after(30):
                report = await eraser.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
                assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
                held.release()  # the COMMIT lands after the erase reported complete
                await held.done.wait()
        raw = await _raw(admin, prefix)
        assert isinstance(held.error, RedisRecallError)  # the writer is told its write did not apply
        assert b"qsecret" not in raw and b"qearlier7" not in raw
        assert await admin.zcard(f"{tp}:pend") == 0
        # The owner writes again into a bucket it holds (both ways), and recall finds it.
        await writing.index_document(OWNER, "after", "qafterlapse5 text", _ctx())
        bucket = await admin.hget(f"{tp}:bk", "ana/s1/~/~")
        assert bucket is not None and await admin.hget(f"{tp}:kb", bucket) == b"ana/s1/~/~"


async def test_a_commit_into_a_bucket_an_erase_dropped_is_refused_and_nothing_published(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A partial call (max_items 1: ana/s2's document is left for the next) empties and drops ana/s1's
    # bucket and ends without its second give-up. Before: the staging's COMMIT then published ana's words
    # into the dropped bucket, a row recall never reads, and the writer was told it was written.
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        tp = f"{prefix}:{{acme}}"
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())
        await eraser.index_document(SourceOwner("acme", "ana", "s2"), "other", "qothers2 text", _ctx())
        await writing.health(_ctx())
        target = EraseTarget.user("acme", "ana")
        async with anyio.create_task_group() as tg:
            _begin_in_a_lapse(monkeypatch, admin, tp, tg, held, writing)
            with anyio.fail_after(30):
                report = await eraser.erase(target, _ctx(), max_items=1)
                assert report.status is EraseStatus.PARTIAL and report.count("document") == 1
                assert await admin.hget(f"{tp}:bk", "ana/s1/~/~") is None  # the emptied bucket went
                held.release()  # the COMMIT lands between the erase's calls, no fence up
                await held.done.wait()
        assert await admin.hget(f"{tp}:ids", "doc/acme/ana/s1/~/~/big") is None  # nothing published
        assert isinstance(held.error, RedisRecallError)  # refused: told its write did not apply
        assert await admin.zcard(f"{tp}:pend") == 0  # the staging was given up
        with anyio.fail_after(30):
            ctx: OpContext = _ctx()
            assert (await eraser.erase(target, ctx)).status is EraseStatus.COMPLETE
        raw = await _raw(admin, prefix)
        assert b"qsecret" not in raw and b"qearlier7" not in raw and b"qothers2" not in raw
