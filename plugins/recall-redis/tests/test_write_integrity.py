"""A write the server refuses part way changes nothing: every key a script writes is checked first.

Lua scripts are not transactions: a command that fails in the middle of a
script leaves the writes before it in place. A foreign key of the wrong type
under the store's prefix (or a damaged counter) must therefore stop a write
before its first write, never after its postings (issue 21, item 12).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import new_prefix

from agentium_harness import OpContext, RecallLimits, Scope, SessionKey, SourceOwner
from agentium_harness import ValidationStatus as V
from agentium_harness.plugin_api import ArchiveReceipt, EraseStatus, EraseTarget
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

OWNER, SCOPE = SourceOwner("wi"), Scope("wi", "u", "s")


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _discover(store: RedisRecallStore, query: str) -> list[str]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        return [c.ref.source_id for c in await session.discover(query, 16, ctx())]
    finally:
        await session.close()


@pytest.fixture
async def fresh(server: Any) -> Any:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    yield store, tenant_prefix(prefix, "wi")
    await store.aclose()


async def test_a_wrong_typed_posting_key_stops_an_index_before_any_write(
    fresh: Any, admin: aioredis.Redis
) -> None:
    store, tp = fresh
    first = await store.index_document(OWNER, "a", "apple orchard", ctx())  # bucket 1 exists now
    await admin.set(f"{tp}:p:1:zebra", "not a sorted set")  # something else writes under the prefix
    before = await key_space(admin, store.config.key_prefix)
    with pytest.raises(RedisRecallError, match="another type"):
        await store.index_document(OWNER, "b", "banana zebra", ctx())
    assert await key_space(admin, store.config.key_prefix) == before  # not one key changed
    session = await store.open(SCOPE, RecallLimits(), ctx())
    [v] = await session.validate([first], ctx())
    assert v.status is V.CURRENT
    await session.close()
    assert await _discover(store, "banana") == []
    # Once the foreign key is gone, the write succeeds, and the next source inherits nothing from it.
    await admin.delete(f"{tp}:p:1:zebra")
    second = await store.index_document(OWNER, "b", "banana zebra", ctx())
    third = await store.index_document(OWNER, "c", "cherry", ctx())
    assert await _discover(store, "banana") == [second.source_id]
    assert await _discover(store, "cherry") == [third.source_id]
    assert await _discover(store, "zebra") == [second.source_id]


async def test_a_wrong_typed_key_stops_a_replacement_and_a_delete_before_any_write(
    fresh: Any, admin: aioredis.Redis
) -> None:
    store, tp = fresh
    ref = await store.index_document(OWNER, "d", "cherry zebra", ctx())
    await admin.set(f"{tp}:p:1:zebra", "not a sorted set")  # a posting the old row's removal must touch
    before = await key_space(admin, store.config.key_prefix)
    with pytest.raises(RedisRecallError, match="another type"):
        await store.index_document(OWNER, "d", "plum", ctx())
    with pytest.raises(RedisRecallError, match="another type"):
        await store.delete_document(OWNER, "d", ctx())
    assert await key_space(admin, store.config.key_prefix) == before
    session = await store.open(SCOPE, RecallLimits(), ctx())
    [v] = await session.validate([ref], ctx())
    assert v.status is V.CURRENT  # neither half-replaced nor half-deleted
    await session.close()
    assert await _discover(store, "cherry") == [ref.source_id]


@pytest.mark.parametrize(
    ("key", "value"),
    [(":n", "not a number"), (":nb", "x"), (":bn", None), (":g:2", "a string"), (":ids", "a string")],
)
async def test_damaged_counters_and_wrong_typed_store_keys_stop_a_write_before_any_write(
    fresh: Any, admin: aioredis.Redis, key: str, value: str | None
) -> None:
    store, tp = fresh
    group = plain_group(0, "group about figs")
    key_ = SessionKey("wi", "u", "s")
    await store.index_document(OWNER, "a", "apple", ctx())  # bucket 1 (the owner "wi")
    if value is None:
        await admin.hset(f"{tp}{key}", "2", "not a number")  # a bucket count the group's write must bump
    else:
        await admin.delete(f"{tp}{key}")
        await admin.set(f"{tp}{key}", value)
    before = await key_space(admin, store.config.key_prefix)
    with pytest.raises(RedisRecallError):
        await store.index_groups(key_, [group], [ArchiveReceipt(0, group.digest, "x")], ctx())
    assert await key_space(admin, store.config.key_prefix) == before


@pytest.mark.parametrize("damage", ["lowered", "deleted", "deleted with the row set"])
async def test_a_damaged_row_counter_never_makes_a_write_overwrite_a_live_row(
    fresh: Any, admin: aioredis.Redis, damage: str
) -> None:
    # New rows took the counter's next number: with the counter lowered (or deleted) behind the
    # store's back, the next write took row 2's number, overwrote document b's row and text, and b's
    # postings then led to document c. A new row now goes past the tenant's highest listed row and
    # past every number whose keys still exist (the row set itself may be gone too).
    store, tp = fresh
    await store.index_document(OWNER, "a", "qalpha text", ctx())
    await store.index_document(OWNER, "b", "qbeta text", ctx())
    before = {n: (await admin.hgetall(f"{tp}:m:{n}"), await admin.get(f"{tp}:t:{n}")) for n in (1, 2)}
    if damage == "lowered":
        await admin.set(f"{tp}:n", "1")
    else:
        await admin.delete(f"{tp}:n")
    if damage == "deleted with the row set":
        await admin.delete(f"{tp}:rows")

    await store.index_document(OWNER, "c", "qgamma text", ctx())

    assert {n: (await admin.hgetall(f"{tp}:m:{n}"), await admin.get(f"{tp}:t:{n}")) for n in (1, 2)} == before
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qbeta")] == ["b"]
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qgamma")] == ["c"]
    assert await store.delete_document(OWNER, "b", ctx())
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qgamma")] == ["c"]


async def _calls(admin: aioredis.Redis, command: str) -> int:
    """How many times the server ran ``command`` so far (scripts' commands included)."""
    stats = await admin.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.parametrize("damage", ["deleted", "lowered"])
async def test_a_damaged_row_counter_costs_a_write_a_bounded_number_of_lookups(
    fresh: Any, admin: aioredis.Redis, damage: str
) -> None:
    # With the counter deleted or lowered and no row set to jump past (a tenant written before the row
    # set, or the set deleted or holding only junk), a new row walked every live row number one EXISTS at a
    # time inside one script: 1,100 rows, 1,100 lookups in a call that blocks the server; its cost
    # followed the tenant's size. Rows are never overwritten either way. 200 rows: over three times the
    # bound below, which the old walk (one lookup per live row) passed.
    store, tp = fresh
    key_ = SessionKey("wi", "u", "s")
    groups = [plain_group(seq, f"group {seq} about figs") for seq in range(200)]
    await store.index_groups(key_, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
    before = await key_space(admin, store.config.key_prefix)
    await admin.delete(f"{tp}:rows")
    if damage == "lowered":
        await admin.set(f"{tp}:n", "1")
    else:
        await admin.delete(f"{tp}:n")
    exists = await _calls(admin, "exists")

    await store.index_document(OWNER, "c", "qgamma text", ctx())

    assert await _calls(admin, "exists") - exists <= 64
    after = await key_space(admin, store.config.key_prefix)
    assert {k: v for k, v in after.items() if k in before and b":m:" in k} == {
        k: v for k, v in before.items() if b":m:" in k
    }
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qgamma")] == ["c"]
    assert len(await _discover(store, "figs")) == 16


@pytest.mark.parametrize("counter", ["1000000000000000", "99999999999999999999"])
async def test_a_row_counter_past_15_digits_stops_a_write_before_any_write(
    fresh: Any, admin: aioredis.Redis, counter: str
) -> None:
    # A counter damaged past 15 digits (where the erase sweep stops trusting it) made the write take row
    # 10^15 + 1 (or, past 2^53, a number Lua cannot hold exactly): a row the erase sweep never reads (it
    # walks 1..counter and the row set up to 10^15), so an erasure of the tenant reported complete and
    # left that row's text, term list and postings in Redis.
    store, tp = fresh
    await store.index_document(OWNER, "a", "qalpha text", ctx())
    await admin.set(f"{tp}:n", counter)
    before = await key_space(admin, store.config.key_prefix)
    group = plain_group(0, "qdelta")

    with pytest.raises(RedisRecallError, match="another type"):
        await store.index_document(OWNER, "c", "qgamma text", ctx())
    with pytest.raises(RedisRecallError, match="another type"):
        await store.index_groups(
            SessionKey("wi", "u", "s"), [group], [ArchiveReceipt(0, group.digest, "x")], ctx()
        )

    assert await key_space(admin, store.config.key_prefix) == before
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qalpha")] == ["a"]


@pytest.mark.parametrize("rows", ["listed", "not listed"])
async def test_a_negative_row_counter_gives_a_new_row_a_number_the_erase_sweep_reads(
    fresh: Any, admin: aioredis.Redis, rows: str
) -> None:
    # A counter damaged to -5 made the next write take row -4, which the sweep (1..counter, then the
    # row set from 1) never reads. It now counts from 0, as a deleted counter does, past live rows.
    store, tp = fresh
    await store.index_document(OWNER, "a", "qalpha text", ctx())
    await admin.set(f"{tp}:n", "-5")
    if rows == "not listed":
        await admin.delete(f"{tp}:rows")

    await store.index_document(OWNER, "c", "qgamma text", ctx())

    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qalpha")] == ["a"]
    assert [sid.rsplit("/", 1)[1] for sid in await _discover(store, "qgamma")] == ["c"]
    # With its index entries gone too, only the sweep can find row c for an erasure.
    await admin.hdel(f"{tp}:ids", "doc/wi/~/~/~/~/c")
    await admin.hdel(f"{tp}:rev", "doc/wi/~/~/~/~/c")
    report = await store.erase(EraseTarget.tenant("wi"), ctx())
    assert report.status is EraseStatus.COMPLETE
    space = await key_space(admin, store.config.key_prefix)
    assert [k for k, (_, v) in space.items() if b"qgamma" in k or b"qgamma" in repr(v).encode()] == []


@pytest.mark.parametrize("key", [":rows", ":rev", ":bn", ":gc"])
async def test_a_wrong_typed_key_stops_a_staged_write_before_it_begins(
    fresh: Any, admin: aioredis.Redis, key: str
) -> None:
    # A source of more words than one call takes is staged: BEGIN took a row number (the counter moved),
    # wrote the first slice's postings and a lease, and only COMMIT found the row set (or the revision
    # hash, bucket counts or garbage list) of another type: the write failed saying nothing was written,
    # and its postings were left for garbage collection. BEGIN now checks what COMMIT will write.
    prefix = new_prefix()
    store = RedisRecallStore(
        RedisRecallConfig(url=fresh[0].config.url, key_prefix=prefix, max_terms_per_call=16)
    )
    tp = tenant_prefix(prefix, "wi")
    try:
        await store.index_document(OWNER, "a", "qalpha text", ctx())
        await admin.delete(f"{tp}{key}")
        await admin.set(f"{tp}{key}", "a string")
        before = await key_space(admin, prefix)

        with pytest.raises(RedisRecallError, match="another type"):
            await store.index_document(OWNER, "c", " ".join(f"w{i}x" for i in range(100)), ctx())
        await store.aclose()  # waits for any collection the failed write left behind

        assert await key_space(admin, prefix) == before
    finally:
        await store.aclose()
