"""Schema version 2: vectors for hybrid recall, the catch-up's unindexed_groups, and the upgrade from 1.

A database at version 1 is refused by every adapter until ``agentium
postgres migrate`` upgrades it; then the rows written at version 1 are
there and hybrid recall works over them. Vectors of one embedding model per
schema: another model writes nothing. ``unindexed_groups`` is one bounded
statement, and the engine's catch-up and hybrid recall work through a real
runtime.
"""

from __future__ import annotations

import json
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from pg_server import APP_USER, PostgresServer, new_schema_name

from agentium_harness import (
    EmbeddingModelMismatchError,
    OpContext,
    ResidentLimits,
    RuntimeLimits,
    Scope,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._cli import main
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EmbeddingModel,
    EraseTarget,
    MemoryFact,
    MemoryScope,
    RecallLimits,
    SourceOwner,
    SourceRef,
    SourceVector,
    Vector,
    digest_of,
    document_source_id,
    group_source_id,
)
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresRecallStore,
    PostgresSchemaError,
    PostgresSessionStore,
    migrate,
)

pytestmark = pytest.mark.anyio

Admin = psycopg.Connection[Any]
AXES = EmbeddingModel("test-axes", 4)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _axis(i: int, model: EmbeddingModel = AXES) -> Vector:
    values = [0.0] * model.dimension
    values[i] = 1.0
    return Vector.normalized(model, values)


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def _count(admin: Admin, schema: str, table: str) -> int:
    row = admin.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
    assert row is not None
    return int(row[0])


async def test_a_version_1_schema_is_refused_until_migrated_and_then_works(
    pg_server: PostgresServer, admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = new_schema_name()
    await migrate(PostgresConfig(dsn=pg_server.admin_dsn(), schema=schema), grant_to=[APP_USER], to_version=1)
    # A document indexed at version 1, as the version-1 recall store wrote it.
    owner = SourceOwner("acme")
    text = "quarterly ledger figures"
    source_id, revision = document_source_id(owner, "ledger"), digest_of({"title": "", "text": text})
    admin.execute(
        f'INSERT INTO "{schema}".recall_sources (tenant_key, source_id, kind, revision, title, size_bytes, '
        "body, tsv) VALUES ('acme', %s, 'document', %s, '', %s, %s, to_tsvector('simple', %s))",
        (source_id, revision, len(text), text, text),
    )
    config = PostgresConfig(dsn=pg_server.app_dsn(), schema=schema, min_pool_size=0)
    key = SessionKey("acme", "ana", "s1")
    calls = {
        "archive": lambda a: a.append(key, [plain_group(0)], _ctx()),
        "session": lambda a: a.save(key, scoped_snapshot(key), None, _ctx()),
        "recall": lambda a: a.index_document(owner, "other", "more text", _ctx()),
        "memory": lambda a: a.remember(MemoryFact(MemoryScope("acme", "ana"), "a fact"), _ctx()),
    }
    adapters = {
        "archive": PostgresArchive(config),
        "session": PostgresSessionStore(config),
        "recall": PostgresRecallStore(config),
        "memory": PostgresMemoryStore(config),
    }
    try:
        for kind, call in calls.items():
            with pytest.raises(PostgresSchemaError, match=r"version 1.*agentium postgres migrate"):
                await call(adapters[kind])
    finally:
        for adapter in adapters.values():
            await adapter.aclose()
    for table in ("archive_groups", "session_snapshots", "memory_facts"):
        assert _count(admin, schema, table) == 0, table
    assert _count(admin, schema, "recall_sources") == 1
    assert admin.execute(f'SELECT version FROM "{schema}".schema_meta').fetchone() == (1,)

    # The upgrade is explicit: the command, as the schema's owner.
    monkeypatch.setenv("TEST_PG_DSN", pg_server.app_dsn())
    monkeypatch.setenv("TEST_PG_OWNER", pg_server.admin_dsn())
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["x"]\n'
        + "".join(
            f'\n[{kind}]\nplugin = "postgres"\n\n[{kind}.options]\n'
            f'dsn = "${{TEST_PG_DSN}}"\nschema = "{schema}"\n'
            for kind in ("archive", "session_store", "recall")
        )
    )
    argv = ["postgres", "migrate", str(path), "--dsn-env", "TEST_PG_OWNER", "--grant", APP_USER, "--json"]
    status, out, err = await anyio.to_thread.run_sync(_main, argv)  # the command runs its own event loop
    assert status == 0, err
    [report] = json.loads(out)
    assert (report["from_version"], report["to_version"], report["applied"]) == (1, 4, [2, 3, 4])
    # The command says whether the database has pgvector and where vectors are scored.
    [installed] = admin.execute(
        "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
    ).fetchone()
    assert report["pgvector"] == installed
    assert report["vectors"].startswith("vectors: float32 in bytea, scored by the adapter")
    status, out, err = await anyio.to_thread.run_sync(_main, argv[:-1])
    assert status == 0 and "already at v4, unchanged" in out and report["vectors"] in out, (out, err)

    recall = PostgresRecallStore(config)
    try:
        ref = SourceRef(source_id, revision)
        assert await recall.index_vectors([SourceVector(ref, _axis(0))], _ctx()) == 1
        session = await recall.open(Scope("acme", "ana", "s1"), RecallLimits(), _ctx())
        found = await session.discover_hybrid("zebra", _axis(0), 8, _ctx())  # no shared word
        assert [c.ref for c in found] == [ref]
        await session.close()
        assert await recall.unindexed_groups(key, 2, 16, _ctx()) == [0, 1]
        probe = await recall.health(_ctx())  # what `agentium check --probe` prints
        assert f"schema {schema!r} v4" in probe and probe.endswith(report["vectors"]), probe
    finally:
        await recall.aclose()


async def test_vectors_of_another_model_write_nothing(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    recall = PostgresRecallStore(app_config)
    owner = SourceOwner("acme")
    try:
        refs = [await recall.index_document(owner, f"d{i}", f"text number {i}", _ctx()) for i in range(3)]
        assert await recall.index_vectors([SourceVector(refs[0], _axis(0))], _ctx()) == 1
        other = EmbeddingModel("test-other", 4)
        stored = admin.execute(f'SELECT embedding FROM "{schema}".recall_vectors').fetchall()
        for batch in (
            [SourceVector(refs[1], _axis(1, other))],
            [SourceVector(refs[1], _axis(1)), SourceVector(refs[2], _axis(2, other))],  # mixed
            [SourceVector(refs[0], _axis(3, EmbeddingModel("test-axes", 8)))],  # same id, other dimension
        ):
            with pytest.raises(EmbeddingModelMismatchError):
                await recall.index_vectors(batch, _ctx())
        assert admin.execute(f'SELECT embedding FROM "{schema}".recall_vectors').fetchall() == stored
        assert admin.execute(f'SELECT model, dimension FROM "{schema}".recall_vector_model').fetchall() == [
            ("test-axes", 4)
        ]
        # A changed document loses its vector with its old revision (the row is replaced).
        await recall.index_document(owner, "d0", "new text", _ctx())
        assert _count(admin, schema, "recall_vectors") == 0
    finally:
        await recall.aclose()


async def test_erasing_a_session_takes_its_vectors_and_leaves_the_neighbours(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    recall = PostgresRecallStore(app_config)
    keys = [SessionKey("acme", "ana", "s1"), SessionKey("acme", "ana", "s10")]
    try:
        for key in keys:
            groups = [plain_group(seq, f"{key.session} group {seq}") for seq in range(3)]
            receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
            assert await recall.index_groups(key, groups, receipts, _ctx()) == 3
            vectors = [
                SourceVector(SourceRef(group_source_id(key, g.seq), g.digest), _axis(g.seq)) for g in groups
            ]
            assert await recall.index_vectors(vectors, _ctx()) == 3
        assert _count(admin, schema, "recall_vectors") == 6
        report = await recall.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.count("group") == 3
        # The cascade took s1's vectors with their sources; s10's (a neighbour by prefix) are untouched.
        left = admin.execute(
            f'SELECT s.session_key FROM "{schema}".recall_vectors AS v '
            f'JOIN "{schema}".recall_sources AS s ON s.id = v.id'
        ).fetchall()
        assert sorted(r[0] for r in left) == ["s10"] * 3
        session = await recall.open(Scope("acme", "ana", "s1"), RecallLimits(), _ctx())
        assert await session.discover_hybrid("group", _axis(0), 8, _ctx()) == []
        await session.close()
    finally:
        await recall.aclose()


async def test_unindexed_groups_reads_a_bounded_window_of_a_long_session(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    recall = PostgresRecallStore(app_config)
    key = SessionKey("acme", "ana", "long")
    try:
        groups = [plain_group(seq, f"group {seq}") for seq in range(5000) if seq not in (10, 4990)]
        for start in range(0, len(groups), 1000):
            part = groups[start : start + 1000]
            receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in part]
            await recall.index_groups(key, part, receipts, _ctx())
        # The recent gap is reported; one older than the window (4,096 indexed seqs) is not.
        assert await recall.unindexed_groups(key, 5000, 16, _ctx()) == [4990]
        assert await recall.unindexed_groups(key, 5003, 16, _ctx()) == [4990, 5000, 5001, 5002]
        assert await recall.unindexed_groups(key, 100, 16, _ctx()) == [10]
        assert await recall.unindexed_groups(key, 10**9, 2, _ctx()) == [4990, 5000]
        # The plan reads the groups index, not the table.
        t, u, s = key.key_segments()
        plan = "\n".join(
            r[0]
            for r in admin.execute(
                f"EXPLAIN SELECT seq FROM \"{schema}\".recall_sources WHERE tenant_key = '{t}' "
                f"AND user_key = '{u}' AND session_key = '{s}' AND kind = 'group' AND seq < 5000 "
                "ORDER BY seq DESC LIMIT 4096"
            ).fetchall()
        )
        assert "recall_sources_groups" in plan, plan
    finally:
        await recall.aclose()


async def test_hybrid_recall_and_catch_up_through_a_runtime(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """A real runtime on the postgres archive, session store and recall store with an embedder."""
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    recall = PostgresRecallStore(app_config)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        recall=recall,
        embedder=HashingEmbedder(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ana = VerifiedIdentity("acme", "ana", "test")
    key = SessionKey("acme", "ana", "s1")
    try:
        await runtime.run(ana, "s1", "My sister keeps bees on the allotment.")
        for i in range(4):
            await runtime.run(ana, "s1", f"note {i}")
        assert _count(admin, schema, "recall_vectors") >= 4
        # The index loses two archived groups (as if indexing had failed): the next commits catch up.
        admin.execute(f'DELETE FROM "{schema}".recall_sources WHERE seq IN (1, 2)')
        assert await recall.unindexed_groups(key, 4, 16, _ctx()) == [1, 2]
        result = await runtime.run(ana, "s1", "Who looks after the beehives?")
        assert result.committed
        assert "recall_index_caught_up" in [d.code for d in result.diagnostics]
        assert await recall.unindexed_groups(key, 5, 16, _ctx()) == []
    finally:
        await runtime.aclose()
        for adapter in (archive, store, recall):
            await adapter.aclose()


async def test_a_vector_whose_source_is_deleted_meanwhile_is_skipped_not_a_foreign_key_error(
    app_config: PostgresConfig, pg_server: PostgresServer, admin: Admin, schema: str
) -> None:
    # The insert read the source row from its snapshot; once a concurrent delete (a replaced
    # document, an erasure) committed, the foreign key check failed and the whole batch raised
    # PostgresRecallError, where a vector of a source no longer at its revision is to be skipped.
    store = PostgresRecallStore(app_config)
    try:
        ref = await store.index_document(SourceOwner("acme", "ana"), "d", "version zero", _ctx())
        stored: list[int] = []

        async def index() -> None:
            stored.append(
                await store.index_vectors([SourceVector(ref, Vector(AXES, (1.0, 0, 0, 0)))], _ctx())
            )

        with psycopg.connect(pg_server.admin_dsn()) as deleter:
            deleter.execute(f'DELETE FROM "{schema}".recall_sources')
            async with anyio.create_task_group() as tg:
                tg.start_soon(index)
                with anyio.fail_after(30):
                    while True:
                        row = admin.execute(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE usename = %s AND wait_event_type = 'Lock'",
                            (APP_USER,),
                        ).fetchone()
                        if row is not None and row[0] >= 1:
                            break
                        await anyio.sleep(0.02)
                deleter.commit()
        assert stored == [0]
        assert admin.execute(f'SELECT count(*) FROM "{schema}".recall_vectors').fetchone() == (0,)
    finally:
        await store.aclose()
