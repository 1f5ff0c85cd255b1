"""A read checks every block of text it returns: a text edited behind the store's back is never evidence.

Anyone who can write the store's keys could change ``P:t:<n>`` while the row keeps its revision: a
read that returned the bytes as found handed the model edited text as verified evidence at the
source's revision (R17). Each row now holds its text's block digests (``td``), bound to its id,
revision and length, and a read checks every block it fetched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import ArchiveCorruptError, Completeness, OpContext, RecallLimits, Scope, SessionKey
from agentium_harness.plugin_api import ArchiveReceipt, SourceOwner, SourceRef
from agentium_harness.testing import rich_group
from agentium_recall_redis import (
    RedisRecallConfig,
    RedisRecallError,
    RedisRecallLayoutError,
    RedisRecallStore,
)
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

OWNER = SourceOwner("ri")
SCOPE = Scope("ri", "u", "s")
LONG = "The ledger opens on Monday. " + "Filler sentence about nothing at all. " * 400 + "It closes Friday."

Edit = Callable[[aioredis.Redis, str], Awaitable[object]]


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _row(admin: aioredis.Redis, store: RedisRecallStore, ref: SourceRef) -> str:
    n = await admin.hget(f"{tenant_prefix(store.config.key_prefix, 'ri')}:ids", ref.source_id)
    assert n is not None
    return f"{tenant_prefix(store.config.key_prefix, 'ri')}:%s:{n.decode()}"


async def _read(store: RedisRecallStore, ref: SourceRef, cap: int = 10_000) -> list[str]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        await session.discover("ledger monday", 4, ctx())
        return [e.text for e in await session.read([ref], cap, ctx())]
    finally:
        await session.close()


EDITS: dict[str, Callable[[aioredis.Redis, str], Awaitable[object]]] = {
    "replaced": lambda a, row: a.set(row % "t", "The ledger opens on FORGED day."),
    "one byte": lambda a, row: a.setrange(row % "t", 20, b"X"),
    "cut short": lambda a, row: a.set(row % "t", LONG.encode()[:4096]),
    "grown": lambda a, row: a.append(row % "t", b" FORGED"),
    "digests dropped": lambda a, row: a.hdel(row % "m", "td"),
    "digests of another text": lambda a, row: a.hset(row % "m", "td", b"\x00" * 64),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_a_document_text_edited_behind_the_stores_back_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis, edit: str
) -> None:
    ref = await store.index_document(OWNER, "d", LONG, ctx(), title="t")
    assert (await _read(store, ref))[0].startswith("The ledger opens on Monday.")  # intact: read
    await EDITS[edit](admin, await _row(admin, store, ref))
    with pytest.raises(RedisRecallError) as raised:
        await _read(store, ref)
    assert "FORGED" not in str(raised.value)
    # The id and the tenant's key prefix are content: the id is on the error, neither is in its text.
    assert "a document source" in str(raised.value)
    assert ref.source_id not in str(raised.value)
    assert tenant_prefix(store.config.key_prefix, "ri") not in str(raised.value)
    assert raised.value.source_id == ref.source_id
    if edit == "digests dropped":
        assert isinstance(raised.value, RedisRecallLayoutError)
    else:
        assert "damaged" in str(raised.value)


async def test_a_text_moved_from_another_source_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    # Its own digests moved with it: they are bound to the other source's id and revision.
    ref = await store.index_document(OWNER, "d", "The ledger opens on Monday.", ctx())
    other = await store.index_document(OWNER, "e", "The ledger opens on FORGED day.", ctx())
    row, donor = await _row(admin, store, ref), await _row(admin, store, other)
    await admin.set(row % "t", await admin.get(donor % "t") or b"")
    await admin.hset(row % "m", "td", await admin.hget(donor % "m", "td") or b"")
    with pytest.raises(RedisRecallError, match="damaged"):
        await _read(store, ref)


async def test_a_group_text_edited_behind_the_stores_back_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    key = SessionKey("ri", "u", "s")
    group = rich_group(0, key, "the ledger opens on monday")
    await store.index_groups(key, [group], [ArchiveReceipt(0, group.digest, "x")], ctx())
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        (found,) = await session.discover("ledger monday", 4, ctx())
        assert len(await session.read([found.ref], 10_000, ctx())) == 1
        row = await _row(admin, store, found.ref)
        text = await admin.get(row % "t")
        assert text is not None and b"monday" in text
        await admin.set(row % "t", text.replace(b"monday", b"FORGED"))
        with pytest.raises((RedisRecallError, ArchiveCorruptError), match="damaged"):
            await session.read([found.ref], 10_000, ctx())
    finally:
        await session.close()


async def test_a_long_text_is_checked_block_by_block_and_read_within_whole_blocks(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # Only the blocks a read fetches are checked: an edit past them is never read, one inside is refused.
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), max_read_bytes=120))
    try:
        ref = await store.index_document(OWNER, "d", LONG, ctx())
        row = await _row(admin, store, ref)
        session = await store.open(SCOPE, RecallLimits(), ctx())
        await session.discover("ledger monday", 4, ctx())
        [excerpt] = await session.read([ref], 4096, ctx())
        assert excerpt.completeness is Completeness.PARTIAL and len(excerpt.text.encode()) <= 120
        await admin.setrange(row % "t", 3 * 4096, b"X")  # past the one block read
        assert len(await session.read([ref], 4096, ctx())) == 1
        await admin.setrange(row % "t", 4000, b"X")  # inside it, past max_read_bytes
        with pytest.raises(RedisRecallError, match="damaged"):
            await session.read([ref], 4096, ctx())
        await session.close()
    finally:
        await store.aclose()


async def test_a_tenant_of_layout_3_is_refused_and_says_how_to_rebuild(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    await store.index_document(OWNER, "d", "The ledger opens on Monday.", ctx())
    await admin.set(
        f"{tenant_prefix(store.config.key_prefix, 'ri')}:v", "3"
    )  # as the previous version left it
    with pytest.raises(RedisRecallLayoutError, match="layout 3"):
        await _read(store, SourceRef("x", "y"))
