"""The recall store beyond its contract: query text is never SQL or tsquery syntax, rare words are
found however many newer sources a common word matches, and bad documents write nothing (R13, R17).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import psycopg
import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    EmbeddingModel,
    OpContext,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    SourceVector,
    ValidationStatus,
    Vector,
    document_source_id,
)
from agentium_postgres import PostgresConfig, PostgresRecallStore, PostgresRowTooLargeError

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
        with pytest.raises(PostgresRowTooLargeError, match="max_row_bytes") as raised:
            await store.index_document(OWNER, "bigQ7", "x" * 2000, _ctx())
        # The id is content: on the error, never in its text.
        assert "bigQ7" not in str(raised.value)
        assert raised.value.source_id == document_source_id(OWNER, "bigQ7")
    finally:
        await store.aclose()
    row = admin.execute(f'SELECT count(*) FROM "{schema}".recall_sources').fetchone()
    assert row == (0,)


def _vector(ref: SourceRef) -> SourceVector:
    return SourceVector(ref, Vector(EmbeddingModel("m", 2), (1.0, 0.0)))


async def test_arguments_of_the_wrong_type_are_refused_typed_and_change_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # A host may call the store directly: each of these raised a bare AttributeError, TypeError or
    # UnicodeEncodeError (a revision with a lone surrogate reached the driver), or a count too large
    # for an integer named no function ("the schema is missing"), instead of InvalidArgumentError.
    store = PostgresRecallStore(app_config)
    key = SessionKey("acme", "ana", "s1")
    try:
        ref = await store.index_document(SourceOwner("acme", "ana"), "d1", "hello world", _ctx())
        before = admin.execute(f'SELECT * FROM "{schema}".recall_sources').fetchall()
        session = await store.open(SCOPE, RecallLimits(), _ctx())
        refused: list[Callable[[], Awaitable[object]]] = [
            lambda: session.read(["x"], 100, _ctx()),  # type: ignore[list-item]
            lambda: session.read(None, 100, _ctx()),  # type: ignore[arg-type]
            lambda: session.read([ref], "100", _ctx()),  # type: ignore[arg-type]
            lambda: session.validate([1], _ctx()),  # type: ignore[list-item]
            lambda: session.validate_current("ab", _ctx()),  # type: ignore[arg-type]
            lambda: session.discover("hello", "5", _ctx()),  # type: ignore[arg-type]
            lambda: session.discover("hello", 5, None),  # type: ignore[arg-type]
            lambda: store.seek_groups(key, "0", 5, _ctx()),  # type: ignore[arg-type]
            lambda: store.index_groups(key, None, None, _ctx()),  # type: ignore[arg-type]
            lambda: store.index_vectors(None, _ctx()),  # type: ignore[arg-type]
            lambda: store.index_vectors([_vector(SourceRef(ref.source_id, "a\ud800"))], _ctx()),
            lambda: store.index_vectors([_vector(SourceRef(ref.source_id, "a\x00"))], _ctx()),
            lambda: store.index_vectors([_vector("x")], _ctx()),  # type: ignore[arg-type]
        ]
        for call in refused:
            with pytest.raises(InvalidArgumentError):
                await call()
        # Counts beyond any table are bounds, not errors.
        assert [c.ref for c in await session.discover("hello", 10**30, _ctx())] == [ref]
        assert await store.seek_groups(key, 0, 10**30, _ctx()) == []
        assert await store.unindexed_groups(key, 10**30, 2, _ctx()) == [0, 1]
        assert admin.execute(f'SELECT * FROM "{schema}".recall_sources').fetchall() == before
        row = admin.execute(f'SELECT count(*) FROM "{schema}".recall_vectors').fetchone()
        assert row == (0,)
    finally:
        await store.aclose()


async def test_a_source_text_grown_past_max_row_bytes_is_refused_before_it_is_transferred(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # The application role may UPDATE recall_sources within its tenant: a body grown behind the
    # store's back was read whole by every read of it, however large (up to 1 GB per row).
    store = PostgresRecallStore(attrs.evolve(app_config, max_row_bytes=64 * 1024))
    try:
        ref = await store.index_document(SourceOwner("acme", "ana"), "d1", "hello world", _ctx())
        session = await store.open(SCOPE, RecallLimits(), _ctx())
        assert len(await session.read([ref], 100, _ctx())) == 1
        admin.execute(f'UPDATE "{schema}".recall_sources SET body = %s', ("hello " * 20_000,))
        with pytest.raises(PostgresRowTooLargeError, match="not transferred") as raised:
            await session.read([ref], 100, _ctx())
        assert ref.source_id not in str(raised.value)  # content: on the error, not in its text
        assert raised.value.source_id == ref.source_id
    finally:
        await store.aclose()


async def test_two_concurrent_writes_of_one_document_leave_the_later_one_indexed(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    # The second writer's DELETE did not see the first's new row (outside its snapshot), its
    # INSERT ... ON CONFLICT DO NOTHING skipped, and it still returned its revision: the index
    # kept the earlier text while the later write reported success.
    from pg_server import APP_USER

    store = PostgresRecallStore(app_config)
    owner = SourceOwner("acme", "ana")
    try:
        await store.index_document(owner, "d", "version zero", _ctx())
        refs: dict[str, SourceRef] = {}

        async def write(name: str) -> None:
            refs[name] = await store.index_document(owner, "d", f"version {name}", _ctx())

        async def waiting(count: int) -> None:
            while True:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
                    (APP_USER,),
                ).fetchone()
                if row is not None and row[0] >= count:
                    return
                await anyio.sleep(0.02)

        with psycopg.connect(pg_server.admin_dsn()) as holder:
            holder.execute(f'SELECT 1 FROM "{schema}".recall_sources FOR UPDATE')
            async with anyio.create_task_group() as tg:
                for n, name in enumerate(("one", "two"), start=1):
                    tg.start_soon(write, name)
                    with anyio.fail_after(30):
                        await waiting(n)
                holder.rollback()
        assert admin.execute(f'SELECT body FROM "{schema}".recall_sources').fetchall() == [("version two",)]
        session = await store.open(SCOPE, RecallLimits(), _ctx())
        [one, two] = await session.validate([refs["one"], refs["two"]], _ctx())
        assert (one.status, two.status) == (ValidationStatus.CHANGED, ValidationStatus.CURRENT)
    finally:
        await store.aclose()
