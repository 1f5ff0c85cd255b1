"""A read whose COMMIT (the end of its read-only transaction) is not confirmed in time says what happened.

On a lent connection outside autocommit, a read's COMMIT runs in a task of its
own and the call stops waiting for it a margin before its deadline
(``plugin_api.before_cancel``). It said it "did not finish by its deadline":
the deadline had not passed, and nothing of it is unknown (it wrote nothing);
only its result is not returned. The COMMIT is held by a proxy between the
client and the real server, which stops forwarding the client's bytes once it
sees the COMMIT until the test lets them through.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest
from pg_proxy import HoldingProxy

from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


async def test_a_read_whose_commit_is_unconfirmed_says_it_stopped_in_time_and_wrote_nothing(
    pg_server: Any, app_config: PostgresConfig
) -> None:
    proxy = HoldingProxy(pg_server.port, b"COMMIT\x00")
    port = await proxy.start()
    conninfo = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=False)
    store = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(20):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20))
            proxy.armed = True  # the read's COMMIT is held
            ticket = Ticket(None, "test", 20.0)
            with pytest.raises(OperationCancelledError) as caught:
                await ticket.call("session load", lambda ctx: store.load(KEY, ctx), timeout_s=0.5)
            assert proxy.held.is_set()
            assert not ticket.abandoned, ticket.abandoned
            error = caught.value
            assert error.reason == "deadline passed", repr(error)
            text = str(error)
            # Stopped a margin before the deadline, which had not passed; nothing unknown, nothing written.
            assert "by its deadline" not in text, text
            assert "just before its deadline" in text and "nothing was written" in text, text
            proxy.armed = False
            proxy.release.set()
            stored = await store.load(KEY, OpContext.with_timeout(10))  # waits for that COMMIT first
            assert stored is not None and stored.revision == base
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()
