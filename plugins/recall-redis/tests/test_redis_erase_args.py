"""``erase`` refuses a ``dry_run`` that is not exactly ``True`` or ``False``, erasing nothing (real servers).

Hosts may call the store directly, not only through the engine (whose
``erase`` checks it). ``dry_run`` was taken for its truth: ``0`` (a host's
"no" from a config flag) erased for real, ``"no"`` ran a dry run the host
did not ask for. The core's adapters and the PostgreSQL plugin refuse both
with ``InvalidArgumentError``; so does this store now, before it touches
the server.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EraseTarget,
    OpContext,
    SeqRange,
    SessionKey,
    SourceOwner,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.mark.parametrize("dry_run", [0, 1, "no", None, 0.0])
async def test_a_dry_run_that_is_no_bool_is_refused_and_nothing_is_erased(
    server: ServerProcess, admin: aioredis.Redis, dry_run: Any
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        groups = [plain_group(seq, f" qkept{seq}word") for seq in range(2)]
        receipts = [ArchiveReceipt(g.seq, g.digest, f"test://{g.seq}") for g in groups]
        await store.index_groups(KEY, groups, receipts, _ctx())
        await store.index_document(SourceOwner("acme", "ana"), "notes", "qkeptdoc text", _ctx())
        before = await key_space(admin, prefix)
        assert any(b"qkept0word" in repr(value).encode() for value in before.values())
        targets = (
            EraseTarget.session("acme", "ana", "s1"),
            EraseTarget.user("acme", "ana"),
            EraseTarget.tenant("acme"),
            EraseTarget.groups_of(KEY, [SeqRange(0, 2)]),
        )
        for target in targets:
            with pytest.raises(InvalidArgumentError, match="dry_run"):
                await store.erase(target, _ctx(), dry_run=dry_run)
        assert await key_space(admin, prefix) == before
        assert await store.unindexed_groups(KEY, 2, 8, _ctx()) == []
    finally:
        await store.aclose()
