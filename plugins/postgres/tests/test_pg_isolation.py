"""Tenant isolation enforced by the database itself: row-level security keyed on the tenant.

Raw SQL issued as the application role (the role the adapters connect as)
sees no row of a tenant other than the one set in ``agentium.tenant``, and no
row at all with none set, whatever query it writes; it cannot write a row for
another tenant, nor change an archived group.
"""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest
from pg_server import PostgresServer
from psycopg import sql

from agentium_harness.plugin_api import (
    EmbeddingModel,
    MemoryFact,
    MemoryScope,
    OpContext,
    SessionKey,
    SourceOwner,
    SourceVector,
    Vector,
)
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresPrivilegeError,
    PostgresRecallStore,
    PostgresSessionStore,
)
from agentium_postgres.schema import grant_statements

pytestmark = pytest.mark.anyio

AppConn = psycopg.AsyncConnection[Any]
TABLES = ("archive_groups", "session_snapshots", "recall_sources", "memory_facts", "recall_vectors")
VECTOR = Vector.normalized(EmbeddingModel("test-axes", 4), [1.0, 0.0, 0.0, 0.0])
HOSTILE = ["'", '"', "\\", "%", "_", "*", "a'; DROP TABLE x; --", "é", "日本", "~", "a/b", " ", "\\x00", "$1"]


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _count(conn: AppConn, schema: str, table: str, tenant: str | None) -> int:
    async with conn.transaction():
        if tenant is not None:
            await conn.execute("SELECT set_config('agentium.tenant', %s, true)", (tenant,))
        # Deliberately no WHERE clause: a query that forgets the tenant must still see only its own rows.
        row = await (await conn.execute(f'SELECT count(*) FROM "{schema}".{table}')).fetchone()
    assert row is not None
    return int(row[0])


async def test_raw_sql_as_the_application_role_with_the_wrong_tenant_sees_nothing(
    app_config: PostgresConfig, app_conn: AppConn, schema: str
) -> None:
    key = SessionKey("acme", "ana", "s1")
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    recall, memory = PostgresRecallStore(app_config), PostgresMemoryStore(app_config)
    try:
        await archive.append(key, [plain_group(0, "secret"), plain_group(1, "more secret")], _ctx())
        await store.save(key, scoped_snapshot(key, " secret"), None, _ctx())
        ref = await recall.index_document(SourceOwner("acme"), "doc", "secret plans", _ctx())
        assert await recall.index_vectors([SourceVector(ref, VECTOR)], _ctx()) == 1
        await memory.remember(MemoryFact(MemoryScope("acme", "ana"), "a secret fact"), _ctx())
    finally:
        for adapter in (archive, store, recall, memory):
            await adapter.aclose()
    own = key.key_segments()[0]
    assert await _count(app_conn, schema, "archive_groups", own) == 2
    assert await _count(app_conn, schema, "session_snapshots", own) == 1
    assert await _count(app_conn, schema, "recall_sources", own) == 1
    assert await _count(app_conn, schema, "memory_facts", own) == 1
    assert await _count(app_conn, schema, "recall_vectors", own) == 1
    for wrong in ("globex", "acme2", "ACME", "", "%", "acme' OR '1'='1"):
        for table in TABLES:
            assert await _count(app_conn, schema, table, wrong) == 0, (table, wrong)
    for table in TABLES:
        assert await _count(app_conn, schema, table, None) == 0, table
    # The discovery function runs as the schema's owner: it too sees only the transaction's tenant.
    for tenant, expected in ((own, 1), ("globex", 0), (None, 0)):
        async with app_conn.transaction():
            if tenant is not None:
                await app_conn.execute("SELECT set_config('agentium.tenant', %s, true)", (tenant,))
            cursor = await app_conn.execute(
                f'SELECT count(*) FROM "{schema}".recall_discover('
                "%s::text[], NULL, NULL, NULL, NULL, 100, 10)",
                (['"secret"'],),
            )
            assert await cursor.fetchone() == (expected,), tenant
            # Hybrid discovery's candidates (the newest sources with a vector): the same confinement.
            cursor = await app_conn.execute(
                f'SELECT count(*) FROM "{schema}".recall_discover_hybrid('
                "%s::text[], NULL, NULL, NULL, NULL, 100, 10, 10, NULL)",
                (['"secret"'],),
            )
            assert await cursor.fetchone() == (expected,), tenant


async def test_the_application_role_cannot_write_for_another_tenant_or_change_an_archived_group(
    app_config: PostgresConfig, app_conn: AppConn, schema: str, admin: psycopg.Connection[Any]
) -> None:
    key = SessionKey("acme", "ana", "s1")
    archive = PostgresArchive(app_config)
    try:
        await archive.append(key, [plain_group(0, "kept")], _ctx())
    finally:
        await archive.aclose()
    t, u, s = key.key_segments()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # WITH CHECK: a row for another tenant
        async with app_conn.transaction():
            await app_conn.execute("SELECT set_config('agentium.tenant', 'globex', true)")
            await app_conn.execute(
                f'INSERT INTO "{schema}".archive_groups '
                "(tenant_key, user_key, session_key, seq, digest, data) VALUES (%s, %s, %s, 5, 'x', 'x')",
                (t, u, s),
            )
    recall = PostgresRecallStore(app_config)
    try:
        ref = await recall.index_document(SourceOwner("acme"), "doc", "kept", _ctx())
    finally:
        await recall.aclose()
    [(source_row,)] = admin.execute(f'SELECT id FROM "{schema}".recall_sources').fetchall()
    # A vector cannot hang on another tenant's source: not under the other tenant's key (WITH CHECK) ...
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with app_conn.transaction():
            await app_conn.execute("SELECT set_config('agentium.tenant', 'globex', true)")
            await app_conn.execute(
                f'INSERT INTO "{schema}".recall_vectors (id, tenant_key, embedding) '
                "VALUES (%s, 'acme', %s)",
                (source_row, VECTOR.to_bytes()),
            )
    # ... nor under its own (the foreign key names the source's tenant).
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        async with app_conn.transaction():
            await app_conn.execute("SELECT set_config('agentium.tenant', 'globex', true)")
            await app_conn.execute(
                f'INSERT INTO "{schema}".recall_vectors (id, tenant_key, embedding) '
                "VALUES (%s, 'globex', %s)",
                (source_row, VECTOR.to_bytes()),
            )
    assert admin.execute(f'SELECT count(*) FROM "{schema}".recall_vectors').fetchone() == (0,)
    assert ref.source_id
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # no UPDATE granted on the archive
        async with app_conn.transaction():
            await app_conn.execute("SELECT set_config('agentium.tenant', %s, true)", (t,))
            await app_conn.execute(f"UPDATE \"{schema}\".archive_groups SET data = 'y'")
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation):  # not even the superuser may
        admin.execute(f"UPDATE \"{schema}\".archive_groups SET data = 'y'")
    row = admin.execute(f'SELECT count(*), (array_agg(data))[1] FROM "{schema}".archive_groups').fetchone()
    assert row is not None and row[0] == 1 and bytes(row[1]) == plain_group(0, "kept").canonical_bytes()


def _hostile_id(rng: random.Random) -> str:
    parts = [rng.choice(HOSTILE) for _ in range(rng.randint(1, 4))]
    return "".join(parts) + str(rng.randint(0, 99))


async def test_no_cross_tenant_row_in_a_thousand_random_id_pairs(
    app_config: PostgresConfig, app_conn: AppConn, schema: str
) -> None:
    """1,000 pairs of distinct hostile tenant ids: as tenant B, raw SQL never sees a row of tenant A."""
    rng = random.Random(26)
    tenants: set[str] = set()
    while len(tenants) < 200:
        tenants.add(_hostile_id(rng))
    ordered = sorted(tenants)
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    recall, memory = PostgresRecallStore(app_config), PostgresMemoryStore(app_config)
    try:
        for tenant in ordered:
            key = SessionKey(tenant, _hostile_id(rng), _hostile_id(rng))
            await archive.append(key, [plain_group(0, tenant)], _ctx())
            await store.save(key, scoped_snapshot(key), None, _ctx())
            ref = await recall.index_document(SourceOwner(tenant), "doc", "shared words", _ctx())
            await recall.index_vectors([SourceVector(ref, VECTOR)], _ctx())
            await memory.remember(MemoryFact(MemoryScope(tenant, key.user), "shared fact"), _ctx())
    finally:
        for adapter in (archive, store, recall, memory):
            await adapter.aclose()
    pairs = set()
    while len(pairs) < 1000:
        a, b = rng.sample(ordered, 2)
        pairs.add((a, b))
    segment = {t: SessionKey(t, "u", "s").key_segments()[0] for t in ordered}
    for a, b in sorted(pairs):
        for table in TABLES:
            async with app_conn.transaction():
                await app_conn.execute("SELECT set_config('agentium.tenant', %s, true)", (segment[b],))
                cursor = await app_conn.execute(
                    "SELECT count(*) FILTER (WHERE tenant_key = %s), "
                    f'count(*) FILTER (WHERE tenant_key <> %s) FROM "{schema}".{table}',
                    (segment[a], segment[b]),
                )
                row = await cursor.fetchone()
            assert row == (0, 0), (a, b, table)
    for tenant in ordered[:20]:  # and each tenant does see its own rows
        for table in TABLES:
            assert await _count(app_conn, schema, table, segment[tenant]) == 1


async def test_require_row_security_refuses_a_role_that_owns_a_table_the_policy_does_not_bind_it_on(
    pg_server: PostgresServer, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """The policy on ``recall_sources`` is not forced on its owner: the owner's raw SQL sees every tenant.

    A host that runs the adapters as the role that owns the tables (the migrating role) was accepted
    by ``require_row_security = true`` and told "row-level security enforced", while any of its
    queries on ``recall_sources`` read every tenant's sources.
    """
    role = f"owner_{schema}"
    ident = sql.Identifier(role)
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'owner-pw'").format(ident))
    try:
        for statement in grant_statements(schema, role):
            admin.execute(statement)
        admin.execute(
            sql.SQL("ALTER TABLE {}.recall_sources OWNER TO {}").format(sql.Identifier(schema), ident)
        )
        dsn = pg_server.dsn(role, "owner-pw")
        lax = PostgresRecallStore(PostgresConfig(dsn=dsn, schema=schema, min_pool_size=0, max_pool_size=2))
        try:
            await lax.index_document(SourceOwner("acme"), "doc", "secret plans", _ctx())
            # Without the option it runs, and says honestly that the database does not confine it.
            assert "bypasses row-level security" in await lax.health(_ctx())
        finally:
            await lax.aclose()
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:  # the hole the option must refuse: as "globex", raw SQL sees acme's source
            assert await _count(conn, schema, "recall_sources", "globex") == 1
        finally:
            await conn.close()
        options = {"dsn": dsn, "schema": schema, "min_pool_size": 0, "max_pool_size": 2}
        strict = PostgresRecallStore(PostgresConfig(**options, require_row_security=True))
        try:
            with pytest.raises(PostgresPrivilegeError, match=r"recall_sources"):
                await strict.index_document(SourceOwner("globex"), "doc", "more plans", _ctx())
        finally:
            await strict.aclose()
        assert admin.execute(f'SELECT count(*) FROM "{schema}".recall_sources').fetchone() == (1,)
    finally:
        admin.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(ident))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        admin.execute(sql.SQL("DROP ROLE {}").format(ident))
