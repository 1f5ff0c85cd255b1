"""A rolling upgrade: once an erase of this version runs on a tenant, older writers refuse it, typed.

This version's erase relies on its writers' checks (``COMMIT`` gives up a staging whose bucket its
owner no longer holds, ``tests/test_erase_fence_lapse.py``): an older ``COMMIT`` has none, and a staging
an older ``BEGIN`` made in a lapse of the fence published the erased owner's words into a dropped bucket.
No new check can run in an older process, but every older writer already runs one: its layout check
(``old_layout`` in ``lua.py``) refuses a tenant with rows whose ``P:v`` is not ``'4'`` before its first
write (``RedisRecallLayoutError``; ``INDEX``, ``BEGIN``, ``VECTORS``, and discovery). So an erase's fence
raise marks the tenant ``'5'`` (:data:`~agentium_recall_redis.lua.ERASED_LAYOUT`: the same data), which
this version reads and writes as layout 4. The older check is run here as that version wrote it.
"""

from __future__ import annotations

from typing import Final

import anyio
import pytest
import redis.asyncio as aioredis

from agentium_harness import OpContext, RecallLimits, Scope, SourceOwner
from agentium_harness.plugin_api import EraseStatus, EraseTarget
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

ANA, BOB = SourceOwner("acme", "ana", "s1"), SourceOwner("acme", "bob", "s1")
#: The layout check every writing script (and discovery) of the previous versions runs before its first
#: write, word for word (lua.py's ``old_layout`` at layout 4): true means "refuse, nothing written".
OLDER_WRITER_REFUSES: Final = (
    "local P = KEYS[1]\nreturn redis.call('EXISTS', P .. ':n') == 1 and redis.call('GET', P .. ':v') ~= '4'"
)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _older_writer_refuses(admin: aioredis.Redis, tp: str) -> bool:
    return await admin.eval(OLDER_WRITER_REFUSES, 1, tp) == 1


async def _found(store: RedisRecallStore, word: str, user: str) -> list[str]:
    session = await store.open(Scope("acme", user, "s1"), RecallLimits(), _ctx())
    try:
        return [c.ref.source_id for c in await session.discover(word, 8, _ctx())]
    finally:
        await session.close()


async def test_an_erase_marks_the_tenant_so_older_writers_refuse_it_and_this_version_goes_on(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    tp = tenant_prefix(store.config.key_prefix, "acme")
    with anyio.fail_after(30):
        await store.index_document(ANA, "a", "kiwi text", _ctx())
        plum = await store.index_document(BOB, "b", "plum text", _ctx())
        # Before any erase: layout 4, and an older writer writes as before (no refusal).
        assert await admin.get(f"{tp}:v") == b"4" and not await _older_writer_refuses(admin, tp)
        planned = await store.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=True)
        assert planned.count("document") == 1
        assert await admin.get(f"{tp}:v") == b"4"  # a dry run raises no fence, marks nothing
        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        # Marked: every older writer's check now refuses the tenant before its first write.
        assert await admin.get(f"{tp}:v") == b"5" and await _older_writer_refuses(admin, tp)
        # This version reads and writes it as before, and never marks it back (single and staged writes).
        assert await _found(store, "plum", "bob") == [plum.source_id]
        pear = await store.index_document(BOB, "c", "pear text", _ctx())
        staged = RedisRecallStore(
            RedisRecallConfig(url=store.config.url, key_prefix=store.config.key_prefix, max_terms_per_call=2)
        )
        try:
            quince = await staged.index_document(BOB, "d", "fig date lime melon quince", _ctx())
        finally:
            await staged.aclose()
        assert await _found(store, "quince", "bob") == [quince.source_id]
        assert await _found(store, "pear", "bob") == [pear.source_id]
        assert await admin.get(f"{tp}:v") == b"5"
