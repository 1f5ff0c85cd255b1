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
import psycopg
import pytest

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore
from agentium_postgres.errors import PostgresSessionStoreError

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
            with pytest.raises(PostgresSessionStoreError, match="not idle .INTRANS: inside a"):
                await store.save(KEY, scoped_snapshot(KEY, " lost"), None, _ctx())
            with pytest.raises(PostgresSessionStoreError, match="not idle .INTRANS: inside a"):
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
