"""A cancel request still on its way when the call's statement ended never stops a later statement.

``calls.ServerStop`` sends the server a cancel request a margin before the call's deadline. The
request cancels whatever the connection runs when it reaches the server: one that arrived after
the call's statement ended (a slow network to the listener) stopped the next statement on that
connection, the host's own on a lent connection or another call's on a pooled one. The call waited
for it only until its margin (tens of milliseconds) and then let the connection go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import psycopg
import pytest
from pg_proxy import HoldingProxy

from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore, PostgresUnavailableError
from agentium_postgres.calls import ServerStop

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


def slow_listener(config: PostgresConfig) -> PostgresConfig:
    """``config`` waiting 3 s for a cancel request: these requests are slow (1 s), not lost."""
    return attrs.evolve(config, cancel_timeout_s=3.0)


async def held_past_its_request(
    proxy: HoldingProxy, cancel_delay: float, call: Callable[[], Awaitable[object]]
) -> OperationCancelledError | None:
    """Run ``call`` (a 0.3 s call) with its statement held past its cancel request, then answered.

    The request is sent 0.25 s into the call; the held statement is answered at 0.28 s, and the
    request reaches the server ``cancel_delay`` later. Returns the call's ``OperationCancelledError``
    (the deadline's), or ``None`` when it returned.
    """
    proxy.cancel_delay = cancel_delay
    proxy.armed = True
    caught: OperationCancelledError | None = None

    async def answer_late() -> None:
        await proxy.held.wait()
        await asyncio.sleep(0.28)
        proxy.armed = False
        proxy.release.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_late)
        try:
            await call()
        except OperationCancelledError as exc:
            caught = exc
    assert proxy.held.is_set()
    return caught


async def test_a_late_cancel_request_does_not_stop_the_hosts_next_statement_on_a_lent_connection(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The load's statements are held on their way past the moment its cancel request is sent
    # (0.25 s into a 0.3 s call), then answered; the request itself reaches the server 0.3 s later.
    proxy = HoldingProxy(pg_server.port, b"SELECT revision")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(10):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use checked
            await held_past_its_request(proxy, 0.3, lambda: store.load(KEY, OpContext.with_timeout(0.3)))
            # The host's own statement, on its connection, right after the call: not cancelled.
            cur = await conn.execute("SELECT pg_sleep(0.4), 7")
            assert await cur.fetchone() == ("", 7)
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()


async def test_a_late_cancel_request_before_a_writes_commit_stops_the_write_and_spares_the_next_statement(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The save's UPDATE is held past its cancel request (0.25 s into a 0.3 s call), then answered;
    # the request reaches the server 0.3 s later. Its COMMIT either went out ahead of the request
    # (the host's next statement was cancelled) or waited behind it past the deadline (reported
    # "outcome unknown", then committed late): the write is now stopped, nothing committed.
    proxy = HoldingProxy(pg_server.port, b"UPDATE ")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(10):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(5))
            caught = await held_past_its_request(
                proxy,
                0.3,
                lambda: store.save(KEY, scoped_snapshot(KEY, " late"), base, OpContext.with_timeout(0.3)),
            )
            assert caught is not None, "the late write was not stopped"
            assert caught.reason == "deadline passed", repr(caught)
            assert "nothing was committed" in str(caught), repr(caught)
            cur = await conn.execute("SELECT pg_sleep(0.4), 7")  # the host's: not cancelled
            assert await cur.fetchone() == ("", 7)
            stored = await store.load(KEY, OpContext.with_timeout(5))
            assert stored is not None and stored.revision == base
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()


async def test_a_late_cancel_request_does_not_stop_the_next_calls_statement_on_a_pooled_connection(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # As on a lent connection: the pool's one connection goes to the next call, a save whose UPDATE
    # waits for a row lock (held until 0.5 s after the load) while the load's request arrives.
    proxy = HoldingProxy(pg_server.port, b"SELECT revision")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1))
    try:
        with anyio.fail_after(10), psycopg.connect(pg_server.admin_dsn()) as holder:
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(5))
            holder.execute(
                f'SELECT 1 FROM "{schema}".session_snapshots WHERE tenant_key = %s AND user_key = %s '
                "AND session_key = %s FOR UPDATE",
                KEY.key_segments(),
            )
            await held_past_its_request(proxy, 0.3, lambda: store.load(KEY, OpContext.with_timeout(0.3)))

            async def unlock_later() -> None:
                await asyncio.sleep(0.5)
                holder.rollback()

            async with anyio.create_task_group() as tg:
                tg.start_soon(unlock_later)
                saved = await store.save(KEY, scoped_snapshot(KEY, " next"), base, OpContext.with_timeout(5))
            assert saved == base + 1
    finally:
        await store.aclose()
        await proxy.close()


async def test_the_next_call_on_a_lent_connection_fenced_by_a_late_request_ends_in_time(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The load's request, delayed 1 s, fences the host's connection. The next call (0.3 s) waited
    # for the fence as it began its pipeline, until its client-side cut-off 0.25 s past its
    # deadline (or the engine's cancellation at it). It now waits only until its margin, and ends
    # with its own error, having sent nothing.
    config = slow_listener(app_config)
    proxy = HoldingProxy(pg_server.port, b"SELECT revision")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    store = PostgresSessionStore(config, connection=conn)
    try:
        with anyio.fail_after(10):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use checked
            await held_past_its_request(proxy, 1.0, lambda: store.load(KEY, OpContext.with_timeout(0.3)))
            began = anyio.current_time()
            with pytest.raises(OperationCancelledError) as caught:
                await store.load(KEY, OpContext.with_timeout(0.3))
            took = anyio.current_time() - began
            assert took < 0.3, took
            assert caught.value.reason == "deadline passed", repr(caught.value)
            assert "nothing was sent" in str(caught.value), repr(caught.value)
            proxy.cancel_delay = 0
            cur = await conn.execute("SELECT 7")  # the host's, once the request was handled
            assert await cur.fetchone() == (7,)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()


async def test_a_lent_pool_that_checks_connections_does_not_hand_out_one_still_fenced(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The host's pool checks each connection it hands out (a statement: it takes the connection's
    # lock). Returned while its load's request (delayed 1 s) still fenced it, the connection was
    # handed to the next call, whose check waited for the fence past that call's deadline. It now
    # goes back once the fence cleared: the next call's wait for a connection ends at its margin.
    from psycopg_pool import AsyncConnectionPool

    config = slow_listener(app_config)
    proxy = HoldingProxy(pg_server.port, b"SELECT revision")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=0,
        max_size=1,
        open=False,
        kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection,
    )
    await pool.open()
    store = PostgresSessionStore(config, pool=pool)
    try:
        with anyio.fail_after(10):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use checked
            await held_past_its_request(proxy, 1.0, lambda: store.load(KEY, OpContext.with_timeout(0.3)))
            began = anyio.current_time()
            with pytest.raises(PostgresUnavailableError) as caught:  # none available in time
                await store.load(KEY, OpContext.with_timeout(0.3))
            took = anyio.current_time() - began
            assert took < 0.3, (took, caught.value)
            proxy.cancel_delay = 0
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # back once fenced off
    finally:
        await store.aclose()
        await pool.close()
        await proxy.close()


async def test_a_cancel_request_lost_on_its_way_holds_the_hosts_next_statement_only_its_own_bound(
    app_config: PostgresConfig, pg_server: Any, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The load's cancel request goes to a black-holed listener (never answered). Its fence held the
    # host's connection until the request's own wait ended, 10 s. It now gives up after
    # cancel_timeout_s (0.3 s here) and closes the connection, as the request may still arrive:
    # the host's next statement waits that long at most and fails at once (never stopped later).
    config = attrs.evolve(app_config, cancel_timeout_s=0.3)
    proxy = HoldingProxy(pg_server.port, b"SELECT revision")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    store = PostgresSessionStore(config, connection=conn)
    try:
        with anyio.fail_after(3):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use checked
            proxy.drop_cancels = True
            await held_past_its_request(proxy, 0.0, lambda: store.load(KEY, OpContext.with_timeout(0.3)))
            began = anyio.current_time()
            with pytest.raises(psycopg.OperationalError, match="closed"):
                await conn.execute("SELECT 7")  # the host's
            took = anyio.current_time() - began
        assert took < 0.6, took  # sent 0.25 s into the 0.3 s call, given up 0.3 s later (10 s before)
        assert conn.closed
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("cancel request was not confirmed within 0.3s" in m for m in warned), warned
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()


async def cancelled_in_disarm(
    proxy: HoldingProxy, store: PostgresSessionStore, schema: str, admin: psycopg.Connection[Any], patch: Any
) -> None:
    """A save refused by the server while its cancel request is held, natively cancelled in disarm's wait.

    The request (sent 0.25 s into the 0.3 s call) is held on its way, then the write reaches the
    server, which refuses it (a trigger): the rollback first waits for the request (disarm), and
    ``task.cancel()`` lands at the call's next step, inside that wait. The request stays held until
    the call ended. Raises unless the call ended with the ``CancelledError``.
    """
    admin.execute(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql '
        "AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
    )
    admin.execute(
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".session_snapshots '
        f'FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
    )
    disarming = asyncio.Event()
    disarm = ServerStop.disarm

    async def noted(stop: ServerStop, *, fence: bool = True, commit: bool = False) -> None:
        if not fence:  # around()'s, before the rollback: the request is still held, so it waits
            disarming.set()
        await disarm(stop, fence=fence, commit=commit)

    patch.setattr(ServerStop, "disarm", noted)
    assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use checked
    proxy.armed = proxy.hold_cancels = True
    save = asyncio.create_task(store.save(KEY, scoped_snapshot(KEY, " x"), None, OpContext.with_timeout(0.3)))
    await proxy.cancel_held.wait()  # the write is held, its request held on its way
    proxy.armed = False
    proxy.release.set()  # the write reaches the server, which refuses it
    await disarming.wait()
    save.cancel()  # at the call's next step: inside disarm's wait for the request
    with pytest.raises(asyncio.CancelledError):
        await save


@pytest.mark.parametrize("autocommit", [True, False], ids=["pipeline", "managed"])
async def test_a_native_cancel_while_a_failed_call_waits_for_its_request_still_rolls_it_back(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    autocommit: bool,
) -> None:
    # A host's Task.cancel() landing while a failed call's rollback waited for its cancel request
    # on its way ended the call there, its rollback never begun ("coroutine was never awaited"),
    # the host's connection left in the failed transaction: the host's next statement, and every
    # later call ("the lent connection is not idle"), refused. It is now raised once the rollback ended.
    proxy = HoldingProxy(pg_server.port, b"WITH w AS")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit)
    store = PostgresSessionStore(slow_listener(app_config), connection=conn)
    try:
        with anyio.fail_after(5):
            await cancelled_in_disarm(proxy, store, schema, admin, monkeypatch)
            status = conn.info.transaction_status
            assert status == psycopg.pq.TransactionStatus.IDLE, f"left {status.name}: not rolled back"
            proxy.cancel_release.set()  # reaches the server between statements: stops nothing
            cur = await conn.execute("SELECT 7")  # the host's, once the request was handled
            assert await cur.fetchone() == (7,)
            if not autocommit:
                await conn.rollback()  # the host ends its own transaction
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # the next call too
    finally:
        await store.aclose()
        await conn.close()
        await proxy.close()


async def test_a_native_cancel_while_a_failed_pooled_call_waits_for_its_request_still_rolls_it_back(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As on a lent connection: the rollback was skipped and the connection went back to its pool in
    # its failed transaction, still in pipeline mode (the pool rolled it back, with a WARNING).
    proxy = HoldingProxy(pg_server.port, b"WITH w AS")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    store = PostgresSessionStore(attrs.evolve(slow_listener(app_config), dsn=dsn, max_pool_size=1))
    try:
        with anyio.fail_after(5), caplog.at_level(logging.WARNING):
            await cancelled_in_disarm(proxy, store, schema, admin, monkeypatch)
            proxy.cancel_release.set()
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # its one connection, next
        returned = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg.pool")]
        assert not returned, returned
    finally:
        await store.aclose()
        await proxy.close()
