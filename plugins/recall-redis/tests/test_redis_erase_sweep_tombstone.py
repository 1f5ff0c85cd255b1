"""A row only the sweep finds, deleted between the sweep and its erase, leaves no tombstone with its id.

Found by review. A document whose revision entry (``P:rev``) was damaged
away is found by no index, only by the sweep of the tenant's rows, which
erases it by row number; ``ERASE`` then drops its ``ids`` and ``rev``
entries only if ``ids`` still names that row. A ``delete_document`` landing
between the sweep and that ``ERASE`` (deletes are not fenced: they only
remove) removed the row and wrote the deletion tombstone ``-<revision>``
under the document's id: the ``ERASE`` found the row gone and ``ids`` empty,
left the tombstone, and the erasure reported complete with the erased
document's id still held in Redis until the next erase. Now the sweep's
rows of the target go to ``ERASE`` as tombstones to drop too.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from keyspace import key_space

import agentium_recall_redis.erase as erase_module
from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner, document_source_id
from agentium_recall_redis import RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

ANA = SourceOwner("acme", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


@pytest.mark.parametrize(
    "target", [EraseTarget.user("acme", "ana"), EraseTarget.tenant("acme")], ids=["user", "tenant"]
)
async def test_a_swept_row_deleted_before_its_erase_leaves_no_tombstone_with_its_id(
    store: RedisRecallStore, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, target: EraseTarget
) -> None:
    tp = tenant_prefix(store.config.key_prefix, "acme")
    sid = document_source_id(ANA, "notes")
    await store.index_document(ANA, "notes", "qsweptx text", _ctx())
    await store.index_document(SourceOwner("acme", "cy", "s2"), "kept", "qkeptx text", _ctx())
    assert await admin.hdel(f"{tp}:rev", sid) == 1  # damage: only the sweep finds the row now
    original = erase_module.sweep_rows

    async def sweep_then_delete(*args: Any, **kwargs: Any) -> Any:
        swept = await original(*args, **kwargs)
        if swept[0]:  # the row was found: its owner deletes it before the erase's ERASE lands
            assert await store.delete_document(ANA, "notes", _ctx())
        return swept

    monkeypatch.setattr(erase_module, "sweep_rows", sweep_then_delete)
    report = await store.erase(target, _ctx())
    assert report.status is EraseStatus.COMPLETE
    assert await admin.hget(f"{tp}:rev", sid) is None  # was b"-sha256:...": the id kept until the next erase
    space = await key_space(admin, store.config.key_prefix)
    assert not any(sid.encode() in key or sid.encode() in repr(v).encode() for key, v in space.items())
