"""Bad input, each refused with a clear typed error that changes nothing.

A DSN with a wrong password (never echoed), an unreachable server, a schema
of another version (and none at all), a role without the needed privileges,
hostile ids (quotes, NUL, backslashes, 1 KB), oversized rows, bad options.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import psycopg
import pytest
from pg_server import APP_PASSWORD, APP_USER, PostgresServer, free_port, new_schema_name

from agentium_harness import InvalidArgumentError, InvalidIdError
from agentium_harness.plugin_api import OpContext, SessionConflictError, SessionKey
from agentium_harness.testing import plain_group, rich_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresArchiveError,
    PostgresAsyncioRequiredError,
    PostgresAuthenticationError,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresPrivilegeError,
    PostgresRecallStore,
    PostgresRowTooLargeError,
    PostgresSchemaError,
    PostgresSessionStore,
    PostgresSessionStoreError,
    PostgresUnavailableError,
    migrate,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
WRONG = "wrong-Pa55word-never-shown"


def _ctx(seconds: float = 30) -> OpContext:
    return OpContext.with_timeout(seconds)


def _rows(admin: psycopg.Connection[Any], schema: str, table: str) -> int:
    row = admin.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
    assert row is not None
    return int(row[0])


async def test_a_wrong_password_is_refused_and_never_echoed(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    for config in (
        attrs.evolve(app_config, dsn=app_config.dsn.replace(APP_PASSWORD, WRONG)),
        attrs.evolve(app_config, dsn=app_config.dsn.replace(f"password={APP_PASSWORD}", ""), password=WRONG),
    ):
        assert WRONG not in repr(config)
        archive = PostgresArchive(config)
        try:
            with pytest.raises(PostgresAuthenticationError) as caught:
                await archive.append(KEY, [plain_group(0)], _ctx())
        finally:
            await archive.aclose()
        assert WRONG not in str(caught.value) and APP_PASSWORD not in str(caught.value)
        assert "password is not shown" in str(caught.value)
        assert APP_USER in str(caught.value)
    assert _rows(admin, schema, "archive_groups") == 0


def test_an_unparsable_dsn_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError) as caught:
        PostgresConfig(dsn=f"host=x password={WRONG} 'unterminated")
    assert WRONG not in str(caught.value)
    with pytest.raises(ValueError):
        PostgresConfig(dsn="host=x", schema="Bad-Name")
    with pytest.raises(ValueError):
        PostgresConfig(dsn="host=x", schema="pg_catalog")
    with pytest.raises(ValueError):
        PostgresConfig(dsn="host=x", min_pool_size=5, max_pool_size=2)


def test_require_row_security_must_be_a_bool() -> None:
    # It was taken for its truth: 0 or "" let a role that bypasses row-level security run, and
    # "no" or "false" required row security.
    for value in ("no", "false", "", 0, 1, None):
        with pytest.raises(InvalidArgumentError, match="require_row_security must be true or false"):
            PostgresConfig(dsn="host=x", require_row_security=value)
    assert PostgresConfig(dsn="host=x", require_row_security=True).require_row_security is True


@pytest.mark.parametrize(
    "adapter", [PostgresArchive, PostgresSessionStore, PostgresRecallStore, PostgresMemoryStore]
)
def test_an_adapter_built_from_something_else_is_refused_typed(adapter: Any) -> None:
    # A dict of options, a DSN string or None was taken, and failed only at the first call (a bare
    # AttributeError); lending a pool and a connection together raised a bare ValueError.
    for bad in ({"dsn": "host=x"}, "host=x", None):
        with pytest.raises(InvalidArgumentError, match="config must be a PostgresConfig"):
            adapter(bad)
    with pytest.raises(InvalidArgumentError, match="lend a pool or a connection, not both"):
        adapter(PostgresConfig(dsn="host=x"), pool=object(), connection=object())
    # A lent pool or connection of another kind raised a bare AttributeError at the first call.
    with pytest.raises(InvalidArgumentError, match=r"pool must be a psycopg_pool\.AsyncConnectionPool"):
        adapter(PostgresConfig(dsn="host=x"), pool=object())
    with pytest.raises(InvalidArgumentError, match=r"connection must be a psycopg\.AsyncConnection"):
        adapter(PostgresConfig(dsn="host=x"), connection="host=x")


async def test_an_unreachable_server_fails_by_the_deadline_with_a_typed_error() -> None:
    config = PostgresConfig(
        dsn=f"host=127.0.0.1 port={free_port()} dbname=x user=u password={WRONG}", connect_timeout_s=1
    )
    store = PostgresSessionStore(config)
    try:
        started = time.monotonic()
        with pytest.raises(PostgresUnavailableError) as caught:
            await store.save(KEY, scoped_snapshot(KEY), None, _ctx(3))
        assert time.monotonic() - started < 3 + 5  # the deadline, plus generous slack on a loaded machine
        assert WRONG not in str(caught.value)
    finally:
        await store.aclose()


async def test_a_schema_of_another_version_is_refused_and_nothing_is_written(
    app_config: PostgresConfig, admin_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    admin.execute(f'UPDATE "{schema}".schema_meta SET version = 99')
    store = PostgresSessionStore(app_config)
    try:
        with pytest.raises(PostgresSchemaError, match=r"version 99.*upgrade agentium-postgres"):
            await store.save(KEY, scoped_snapshot(KEY), None, _ctx())
    finally:
        await store.aclose()
    assert _rows(admin, schema, "session_snapshots") == 0
    with pytest.raises(PostgresSchemaError, match="newer"):
        await migrate(admin_config)
    row = admin.execute(f'SELECT version FROM "{schema}".schema_meta').fetchone()
    assert row == (99,)


async def test_a_database_without_the_schema_says_to_migrate(app_config: PostgresConfig) -> None:
    archive = PostgresArchive(attrs.evolve(app_config, schema="never_migrated"))
    try:
        with pytest.raises(PostgresSchemaError, match="agentium postgres migrate"):
            await archive.read_groups(KEY, 0, 10, _ctx())
    finally:
        await archive.aclose()


async def test_a_role_without_the_needed_privileges_is_told_what_to_grant(
    pg_server: PostgresServer, admin: psycopg.Connection[Any]
) -> None:
    name = new_schema_name()
    await migrate(PostgresConfig(dsn=pg_server.admin_dsn(), schema=name))  # no grant
    config = PostgresConfig(dsn=pg_server.app_dsn(), schema=name, min_pool_size=0)
    archive = PostgresArchive(config)
    try:
        with pytest.raises(PostgresPrivilegeError, match="--grant"):
            await archive.append(KEY, [plain_group(0)], _ctx())
    finally:
        await archive.aclose()
    admin.execute(f'GRANT USAGE ON SCHEMA "{name}" TO {APP_USER}')
    admin.execute(f'GRANT SELECT ON "{name}".schema_meta, "{name}".archive_groups TO {APP_USER}')
    archive = PostgresArchive(config)
    try:
        with pytest.raises(PostgresPrivilegeError, match=r"INSERT on .*archive_groups"):
            await archive.append(KEY, [plain_group(0)], _ctx())
    finally:
        await archive.aclose()
    assert _rows(admin, name, "archive_groups") == 0


async def test_nul_in_an_id_is_refused_before_anything_is_written() -> None:
    for bad in ("a\x00b", "\x00", "x" * 257):
        with pytest.raises(InvalidIdError):
            SessionKey("acme", "ana", bad)


async def test_quotes_backslashes_and_one_kilobyte_ids_round_trip_and_stay_apart(
    app_config: PostgresConfig,
) -> None:
    kilobyte = "😀" * 256  # 256 characters (the id limit), 1,024 UTF-8 bytes
    assert len(kilobyte.encode()) == 1024
    ids = ["'", "''", '"', "\\", "\\'", "a'; DROP TABLE session_snapshots; --", "%s", "$1", kilobyte, "é"]
    keys = [SessionKey(t, u, s) for t in ids[:4] for u in ids[4:7] for s in (ids[7], ids[8], ids[9])]
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        for key in keys:
            await archive.append(key, [rich_group(0, key, repr(key))], _ctx())
            await store.save(key, scoped_snapshot(key, f" {key!r}"), None, _ctx())
        for key in keys:
            [group] = await archive.read_groups(key, 0, 5, _ctx())
            assert group == rich_group(0, key, repr(key))
            stored = await store.load(key, _ctx())
            assert stored is not None and stored.snapshot == scoped_snapshot(key, f" {key!r}")
        listed = await store.list_sessions("'", "\\'", 10, _ctx())
        assert listed == sorted([ids[7], ids[8], ids[9]])
    finally:
        await archive.aclose()
        await store.aclose()


async def test_rows_over_max_row_bytes_are_refused_before_any_statement(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    small = attrs.evolve(app_config, max_row_bytes=1024)
    archive, store = PostgresArchive(small), PostgresSessionStore(small)
    try:
        with pytest.raises(PostgresRowTooLargeError):
            await archive.append(KEY, [plain_group(0), plain_group(1, "x" * 2000)], _ctx())
        with pytest.raises(PostgresRowTooLargeError):
            await store.save(KEY, scoped_snapshot(KEY, "y" * 2000), None, _ctx())
    finally:
        await archive.aclose()
        await store.aclose()
    assert _rows(admin, schema, "archive_groups") == 0
    assert _rows(admin, schema, "session_snapshots") == 0
    # A row stored under a larger bound is refused on read, not transferred.
    big = PostgresArchive(app_config)
    try:
        await big.append(KEY, [plain_group(0, "z" * 2000)], _ctx())
    finally:
        await big.aclose()
    archive = PostgresArchive(small)
    try:
        with pytest.raises(PostgresRowTooLargeError):
            await archive.read_groups(KEY, 0, 10, _ctx())
    finally:
        await archive.aclose()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_under_trio_the_adapters_refuse_with_a_clear_error(
    anyio_backend: str, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    archive = PostgresArchive(app_config)
    try:
        with pytest.raises(PostgresAsyncioRequiredError, match="asyncio"):
            await archive.append(KEY, [plain_group(0)], _ctx())
    finally:
        await archive.aclose()
    assert _rows(admin, schema, "archive_groups") == 0


@pytest.mark.parametrize(
    "grantee", ["public", "PUBLIC", "Public", "current_user", "session_user", "pg_read_all_data", ""]
)
async def test_a_grantee_that_is_every_role_or_a_predefined_one_is_refused_and_nothing_is_created(
    pg_server: PostgresServer, admin: psycopg.Connection[Any], grantee: str
) -> None:
    # GRANT ... TO "public" grants to every role, present and future: any role could then set the
    # tenant setting and read or delete every tenant's rows.
    name = new_schema_name()
    with pytest.raises(InvalidArgumentError, match=r"refusing to grant|role name"):
        await migrate(PostgresConfig(dsn=pg_server.admin_dsn(), schema=name), grant_to=[grantee])
    found = admin.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
    assert found == (0,)


@pytest.mark.parametrize(
    "grant_to",
    [[f"{APP_USER}\x00x"], ["app\ud800"], ["r" * 64], APP_USER, None, 5, (r for r in [APP_USER])],
)
async def test_a_grantee_postgresql_would_read_as_another_role_is_refused_and_nothing_is_created(
    pg_server: PostgresServer, admin: psycopg.Connection[Any], grant_to: Any
) -> None:
    # libpq's identifier escaping stops at a NUL: "agentium_app\x00x" was granted as agentium_app.
    # PostgreSQL cuts names past 63 bytes; a lone surrogate escaped as a bare UnicodeEncodeError;
    # a string was iterated, each character taken for a role; None or a number raised a bare
    # TypeError, and a generator was used up by the check, so nothing was granted.
    name = new_schema_name()
    with pytest.raises(InvalidArgumentError):
        await migrate(PostgresConfig(dsn=pg_server.admin_dsn(), schema=name), grant_to=grant_to)
    found = admin.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
    assert found == (0,)


async def test_migrate_refuses_a_connection_that_is_not_one_and_nothing_is_created(
    pg_server: PostgresServer, admin: psycopg.Connection[Any]
) -> None:
    # A DSN string (or anything else) where a connection belongs failed with a bare AttributeError.
    name = new_schema_name()
    with pytest.raises(InvalidArgumentError, match="connection must be"):
        await migrate(
            PostgresConfig(dsn=pg_server.admin_dsn(), schema=name), connection=pg_server.admin_dsn()
        )  # type: ignore[arg-type]
    found = admin.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
    assert found == (0,)


async def test_listing_refuses_ids_no_key_could_hold_before_anything_is_sent(
    app_config: PostgresConfig,
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        for tenant, user, after in (
            ("\ud800", "ana", None),
            ("acme", "\ud800", None),
            ("acme", "ana", "\x00"),
        ):
            with pytest.raises(InvalidIdError):
                await store.list_sessions(tenant, user, 10, _ctx(), after=after)
    finally:
        await store.aclose()


async def test_archive_and_session_store_arguments_of_the_wrong_type_are_refused_and_change_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # A string expected_revision "1" was bound as text and matched revision 1: the save committed.
    # True was reported as a damaged schema; None, a str key or seq crashed with a bare
    # AttributeError or TypeError. Each is InvalidArgumentError now, before any statement.
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        await archive.append(KEY, [rich_group(0, KEY, "zero")], _ctx())
        revision = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        snapshot = scoped_snapshot(KEY, " next")
        before = [_rows(admin, schema, t) for t in ("archive_groups", "session_snapshots")]
        stored = admin.execute(f'SELECT revision, data FROM "{schema}".session_snapshots').fetchall()
        refused: list[Callable[[], Awaitable[object]]] = [
            lambda: store.save(KEY, snapshot, str(revision), _ctx()),  # type: ignore[arg-type]
            lambda: store.save(KEY, snapshot, True, _ctx()),  # type: ignore[arg-type]
            lambda: store.save(KEY, snapshot, 1.0, _ctx()),  # type: ignore[arg-type]
            lambda: store.save(KEY, None, revision, _ctx()),  # type: ignore[arg-type]
            lambda: store.save("acme/ana/s1", snapshot, revision, _ctx()),  # type: ignore[arg-type]
            lambda: store.commit_with_archive(archive, KEY, [], snapshot, "1", _ctx()),  # type: ignore[arg-type]
            lambda: store.commit_with_archive(archive, KEY, None, snapshot, revision, _ctx()),  # type: ignore[arg-type]
            lambda: store.load("acme/ana/s1", _ctx()),  # type: ignore[arg-type]
            lambda: store.load(KEY, None),  # type: ignore[arg-type]
            lambda: store.list_sessions("acme", "ana", "5", _ctx()),  # type: ignore[arg-type]
            lambda: archive.append(KEY, None, _ctx()),  # type: ignore[arg-type]
            lambda: archive.append(KEY, ["group"], _ctx()),  # type: ignore[list-item]
            lambda: archive.append("acme/ana/s1", [rich_group(1, KEY, "one")], _ctx()),  # type: ignore[arg-type]
            lambda: archive.read_groups(KEY, "0", 5, _ctx()),  # type: ignore[arg-type]
            lambda: archive.read_groups(KEY, 0, None, _ctx()),  # type: ignore[arg-type]
            lambda: archive.read_groups(KEY, 0, True, _ctx()),
            lambda: archive.read_groups("acme/ana/s1", 0, 5, _ctx()),  # type: ignore[arg-type]
        ]
        for call in refused:
            with pytest.raises(InvalidArgumentError):
                await call()
        # A revision no row holds is a conflict, however large; counts beyond any table are bounds.
        with pytest.raises(SessionConflictError):
            await store.save(KEY, snapshot, 10**30, _ctx())
        assert len(await archive.read_groups(KEY, 0, 10**30, _ctx())) == 1
        assert await store.list_sessions("acme", "ana", 10**30, _ctx()) == ["s1"]
        assert [_rows(admin, schema, t) for t in ("archive_groups", "session_snapshots")] == before
        assert admin.execute(f'SELECT revision, data FROM "{schema}".session_snapshots').fetchall() == stored
    finally:
        await archive.aclose()
        await store.aclose()


async def test_ids_too_long_for_the_key_index_are_refused_as_such_not_as_a_lost_connection(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # 256 characters of the supplementary planes are valid ids, 3 KB each as key segments: three
    # of them pass the btree's 2,704-byte row limit. psycopg files "program limit exceeded" under
    # OperationalError, so the refusal read "the connection failed ... nothing was acknowledged"
    # (PostgresUnavailableError) and dropped the adapter's pool; it is the adapter's own error now.
    rnd = random.Random(7)

    def long_id() -> str:
        return "".join(chr(rnd.randrange(0x10000, 0x10FFFF)) for _ in range(256))

    key = SessionKey(long_id(), long_id(), long_id())
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        for call, family in (
            (lambda: archive.append(key, [rich_group(0, key, "zero")], _ctx()), PostgresArchiveError),
            (lambda: store.save(key, scoped_snapshot(key, " x"), None, _ctx()), PostgresSessionStoreError),
        ):
            with pytest.raises(family, match="cannot hold this value") as caught:
                await call()
            assert not isinstance(caught.value, PostgresUnavailableError)
            assert caught.value.sqlstate == "54000"
        assert _rows(admin, schema, "archive_groups") == _rows(admin, schema, "session_snapshots") == 0
        assert await store.save(KEY, scoped_snapshot(KEY, " fine"), None, _ctx()) == 1
    finally:
        await archive.aclose()
        await store.aclose()


@pytest.mark.parametrize(
    "options",
    [
        {"dsn": "host=x \ud800"},
        {"dsn": "host=x", "password": "\ud800"},
        {"dsn": "host=x", "min_pool_size": 5, "max_pool_size": 2},
        {"dsn": "host=x", "schema": "Bad-Name"},
        {"dsn": "host=x", "min_similarity": 2},
        {"dsn": f"host=x password={WRONG} 'unterminated"},
        {"dsn": ""},
    ],
)
def test_bad_options_are_invalid_argument_errors_never_bare_ones(options: dict[str, Any]) -> None:
    # The options' own checks raised bare ValueError (the core's bounded counts already raised
    # InvalidArgumentError), and a lone surrogate in the DSN or password escaped as a bare
    # UnicodeEncodeError, from the constructor or only later from conninfo().
    with pytest.raises(InvalidArgumentError) as caught:
        PostgresConfig(**options).conninfo()
    assert WRONG not in str(caught.value)


async def test_a_missing_context_is_refused_typed_by_every_adapter(app_config: PostgresConfig) -> None:
    # health, erase and the recall store's open read ctx unchecked: None raised a bare AttributeError.
    from agentium_harness import EraseTarget
    from agentium_harness.plugin_api import RecallLimits, Scope

    adapters = [
        PostgresArchive(app_config),
        PostgresSessionStore(app_config),
        PostgresRecallStore(app_config),
        PostgresMemoryStore(app_config),
    ]
    try:
        for adapter in adapters:
            with pytest.raises(InvalidArgumentError):
                await adapter.health(None)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                await adapter.erase(EraseTarget("acme"), None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await adapters[2].open(Scope("acme", "ana", "s1"), RecallLimits(), None)  # type: ignore[arg-type, union-attr]
    finally:
        for adapter in adapters:
            await adapter.aclose()
