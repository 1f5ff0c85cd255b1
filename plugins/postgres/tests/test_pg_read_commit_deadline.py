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

import asyncio
import contextlib
from typing import Any

import anyio
import psycopg
import pytest

from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


class CommitHoldingProxy:
    """A TCP proxy to the server that, once ``armed``, holds the client's bytes from a COMMIT on."""

    def __init__(self, port: int) -> None:
        self.armed = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self._port = port
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on a free loopback port (returned)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Let everything through, then close every connection and the listener."""
        self.release.set()
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pump(reader, up_writer, True), self._pump(up_reader, writer, False))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if upstream and self.armed and b"COMMIT\x00" in data:
                    self.held.set()
                    await self.release.wait()
                dst.write(data)
                await dst.drain()
        dst.close()


async def test_a_read_whose_commit_is_unconfirmed_says_it_stopped_in_time_and_wrote_nothing(
    pg_server: Any, app_config: PostgresConfig
) -> None:
    proxy = CommitHoldingProxy(pg_server.port)
    port = await proxy.start()
    conninfo = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=False)
    store = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(20):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20))
            proxy.armed = True
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
