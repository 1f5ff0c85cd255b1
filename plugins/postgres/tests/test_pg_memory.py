"""The memory store beyond its contract: concurrent identical writes store once, every row stays in
its tenant under row-level security, and query text is matched literally (R36-R39).
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from agentium_harness.plugin_api import AckStatus, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryStore

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


async def test_concurrent_identical_remembers_store_one_fact(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    stores = [PostgresMemoryStore(app_config) for _ in range(4)]
    acks = []
    try:

        async def one(store: PostgresMemoryStore) -> None:
            acks.append(await store.remember(MemoryFact(ALICE, "the deploy window is Tuesday"), _ctx()))

        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(one, store)
    finally:
        for store in stores:
            await store.aclose()
    assert sorted(a.status.value for a in acks) == ["duplicate"] * 3 + ["stored"]
    assert len({a.fact_id for a in acks}) == 1
    row = admin.execute(f'SELECT count(*) FROM "{schema}".memory_facts').fetchone()
    assert row == (1,)


async def test_query_text_is_matched_literally_never_as_a_pattern(app_config: PostgresConfig) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        plain = await store.remember(MemoryFact(ALICE, "plain words only"), _ctx())
        odd = await store.remember(MemoryFact(ALICE, "100% of '_quoted_' \\ text"), _ctx())
        for query in ("%", "_", "'; DELETE FROM memory_facts; --", "\\", "[a-z]*", ".*"):
            found = await store.lookup(ALICE, query, 10, _ctx())
            assert {f.fact_id for f in found} == {plain.fact_id, odd.fact_id}  # no error, nothing lost
        [first, _] = await store.lookup(ALICE, "quoted", 10, _ctx())
        assert first.fact_id == odd.fact_id
        assert odd.status is AckStatus.STORED
    finally:
        await store.aclose()
