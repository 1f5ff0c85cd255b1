"""A statement still running at its call's deadline, under the engine: a timeout, the connection kept.

The engine cancels an adapter call at its deadline and abandons it when it has
not unwound 0.1 s later. A store's statement (an UPDATE waiting for a row
lock) was timed by the server to that very deadline, so the engine's
cancellation came first: psycopg began cancelling the statement on the
server, was interrupted again by it and closed the connection ("query
cancellation interrupted"). A pooled connection was replaced (a new
connection for the next call, inside its own deadline); a lent one, the
host's, stayed closed and every later call failed. When the server's cancel
came first, the rollback ran into the engine's grace. The server now stops the
statement a margin short of the deadline (``plugin_api.before_cancel``): the
call rolls back on a connection still in sync and ends with the store's own
error, a timeout (``reason`` "deadline passed"), before the engine cancels it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import attrs
import psycopg
import pytest
from pg_proxy import HoldingProxy
from pg_server import APP_USER

from agentium_harness import (
    CommitState,
    Message,
    OperationTimeoutError,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresSessionStore,
    PostgresStatementTimeoutError,
    PostgresUnavailableError,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
ANA = VerifiedIdentity("acme", "ana", "test-auth")


@contextmanager
def holding_snapshot_lock(dsn: str, schema: str, key: SessionKey) -> Iterator[None]:
    """A superuser transaction holding the row lock of ``key``'s snapshot until the block ends."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            f'SELECT 1 FROM "{schema}".session_snapshots '
            "WHERE tenant_key = %s AND user_key = %s AND session_key = %s FOR UPDATE",
            key.key_segments(),
        )
        try:
            yield
        finally:
            conn.rollback()


def app_backends(admin: psycopg.Connection[Any], application_name: str) -> set[int]:
    """The application role's server processes named ``application_name`` (one per open connection).

    Only those of one test's store: a connection of an earlier test (same role, same server) may
    still be closing while this one counts, and gone by its next count.
    """
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE usename = %s AND application_name = %s",
        (APP_USER, application_name),
    ).fetchall()
    return {int(r[0]) for r in rows}


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged (any logger): psycopg's own WARNINGs and the engine's too."""
    return [r.getMessage() for r in caplog.records]


async def test_a_statement_still_running_at_the_deadline_ends_with_the_stores_timeout_on_a_kept_connection(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    admin: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    archive = PostgresArchive(app_config)
    name = f"kept-{uuid.uuid4().hex[:12]}"  # counts this store's backends only (see app_backends)
    store_dsn = psycopg.conninfo.make_conninfo(app_config.dsn, application_name=name)
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=store_dsn, max_pool_size=1))
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=8), op_timeout_s=0.4),
        owned=(archive, store),
    )
    async with runtime:
        with anyio.fail_after(20):
            first = await runtime.append(ANA, "s1", [Message(Role.USER, "first")])
            kept = 0
            with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
                for i in range(3):  # the store's UPDATE waits for the lock past its deadline
                    assert await store.load(KEY, OpContext.with_timeout(5)) is not None  # pool settled
                    before = app_backends(admin, name)
                    assert len(before) == 1, before  # its one pooled connection
                    caplog.clear()
                    with caplog.at_level(logging.WARNING), pytest.raises(OperationCancelledError) as caught:
                        await runtime.append(ANA, "s1", [Message(Role.USER, f"blocked {i}")])
                    error = caught.value
                    # A timeout (the engine read the session back), nothing committed, never abandoned.
                    assert error.reason == "deadline passed", repr(error)
                    assert error.commit_state is CommitState.NOT_COMMITTED, repr(error)
                    assert not getattr(error, "abandoned", False), repr(error)
                    assert not [m for m in said(caplog) if "abandoned" in m]
                    # On a machine too loaded for the margin the engine's cancellation may still come
                    # first (its OperationTimeoutError; psycopg closes the connection): again, then.
                    if isinstance(error, OperationTimeoutError):
                        continue
                    # The store's own stop: its one pooled connection rolled back and kept, not replaced.
                    assert app_backends(admin, name) == before
                    assert not [m for m in said(caplog) if "cancellation interrupted" in m]
                    kept += 1
                    if kept == 2:
                        break
            assert kept, "the engine's cancellation came first every time"
            after = await runtime.append(ANA, "s1", [Message(Role.USER, "after")])
            assert after.snapshot_revision == first.snapshot_revision + 1


async def test_a_statement_still_running_at_the_deadline_leaves_a_lent_connection_open(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server stops the statement a margin before the deadline: the host's lent connection stays open.

    Before, the statement's timeout was the whole time left, the engine's cancellation came first and
    psycopg closed the host's connection ("query cancellation interrupted"). The margin is 50 ms: on an
    overloaded machine the engine may still win a round (a typed timeout, the connection then closed,
    never abandoned), so up to four rounds run, each on a connection of its own, and one the store
    stopped must keep its connection open and usable.
    """
    kept = 0
    for _ in range(4):
        conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
        store = PostgresSessionStore(app_config, connection=conn)
        try:
            with anyio.fail_after(20):
                stored = await store.load(KEY, OpContext.with_timeout(5))
                base = stored.revision if stored is not None else None
                if base is None:
                    base = await store.save(
                        KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20)
                    )
                with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
                    ticket = Ticket(None, "test", 20.0)
                    with caplog.at_level(logging.WARNING), pytest.raises(OperationCancelledError) as caught:
                        await ticket.call(
                            "session save",
                            lambda ctx, store=store, base=base: store.save(
                                KEY, scoped_snapshot(KEY, " late"), base, ctx
                            ),
                            timeout_s=0.25,
                        )
                    assert not ticket.abandoned, ticket.abandoned
                    if caught.value.reason != "deadline passed" or conn.closed:
                        continue  # the engine's cancellation came first on an overloaded machine
                assert not [m for m in said(caplog) if "cancellation interrupted" in m], said(caplog)
                stored = await store.load(KEY, OpContext.with_timeout(5))
                assert stored is not None and stored.revision == base  # nothing of the late save
                base = await store.save(KEY, scoped_snapshot(KEY, " next"), base, OpContext.with_timeout(5))
                assert base and not conn.closed
                kept += 1
                if kept == 2:
                    break
        finally:
            await store.aclose()
            await conn.close()
    assert kept, "the engine's cancellation came first every time: the host's connection was closed"


async def test_a_wait_for_a_pooled_connection_ends_with_the_stores_error_before_the_deadline(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The pool's one connection is held by a save waiting for a lock; a second call waits for the
    # pool until its deadline: the pool's "none became available in time", not the engine's
    # cancellation at the same instant.
    store = PostgresSessionStore(attrs.evolve(app_config, max_pool_size=1))
    try:
        with anyio.fail_after(20):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20))
            with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
                async with anyio.create_task_group() as tg:

                    async def hold() -> None:
                        with pytest.raises(OperationCancelledError):
                            await store.save(
                                KEY, scoped_snapshot(KEY, " x"), base, OpContext.with_timeout(0.9)
                            )

                    tg.start_soon(hold)
                    await anyio.sleep(0.1)
                    for _ in range(2):
                        ticket = Ticket(None, "test", 20.0)
                        with pytest.raises(PostgresUnavailableError, match="no connection became available"):
                            await ticket.call("session load", lambda ctx: store.load(KEY, ctx), timeout_s=0.2)
                        assert not ticket.abandoned
    finally:
        await store.aclose()


async def test_a_rollback_held_past_the_deadline_is_finished_after_the_call_not_abandoned_with_it(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The server stops the blocked UPDATE a margin before the deadline; the ROLLBACK that follows
    # is held on its way (a stalled network). It was waited for, shielded, for up to 10 s: the
    # engine reported the call abandoned ("blocked in a worker thread?"). It now finishes after
    # the call, which ends with the store's error; the connection goes back to the pool then.
    proxy = HoldingProxy(pg_server.port, b"ROLLBACK\x00")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1))
    try:
        with anyio.fail_after(20):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20))
            with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
                proxy.armed = True
                # On a machine too loaded for the margin the engine's cancellation may still come
                # first (psycopg then closes the connection: no ROLLBACK to hold); again, then.
                for _ in range(3):
                    ticket = Ticket(None, "test", 20.0)
                    with pytest.raises(OperationCancelledError) as caught:
                        await ticket.call(
                            "session save",
                            lambda ctx: store.save(KEY, scoped_snapshot(KEY, " late"), base, ctx),
                            timeout_s=0.3,
                        )
                    assert not ticket.abandoned, ticket.abandoned
                    assert caught.value.reason == "deadline passed", repr(caught.value)
                    if proxy.held.is_set():
                        break
                assert proxy.held.is_set(), "the ROLLBACK was never held"
                proxy.armed = False
                proxy.release.set()
            # The one pooled connection comes back once its rollback ended: the next call gets it.
            stored = await store.load(KEY, OpContext.with_timeout(10))
            assert stored is not None and stored.revision == base
    finally:
        await store.aclose()
        await proxy.close()


async def test_a_first_use_check_stopped_short_of_the_deadline_is_the_deadlines_not_the_ceilings(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # The first call's schema check (blocked on a locked schema_meta) is stopped by the server a
    # margin before the call's deadline too: that is the deadline's doing, not statement_timeout_s's.
    store = PostgresSessionStore(attrs.evolve(app_config, statement_timeout_s=5.0))
    try:
        with psycopg.connect(pg_server.admin_dsn()) as holder:
            holder.execute(f'LOCK TABLE "{schema}".schema_meta IN ACCESS EXCLUSIVE MODE')
            ticket = Ticket(None, "test", 20.0)
            with pytest.raises(OperationCancelledError) as caught:
                await ticket.call("session load", lambda ctx: store.load(KEY, ctx), timeout_s=0.4)
            holder.rollback()
        assert not isinstance(caught.value, PostgresStatementTimeoutError), repr(caught.value)
        assert "statement_timeout_s" not in str(caught.value), repr(caught.value)
        assert not ticket.abandoned
    finally:
        await store.aclose()


async def test_a_statement_begun_late_is_stopped_before_the_deadline_too(
    app_config: PostgresConfig, pg_server: Any, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``statement_timeout`` counts from each statement's start: one begun late is stopped in time too.

    The save's UPDATE reaches the server 0.25 s into a 0.5 s call (a slow network here; a statement
    after slower ones alike) and waits for a row lock. Its timeout (0.45 s, set once for the
    transaction) ran past the deadline: the engine's cancellation came first and psycopg closed the
    host's lent connection. The client's cancel request at the margin stops it in time.
    """
    proxy = HoldingProxy(pg_server.port, b"UPDATE ")
    port = await proxy.start()
    dsn = psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)
    kept = 0
    try:
        for _ in range(3):  # an overloaded machine may lose the margin: again, then
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            store = PostgresSessionStore(app_config, connection=conn)
            try:
                with anyio.fail_after(20):
                    stored = await store.load(KEY, OpContext.with_timeout(5))
                    base = stored.revision if stored is not None else None
                    if base is None:
                        base = await store.save(
                            KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(20)
                        )
                    with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
                        proxy.held.clear()
                        proxy.release.clear()
                        proxy.armed = True

                        async def late() -> None:
                            await proxy.held.wait()
                            await anyio.sleep(0.25)
                            proxy.armed = False
                            proxy.release.set()

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(late)
                            ticket = Ticket(None, "test", 20.0)
                            with (
                                caplog.at_level(logging.WARNING),
                                pytest.raises(OperationCancelledError) as caught,
                            ):
                                await ticket.call(
                                    "session save",
                                    lambda ctx, store=store, base=base: store.save(
                                        KEY, scoped_snapshot(KEY, " late"), base, ctx
                                    ),
                                    timeout_s=0.5,
                                )
                        assert not ticket.abandoned, ticket.abandoned
                        if isinstance(caught.value, OperationTimeoutError):
                            continue  # the engine's cancellation came first (psycopg may close the link)
                    assert not conn.closed, f"the host's connection was closed: {caught.value!r}"
                    assert "the server stopped it" in str(caught.value), repr(caught.value)
                    stored = await store.load(KEY, OpContext.with_timeout(5))
                    assert stored is not None and stored.revision == base  # nothing of the late save
                    kept += 1
                    break
            finally:
                await store.aclose()
                await conn.close()
    finally:
        await proxy.close()
    assert kept, "the engine's cancellation came first every time: the host's connection was closed"
