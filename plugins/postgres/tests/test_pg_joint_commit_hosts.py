"""Several-host connection strings and the joint commit: one database only when that is certain.

``host=a,b load_balance_hosts=random`` (or a list that libpq cannot pair with its ports, or a
service not readable here) may put two adapters' connections on two servers; their identities
compared equal, so the session store's joint commit wrote the archive's groups on whichever
server its own connection reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from agentium_harness import ResidentLimits, RuntimeLimits, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import rich_group, scoped_snapshot
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresSessionStore
from agentium_postgres.cli import _targets
from agentium_postgres.config import migration_target
from agentium_postgres.errors import PostgresSessionStoreError

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
ANA = VerifiedIdentity("acme", "ana", "test-auth")
_HOST_ENV = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGLOADBALANCEHOSTS", "PGSERVICE", "PGSERVICEFILE")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No libpq variable that chooses hosts, and no user service file."""
    for name in _HOST_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "absent.conf"))
    return monkeypatch


def _same(a: str, b: str) -> bool:
    return PostgresConfig(dsn=a).identity() == PostgresConfig(dsn=b).identity()


def test_a_randomly_balanced_host_list_is_no_database_shared_with_anything(clean_env: Any) -> None:
    random = "host=db1,db2 port=5432 dbname=app user=app load_balance_hosts=random"
    config = PostgresConfig(dsn=random)
    assert config.identity() != config.identity()  # two connections, maybe two servers
    assert not _same(random, random)
    url = "postgresql://app@db1:5432,db2:5432/app?load_balance_hosts=random"
    assert not _same(url, url)
    assert not _same("hostaddr=10.0.0.1,10.0.0.2 dbname=app load_balance_hosts=random", random)
    # The same list tried in order, with the same ports and target_session_attrs: one database.
    ordered = "host=db1,db2 port=5432,5433 dbname=app target_session_attrs=read-write"
    assert _same(ordered, ordered)
    assert not _same(ordered, f"{ordered} load_balance_hosts=disable")  # as written: separate
    assert _same(f"{ordered} load_balance_hosts=disable", f"{ordered} load_balance_hosts=disable")
    assert not _same(ordered, ordered.replace("db1,db2", "db2,db1"))  # another order
    assert not _same(ordered, ordered.replace("5432,5433", "5433,5432"))  # other ports
    assert not _same(ordered, ordered.replace("read-write", "any"))
    assert not _same(ordered, ordered.replace(" target_session_attrs=read-write", ""))
    # One address or socket folder shuffled is still that server.
    for one in ("hostaddr=10.0.0.1", "host=10.0.0.1", "host=::1", "host=/var/run/postgresql"):
        assert _same(
            f"{one} dbname=app load_balance_hosts=random", f"{one} dbname=app load_balance_hosts=random"
        )
    named = "host=db1 hostaddr=10.0.0.1 dbname=app load_balance_hosts=random"  # not looked up
    assert _same(named, named)


def test_a_randomly_balanced_host_name_is_no_database_shared_with_anything(clean_env: Any) -> None:
    # psycopg shuffles the addresses a name resolves to: round-robin DNS is a list of servers.
    for dsn in (
        "host=db1 dbname=app load_balance_hosts=random",
        "postgresql://app@db1:5432/app?load_balance_hosts=random",
        "host=db1,db1 hostaddr=10.0.0.1, dbname=app load_balance_hosts=random",  # 2nd looked up
    ):
        assert not _same(dsn, dsn)
    clean_env.setenv("PGLOADBALANCEHOSTS", "random")
    assert not _same("host=db1 dbname=app", "host=db1 dbname=app")
    clean_env.setenv("PGHOSTADDR", "10.0.0.1")  # psycopg takes the address from there: no lookup
    assert _same("host=db1 dbname=app", "host=db1 dbname=app")
    clean_env.delenv("PGLOADBALANCEHOSTS")
    clean_env.delenv("PGHOSTADDR")
    assert _same("host=db1 dbname=app", "host=db1 dbname=app")  # tried in order: the common case


def test_the_environment_and_a_service_file_can_make_a_list_random(clean_env: Any, tmp_path: Path) -> None:
    clean_env.setenv("PGLOADBALANCEHOSTS", "random")
    assert not _same("host=db1,db2 dbname=app", "host=db1,db2 dbname=app")
    assert _same("host=10.0.0.1 dbname=app", "host=10.0.0.1 dbname=app")
    clean_env.setenv("PGHOST", "db1,db2")
    assert not _same("dbname=app", "dbname=app")  # the list comes from PGHOST
    # PGHOST is used only when the string names no host: here libpq connects to 10.0.0.1 alone.
    assert _same("host=10.0.0.1 dbname=app", "host=10.0.0.1 dbname=app")
    clean_env.delenv("PGLOADBALANCEHOSTS")
    assert _same("host=10.0.0.1 dbname=app", "host=10.0.0.1 dbname=app")
    clean_env.delenv("PGHOST")
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "# two services ([DEFAULT] is one more service to libpq, not defaults for the others)\n"
        "[DEFAULT]\nload_balance_hosts=random\n"
        "[spread]\nhost=db1,db2\nload_balance_hosts=random\n[ordered]\nhost=db1,db2\n"
    )
    clean_env.setenv("PGSERVICEFILE", str(services))
    assert not _same("service=spread dbname=app", "service=spread dbname=app")
    assert _same("service=ordered dbname=app", "service=ordered dbname=app")
    # The string's own option wins over the file's, as in libpq.
    assert _same(
        "service=spread dbname=app load_balance_hosts=disable",
        "service=spread dbname=app load_balance_hosts=disable",
    )
    assert not _same("service=missing dbname=app", "service=missing dbname=app")  # not known here
    clean_env.setenv("PGSERVICE", "spread")
    assert not _same("dbname=app", "dbname=app")
    clean_env.setenv("PGSERVICEFILE", str(tmp_path))  # a folder: unreadable, nothing certain
    assert not _same("service=ordered dbname=app", "service=ordered dbname=app")


def test_options_libpq_would_refuse_or_cannot_be_read_share_nothing(clean_env: Any) -> None:
    mismatched = "host=db1,db2,db3 port=5432,5433 dbname=app"  # libpq: 2 ports for 3 hosts
    assert not _same(mismatched, mismatched)
    pairs = "host=db1,db2 hostaddr=10.0.0.1 dbname=app"
    assert not _same(pairs, pairs)
    unknown = "host=db1,db2 dbname=app load_balance_hosts=sometimes"
    assert not _same(unknown, unknown)
    # migrate still takes one such config, used by two adapters, as one target.
    config = PostgresConfig(dsn=unknown)
    assert migration_target(config) == migration_target(PostgresConfig(dsn=unknown))


def test_migrate_takes_a_randomly_balanced_config_of_two_adapters_as_one_target(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The identity of such options is unique: deduplicated by it, one schema was migrated twice.
    clean_env.setenv("TEST_PG_DSN", "host=db1,db2 dbname=app user=app load_balance_hosts=random")
    shared = '[plugins.postgres]\ndsn = "${TEST_PG_DSN}"\nschema = "app"\n'
    sections = "".join(f'\n[{kind}]\nplugin = "postgres"\n' for kind in ("archive", "session_store"))
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["Noted."]\n\n'
        + shared
        + sections
    )
    assert len(_targets(str(path), None)) == 1
    assert len(_targets(str(path), "TEST_PG_DSN")) == 1


async def test_a_dsn_whose_identity_cannot_be_parsed_shares_no_transaction(
    app_config: PostgresConfig,
) -> None:
    store, archive = PostgresSessionStore(app_config), PostgresArchive(attrs.evolve(app_config))
    try:
        assert store.shares_transactions_with(archive)
        # Past the validator (a frozen class only guards assignment): the check must not raise,
        # and must not say "shared".
        object.__setattr__(archive.config, "dsn", "host='unterminated")
        with pytest.raises(ValueError):
            archive.config.identity()
        assert not store.shares_transactions_with(archive)
        with pytest.raises(PostgresSessionStoreError, match="nothing was written"):
            await store.commit_with_archive(
                archive, KEY, [rich_group(0, KEY, "zero")], scoped_snapshot(KEY, " next"), None, _ctx()
            )
    finally:
        await store.aclose()
        await archive.aclose()


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


async def test_a_randomly_balanced_list_of_one_server_commits_separately(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, clean_env: Any
) -> None:
    # Two spellings of the one test server: the connections work, but nothing says they land on
    # one server, so the engine must not make one joint commit for the archive and the store.
    dsn = make_conninfo(app_config.dsn, host="127.0.0.1,localhost", load_balance_hosts="random")
    config = attrs.evolve(app_config, dsn=dsn)
    archive, store = PostgresArchive(config), PostgresSessionStore(config)
    assert not store.shares_transactions_with(archive)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        for i in range(4):
            assert (await runtime.run(ANA, "s1", f"Message number {i}.")).committed
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.snapshot.boundary >= 1
        archived = await archive.read_groups(KEY, 0, 100, _ctx())
        assert [g.seq for g in archived] == list(range(stored.snapshot.boundary))
        # now() is the transaction's start: the last evicted group and the snapshot were written
        # by two transactions (archive first, then the store), not by one joint commit.
        same = admin.execute(
            f'SELECT (SELECT max(archived_at) FROM "{schema}".archive_groups) = '
            f'(SELECT saved_at FROM "{schema}".session_snapshots)'
        ).fetchone()
        assert same == (False,)
        with pytest.raises(PostgresSessionStoreError, match="same database and schema"):
            await store.commit_with_archive(
                archive, KEY, [rich_group(99, KEY, "x")], scoped_snapshot(KEY, " y"), None, _ctx()
            )
    finally:
        await runtime.aclose()
        await archive.aclose()
        await store.aclose()
