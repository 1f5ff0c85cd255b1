"""A read transfers what its excerpts can use, not ``max_read_bytes`` per ref, on real Redis and Valkey.

``read`` fetched each text up to ``max_read_bytes`` (64 KiB by default)
before applying the caller's budgets, so four refs read with a 300-byte
excerpt cap pulled 256 KiB over the network. The ``READ`` script now
fetches each text only as far as ``max_excerpt_bytes`` and what is left of
``ctx.remaining_bytes`` reach, rounded up to whole 4 KiB blocks (what the
block digests check). The server's own count of bytes it sent
(``INFO stats`` ``total_net_output_bytes``) measures the transfer; no time
is asserted.
"""

from __future__ import annotations

from typing import Final

import pytest
import redis.asyncio as aioredis

from agentium_harness import Completeness, OpContext, RecallLimits, Scope
from agentium_harness.plugin_api import SourceOwner, SourceRef
from agentium_recall_redis import RedisRecallStore

pytestmark = pytest.mark.anyio

OWNER: Final = SourceOwner("rt", "u")
SCOPE: Final = Scope("rt", "u", "s")
#: One block: what each ref may pull past the budget (reads fetch whole blocks, each checked).
BLOCK: Final = 4096
#: The reply's framing, the digests and the INFO reply counted in the second reading of the counter.
SLACK: Final = 8192
REFS: Final = 4


def _text(i: int) -> str:
    # About 256 KiB of a few repeated words: large to transfer, cheap to index.
    return f"Ledger {i} opens with the quarterly figures. " + "Filler words about nothing much. " * 8000


async def _sent(admin: aioredis.Redis) -> int:
    return int((await admin.info("stats"))["total_net_output_bytes"])


async def _indexed(store: RedisRecallStore) -> list[SourceRef]:
    ctx = OpContext.with_timeout(30)
    return [await store.index_document(OWNER, f"doc{i}", _text(i), ctx) for i in range(REFS)]


@pytest.mark.parametrize(
    ("excerpt_bytes", "remaining_bytes", "budget"),
    [
        (300, None, REFS * 300),  # the excerpt cap bounds each ref
        (65536, 1000, 1000),  # the byte budget bounds the whole read
        (0, None, 0),
    ],
)
async def test_a_read_transfers_at_most_its_budget_plus_a_block_per_ref(
    store: RedisRecallStore,
    admin: aioredis.Redis,
    excerpt_bytes: int,
    remaining_bytes: int | None,
    budget: int,
) -> None:
    refs = await _indexed(store)
    session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
    try:
        before = await _sent(admin)
        excerpts = await session.read(
            refs, excerpt_bytes, OpContext.with_timeout(30, remaining_bytes=remaining_bytes)
        )
        sent = await _sent(admin) - before
    finally:
        await session.close()

    assert sent <= budget + REFS * BLOCK + SLACK, f"the read pulled {sent} bytes for a budget of {budget}"
    # The excerpts are what the budgets allow, from the start of each text.
    spent = sum(len(e.text.encode()) for e in excerpts)
    assert spent <= (budget if remaining_bytes is not None else REFS * excerpt_bytes)
    assert all(e.completeness is not Completeness.COMPLETE for e in excerpts)
    if excerpt_bytes == 300:
        assert [e.ref for e in excerpts] == refs
        assert [e.text.split(" with")[0] for e in excerpts] == [f"Ledger {i} opens" for i in range(REFS)]


async def test_a_small_text_is_read_whole_within_the_budget(store: RedisRecallStore) -> None:
    # The bound never cuts what fits: a short text read with room to spare comes back complete.
    ref = await store.index_document(OWNER, "short", "Ledger opens on Monday.", OpContext.with_timeout(30))
    session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
    try:
        [excerpt] = await session.read([ref], 300, OpContext.with_timeout(30, remaining_bytes=100))
    finally:
        await session.close()
    assert excerpt.text == "Ledger opens on Monday." and excerpt.completeness is Completeness.COMPLETE
