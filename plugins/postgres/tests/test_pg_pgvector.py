"""Hybrid recall where the database has pgvector: scored in the database, ranked as by the fallback.

Debian 12 packages no pgvector, so this module starts the PostgreSQL that the
``pgserver`` wheel ships (PostgreSQL 16 with pgvector; a test dependency of
this plugin) and FAILS when it is missing, like every backend test here. One
schema is migrated before ``CREATE EXTENSION vector`` (the adapter scores its
vectors) and one after (pgvector scores them); both hold the same sources
and vectors and must rank alike.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import anyio
import psycopg
import pytest
from pg_server import (
    APP_USER,
    PostgresServer,
    ServerNotFound,
    new_schema_name,
    pgvector_bindir,
    server_readable_bindir,
)

from agentium_harness import OpContext, Scope
from agentium_harness._cli import main
from agentium_harness.plugin_api import (
    EmbeddingModel,
    EmbeddingModelMismatchError,
    RecallLimits,
    SourceOwner,
    SourceRef,
    SourceVector,
    Vector,
)
from agentium_postgres import PostgresConfig, PostgresRecallStore, migrate

pytestmark = pytest.mark.anyio

MODEL = EmbeddingModel("test-random", 16)
WORDS = ["river", "garden", "violin", "harbour", "lantern", "orchard", "meadow", "glacier"]


@pytest.fixture(scope="module")
def pgv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """PostgreSQL with pgvector available (not yet created in the test database)."""
    try:
        found = pgvector_bindir()
    except ServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    copy = Path(tempfile.mkdtemp(prefix="agentium-pgvector-"))  # a folder the server's user can reach
    server = PostgresServer(bindir=server_readable_bindir(found, copy))
    try:
        server.start().prepare()
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(copy, ignore_errors=True)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _vector(rng: random.Random) -> Vector:
    return Vector.normalized(MODEL, [rng.gauss(0.0, 1.0) for _ in range(MODEL.dimension)])


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


async def _seed(config: PostgresConfig, seed: int) -> list[SourceRef]:
    """The same 60 documents and vectors in any schema, for a given seed."""
    rng = random.Random(seed)
    store = PostgresRecallStore(config)
    try:
        refs = []
        for i in range(60):
            text = " ".join(rng.choice(WORDS) for _ in range(6))
            refs.append(await store.index_document(SourceOwner("acme", "ana"), f"doc{i}", text, _ctx()))
        vectors = [SourceVector(ref, _vector(rng)) for ref in refs]
        assert await store.index_vectors(vectors, _ctx()) == len(refs)
        return refs
    finally:
        await store.aclose()


async def _rank(config: PostgresConfig, queries: list[tuple[str, Vector]]) -> list[list[tuple[str, float]]]:
    store = PostgresRecallStore(config)
    try:
        session = await store.open(Scope("acme", "ana", "s1"), RecallLimits(), _ctx())
        out = []
        for text, vector in queries:
            found = await session.discover_hybrid(text, vector, 10, _ctx())
            out.append([(c.ref.source_id, c.score) for c in found])
        await session.close()
        return out
    finally:
        await store.aclose()


async def _probe(config: PostgresConfig) -> str:
    store = PostgresRecallStore(config)
    try:
        return await store.health(_ctx())
    finally:
        await store.aclose()


def _same(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> None:
    assert [[sid for sid, _ in r] for r in a] == [[sid for sid, _ in r] for r in b]
    for ra, rb in zip(a, b, strict=True):
        for (_, sa), (_, sb) in zip(ra, rb, strict=True):
            assert sa == pytest.approx(sb, abs=1e-6)


async def test_pgvector_scores_in_the_database_and_ranks_as_the_adapter_does(
    pgv_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin_dsn, app_dsn = pgv_server.admin_dsn(), pgv_server.app_dsn()
    before, after = new_schema_name(), new_schema_name()
    report = await migrate(PostgresConfig(dsn=admin_dsn, schema=before), grant_to=[APP_USER])
    assert (report.pgvector, report.scored_in_database) == (None, False)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION vector")
        [(version,)] = admin.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchall()

    # The command says where vectors are scored, and adds the column where pgvector is.
    monkeypatch.setenv("TEST_PG_DSN", app_dsn)
    monkeypatch.setenv("TEST_PG_OWNER", admin_dsn)
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["x"]\n'
        + "".join(
            f'\n[{kind}]\nplugin = "postgres"\n\n[{kind}.options]\n'
            f'dsn = "${{TEST_PG_DSN}}"\nschema = "{after}"\n'
            for kind in ("archive", "session_store", "recall")
        )
    )
    argv = ["postgres", "migrate", str(path), "--dsn-env", "TEST_PG_OWNER", "--grant", APP_USER, "--json"]
    status, out, err = await anyio.to_thread.run_sync(_main, argv)
    assert status == 0, err
    [made] = json.loads(out)
    assert (made["pgvector"], made["to_version"]) == (version, 4)
    assert (
        made["vectors"]
        == f"vectors: scored in the database by pgvector {version}; added recall_vectors.embedding_pgv"
    )

    old = PostgresConfig(dsn=app_dsn, schema=before, min_pool_size=0)
    new = PostgresConfig(dsn=app_dsn, schema=after, min_pool_size=0)
    assert await _seed(old, 7) == await _seed(new, 7)
    assert (await _probe(old)).endswith(
        f"vectors: float32 in bytea, scored by the adapter (pgvector {version} installed: "
        "run `agentium postgres migrate` to use it)"
    )
    assert (await _probe(new)).endswith(f"vectors: scored in the database by pgvector {version}")

    rng = random.Random(11)
    queries = [(f"{rng.choice(WORDS)} {rng.choice(WORDS)}", _vector(rng)) for _ in range(8)]
    queries.append(("zebra", _vector(rng)))  # no word in common: the vector ranking alone
    by_adapter, by_pgvector = await _rank(old, queries), await _rank(new, queries)
    assert any(by_pgvector)
    _same(by_adapter, by_pgvector)

    # In the new schema the candidates come back scored, without their stored vectors.
    async with await psycopg.AsyncConnection.connect(app_dsn, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute("SELECT set_config('agentium.tenant', 'acme', true)")
            cursor = await conn.execute(
                f'SELECT embedding IS NULL, similarity IS NOT NULL FROM "{after}".recall_discover_hybrid('
                "%s::text[], 'ana', 's1', NULL, NULL, 100, 20, 100, %s::real[])",
                (['"river"'], list(queries[0][1].values)),
            )
            rows = await cursor.fetchall()
        assert rows and set(rows) == {(True, True)}
        # Another tenant's candidates: none, on this path too.
        async with conn.transaction():
            await conn.execute("SELECT set_config('agentium.tenant', 'globex', true)")
            cursor = await conn.execute(
                f'SELECT count(*) FROM "{after}".recall_discover_hybrid('
                "%s::text[], 'ana', 's1', NULL, NULL, 100, 20, 100, %s::real[])",
                (['"river"'], list(queries[0][1].values)),
            )
            assert await cursor.fetchone() == (0,)

    # Migrating the older schema now adds the column; its rows written before are still scored (by
    # the adapter, from their bytes) and the ranking does not move.
    report = await migrate(PostgresConfig(dsn=admin_dsn, schema=before))
    assert (report.applied, report.added_pgvector_column, report.scored_in_database) == ((), True, True)
    _same(await _rank(old, queries), by_pgvector)
    await _seed(old, 7)  # written again: both forms now
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        missing = admin.execute(
            f'SELECT count(*) FROM "{before}".recall_vectors WHERE embedding_pgv IS NULL'
        ).fetchone()
    assert missing == (0,)
    _same(await _rank(old, queries), by_pgvector)


async def test_a_query_vector_of_another_dimension_is_a_model_mismatch_with_pgvector_too(
    pgv_server: PostgresServer,
) -> None:
    # Scored in the database, a query vector of another dimension reached pgvector's <=> and
    # failed there ("different vector dimensions 16 and 8", PostgresRecallError) before the
    # adapter's model check could raise EmbeddingModelMismatchError, as the README promises.
    admin_dsn, app_dsn = pgv_server.admin_dsn(), pgv_server.app_dsn()
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
    name = new_schema_name()
    assert (await migrate(PostgresConfig(dsn=admin_dsn, schema=name), grant_to=[APP_USER])).scored_in_database
    config = PostgresConfig(dsn=app_dsn, schema=name, min_pool_size=0)
    await _seed(config, 3)
    store = PostgresRecallStore(config)
    try:
        session = await store.open(Scope("acme", "ana", "s1"), RecallLimits(), _ctx())
        for model in (EmbeddingModel("other", 8), EmbeddingModel("other", MODEL.dimension)):
            with pytest.raises(EmbeddingModelMismatchError):
                await session.discover_hybrid(
                    "river", Vector.normalized(model, [1.0] * model.dimension), 5, _ctx()
                )
        assert await session.discover_hybrid("river", _vector(random.Random(1)), 5, _ctx())
    finally:
        await store.aclose()
