"""Schema version 4 (``memory_facts.row_digest``) from a database written at version 3.

The upgrade runs as the schema's owner, a role without superuser or
BYPASSRLS (row-level security is forced on ``memory_facts``, so the step
must lift it for its own transaction to see every tenant's rows). It blesses
each existing row as it is at migration time; a row changed afterwards is
caught, and a row written the version-3 way (no row digest) is refused by
the database itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pg_server import APP_USER, DATABASE, PostgresServer, new_schema_name
from psycopg import sql

from agentium_harness.plugin_api import (
    GroupRef,
    MemoryFact,
    MemoryScope,
    OpContext,
    canonical_json,
    encode_segment,
)
from agentium_postgres import (
    PostgresConfig,
    PostgresMemoryError,
    PostgresMemoryStore,
    PostgresSchemaError,
    migrate,
)
from agentium_postgres.memory import content_digest

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")
BOB = MemoryScope("globex", "bob")
REF = GroupRef("s1", 3, "sha256:" + "3" * 64)
V3_INSERT = (
    "INSERT INTO {}.memory_facts (tenant_key, fact_id, revision, user_key, project_key, repository_key, "
    "status, text, text_lower, valid_from, valid_until, provenance, recorded_at, content_digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
WHEN = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.fixture
def owner(pg_server: PostgresServer, admin: psycopg.Connection[Any]) -> Iterator[tuple[str, str]]:
    """A fresh schema name and a login role that may create it (no superuser, no BYPASSRLS)."""
    schema = new_schema_name()
    role = f"owner_{schema}"
    ident = sql.Identifier(role)
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'owner-pw'").format(ident))
    admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(DATABASE), ident))
    try:
        yield schema, pg_server.dsn(role, "owner-pw")
    finally:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(sql.Identifier(DATABASE), ident))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        admin.execute(sql.SQL("DROP ROLE {}").format(ident))


def _write_v3(admin: psycopg.Connection[Any], schema: str, fact_id: str, fact: MemoryFact) -> None:
    """A fact row as the version-3 store wrote it: every column but the row digest."""
    s = fact.scope
    provenance = canonical_json([[r.session, r.seq, r.digest] for r in fact.provenance]).decode()
    values = (
        *(encode_segment(s.tenant), fact_id, 1, encode_segment(s.user), None, None, "current"),
        *(fact.text, fact.text.lower(), None, None, provenance, WHEN, content_digest(fact)),
    )
    admin.execute(sql.SQL(V3_INSERT).format(sql.Identifier(schema)), values)


async def test_a_version_3_database_is_refused_then_migrated_with_its_rows_blessed_and_guarded(
    pg_server: PostgresServer, admin: psycopg.Connection[Any], owner: tuple[str, str]
) -> None:
    schema, owner_dsn = owner
    config = PostgresConfig(dsn=owner_dsn, schema=schema)
    await migrate(config, grant_to=[APP_USER], to_version=3)
    _write_v3(admin, schema, "m-alice", MemoryFact(ALICE, "alice's fact", provenance=[REF]))
    _write_v3(admin, schema, "m-bob", MemoryFact(BOB, "bob's fact"))
    # Changed before the upgrade: the migration blesses rows as they are then (documented).
    admin.execute(
        sql.SQL("UPDATE {}.memory_facts SET provenance = '[]' WHERE fact_id = 'm-bob'").format(
            sql.Identifier(schema)
        )
    )
    app = PostgresConfig(dsn=pg_server.app_dsn(), schema=schema, min_pool_size=0, max_pool_size=2)
    store = PostgresMemoryStore(app)
    try:
        with pytest.raises(PostgresSchemaError, match=r"version 3.*agentium postgres migrate"):
            await store.list_facts(ALICE, 10, _ctx())
    finally:
        await store.aclose()

    report = await migrate(config, grant_to=[APP_USER])
    assert (report.from_version, report.to_version, report.applied) == (3, 4, (4,))
    s = sql.Identifier(schema)
    # Every tenant's row got its digest (row-level security did not hide bob's from the owner), and
    # the policy is forced on the owner again.
    assert admin.execute(
        sql.SQL("SELECT count(*) FROM {}.memory_facts WHERE row_digest LIKE 'sha256:%%'").format(s)
    ).fetchone() == (2,)
    forced = admin.execute(
        "SELECT relforcerowsecurity FROM pg_class WHERE oid = to_regclass(%s)", (f'"{schema}".memory_facts',)
    ).fetchone()
    assert forced == (True,)
    # Code that predates the column (its INSERT does not name it) cannot write a row without one.
    with pytest.raises(psycopg.errors.NotNullViolation):
        _write_v3(admin, schema, "m-old-code", MemoryFact(ALICE, "written the version-3 way"))

    store = PostgresMemoryStore(app)
    try:
        (fact,) = await store.list_facts(ALICE, 10, _ctx())
        assert (fact.fact_id, fact.text, fact.fact.provenance, fact.recorded_at) == (
            "m-alice",
            "alice's fact",
            (REF,),
            WHEN,
        )
        (blessed,) = await store.list_facts(BOB, 10, _ctx())
        assert blessed.fact.provenance == ()  # as it was at migration time
        # The store writes on from there: a forget rewrites and digests every revision.
        await store.forget(BOB, "m-bob", _ctx())
        assert [r.status.value for r in await store.history(BOB, "m-bob", _ctx())] == ["forgotten"] * 2
        # A change after the upgrade is caught, and nothing is changed.
        admin.execute(
            sql.SQL("UPDATE {}.memory_facts SET recorded_at = now() WHERE fact_id = 'm-alice'").format(s)
        )
        before = admin.execute(sql.SQL("SELECT * FROM {}.memory_facts ORDER BY ord").format(s)).fetchall()
        for call in (
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.forget(ALICE, "m-alice", _ctx()),
        ):
            with pytest.raises(PostgresMemoryError, match="row digest"):
                await call()
        after = admin.execute(sql.SQL("SELECT * FROM {}.memory_facts ORDER BY ord").format(s)).fetchall()
        assert after == before
    finally:
        await store.aclose()


async def test_the_upgrade_digests_facts_at_the_validity_bounds_whatever_the_owners_time_zone(
    pg_server: PostgresServer, admin: psycopg.Connection[Any], owner: tuple[str, str]
) -> None:
    # In the owner's zone (here its role's setting) a bound of 0001-01-01 UTC is a BC date,
    # which psycopg cannot load: the step failed reading the row, and the upgrade with it.
    schema, owner_dsn = owner
    config = PostgresConfig(dsn=owner_dsn, schema=schema)
    await migrate(config, grant_to=[APP_USER], to_version=3)
    first = datetime(1, 1, 1, tzinfo=UTC)
    fact = MemoryFact(ALICE, "valid from the first instant", valid_from=first)
    values = (
        *(encode_segment("acme"), "m-first", 1, encode_segment("alice"), None, None, "current"),
        *(fact.text, fact.text.lower(), first, None, "[]", WHEN, content_digest(fact)),
    )
    admin.execute(sql.SQL(V3_INSERT).format(sql.Identifier(schema)), values)
    role = sql.Identifier(f"owner_{schema}")
    admin.execute(sql.SQL("ALTER ROLE {} SET TimeZone = 'America/New_York'").format(role))
    report = await migrate(config, grant_to=[APP_USER])
    assert report.applied == (4,)
    store = PostgresMemoryStore(PostgresConfig(dsn=pg_server.app_dsn(), schema=schema, min_pool_size=0))
    try:
        (read,) = await store.list_facts(ALICE, 10, _ctx())
        assert (read.fact_id, read.fact.valid_from) == ("m-first", first)
    finally:
        await store.aclose()
