"""A query's index terms are bounded however its words are written (real Redis and Valkey).

The core keeps at most 32 distinct words of a query (``content_terms``),
but a word is a ``\\w+`` run, and the store's tokens split it again at
``_``: one "word" ``t0_t1_..._t99999`` made 100,000 index terms, each
ranked by the discovery script (a ``ZCARD`` and two ``ZRANGE``s per
visible bucket) while every other client of the server waited.
"""

from __future__ import annotations

from typing import Final

import pytest
import redis.asyncio as aioredis

from agentium_harness.plugin_api import (
    EmbeddingModel,
    OpContext,
    RecallLimits,
    Scope,
    SourceOwner,
    SourceVector,
    Vector,
)
from agentium_recall_redis import RedisRecallStore
from agentium_recall_redis.terms import MAX_QUERY_INDEX_TERMS, query_stems

pytestmark = pytest.mark.anyio

#: Far more tokens than any bound: one ``\w+`` word.
WORD: Final = "_".join(f"t{i}" for i in range(100_000))
MODEL: Final = EmbeddingModel("test-axes", 4)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _zcards(admin: aioredis.Redis) -> int:
    entry = (await admin.info("commandstats")).get("cmdstat_zcard")
    return int(entry["calls"]) if isinstance(entry, dict) else 0


def test_a_querys_index_terms_are_capped_in_order() -> None:
    words, terms = query_stems(f"kiwi {WORD} harvest", frozenset())
    assert len(terms) == MAX_QUERY_INDEX_TERMS
    assert terms[:3] == ("kiwi", "t0", "t1")
    assert words[0] == "kiwi"


async def test_one_word_of_many_tokens_ranks_a_bounded_number_of_terms(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    owner = SourceOwner("qb", "u", "s")
    ref = await store.index_document(owner, "d", "t0 t1 t2 kiwi", _ctx())
    vector = Vector.normalized(MODEL, [1.0, 0.0, 0.0, 0.0])
    assert await store.index_vectors([SourceVector(ref, vector)], _ctx()) == 1
    session = await store.open(Scope("qb", "u", "s"), RecallLimits(), _ctx())
    try:
        for hybrid in (False, True):
            before = await _zcards(admin)
            if hybrid:  # found by its vector: 3 of the 64 terms ranked are under the relevance floor
                assert [c.ref for c in await session.discover_hybrid(WORD, vector, 8, _ctx())] == [ref]
            else:
                await session.discover(WORD, 8, _ctx())
            # One visible bucket holds rows: one ZCARD per term ranked.
            assert 0 < await _zcards(admin) - before <= MAX_QUERY_INDEX_TERMS
    finally:
        await session.close()
