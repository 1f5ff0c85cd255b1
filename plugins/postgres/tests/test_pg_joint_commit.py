"""Archive and boundary in one transaction, in a harness runtime and through the port (R3).

The session store declares ``joint_archive_commit``; with a PostgreSQL archive
on the same database and schema, the engine commits an eviction's groups and
the new snapshot together, and a failure of either writes neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from pg_server import APP_PASSWORD, APP_USER, DATABASE
from psycopg_pool import AsyncConnectionPool

from agentium_harness import (
    InvalidArgumentError,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    OpContext,
    SessionConflictError,
    SessionKey,
    SnapshotScopeMismatchError,
)
from agentium_harness.testing import plain_group, rich_group, scoped_snapshot
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresSessionStore, migrate
from agentium_postgres.errors import (
    PostgresPrivilegeError,
    PostgresRowTooLargeError,
    PostgresSessionStoreError,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def archived_seqs(admin: psycopg.Connection[Any], schema: str, key: SessionKey) -> list[int]:
    rows = admin.execute(
        f'SELECT seq FROM "{schema}".archive_groups '
        "WHERE tenant_key = %s AND user_key = %s AND session_key = %s ORDER BY seq",
        key.key_segments(),
    ).fetchall()
    return [int(r[0]) for r in rows]


async def test_a_runtime_evicts_through_the_joint_commit_and_loses_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    assert store.shares_transactions_with(archive)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        for i in range(6):
            result = await runtime.run(ANA, "s1", f"Message number {i}.")
            assert result.committed
        stored = await store.load(KEY, _ctx())
        assert stored is not None
        snapshot = stored.snapshot
        assert snapshot.boundary >= 3
        archived = list(await archive.read_groups(KEY, 0, 100, _ctx()))
        assert [g.seq for g in archived] == list(range(snapshot.boundary))
        assert [g.seq for g in snapshot.resident] == list(range(snapshot.boundary, snapshot.next_seq))
        assert archived_seqs(admin, schema, KEY) == list(range(snapshot.boundary))
        # now() is the transaction's start: the last evicted group and the snapshot share it only
        # when they were written by one transaction (the joint commit), not by two.
        same = admin.execute(
            f'SELECT (SELECT max(archived_at) FROM "{schema}".archive_groups) = '
            f'(SELECT saved_at FROM "{schema}".session_snapshots)'
        ).fetchone()
        assert same == (True,)
    finally:
        await runtime.aclose()
        await archive.aclose()
        await store.aclose()


async def test_a_session_conflict_in_the_joint_commit_archives_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        groups = [rich_group(0, KEY, "evicted zero"), rich_group(1, KEY, "evicted one")]
        with pytest.raises(SessionConflictError):
            await store.commit_with_archive(
                archive, KEY, groups, scoped_snapshot(KEY, " next"), base + 1, _ctx()
            )
        assert archived_seqs(admin, schema, KEY) == []
        revision, receipts = await store.commit_with_archive(
            archive, KEY, groups, scoped_snapshot(KEY, " next"), base, _ctx()
        )
        assert revision == base + 1
        assert [(r.seq, r.digest) for r in receipts] == [(g.seq, g.digest) for g in groups]
        assert archived_seqs(admin, schema, KEY) == [0, 1]
        assert list(await archive.read_groups(KEY, 0, 10, _ctx())) == groups
    finally:
        await archive.aclose()
        await store.aclose()


async def test_an_archive_conflict_in_the_joint_commit_saves_no_snapshot(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        await archive.append(KEY, [plain_group(1, "stored first")], _ctx())
        groups = [plain_group(0, "zero"), plain_group(1, "different content")]
        with pytest.raises(ArchiveConflictError):
            await store.commit_with_archive(archive, KEY, groups, scoped_snapshot(KEY, " next"), base, _ctx())
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.revision == base
        assert stored.snapshot == scoped_snapshot(KEY, " base")
        assert archived_seqs(admin, schema, KEY) == [1]  # group 0 of the failed batch was rolled back
    finally:
        await archive.aclose()
        await store.aclose()


async def test_the_joint_commit_refuses_another_sessions_snapshot_and_writes_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # Stored, the snapshot would only be refused by the engine's next load of the key: the groups
    # went into the archive and the session was unusable from then on.
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    other = SessionKey(KEY.tenant, KEY.user, "another")
    try:
        for expected in (None, 1):
            with pytest.raises(SnapshotScopeMismatchError, match="nothing was written"):
                await store.commit_with_archive(
                    archive, KEY, [plain_group(0)], scoped_snapshot(other), expected, _ctx()
                )
        assert archived_seqs(admin, schema, KEY) == []
        assert await store.load(KEY, _ctx()) is None
    finally:
        await archive.aclose()
        await store.aclose()


async def test_shares_transactions_only_with_an_open_archive_on_the_same_schema(
    app_config: PostgresConfig, pg_server: Any
) -> None:
    store = PostgresSessionStore(app_config)
    same = PostgresArchive(app_config)
    other_schema = PostgresArchive(PostgresConfig(dsn=app_config.dsn, schema="elsewhere"))
    other_database = PostgresArchive(
        PostgresConfig(dsn=pg_server.app_dsn("postgres"), schema=app_config.schema)
    )
    try:
        assert store.shares_transactions_with(same)
        assert not store.shares_transactions_with(other_schema)
        assert not store.shares_transactions_with(other_database)
        assert not store.shares_transactions_with(object())
        await same.aclose()
        assert not store.shares_transactions_with(same)
    finally:
        for adapter in (store, same, other_schema, other_database):
            await adapter.aclose()


async def test_two_services_naming_two_databases_never_share_a_transaction(
    pg_server: Any,
    schema: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    admin: psycopg.Connection[Any],
) -> None:
    # Only host, port, database and user were compared: "service=one" and "service=two" were one
    # database, and the joint commit wrote the archive's groups into the session store's database,
    # where the archive never read them (read_groups returned [] after the commit).
    await migrate(PostgresConfig(dsn=pg_server.admin_dsn("postgres"), schema=schema), grant_to=[APP_USER])
    services = tmp_path / "pg_service.conf"
    common = f"host=127.0.0.1\nport={pg_server.port}\nuser={APP_USER}\npassword={APP_PASSWORD}\n"
    services.write_text(f"[one]\n{common}dbname={DATABASE}\n[two]\n{common}dbname=postgres\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    store = PostgresSessionStore(PostgresConfig(dsn="service=one", schema=schema))
    archive = PostgresArchive(PostgresConfig(dsn="service=two", schema=schema))
    twin = PostgresArchive(PostgresConfig(dsn="service=one", schema=schema))
    try:
        assert store.shares_transactions_with(twin)  # the same service is the same database
        assert not store.shares_transactions_with(archive)
        groups = [rich_group(0, KEY, "evicted zero")]
        with pytest.raises(PostgresSessionStoreError, match="same database and schema"):
            await store.commit_with_archive(archive, KEY, groups, scoped_snapshot(KEY, " next"), None, _ctx())
        assert archived_seqs(admin, schema, KEY) == []
        assert await store.load(KEY, _ctx()) is None
    finally:
        for adapter in (store, archive, twin):
            await adapter.aclose()
    with psycopg.connect(pg_server.admin_dsn("postgres"), autocommit=True) as other:
        other.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_an_identity_names_every_option_that_chooses_the_server() -> None:
    one = PostgresConfig(dsn="host=db hostaddr=10.0.0.1 dbname=app user=app")
    assert one.identity() != PostgresConfig(dsn="host=db hostaddr=10.0.0.2 dbname=app user=app").identity()
    # The secrets and the options that cannot move a connection elsewhere do not count (and the
    # identity, a dictionary key, holds no secret).
    same = PostgresConfig(
        dsn="host=db hostaddr=10.0.0.1 dbname=app user=app application_name=x connect_timeout=3 "
        "sslpassword=secret-key password=secret-dsn",
        password="secret",
    )
    assert one.identity() == same.identity()
    assert "secret" not in " ".join(same.identity())


@pytest.mark.parametrize("option", ["oauth_client_secret", "scram_client_key", "scram_server_key"])
def test_an_identity_holds_no_secret_of_libpq_18(option: str) -> None:
    # libpq 18 (the one psycopg[binary] bundles) takes an OAuth client secret and the SCRAM keys,
    # which authenticate as the password does, as connection options; identity() took them in.
    dsn = "host=db hostaddr=10.0.0.1 dbname=app user=app"
    known = {o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults()}
    if option not in known:  # an older libpq refuses the option: the secret cannot land anywhere
        with pytest.raises(InvalidArgumentError):
            PostgresConfig(dsn=f"{dsn} {option}=hunter2-secret")
        return
    given = PostgresConfig(dsn=f"{dsn} {option}=hunter2-secret")
    assert "hunter2" not in " ".join(given.identity())
    # Only a credential differs: one database, still one joint commit.
    assert given.identity() == PostgresConfig(dsn=dsn).identity()


async def test_the_joint_commit_refuses_a_group_over_the_archives_own_row_bound(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # The batch was sized against the session store's max_row_bytes: a group the archive's own
    # append refuses was committed, with the boundary past it, and every archive read of it then
    # failed with PostgresRowTooLargeError.
    store = PostgresSessionStore(app_config)
    archive = PostgresArchive(attrs.evolve(app_config, max_row_bytes=1024))
    try:
        groups = [rich_group(0, KEY, "x" * 3000)]
        with pytest.raises(PostgresRowTooLargeError):
            await archive.append(KEY, groups, _ctx())
        with pytest.raises(PostgresRowTooLargeError):
            await store.commit_with_archive(archive, KEY, groups, scoped_snapshot(KEY, " next"), None, _ctx())
        assert archived_seqs(admin, schema, KEY) == []
        assert await store.load(KEY, _ctx()) is None
        assert list(await archive.read_groups(KEY, 0, 10, _ctx())) == []
    finally:
        await archive.aclose()
        await store.aclose()


async def test_the_joint_commit_does_not_write_for_an_archive_that_requires_row_security(
    admin_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # An archive with require_row_security refuses every call of a role that bypasses row-level
    # security; the session store's joint commit ran on the store's own link, whose config did not
    # ask, and wrote the archive's groups as that role all the same.
    store = PostgresSessionStore(admin_config)  # the superuser bypasses row-level security
    archive = PostgresArchive(attrs.evolve(admin_config, require_row_security=True))
    try:
        groups = [rich_group(0, KEY, "kept out")]
        with pytest.raises(PostgresPrivilegeError):
            await archive.append(KEY, groups, _ctx())
        assert not store.shares_transactions_with(archive)
        with pytest.raises(PostgresSessionStoreError, match="nothing was written"):
            await store.commit_with_archive(archive, KEY, groups, scoped_snapshot(KEY, " next"), None, _ctx())
        assert archived_seqs(admin, schema, KEY) == []
        assert await store.load(KEY, _ctx()) is None
        # The other way round the store's own check covers the archive's rows: one transaction.
        strict = PostgresSessionStore(attrs.evolve(admin_config, require_row_security=True))
        assert strict.shares_transactions_with(PostgresArchive(admin_config))
        await strict.aclose()
    finally:
        await archive.aclose()
        await store.aclose()


async def test_two_lent_pools_share_no_transaction_whatever_their_configs_say(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # With pools lent, the configs' dsn names nothing the adapters connect to; two different
    # pools were compared by their configs, so two pools of two databases under one config were
    # one database to the joint commit, which wrote the archive's groups through the session
    # store's pool, into its database.
    ours = AsyncConnectionPool(pg_server.app_dsn(), min_size=0, max_size=1, open=False)
    theirs = AsyncConnectionPool(pg_server.app_dsn("postgres"), min_size=0, max_size=1, open=False)
    await ours.open()
    await theirs.open()
    store = PostgresSessionStore(app_config, pool=ours)
    archive = PostgresArchive(app_config, pool=theirs)
    same_pool = PostgresArchive(app_config, pool=ours)
    owned = PostgresArchive(app_config)
    try:
        assert store.shares_transactions_with(same_pool)
        assert not store.shares_transactions_with(archive)
        assert not store.shares_transactions_with(owned)  # its own pool, not the lent one
        with pytest.raises(PostgresSessionStoreError, match="same database and schema"):
            await store.commit_with_archive(
                archive, KEY, [rich_group(0, KEY, "zero")], scoped_snapshot(KEY, " next"), None, _ctx()
            )
        assert archived_seqs(admin, schema, KEY) == []
    finally:
        for adapter in (store, archive, same_pool, owned):
            await adapter.aclose()
        await ours.close()
        await theirs.close()


async def test_an_address_given_as_host_or_as_hostaddr_is_one_database_for_the_joint_commit(
    app_config: PostgresConfig, pg_server: Any, admin: psycopg.Connection[Any], schema: str
) -> None:
    # host=127.0.0.1 and hostaddr=127.0.0.1 reach one server (libpq looks no numeric host up), but
    # were two identities: the archive and the store committed separately, in two transactions.
    spelled = app_config.dsn.replace("host=127.0.0.1", "hostaddr=127.0.0.1")
    assert spelled != app_config.dsn
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=spelled))
    archive = PostgresArchive(app_config)
    try:
        assert store.shares_transactions_with(archive)
        groups = [rich_group(0, KEY, "evicted zero")]
        revision, _ = await store.commit_with_archive(
            archive, KEY, groups, scoped_snapshot(KEY, " next"), None, _ctx()
        )
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, _ctx())] == [0]
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.revision == revision
        assert archived_seqs(admin, schema, KEY) == [0]
    finally:
        await store.aclose()
        await archive.aclose()


def test_only_an_address_no_other_option_can_supply_is_one_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGHOSTADDR", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)

    def same(a: str, b: str) -> bool:
        return (
            PostgresConfig(dsn=f"{a} dbname=app").identity()
            == PostgresConfig(dsn=f"{b} dbname=app").identity()
        )

    assert same("host=10.0.0.1", "hostaddr=10.0.0.1")
    assert same("host=::1", "hostaddr=0:0:0:0:0:0:0:1")
    assert same("host=10.0.0.1,10.0.0.2", "hostaddr=10.0.0.1,10.0.0.2")
    assert not same("host=10.0.0.1", "hostaddr=10.0.0.2")
    assert not same("host=localhost", "hostaddr=127.0.0.1")  # a name is looked up: maybe elsewhere
    assert not same("host=127.1", "hostaddr=127.0.0.1")  # read strictly, or not at all
    assert not same("host=10.0.0.1,db", "hostaddr=10.0.0.1,10.0.0.2")
    assert not same("host=db hostaddr=10.0.0.1", "hostaddr=10.0.0.1")  # both given: as written
    assert not same("service=s host=10.0.0.1", "service=s hostaddr=10.0.0.1")  # the file may add one
    # libpq takes hostaddr from the environment for host= alone: the spellings may then differ.
    monkeypatch.setenv("PGHOSTADDR", "10.0.0.9")
    assert not same("host=10.0.0.1", "hostaddr=10.0.0.1")
    monkeypatch.delenv("PGHOSTADDR")
    monkeypatch.setenv("PGSERVICE", "s")
    assert not same("host=10.0.0.1", "hostaddr=10.0.0.1")
