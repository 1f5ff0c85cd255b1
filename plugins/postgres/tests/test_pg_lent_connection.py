"""A lent ``AsyncConnection``: each call commits on its own, or is refused with nothing sent.

psycopg nests a transaction begun on a connection already inside one as a
savepoint. A host that lent a connection after using it itself (psycopg's
default is not autocommit, so any statement leaves a transaction open) had
every write reported committed, with a revision, while only a savepoint was
released; the host's rollback, or closing the connection, then dropped it.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import psycopg
import pytest
from pg_server import new_schema_name

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_postgres import SCHEMA_VERSION, PostgresArchive, PostgresConfig, PostgresSessionStore, migrate
from agentium_postgres.errors import PostgresError, PostgresSessionStoreError

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def _snapshots(admin: psycopg.Connection[Any], schema: str) -> int:
    row = admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("autocommit", [False, True])
async def test_a_lent_connection_inside_the_hosts_transaction_is_refused_and_nothing_is_written(
    pg_server: Any, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, autocommit: bool
) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=autocommit)
    store = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(30):
            # The host's own statement: psycopg opens a transaction (or the host began one).
            await conn.execute("SELECT 1" if not autocommit else "BEGIN")
            with pytest.raises(PostgresSessionStoreError, match=r"not idle \(INTRANS: inside a"):
                await store.save(KEY, scoped_snapshot(KEY, " lost"), None, _ctx())
            with pytest.raises(PostgresSessionStoreError, match=r"not idle \(INTRANS: inside a"):
                await store.load(KEY, _ctx())
            # The host's transaction is left as it was, and nothing reached the table.
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            if autocommit:
                await conn.execute("ROLLBACK")
            else:
                await conn.rollback()
            assert _snapshots(admin, schema) == 0
            # Idle again: the call commits on its own, visible to every other connection at once.
            revision = await store.save(KEY, scoped_snapshot(KEY, " kept"), None, _ctx())
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert _snapshots(admin, schema) == 1
            stored = await store.load(KEY, _ctx())
            assert stored is not None and stored.revision == revision
    finally:
        await store.aclose()
        await conn.close()
    assert _snapshots(admin, schema) == 1  # closing the lent connection took nothing back


async def test_one_connection_lent_to_two_adapters_serves_their_concurrent_calls_one_at_a_time(
    pg_server: Any, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # The README lends one connection to all four adapters. Each adapter held a lock of its own,
    # so the archive's call and the session store's ran at once on the connection: their
    # transactions interleaved in one pipeline, the connection broke ("the connection is closed")
    # and both calls, and every later one, failed with PostgresUnavailableError.
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    archive = PostgresArchive(app_config, connection=conn)
    other = SessionKey("globex", "bob", "t1")
    try:
        with anyio.fail_after(30):
            revision = await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
            await archive.append(other, [plain_group(0, "b zero")], _ctx())
            results: list[object] = []

            async def save(n: int) -> None:
                results.append(await store.save(KEY, scoped_snapshot(KEY, f" a{n}"), revision + n, _ctx()))

            async def append(n: int) -> None:
                await archive.append(other, [plain_group(n + 1, f"b {n}")], _ctx())
                results.append([g.seq for g in await archive.read_groups(other, 0, 100, _ctx())])

            for n in range(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(save, n)
                    tg.start_soon(append, n)
        assert [r for r in results if isinstance(r, int)] == [revision + n + 1 for n in range(20)]
        assert [r for r in results if isinstance(r, list)] == [list(range(n + 2)) for n in range(20)]
        row = admin.execute(f'SELECT revision FROM "{schema}".session_snapshots').fetchone()
        assert row == (revision + 20,)
    finally:
        await store.aclose()
        await archive.aclose()
        await conn.close()


async def test_migrate_on_a_lent_connection_inside_the_hosts_transaction_is_refused(
    pg_server: Any, admin: psycopg.Connection[Any]
) -> None:
    # The migration's transaction was a savepoint of the host's: the report said every step was
    # applied, and closing the connection took the whole schema back.
    name = new_schema_name()
    config = PostgresConfig(dsn=pg_server.admin_dsn(), schema=name)
    conn = await psycopg.AsyncConnection.connect(pg_server.admin_dsn())
    try:
        with anyio.fail_after(30):
            await conn.execute("SELECT 1")
            with pytest.raises(PostgresError, match=r"not idle \(INTRANS"):
                await migrate(config, connection=conn)
            await conn.rollback()
            report = await migrate(config, connection=conn)
            assert report.applied == tuple(range(1, SCHEMA_VERSION + 1))
    finally:
        await conn.close()
    try:
        row = admin.execute(f'SELECT version FROM "{name}".schema_meta').fetchone()
        assert row == (SCHEMA_VERSION,)  # committed: closing the lent connection took nothing back
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.mark.parametrize("head_start", range(4))
async def test_migrate_and_an_adapter_on_one_lent_connection_take_turns(
    pg_server: Any, admin_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, head_start: int
) -> None:
    # migrate(connection=...) did not take the connection's lock the adapters share: a save that
    # had passed its idle check ran its statements inside the migration's transaction and the
    # migration inside the save's; both failed ("transaction commit at the wrong nesting level")
    # and the connection was left INTRANS, so every later call on it was refused. Otherwise the
    # one that came second was refused as if the host had left a transaction open.
    conn = await psycopg.AsyncConnection.connect(pg_server.admin_dsn())
    store = PostgresSessionStore(admin_config, connection=conn)
    failures: list[BaseException] = []

    async def save() -> None:
        try:
            await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())
        except Exception as exc:
            failures.append(exc)

    async def migrate_too() -> None:
        for _ in range(head_start):  # the save's call gets this far before the migration begins
            await anyio.lowlevel.checkpoint()
        try:
            await migrate(admin_config, connection=conn)
        except Exception as exc:
            failures.append(exc)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(save)
                tg.start_soon(migrate_too)
            assert failures == []
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert _snapshots(admin, schema) == 1
            stored = await store.load(KEY, _ctx())
            assert stored is not None
    finally:
        await store.aclose()
        await conn.close()
