"""Memory rows changed behind the store's back (the application role may UPDATE them in its tenant).

Each row keeps the digest of its content (scope, text, validity): reads
check it, and a remember finding its duplicate decodes that row first.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryError, PostgresMemoryStore

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")
DIGEST = "sha256:" + "0" * 64


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _rows(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return admin.execute(f'SELECT * FROM "{schema}".memory_facts ORDER BY fact_id, revision').fetchall()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("text", "the safe code is 1234"),
        ("valid_until", "2001-01-01T00:00:00Z"),
        ("project_key", "another-project"),
    ],
)
async def test_a_fact_whose_content_no_longer_matches_its_digest_is_refused_and_left_alone(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, column: str, value: str
) -> None:
    # The content digest was only used to find duplicates: the changed fact was returned by every
    # read as the fact, and a remember of the original was acknowledged as its duplicate.
    store = PostgresMemoryStore(app_config)
    try:
        fact = MemoryFact(ALICE, "the safe code is private")
        ack = await store.remember(fact, _ctx())
        assert ack.fact_id is not None
        fact_id = ack.fact_id
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET {column} = %s WHERE fact_id = %s', (value, fact_id)
        )
        before = _rows(admin, schema)
        for call in (
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.history(ALICE, fact_id, _ctx()),
            lambda: store.remember(fact, _ctx()),
        ):
            with pytest.raises(PostgresMemoryError, match="content digest"):
                await call()
        if column == "text":
            with pytest.raises(PostgresMemoryError, match="content digest"):
                await store.lookup(ALICE, "safe", 10, _ctx())
        assert _rows(admin, schema) == before  # nothing written over or next to it
    finally:
        await store.aclose()


async def test_a_forgotten_revision_holding_text_again_is_refused(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # A forgotten revision keeps no content; one holding text was handed out by history.
    store = PostgresMemoryStore(app_config)
    try:
        ack = await store.remember(MemoryFact(ALICE, "the safe code is private"), _ctx())
        assert ack.fact_id is not None
        fact_id = ack.fact_id
        await store.forget(ALICE, fact_id, _ctx())
        admin.execute(
            f"UPDATE \"{schema}\".memory_facts SET text = 'the safe code is private' "
            "WHERE fact_id = %s AND revision = 1",
            (fact_id,),
        )
        before = _rows(admin, schema)
        with pytest.raises(PostgresMemoryError, match="content digest"):
            await store.history(ALICE, fact_id, _ctx())
        assert _rows(admin, schema) == before
    finally:
        await store.aclose()


async def test_a_provenance_reference_with_more_than_three_parts_is_refused(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # [session, seq, digest, extra] was read as its first three parts, the rest dropped unseen.
    store = PostgresMemoryStore(app_config)
    try:
        ack = await store.remember(
            MemoryFact(ALICE, "from s1", provenance=[GroupRef("s1", 0, DIGEST)]), _ctx()
        )
        assert ack.fact_id is not None
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET provenance = %s WHERE fact_id = %s',
            (f'[["s1", 0, "{DIGEST}", "extra"]]', ack.fact_id),
        )
        before = _rows(admin, schema)
        with pytest.raises(PostgresMemoryError, match="damaged"):
            await store.list_facts(ALICE, 10, _ctx())
        assert _rows(admin, schema) == before
    finally:
        await store.aclose()
