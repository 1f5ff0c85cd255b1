"""What a read transfers follows what its excerpts can use, on real Redis and Valkey.

``read`` fetched each text up to ``max_read_bytes`` (64 KiB by default)
before applying the caller's budgets, so a read whose budget was spent
still pulled 64 KiB per ref. A text whose excerpt can still take bytes is
fetched up to ``max_read_bytes`` (its excerpt is cut around the query's
words, wherever they are: fetching less cut every excerpt from the start of
its text); any other costs one 4 KiB block. The server's own count of bytes
it sent (``INFO stats`` ``total_net_output_bytes``) measures the transfer;
no time is asserted.
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


#: What one ref's text is fetched up to when its excerpt can take bytes (the default max_read_bytes).
READ_CAP: Final = 65536


@pytest.mark.parametrize(
    ("excerpt_bytes", "remaining_bytes", "budget", "fetched"),
    [
        (300, 300, 300, 1),  # the byte budget is spent by the first excerpt: one text fetched whole
        (65536, 1000, 1000, 1),
        (300, 600, 600, 2),
        (0, None, 0, 0),  # no excerpt can take a byte: one block of each
        (300, 0, 0, 0),  # nothing left of the budget: the same
    ],
)
async def test_a_read_fetches_the_read_cap_only_of_texts_its_budgets_leave_room_for(
    store: RedisRecallStore,
    admin: aioredis.Redis,
    excerpt_bytes: int,
    remaining_bytes: int | None,
    budget: int,
    fetched: int,
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

    limit = fetched * READ_CAP + (REFS - fetched) * BLOCK + SLACK
    assert sent <= limit, f"the read pulled {sent} bytes; {fetched} text(s) fetched whole allow {limit}"
    # The excerpts are what the budgets allow.
    spent = sum(len(e.text.encode()) for e in excerpts)
    assert spent <= budget
    assert all(e.completeness is not Completeness.COMPLETE for e in excerpts)


async def test_a_small_text_is_read_whole_within_the_budget(store: RedisRecallStore) -> None:
    # The bound never cuts what fits: a short text read with room to spare comes back complete.
    ref = await store.index_document(OWNER, "short", "Ledger opens on Monday.", OpContext.with_timeout(30))
    session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
    try:
        [excerpt] = await session.read([ref], 300, OpContext.with_timeout(30, remaining_bytes=100))
    finally:
        await session.close()
    assert excerpt.text == "Ledger opens on Monday." and excerpt.completeness is Completeness.COMPLETE


async def test_an_excerpt_is_cut_around_the_query_words_deep_in_a_long_text(store: RedisRecallStore) -> None:
    """Where the query's words are found decides the excerpt, also past the first block of a text.

    Fetching each text only as far as the excerpt cap (one 4 KiB block) cut every excerpt from
    the start of its text, so a long document found by its words came back without them.
    """
    text = "Opening remarks about the weather. " * 400 + "The zephyr vault code is 4417. " + "Closing. " * 50
    assert text.index("4417") > 3 * BLOCK
    ref = await store.index_document(OWNER, "deep", text, OpContext.with_timeout(30))
    session = await store.open(SCOPE, RecallLimits(), OpContext.with_timeout(30))
    try:
        found = await session.discover("zephyr vault code", 5, OpContext.with_timeout(30))
        assert [c.ref for c in found] == [ref]
        [excerpt] = await session.read([ref], 600, OpContext.with_timeout(30, remaining_bytes=2000))
    finally:
        await session.close()
    assert "zephyr vault code is 4417" in excerpt.text
    assert len(excerpt.text.encode()) <= 600
