"""A replaced document in the Redis recall store is found by its new words only; no key keeps the old ones.

The ``INDEX`` script drops the old row's postings in the call that publishes
the new row when they fit its room (a small document's always do), so right
after a replace no key of the tenant names a word only the old version held.
Checked on a real server of each flavour, as the SQLite store is in
``tests/core/test_sqlite_recall_replace.py``; an erasure afterwards still
leaves no word of either version.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from keyspace import key_space

from agentium_harness import EraseTarget, OpContext, RecallLimits, Scope, SourceOwner, SourceRef
from agentium_recall_redis import RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

OWNER, SCOPE = SourceOwner("rp", "ana"), Scope("rp", "ana", "s1")
OLD_TEXT, OLD_TITLE = "Zanzibar ferry timetable for the quarterly offsite.", "Kilimanjaro notes"
NEW_TEXT, NEW_TITLE = "Yokohama train timetable for the quarterly offsite.", "Everest notes"
OLD_ONLY, NEW_ONLY, BOTH = ("zanzibar", "kilimanjaro"), ("yokohama", "everest"), ("quarterly", "timetable")


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def discovered(store: RedisRecallStore, word: str) -> list[SourceRef]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        return [c.ref for c in await session.discover(word, 8, ctx())]
    finally:
        await session.close()


async def tenant_dump(admin: aioredis.Redis, store: RedisRecallStore) -> bytes:
    """Every key of the tenant with its value, lower-cased, for a search for words."""
    space = await key_space(admin, tenant_prefix(store.config.key_prefix, OWNER.tenant))
    return b"\n".join(key + b"=" + repr(value).encode() for key, value in sorted(space.items())).lower()


@pytest.mark.parametrize("neighbour", [False, True], ids=["alone", "with-neighbour"])
async def test_a_replaced_document_is_found_by_its_new_words_only(
    store: RedisRecallStore, admin: aioredis.Redis, neighbour: bool
) -> None:
    old = await store.index_document(OWNER, "plan", OLD_TEXT, ctx(), title=OLD_TITLE)
    if neighbour:
        await store.index_document(OWNER, "other", "An unrelated memo about parking.", ctx())
    new = await store.index_document(OWNER, "plan", NEW_TEXT, ctx(), title=NEW_TITLE)
    assert new.revision != old.revision
    for word in OLD_ONLY:
        assert await discovered(store, word) == [], word
    for word in NEW_ONLY + BOTH:  # found, and only once
        assert await discovered(store, word) == [new], word
    dump = await tenant_dump(admin, store)
    for word in OLD_ONLY:
        assert word.encode() not in dump, word
    assert b"yokohama" in dump  # the check can see a word where one is


async def test_an_erasure_after_a_replace_leaves_no_word_of_either_version(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    await store.index_document(OWNER, "plan", OLD_TEXT, ctx(), title=OLD_TITLE)
    await store.index_document(OWNER, "plan", NEW_TEXT, ctx(), title=NEW_TITLE)
    report = await store.erase(EraseTarget.user(OWNER.tenant, "ana"), ctx())
    assert report.count("document") == 1
    for word in OLD_ONLY + NEW_ONLY + BOTH:
        assert await discovered(store, word) == [], word
    dump = await tenant_dump(admin, store)
    for word in OLD_ONLY + NEW_ONLY + BOTH:
        assert word.encode() not in dump, word
