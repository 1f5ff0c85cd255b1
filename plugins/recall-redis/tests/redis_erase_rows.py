"""Six rows of one tenant for the erase tests, and what a session can still find among them.

Shared by the damaged-index and sweep-bounds tests, which erase some of the
rows (after damaging the store's indexes behind its back) and check which
are left. A helper module, not a ``conftest.py``: see ``redis_servers``.
"""

from __future__ import annotations

from typing import Final

from agentium_harness.plugin_api import (
    ArchiveReceipt,
    OpContext,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallStore

KEY: Final = SessionKey("acme", "ana", "s1")
OTHER: Final = SessionKey("acme", "ana", "s2")


def ctx() -> OpContext:
    """A context of 30 s for one store call."""
    return OpContext.with_timeout(30)


async def discovered(store: RedisRecallStore, key: SessionKey, word: str) -> list[str]:
    """The source ids a discovery of ``word`` in ``key``'s session finds (at most eight)."""
    session = await store.open(Scope(key.tenant, key.user, key.session), RecallLimits(), ctx())
    try:
        return [c.ref.source_id for c in await session.discover(word, 8, ctx())]
    finally:
        await session.close()


async def six_rows(store: RedisRecallStore) -> tuple[list[str], str]:
    """Rows 1-3: groups 0-2 of s1; row 4: group 0 of s2; row 5: a document of s1; row 6: one of s2.

    Returns the digests of s1's groups and of s2's group.
    """
    groups = [plain_group(seq, f" qword{seq}x text") for seq in range(3)]
    await store.index_groups(KEY, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
    kept = plain_group(0, " qother0x text")
    await store.index_groups(OTHER, [kept], [ArchiveReceipt(0, kept.digest, "x")], ctx())
    await store.index_document(SourceOwner("acme", "ana", "s1"), "notes", "qdocmine text", ctx())
    await store.index_document(SourceOwner("acme", "ana", "s2"), "notes", "qdocother text", ctx())
    return [g.digest for g in groups], kept.digest
