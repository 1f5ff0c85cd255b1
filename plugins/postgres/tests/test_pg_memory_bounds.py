"""Every variable column of a memory row is size capped on the server, not only its text and provenance.

The store read ``text`` and ``provenance`` as ``CASE WHEN octet_length(...) <=
bound``, but fetched the other variable columns whole: a row whose
``content_digest``, ``row_digest``, ``project_key`` or ``repository_key``
was grown behind the store's back (the application role may UPDATE its own
tenant's rows) was transferred in full to the client by every read and by a
session erasure before its digest check refused it. Each such value must
come back unread, the row refused as damage (``PostgresRowTooLargeError``,
which says it was not transferred), and nothing changed.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryStore, PostgresRowTooLargeError

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice", project="p1", repository="r1")
S1 = GroupRef("s1", 0, "sha256:" + "1" * 64)
#: 8 MiB: far past every bound of these columns (a digest is 71 characters, a key segment at most 3 KiB).
HUGE = 8 * 1024 * 1024


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _rows(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return admin.execute(
        f"SELECT fact_id, revision, status, octet_length(text), md5(content_digest), md5(row_digest), "
        f"md5(coalesce(project_key, '')), md5(coalesce(repository_key, '')) "
        f'FROM "{schema}".memory_facts ORDER BY fact_id, revision'
    ).fetchall()


@pytest.mark.parametrize("column", ["content_digest", "row_digest", "project_key", "repository_key"])
async def test_a_column_grown_past_its_bound_is_refused_unread_by_every_read_path(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, column: str
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        fact = MemoryFact(ALICE, "the vault code", provenance=[S1])
        fact_id = str((await store.remember(fact, _ctx())).fact_id)
        # list_facts filters neither project nor repository: it still reaches the grown row.
        admin.execute(
            f"UPDATE \"{schema}\".memory_facts SET {column} = repeat('x', %s) WHERE fact_id = %s",
            (HUGE, fact_id),
        )
        before = _rows(admin, schema)
        calls = [
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.history(ALICE, fact_id, _ctx()),
            lambda: store.forget(ALICE, fact_id, _ctx()),
            lambda: store.correct(ALICE, fact_id, MemoryFact(ALICE, "a new code"), _ctx()),
        ]
        for call in calls:
            with pytest.raises(PostgresRowTooLargeError, match=f"{column} of {HUGE} bytes.*not transferred"):
                await call()
        assert _rows(admin, schema) == before  # nothing forgotten, corrected or written
    finally:
        await store.aclose()
