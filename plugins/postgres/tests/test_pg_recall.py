"""The recall store beyond its contract: query text is never SQL or tsquery syntax, rare words are
found however many newer sources a common word matches, and bad documents write nothing (R13, R17).
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import OpContext, RecallLimits, Scope, SourceOwner, document_source_id
from agentium_postgres import PostgresConfig, PostgresRecallStore

pytestmark = pytest.mark.anyio

OWNER = SourceOwner("acme")
SCOPE = Scope("acme", "ana", "s1")

HOSTILE_QUERIES = [
    "'); DROP TABLE recall_sources; --",
    "a & b | !c <-> d:* & (e",
    '"unterminated',
    "\\",
    "\\x00 \\' \\\"",
    "OR AND NOT or and not",
    "-x -- /* */ ;",
    "$1 %s %(tenant)s {s}",
    "*:A <2> !!",
    "'" * 200,
]


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


async def _discover(store: PostgresRecallStore, query: str, n: int = 8) -> list[str]:
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    try:
        return [c.ref.source_id for c in await session.discover(query, n, _ctx())]
    finally:
        await session.close()


async def test_sql_and_tsquery_syntax_in_queries_is_inert_and_words_still_match(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    store = PostgresRecallStore(app_config)
    try:
        await store.index_document(OWNER, "ops", "drop table recall sources and the tenant s", _ctx())
        await store.index_document(OWNER, "other", "nothing relevant here", _ctx())
        for query in HOSTILE_QUERIES:
            await _discover(store, query)  # no error
        assert await _discover(store, "'); DROP TABLE recall_sources; --") == [
            document_source_id(OWNER, "ops")
        ]
        assert await _discover(store, "a & b | !c <-> d:*") == []
    finally:
        await store.aclose()
    row = admin.execute(f'SELECT count(*) FROM "{schema}".recall_sources').fetchone()
    assert row == (2,)


async def test_a_rare_word_is_found_however_many_newer_sources_match_a_common_one(
    app_config: PostgresConfig,
) -> None:
    store = PostgresRecallStore(attrs.evolve(app_config, max_ranked_matches=40))
    try:
        await store.index_document(OWNER, "old", "the meeting notes mention the zebra crossing", _ctx())
        for i in range(200):
            await store.index_document(OWNER, f"d{i}", f"the meeting notes number {i}", _ctx())
        found = await _discover(store, "what did the meeting notes say about the zebra", 5)
        assert found[0] == document_source_id(OWNER, "old")
        assert len(found) == 5
    finally:
        await store.aclose()


async def test_documents_postgres_cannot_hold_are_refused_and_nothing_is_written(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    store = PostgresRecallStore(attrs.evolve(app_config, max_row_bytes=1024))
    try:
        with pytest.raises(InvalidArgumentError):
            await store.index_document(OWNER, "nul", "text with \x00 NUL", _ctx())
        with pytest.raises(InvalidArgumentError):
            await store.index_document(OWNER, "bad\x00id", "text", _ctx())
        with pytest.raises(InvalidArgumentError):
            await store.index_document(OWNER, "surrogate", "lone \ud800", _ctx())
        with pytest.raises(Exception, match="max_row_bytes"):
            await store.index_document(OWNER, "big", "x" * 2000, _ctx())
    finally:
        await store.aclose()
    row = admin.execute(f'SELECT count(*) FROM "{schema}".recall_sources').fetchone()
    assert row == (0,)
