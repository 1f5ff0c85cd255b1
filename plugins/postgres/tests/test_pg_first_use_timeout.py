"""The first-use check (schema version, privileges) runs under ``statement_timeout_s`` like every statement.

``statement_timeout_s`` is the ceiling of every statement (README), but a
link's first call read ``schema_meta`` on a connection with no statement
timeout at all: while another session held a lock on the table (an owner's
``LOCK TABLE``, ``ALTER TABLE`` or ``VACUUM FULL`` run over the schema, as the
README's Erasure section advises after an erasure), a call with no deadline
of its own waited for as long as the lock was held. It now stops at the
ceiling with ``PostgresStatementTimeoutError``, and a call with a deadline
by its deadline (the client's cancel scope, as before); nothing is written.
"""

from __future__ import annotations

import anyio
import attrs
import psycopg
import pytest
from pg_server import PostgresServer

from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionKey
from agentium_postgres import PostgresConfig, PostgresSessionStore, PostgresStatementTimeoutError

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


async def test_a_first_call_blocked_on_a_locked_schema_meta_stops_at_the_statement_ceiling(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    config = attrs.evolve(app_config, statement_timeout_s=1.0)
    with psycopg.connect(pg_server.admin_dsn()) as holder:
        holder.execute(f'LOCK TABLE "{schema}".schema_meta IN ACCESS EXCLUSIVE MODE')
        for ctx, error in (
            (OpContext.unbounded(), PostgresStatementTimeoutError),  # the ceiling: the server cancels it
            (OpContext.with_timeout(1.0), OperationCancelledError),  # the call's own deadline
        ):
            store = PostgresSessionStore(config)
            try:
                # Generous outer bound: only a call that ignores both bounds reaches it.
                with anyio.fail_after(30):
                    with pytest.raises(error):
                        await store.load(KEY, ctx)
            finally:
                with anyio.fail_after(30):
                    await store.aclose()
        holder.rollback()
    store = PostgresSessionStore(config)
    try:  # once the lock is gone, the first use passes
        assert await store.load(KEY, OpContext.with_timeout(30)) is None
    finally:
        await store.aclose()
