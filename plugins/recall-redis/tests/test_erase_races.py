"""A staged write racing an erasure, interleaved deterministically on a real server.

A source with more words than one script call takes is staged: ``BEGIN``
(its own round trip), then ``STAGE`` slices and ``COMMIT``, which publishes
it. These tests hold one writer (its own store object, as another process
would be) between ``BEGIN`` and its ``COMMIT``, and let the ``COMMIT`` land
at a chosen point of an erasure run by another store object: the
interleaving is fixed by events, not by timing. Whatever the point, the
erased owner's words must be gone from Redis once the erasure reports
``complete``, and the writer must learn that its write did not apply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

import agentium_recall_redis.erase as erase_module
import agentium_recall_redis.erase_fence as erase_fence
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EraseStatus,
    EraseTarget,
    OpContext,
    SeqRange,
    SessionKey,
    SourceOwner,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.writes import Writer

pytestmark = pytest.mark.anyio

OWNER = SourceOwner("acme", "ana", "s1")
KEY = SessionKey("acme", "ana", "s1")
#: Words enough to be staged over several calls (``max_terms_per_call`` is 64 below).
BIG = " ".join(f"qsecret{i}x" for i in range(200))


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


class HeldWriter:
    """Holds one store's staged write after its ``BEGIN`` until :meth:`release`; the rest then runs."""

    def __init__(self, store: RedisRecallStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.begun = anyio.Event()
        self._go = anyio.Event()
        self.done = anyio.Event()
        self.error: BaseException | None = None
        writer = store._writer  # this store's writer only; the eraser's writes go through unheld
        original = Writer.write

        async def write(
            self_: Writer, link: Any, prefix: str, calls: Sequence[Any], *rest: Any, **kw: Any
        ) -> Any:
            # The round trip after BEGIN's: its STAGE slices and its COMMIT.
            if self_ is writer and calls and calls[0][0].name in {"stage", "commit"}:
                self.begun.set()
                await self._go.wait()
            return await original(self_, link, prefix, calls, *rest, **kw)

        monkeypatch.setattr(Writer, "write", write)

    def release(self) -> None:
        """Let the held write send its ``STAGE`` slices and ``COMMIT``."""
        self._go.set()

    async def run(self, work: Callable[[], Awaitable[object]]) -> None:
        """Run the write, keeping its error (the erasure may have given its staging up)."""
        try:
            await work()
        except RedisRecallError as exc:
            self.error = exc
        finally:
            self.begun.set()
            self.done.set()


async def _raw(admin: aioredis.Redis, prefix: str) -> bytes:
    space = await key_space(admin, prefix)
    return b"\n".join(key + b"=" + repr(value).encode() for key, value in sorted(space.items()))


async def _erase_until_complete(store: RedisRecallStore, target: EraseTarget) -> None:
    for _ in range(20):
        report = await store.erase(target, _ctx())
        if report.status is EraseStatus.COMPLETE:
            return
    raise AssertionError("erase never completed")


def _around_sweep(
    monkeypatch: pytest.MonkeyPatch,
    before: Callable[[], Awaitable[None]] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run ``before`` / ``after`` around the first sweep of the tenant's rows (once each)."""
    original = erase_module.sweep_rows
    state = {"ran": False}

    async def sweep(*args: Any, **kwargs: Any) -> Any:
        first = not state["ran"]
        state["ran"] = True
        if first and before is not None:
            await before()
        result = await original(*args, **kwargs)
        if first and after is not None:
            await after()
        return result

    monkeypatch.setattr(erase_module, "sweep_rows", sweep)


@asynccontextmanager
async def _eraser_and_writer(
    server: ServerProcess, **config: Any
) -> AsyncIterator[tuple[str, RedisRecallStore, RedisRecallStore]]:
    """A fresh key prefix, two store objects on it (eraser, writer: two processes), closed after."""
    prefix = new_prefix()
    settings = RedisRecallConfig(url=server.url, key_prefix=prefix, **config)
    eraser, writing = RedisRecallStore(settings), RedisRecallStore(settings)
    try:
        yield prefix, eraser, writing
    finally:
        await writing.aclose()
        await eraser.aclose()


async def test_a_staging_begun_before_a_session_erasure_and_committed_after_its_sweep_leaves_nothing(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the ``COMMIT`` landed after the sweep and before the stagings were given up, published."""
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())

        async def commit_now() -> None:
            held.release()
            with anyio.fail_after(30):
                await held.done.wait()

        _around_sweep(monkeypatch, after=commit_now)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
                await held.begun.wait()  # BEGIN ran: the staging exists before the erasure starts
                await _erase_until_complete(eraser, EraseTarget.session("acme", "ana", "s1"))
        raw = await _raw(admin, prefix)
        assert b"qsecret" not in raw and b"qearlier7" not in raw
        assert isinstance(held.error, RedisRecallError)  # the writer is told its write did not apply


async def test_a_staging_begun_during_a_session_erasure_and_committed_after_its_sweep_leaves_nothing(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``BEGIN`` lands after the erasure began (before its sweep), ``COMMIT`` after the sweep."""
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        held = HeldWriter(writing, monkeypatch)
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())
        await writing.health(_ctx())
        async with anyio.create_task_group() as tg:

            async def begin_now() -> None:
                tg.start_soon(held.run, lambda: writing.index_document(OWNER, "big", BIG, _ctx()))
                with anyio.fail_after(30):
                    await held.begun.wait()

            async def commit_now() -> None:
                held.release()
                with anyio.fail_after(30):
                    await held.done.wait()

            _around_sweep(monkeypatch, before=begin_now, after=commit_now)
            with anyio.fail_after(30):
                await _erase_until_complete(eraser, EraseTarget.session("acme", "ana", "s1"))
        raw = await _raw(admin, prefix)
        assert b"qsecret" not in raw and b"qearlier7" not in raw
        assert isinstance(held.error, RedisRecallError)


async def test_a_group_staged_before_its_erasure_and_committed_after_it_is_not_published(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A groups target gave no staging up: a large group's ``COMMIT`` after the erasure published it."""
    async with _eraser_and_writer(server, max_terms_per_call=64) as (prefix, eraser, writing):
        held = HeldWriter(writing, monkeypatch)
        group = plain_group(0, " " + BIG)
        kept = plain_group(1, " qkeptgroup9 text")
        await eraser.index_groups(KEY, [kept], [ArchiveReceipt(1, kept.digest, "x")], _ctx())
        receipt = ArchiveReceipt(0, group.digest, "x")
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(held.run, lambda: writing.index_groups(KEY, [group], [receipt], _ctx()))
                await held.begun.wait()  # BEGIN ran
                await _erase_until_complete(eraser, EraseTarget.groups_of(KEY, [SeqRange(0, 1)]))
                held.release()  # the COMMIT lands after the erasure reported complete
                await held.done.wait()
        raw = await _raw(admin, prefix)
        assert b"qsecret" not in raw
        assert b"qkeptgroup9" in raw  # the session's other group stays
        assert isinstance(held.error, RedisRecallError)


async def test_a_write_landing_after_the_sweep_is_refused_and_another_owners_write_goes_through(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: an ``INDEX`` landing after the sweep was published, and the erasure still said complete."""
    async with _eraser_and_writer(server) as (prefix, eraser, writing):
        outcome: dict[str, object] = {}
        await eraser.index_document(OWNER, "small", "qearlier7 text", _ctx())

        async def write_now() -> None:
            try:
                await writing.index_document(OWNER, "late", "qlateword5 text", _ctx())
            except RedisRecallError as exc:
                outcome["ana"] = exc
            bob = SourceOwner("acme", "bob")
            outcome["bob"] = await writing.index_document(bob, "b", "qbobword5", _ctx())

        _around_sweep(monkeypatch, after=write_now)
        with anyio.fail_after(30):
            await _erase_until_complete(eraser, EraseTarget.session("acme", "ana", "s1"))
        raw = await _raw(admin, prefix)
        assert b"qlateword5" not in raw and b"qearlier7" not in raw
        assert "erasure" in str(outcome["ana"])  # typed (RedisRecallError), and nothing written
        assert b"qbobword5" in raw  # another owner is not fenced
        # The fence is lowered with the erasure's end: the owner can be written again.
        await writing.index_document(OWNER, "after", "qafterword5 text", _ctx())
        assert b"qafterword5" in await _raw(admin, prefix)
        assert not await admin.exists(f"{prefix}:{{acme}}:ef")


async def test_a_fence_past_its_end_refuses_nothing(server: ServerProcess, admin: aioredis.Redis) -> None:
    """A fence an erasure left behind (it crashed) ends by itself: only an unexpired one refuses."""
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    fence = f"{prefix}:{{acme}}:ef"
    try:
        await admin.hset(fence, "ana/", "1")  # ended in 1970
        await store.index_document(OWNER, "a", "qpastfence3 text", _ctx())
        assert b"qpastfence3" in await _raw(admin, prefix)
        await admin.hset(fence, "ana/", str(2**52))  # far in the future: refused, nothing written
        before = await _raw(admin, prefix)
        with pytest.raises(RedisRecallError, match="erasure"):
            await store.index_document(OWNER, "b", "qfuturefence3 text", _ctx())
        assert await _raw(admin, prefix) == before
    finally:
        await store.aclose()


async def test_a_second_erasure_of_the_same_target_keeps_its_fence_when_the_first_ends(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: both calls shared one fence field, and the first to end lowered it for the other.

    Erasure B is past its sweep when erasure A of the same session runs whole and ends; a write of the
    session landing then, while B still runs, was published and stayed after B reported ``complete``.
    """
    prefix = new_prefix()
    config = RedisRecallConfig(url=server.url, key_prefix=prefix)
    first, second = RedisRecallStore(config), RedisRecallStore(config)
    writing = RedisRecallStore(config)
    target = EraseTarget.session("acme", "ana", "s1")
    outcome: dict[str, object] = {}
    try:
        await writing.index_document(OWNER, "small", "qearlier7 text", _ctx())

        async def other_erasure_then_write() -> None:
            outcome["a"] = await first.erase(target, _ctx())  # runs whole (its sweep is not held)
            try:
                await writing.index_document(OWNER, "late", "qduringb5 text", _ctx())
            except RedisRecallError as exc:
                outcome["write"] = exc

        _around_sweep(monkeypatch, after=other_erasure_then_write)
        with anyio.fail_after(30):
            report = await second.erase(target, _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert isinstance(outcome.get("write"), RedisRecallError)  # refused: B's fence still held
        assert b"qduringb5" not in await _raw(admin, prefix)
        # Both ended: the owner can be written again, and no fence or holder is left behind.
        await writing.index_document(OWNER, "after", "qafterword5 text", _ctx())
        assert b"qafterword5" in await _raw(admin, prefix)
        assert not await admin.exists(f"{prefix}:{{acme}}:ef")
    finally:
        await writing.aclose()
        await second.aclose()
        await first.aclose()


async def test_a_long_erase_call_keeps_its_fence_up_past_the_fences_life(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: raised at the start and before the sweep only, the fence lapsed in a call that spent longer
    than its life (10 minutes) in its sweep, and a write landing after it was published and stayed.

    The sweep is made to "take" the fence's whole life: both clocks are stood in for (the fence's end in
    Redis moved to the past, the erase's monotonic clock moved on), no wall time is waited for.
    """
    async with _eraser_and_writer(server) as (prefix, eraser, writing):
        now = {"t": 1000.0}
        monkeypatch.setattr(erase_fence, "_clock", lambda: now["t"])
        fences, holders = f"{prefix}:{{acme}}:ef", f"{prefix}:{{acme}}:efh"
        outcome: dict[str, object] = {}
        await writing.index_document(OWNER, "small", "qearlier7 text", _ctx())

        async def fence_life_passes() -> None:
            for key in (fences, holders):
                for field in await admin.hkeys(key):
                    await admin.hset(key, field, "1")  # ended in 1970, as after 10 minutes
            now["t"] += erase_fence.FENCE_MS / 1000

        original = erase_module._collect_all

        async def collect_then_write(*args: Any, **kwargs: Any) -> Any:
            left = await original(*args, **kwargs)
            try:  # still inside the erase call, after its sweep and last staging abort
                await writing.index_document(OWNER, "late", "qlongcall5 text", _ctx())
            except RedisRecallError as exc:
                outcome["write"] = exc
            return left

        _around_sweep(monkeypatch, after=fence_life_passes)
        monkeypatch.setattr(erase_module, "_collect_all", collect_then_write)
        with anyio.fail_after(30):
            report = await eraser.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert isinstance(outcome.get("write"), RedisRecallError)  # refused: the fence was raised again
        assert b"qlongcall5" not in await _raw(admin, prefix)
        assert not await admin.exists(fences) and not await admin.exists(holders)
