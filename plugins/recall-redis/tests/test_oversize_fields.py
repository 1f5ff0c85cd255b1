"""A row field grown behind the store's back is refused as damage, never pulled into Python whole.

Each test grows one field to 64 MiB with a Lua script on the real server
(Redis and Valkey), so the test never holds it, and measures the call with
tracemalloc: a call that fetched the value would show a peak of at least
its size. The scripts read each field's length (``HSTRLEN``) before the
field, and a field longer than any the store writes marks the row as
changed outside the store: discovery leaves it out (as it leaves out a row
with any other damaged field), ``seek_groups`` raises ``ArchiveCorruptError``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import ArchiveCorruptError, EmbeddingModelMismatchError
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EmbeddingModel,
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    SourceVector,
    ValidationStatus,
    Vector,
    document_source_id,
)
from agentium_harness.testing import plain_group, rich_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

#: Far over any field the store writes (and over max_value_bytes): a read that fetched it shows.
HUGE: Final = 64 * 1024 * 1024
PEAK: Final = 8 * 1024 * 1024
OWNER: Final = SourceOwner("big", "u", "s")
MODEL: Final = EmbeddingModel("test-axes", 4)

# A value the Lua script builds on the server, so the test itself never holds it.
_GROW = "redis.call('HSET', KEYS[1], ARGV[1], string.rep('a', tonumber(ARGV[2]))) return 1"


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _axis(i: int) -> Vector:
    return Vector.normalized(MODEL, [1.0 if j == i else 0.0 for j in range(4)])


async def _peak(call: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """What ``call`` returned (or the exception it raised) and the peak memory Python traced meanwhile."""
    tracemalloc.start()
    try:
        try:
            result: Any = await call()
        except Exception as exc:  # the caller asserts on what was raised
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
async def grown(server: ServerProcess) -> AsyncIterator[tuple[RedisRecallStore, str]]:
    """A store holding two documents sharing the word "quince", each with a vector: rows 1 and 2."""
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        first = await store.index_document(OWNER, "first", "quince jam", _ctx(), title="Quince")
        second = await store.index_document(OWNER, "second", "quince tart", _ctx(), title="Tart")
        stored = [SourceVector(first, _axis(0)), SourceVector(second, _axis(1))]
        assert await store.index_vectors(stored, _ctx()) == 2
        yield store, tenant_prefix(store.config.key_prefix, "big")
    finally:
        await store.aclose()


async def _grow(server: ServerProcess, key: str, field: str) -> None:
    # Up to 120 s for the script (redis-py's default read timeout is 5 s): see conftest's ``admin``.
    admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
    try:
        await admin.eval(_GROW, 1, key, field, HUGE)  # type: ignore[misc]
    finally:
        await admin.aclose()


@pytest.mark.parametrize("field", ["sid", "rev", "o", "size", "title"])
async def test_discovery_leaves_out_a_row_with_a_huge_field_without_fetching_it(
    server: ServerProcess, grown: tuple[RedisRecallStore, str], field: str
) -> None:
    store, tp = grown
    await _grow(server, f"{tp}:m:1", field)
    session = await store.open(Scope("big", "u", "s"), RecallLimits(), _ctx())
    try:
        found, peak = await _peak(lambda: session.discover("quince", 5, _ctx()))  # no byte budget
        assert peak < PEAK, f"discover pulled {peak} bytes into Python"
        assert [c.ref.source_id.rsplit("/", 1)[1] for c in found] == ["second"]
    finally:
        await session.close()


@pytest.mark.parametrize("field", ["sid", "rev", "o", "size", "title", "vec"])
async def test_hybrid_discovery_leaves_out_a_row_with_a_huge_field_without_fetching_it(
    server: ServerProcess, grown: tuple[RedisRecallStore, str], field: str
) -> None:
    store, tp = grown
    await _grow(server, f"{tp}:m:1", field)
    session = await store.open(Scope("big", "u", "s"), RecallLimits(), _ctx())
    try:
        found, peak = await _peak(lambda: session.discover_hybrid("quince", _axis(0), 5, _ctx()))
        assert peak < PEAK, f"discover_hybrid pulled {peak} bytes into Python"
        assert [c.ref.source_id.rsplit("/", 1)[1] for c in found] == ["second"]
    finally:
        await session.close()


async def test_seek_refuses_a_huge_digest_without_fetching_it(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    key = SessionKey("big", "u", "s")
    group = rich_group(0, key, "plum tree")
    try:
        await store.index_groups(key, [group], [ArchiveReceipt(0, group.digest, "x")], _ctx())
        assert list(await store.seek_groups(key, 0, 5, _ctx())) == [group]
        await _grow(server, f"{tenant_prefix(store.config.key_prefix, 'big')}:m:1", "dg")
        raised, peak = await _peak(lambda: store.seek_groups(key, 0, 5, _ctx()))
        assert peak < PEAK, f"seek_groups pulled {peak} bytes into Python"
        assert isinstance(raised, ArchiveCorruptError), raised
    finally:
        await store.aclose()


async def test_validation_refuses_a_huge_revision_without_fetching_it(
    server: ServerProcess, grown: tuple[RedisRecallStore, str]
) -> None:
    store, tp = grown
    first = document_source_id(OWNER, "first")
    second = document_source_id(OWNER, "second")
    session = await store.open(Scope("big", "u", "s"), RecallLimits(), _ctx())
    try:
        [current] = await session.validate([SourceRef(second, "sha256:" + "0" * 64)], _ctx())
        assert current.status is ValidationStatus.CHANGED
        await _grow(server, f"{tp}:rev", first)
        for check in (session.validate, session.validate_current):
            raised, peak = await _peak(lambda: check([SourceRef(first, "x")], _ctx()))  # noqa: B023
            assert peak < PEAK, f"validation pulled {peak} bytes into Python"
            assert isinstance(raised, RedisRecallError) and "damaged" in str(raised), raised
            # The id and the tenant's key prefix are content: the id is on the error, neither in its text.
            assert "a document source" in str(raised)
            assert first not in str(raised) and tp not in str(raised)
            assert raised.source_id == first
    finally:
        await session.close()


@pytest.mark.parametrize("level", ["tenant", "session"])
async def test_an_erase_never_fetches_a_huge_revision_and_erases_its_source(
    server: ServerProcess, grown: tuple[RedisRecallStore, str], level: str
) -> None:
    store, tp = grown
    await _grow(server, f"{tp}:rev", document_source_id(OWNER, "first"))
    target = EraseTarget.tenant("big") if level == "tenant" else EraseTarget.session("big", "u", "s")
    report, peak = await _peak(lambda: store.erase(target, _ctx()))
    assert peak < PEAK, f"the erase pulled {peak} bytes into Python"
    assert isinstance(report, EraseReport) and report.status is EraseStatus.COMPLETE, report
    assert report.count("document") == 2
    admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
    try:
        assert await admin.exists(f"{tp}:m:1", f"{tp}:m:2", f"{tp}:t:1", f"{tp}:t:2") == 0
        assert not await admin.hexists(f"{tp}:rev", document_source_id(OWNER, "first"))
    finally:
        await admin.aclose()


async def test_a_huge_vector_model_key_is_a_mismatch_never_fetched(
    server: ServerProcess, grown: tuple[RedisRecallStore, str]
) -> None:
    store, tp = grown
    admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
    try:
        await admin.eval(  # type: ignore[misc]
            "redis.call('SET', KEYS[1], string.rep('m', tonumber(ARGV[1]))) return 1", 1, f"{tp}:vm", HUGE
        )
        before = await admin.hgetall(f"{tp}:m:1")
    finally:
        await admin.aclose()
    session = await store.open(Scope("big", "u", "s"), RecallLimits(), _ctx())
    try:
        raised, peak = await _peak(lambda: session.discover_hybrid("quince", _axis(0), 5, _ctx()))
        assert peak < PEAK, f"discover_hybrid pulled {peak} bytes into Python"
        assert isinstance(raised, EmbeddingModelMismatchError), raised
    finally:
        await session.close()
    ref = SourceRef(document_source_id(OWNER, "first"), before[b"rev"].decode())
    raised, peak = await _peak(lambda: store.index_vectors([SourceVector(ref, _axis(2))], _ctx()))
    assert peak < PEAK, f"index_vectors pulled {peak} bytes into Python"
    assert isinstance(raised, EmbeddingModelMismatchError), raised
    admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
    try:
        assert await admin.hgetall(f"{tp}:m:1") == before  # nothing written
    finally:
        await admin.aclose()


@pytest.mark.parametrize("field", ["rev", "size"])
async def test_discovery_leaves_out_a_revision_or_size_longer_than_a_digest(
    server: ServerProcess, grown: tuple[RedisRecallStore, str], field: str
) -> None:
    # 700 candidate rows of hybrid discovery, each with fields just under a loose cap, add up to a
    # large reply: a revision and a size are held to what the store writes (71 bytes at most).
    store, tp = grown
    admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
    try:
        await admin.hset(f"{tp}:m:1", field, "7" * 4096)
    finally:
        await admin.aclose()
    session = await store.open(Scope("big", "u", "s"), RecallLimits(), _ctx())
    try:
        for found in (
            await session.discover("quince", 5, _ctx()),
            await session.discover_hybrid("quince", _axis(0), 5, _ctx()),
        ):
            assert [c.ref.source_id.rsplit("/", 1)[1] for c in found] == ["second"]
    finally:
        await session.close()


async def test_seek_refuses_another_sessions_group_filed_in_its_group_set(server: ServerProcess) -> None:
    # A session's group set names rows by number: a member edited to name another session's row (at
    # that group's own seq, so its digest and seq both check) was returned as this session's group.
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    mine, theirs = SessionKey("big", "u", "s"), SessionKey("big", "v", "t")
    # Groups without a retained scope (the engine's older groups, other hosts' archives): nothing in
    # their bytes names their session, so only the store can tell.
    group, secret = plain_group(0, " plum tree"), plain_group(0, " their secret")
    try:
        await store.index_groups(mine, [group], [ArchiveReceipt(0, group.digest, "x")], _ctx())  # row 1
        await store.index_groups(theirs, [secret], [ArchiveReceipt(0, secret.digest, "x")], _ctx())  # row 2
        tp = tenant_prefix(store.config.key_prefix, "big")
        admin = aioredis.Redis.from_url(server.url, socket_timeout=120)
        try:
            bucket = (await admin.hget(f"{tp}:m:1", "b") or b"").decode()
            await admin.zrem(f"{tp}:g:{bucket}", "1")
            await admin.zadd(f"{tp}:g:{bucket}", {"2": 0})
        finally:
            await admin.aclose()
        with pytest.raises(ArchiveCorruptError, match="another owner"):
            await store.seek_groups(mine, 0, 5, _ctx())
    finally:
        await store.aclose()
