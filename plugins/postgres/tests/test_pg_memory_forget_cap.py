"""``forget`` reads a fact's revisions with a bounded query, and refuses a fact past the cap.

It read every revision of the fact without a ``LIMIT``. A fact holds at most
``MAX_FACT_REVISIONS`` revisions (the store refuses a correction past it), so
more rows (damage, or a fact written before the cap) must be refused, typed,
with nothing changed: forgetting only the revisions one bounded read returns
would leave the text of the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentium_harness.plugin_api import MAX_FACT_REVISIONS, FactStatus, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryError, PostgresMemoryStore
from agentium_postgres.memory_rows import INSERT, row_values

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")


def _rows(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return admin.execute(
        f'SELECT fact_id, revision, status, text, provenance, row_digest FROM "{schema}".memory_facts '
        "ORDER BY fact_id, revision"
    ).fetchall()


async def test_forget_of_a_fact_past_the_revision_cap_is_refused_and_changes_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        fact_id = str(
            (await store.remember(MemoryFact(ALICE, "revision 1"), OpContext.with_timeout(30))).fact_id
        )
        # Valid rows (their digests match) past the cap, as a fact written before it would hold.
        insert = sql.SQL(INSERT.replace("{s}", "{}")).format(sql.Identifier(schema))
        now = datetime.now(UTC)
        for n in range(2, MAX_FACT_REVISIONS + 2):
            values = row_values(fact_id, n, FactStatus.CURRENT, MemoryFact(ALICE, f"revision {n}"), now)
            admin.execute(insert, values)
        before = _rows(admin, schema)
        assert len(before) == MAX_FACT_REVISIONS + 1
        with pytest.raises(PostgresMemoryError, match=f"more than {MAX_FACT_REVISIONS} revisions.*nothing"):
            await store.forget(ALICE, fact_id, OpContext.with_timeout(30))
        assert _rows(admin, schema) == before  # no text removed, no tombstone written
        # At the cap the fact is still forgotten whole (the bound takes every revision).
        admin.execute(
            f'DELETE FROM "{schema}".memory_facts WHERE fact_id = %s AND revision = %s',
            (fact_id, MAX_FACT_REVISIONS + 1),
        )
        ack = await store.forget(ALICE, fact_id, OpContext.with_timeout(30))
        assert ack.revision == MAX_FACT_REVISIONS + 1
        after = _rows(admin, schema)
        assert len(after) == MAX_FACT_REVISIONS + 1
        assert all(row[2] == "forgotten" and row[3] == "" for row in after)
    finally:
        await store.aclose()
