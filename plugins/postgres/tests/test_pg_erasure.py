"""Erasure with every store in PostgreSQL: a runtime erases a session, raw SQL finds none of it.

The contract suites (test_pg_contract.py) check each adapter's ``erase`` on
its own, with a byte-level check over every row of the schema; here the
engine drives all four adapters together, the neighbours' rows must stay
byte for byte, and the honest limits are checked: dead row versions stay in
the table's pages until ``VACUUM`` (the tombstone says ``unreferenced``), and
a role without ``DELETE`` erases nothing.
"""

from __future__ import annotations

import json
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from pg_server import PostgresServer
from psycopg import sql

from agentium_harness import (
    EraseTarget,
    ErasureKind,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._cli import main
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    EmbeddingModel,
    GroupRef,
    MemoryFact,
    MemoryScope,
    OpContext,
    PhysicalErasure,
    SessionKey,
    SourceOwner,
    SourceVector,
    Vector,
)
from agentium_harness.testing import plain_group
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresPrivilegeError,
    PostgresRecallStore,
    PostgresSessionStore,
)

pytestmark = pytest.mark.anyio

Admin = psycopg.Connection[Any]
ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
TABLES = ("archive_groups", "session_snapshots", "recall_sources", "memory_facts")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def rows_of(admin: Admin, schema: str, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` as the superuser sees it (no row-level security), in a stable order."""
    query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    return sorted((tuple(r) for r in admin.execute(query).fetchall()), key=repr)


def every_byte(admin: Admin, schema: str) -> bytes:
    """Every value of every row of the four tables, concatenated."""
    out = bytearray()
    for table in TABLES:
        for row in rows_of(admin, schema, table):
            for value in row:
                out += value if isinstance(value, bytes) else str(value).encode()
    return bytes(out)


def _not_of(session: str, row: tuple[Any, ...], table: str) -> bool:
    """True for a row of tenant acme that is not session ``session`` of ana (by its key columns).

    The erasure records live in ``session_snapshots`` under a reserved tenant; they are not neighbours.
    """
    if row[0 if table != "recall_sources" else 1] != "acme":
        return False
    if table in ("archive_groups", "session_snapshots"):
        return (row[1], row[2]) != ("ana", session)
    if table == "recall_sources":
        return (row[4], row[5]) != ("ana", session)
    return True


def _runtime(config: PostgresConfig, **kwargs: Any) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=PostgresArchive(config),
        session_store=PostgresSessionStore(config),
        recall=PostgresRecallStore(config),
        memory=PostgresMemoryStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        **kwargs,
    )


async def test_erasing_a_session_leaves_no_row_of_it_and_every_neighbour_byte_identical(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    secret, kept, other = "qzebraerased7741", "qkeptsibling3318", "qkeptbob5521"
    runtime = _runtime(app_config)
    recall, memory = PostgresRecallStore(app_config), PostgresMemoryStore(app_config)
    try:
        for i in range(4):
            assert (await runtime.run(ANA, "s1", f"Message {i} mentions {secret}.")).committed
            assert (await runtime.run(ANA, "s2", f"Message {i} mentions {kept}.")).committed
            assert (await runtime.run(BOB, "s1", f"Message {i} mentions {other}.")).committed
        await recall.index_document(SourceOwner("acme", "ana", "s1"), "notes", f"notes on {secret}", _ctx())
        await recall.index_document(SourceOwner("acme", "ana"), "profile", f"profile {kept}", _ctx())
        ana = MemoryScope("acme", "ana")
        await memory.remember(
            MemoryFact(ana, f"ana said {secret}", provenance=[GroupRef("s1", 0, "sha256:" + "0" * 64)]),
            _ctx(),
        )
        await memory.remember(MemoryFact(ana, f"ana likes {kept}"), _ctx())
        raw = every_byte(admin, schema)
        assert secret.encode() in raw and kept.encode() in raw
        assert rows_of(admin, schema, "archive_groups"), "nothing was archived"
        before = {t: [r for r in rows_of(admin, schema, t) if _not_of("s1", r, t)] for t in TABLES}

        result = await runtime.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=OPERATOR
        )

        tombstone = result.tombstone
        assert tombstone is not None and tombstone.state is ErasureState.COMPLETE
        roles = {s.role: s for s in tombstone.stores}
        assert set(roles) == {"archive", "session_store", "recall", "memory"}
        for role in ("recall", "session_store", "memory"):
            # Dead row versions stay until VACUUM: the tombstone says so rather than "removed".
            assert roles[role].physical is PhysicalErasure.UNREFERENCED and "VACUUM" in roles[role].detail
        # The recall store runs first and takes its groups' rows of archive_groups, which the
        # archive shares on one schema: the archive then finds nothing of them, and says so.
        assert "archive_groups" in roles["recall"].detail
        assert roles["memory"].counts and tombstone.groups_removed > 0
        raw = every_byte(admin, schema)
        assert secret.encode() not in raw, "erased text is still in a row"
        assert kept.encode() in raw and other.encode() in raw
        for table in TABLES:
            after = [r for r in rows_of(admin, schema, table) if _not_of("s1", r, table)]
            if table == "memory_facts":  # the fact citing s1 went; ana's other fact is unchanged
                assert after == [r for r in before[table] if secret not in str(r)]
            elif table == "recall_sources":
                assert after == [r for r in before[table] if secret not in str(r)]
            else:
                assert after == before[table], f"{table}: a neighbour's row changed"
        assert (await runtime.run(ANA, "s2", "still here")).committed
        view = await runtime.inspect_session(ANA, "s1")
        assert not view.exists and view.erasures[0].erasure_id == tombstone.erasure_id
    finally:
        await runtime.aclose()
        await recall.aclose()
        await memory.aclose()


async def test_dead_row_versions_hold_the_text_until_vacuum_as_the_tombstone_says(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """The ``unreferenced`` report is true: the table's file keeps the bytes until the owner vacuums."""
    secret = "qpagesecret90210"
    archive = PostgresArchive(app_config)
    key = SessionKey("acme", "ana", "s1")
    name = sql.Literal(f'"{schema}".archive_groups')

    def table_file() -> bytes:
        admin.execute("CHECKPOINT")  # the pages reach the file
        path = admin.execute(sql.SQL("SELECT pg_relation_filepath({})").format(name)).fetchone()
        assert path is not None
        data = admin.execute("SELECT pg_read_binary_file(%s)", (path[0],)).fetchone()
        assert data is not None
        return bytes(data[0])

    try:
        await archive.append(key, [plain_group(0, f" say {secret}")], _ctx())
        assert secret.encode() in table_file()
        report = await archive.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.physical is PhysicalErasure.UNREFERENCED and report.count("group") == 1
        assert secret.encode() not in every_byte(admin, schema)
        assert secret.encode() in table_file(), "the dead row version was already gone"
        admin.execute(sql.SQL("VACUUM FULL {}").format(sql.Identifier(schema, "archive_groups")))
        assert secret.encode() not in table_file()
    finally:
        await archive.aclose()


async def test_a_role_without_delete_erases_nothing_and_is_told_what_to_grant(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """DELETE is granted by migrate --grant but not needed to serve turns; without it erase is refused."""
    archive = PostgresArchive(app_config)
    key = SessionKey("acme", "ana", "s1")
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=PostgresSessionStore(app_config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        for i in range(3):
            await runtime.run(ANA, "s1", f"message {i}")
        admin.execute(
            sql.SQL("REVOKE DELETE ON {} FROM agentium_app").format(sql.Identifier(schema, "archive_groups"))
        )
        before = rows_of(admin, schema, "archive_groups")
        assert before
        # Turns still run: DELETE is not among the privileges checked on first use.
        assert (await runtime.run(ANA, "s1", "one more")).committed
        before = rows_of(admin, schema, "archive_groups")
        with pytest.raises(PostgresPrivilegeError, match="--grant"):
            await archive.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert rows_of(admin, schema, "archive_groups") == before
        assert [g.seq for g in await archive.read_groups(key, 0, 10, _ctx())]
    finally:
        await runtime.aclose()


async def test_retention_on_postgres_erases_old_groups_from_the_archive_and_the_index(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    runtime = _runtime(app_config, retention=RetentionPolicy(max_archived_groups=2))
    try:
        for i in range(6):
            await runtime.run(ANA, "s1", f"Old message {i} about qharbour{i}x.")
        result = await runtime.apply_retention(OPERATOR)
        (erasure,) = result.erasures
        assert erasure.tombstone is not None
        erased = erasure.tombstone.target.groups
        assert erased and erased[0].start == 0
        raw = b"".join(
            str(r).encode() + (r[5] if isinstance(r[5], bytes) else b"")
            for r in rows_of(admin, schema, "archive_groups")
        ) + b"".join(str(r).encode() for r in rows_of(admin, schema, "recall_sources"))
        for seq in range(erased[-1].stop):
            assert f"qharbour{seq}x".encode() not in raw
        assert (await runtime.run(ANA, "s1", "and one more")).committed
        page = await runtime.read_history(ANA, "s1", max_groups=50, view=False)
        assert page.groups and page.groups[0].seq == erased[-1].stop
    finally:
        await runtime.aclose()


async def test_erasing_a_source_takes_its_vector_and_leaves_the_neighbours(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """Vectors hang on their source's row (a cascading key): the erase takes them, as the app role."""
    model = EmbeddingModel("test-axes", 4)
    recall = PostgresRecallStore(app_config)
    try:
        gone = await recall.index_document(SourceOwner("acme", "ana", "s1"), "d", "erased text", _ctx())
        kept = await recall.index_document(SourceOwner("acme", "ana", "s2"), "d", "kept text", _ctx())
        axis = [Vector.normalized(model, [1.0 if j == i else 0.0 for j in range(4)]) for i in range(2)]
        assert (
            await recall.index_vectors([SourceVector(gone, axis[0]), SourceVector(kept, axis[1])], _ctx())
            == 2
        )
        before = rows_of(admin, schema, "recall_vectors")
        report = await recall.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.count("document") == 1
        after = rows_of(admin, schema, "recall_vectors")
        assert len(before) == 2 and len(after) == 1 and after[0] in before
        assert bytes(after[0][2]) == axis[1].to_bytes()
    finally:
        await recall.aclose()


def test_agentium_erase_with_postgres_from_config_dry_run_erase_and_status(
    pg_server: PostgresServer, schema: str, admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's path: ``agentium erase CONFIG`` with every store in PostgreSQL, as the app role."""
    monkeypatch.setenv("TEST_PG_DSN", pg_server.app_dsn())
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["Noted."]\ncycle = true\n\n'
        f'[plugins.postgres]\ndsn = "${{TEST_PG_DSN}}"\nschema = "{schema}"\n'
        + "".join(
            f'\n[{kind}]\nplugin = "postgres"\n' for kind in ("archive", "session_store", "recall", "memory")
        )
        + "\n[runtime.resident]\nmax_groups = 1\n"
    )
    who = ["--tenant", "acme", "--user", "ana"]
    for i in range(3):
        assert _cli(["run", str(path), *who, "--session", "s1", f"qclierased{i}x said"])[0] == 0
    assert _cli(["run", str(path), *who, "--session", "s2", "qclikept said"])[0] == 0
    assert b"qclierased0x" in every_byte(admin, schema)

    status, out, err = _cli(["erase", str(path), *who, "--session", "s1", "--reason", "DSR 7", "--dry-run"])
    assert status == 0, err
    assert "PostgresArchive" in out and "PostgresRecallStore" in out and "PostgresSessionStore" in out
    assert b"qclierased0x" in every_byte(admin, schema), "the dry run removed something"

    status, out, err = _cli(["erase", str(path), *who, "--session", "s1", "--reason", "DSR 7", "--json"])
    assert status == 0, err
    (record,) = json.loads(out)
    assert record["state"] == "complete"
    assert {s["role"]: s["physical"] for s in record["stores"]}["session_store"] == "unreferenced"
    raw = every_byte(admin, schema)
    assert b"qclierased" not in raw and b"qclikept" in raw
    status, out, _ = _cli(["erase", str(path), *who, "--session", "s1", "--status"])
    assert status == 0 and f"erasure {record['erasure_id']} (erasure) complete" in out


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


class Recording(ScriptedProvider):
    """Keeps every request it answers, rendered: instructions, sources, history and turn."""

    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.seen: list[str] = []

    async def complete(self, request: Any, ctx: Any) -> Any:
        messages = " ".join(m.content for m in (*request.history, *request.turn))
        self.seen.append(" ".join((request.instructions, request.render_sources(), messages)))
        return await super().complete(request, ctx)


async def test_forget_with_erased_sources_on_postgres_leaves_the_text_in_no_row_and_no_request(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """``forget(..., erase_sources=True)`` with every store in PostgreSQL (issue 23, item 4)."""
    secret = "qzephyrcode4471"
    provider = Recording()
    archive = PostgresArchive(app_config)
    runtime = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=PostgresSessionStore(app_config),
        recall=PostgresRecallStore(app_config),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        memory=PostgresMemoryStore(app_config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    scope = MemoryScope("acme", "ana")
    try:
        await runtime.run(ANA, "s1", f"My vault code is {secret}. Remember the vault code.")
        await runtime.run(ANA, "s1", "The weather is fine today.")
        await runtime.run(ANA, "s1", "Tell me about the weather again.")
        (group,) = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, _ctx())
        ack = await runtime.memory.remember(
            MemoryFact(scope, f"ana's vault code is {secret}", provenance=[GroupRef("s1", 0, group.digest)])
        )
        assert ack.fact_id is not None
        provider.seen.clear()
        await runtime.run(ANA, "s1", "What is my vault code?")
        assert secret in provider.seen[-1], "the fact's text reached the request before it was forgotten"

        result = await runtime.forget(
            scope, ack.fact_id, erase_sources=True, reason="asked", attestation=OPERATOR
        )

        assert result.ack.ok and result.still_held == ()
        (erasure,) = result.erasures
        assert erasure.tombstone is not None and erasure.record.kind is ErasureKind.FORGET
        provider.seen.clear()
        await runtime.run(ANA, "s1", "What is my vault code? The vault code please.")
        await runtime.run(ANA, "s2", "What is my vault code?")
        assert provider.seen and all(secret not in text for text in provider.seen)
        # No row of any table holds it: archive, index, memory, and the snapshots (summary included).
        assert secret.encode() not in every_byte(admin, schema)
    finally:
        await runtime.aclose()


async def test_rows_with_key_text_no_id_encodes_to_are_erased_with_their_tenant_not_a_bare_error(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    # Rows written behind the adapters' back (the application role may insert any key text within
    # its tenant) whose user or session key no id encodes to: a tenant or user erasure must still
    # take them. Decoding their keys for the report raised a bare ValueError and stopped it for good.
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    recall = PostgresRecallStore(app_config)
    s = sql.Identifier(schema)
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.archive_groups (tenant_key, user_key, session_key, seq, digest, data) "
            "VALUES ('acme', 'bad key', 's1', 0, 'x', 'x'), ('acme', 'ana', '%ZZ', 0, 'x', 'x')"
        ).format(s)
    )
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.session_snapshots "
            "(tenant_key, user_key, session_key, session_id, revision, data) "
            "VALUES ('acme', 'ana', '%ZZ', 'x', 1, 'x'), ('acme', 'b%2', 's1', 'y', 1, 'y')"
        ).format(s)
    )
    admin.execute(
        sql.SQL(
            "INSERT INTO {}.recall_sources (tenant_key, source_id, kind, user_key, session_key, revision, "
            "title, size_bytes, seq, body, tsv) VALUES ('acme', 'group/x', 'group', 'ana', '%ZZ', 'r', '', "
            "1, 0, 'b', to_tsvector('simple', 'b')), ('acme', 'group/y', 'group', NULL, NULL, 'r', '', "
            "1, 1, 'b', to_tsvector('simple', 'b'))"
        ).format(s)
    )
    try:
        for target, expected in ((EraseTarget("acme", "ana"), 1), (EraseTarget("acme"), 1)):
            for adapter, kind in ((archive, "group"), (store, "snapshot"), (recall, "group")):
                dry = await adapter.erase(target, _ctx(), dry_run=True)
                done = await adapter.erase(target, _ctx())
                assert dry.count(kind) == done.count(kind) >= expected, (adapter, target)
                assert done.sessions == ()  # no session can be named from such keys
        for table in ("archive_groups", "session_snapshots", "recall_sources"):
            assert rows_of(admin, schema, table) == [], table
    finally:
        for adapter in (archive, store, recall):
            await adapter.aclose()


async def test_a_snapshot_grown_past_max_row_bytes_is_erased_without_being_transferred(
    app_config: PostgresConfig, admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session store's erase read every matched snapshot whole (to list its resident groups),
    # however large a row grown behind its back had become; such a row is erased unread now.
    import agentium_postgres.erase as erase_module
    from agentium_harness.testing import scoped_snapshot

    seen: list[int] = []
    real = erase_module.snapshot_erasure

    def recording(key: SessionKey, data: bytes) -> Any:
        seen.append(len(data))
        return real(key, data)

    monkeypatch.setattr(erase_module, "snapshot_erasure", recording)
    store = PostgresSessionStore(attrs.evolve(app_config, max_row_bytes=64 * 1024))
    key = SessionKey("acme", "ana", "s1")
    try:
        await store.save(key, scoped_snapshot(key, " x"), None, _ctx())
        admin.execute(
            sql.SQL("UPDATE {}.session_snapshots SET data = %s").format(sql.Identifier(schema)),
            (b"x" * (128 * 1024),),
        )
        report = await store.erase(EraseTarget("acme", "ana"), _ctx())
        assert report.count("snapshot") == 1
        assert [(s.session, s.groups) for s in report.sessions] == [(key, ())]
        assert seen == []  # nothing over max_row_bytes reached the client
        assert rows_of(admin, schema, "session_snapshots") == []
    finally:
        await store.aclose()
