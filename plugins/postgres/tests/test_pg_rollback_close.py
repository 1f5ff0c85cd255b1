"""``aclose()`` waits for the rollback of a call's failed transaction still running on a pooled connection.

A failed transaction on a pooled connection is rolled back in a task of its own
(``calls.settle_in_time``), which the call waits for until a margin before its
deadline; only once the call ended was that task known to ``aclose()``. A
rollback still unanswered while the call waited for it (a stalled network) was
not waited for: ``aclose()`` closed the pool and returned with the call still
running and its connection still open under it. The ROLLBACK is held by a
proxy between the client and the real server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import attrs
import psycopg
import pytest
from pg_proxy import HoldingProxy

from agentium_harness import AgentiumError, RuntimeLimits
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore, PostgresSessionStoreError, calls

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


async def proxied(pg_server: Any, held: bytes) -> tuple[HoldingProxy, str]:
    """A started proxy to the server that holds the message ``held`` once armed, and the DSN through it."""
    proxy = HoldingProxy(pg_server.port, held)
    port = await proxy.start()
    return proxy, psycopg.conninfo.make_conninfo(pg_server.app_dsn(), port=port)


async def held_save(store: PostgresSessionStore, proxy: HoldingProxy, ctx: OpContext) -> asyncio.Task[int]:
    """A save started (after the store's first use) and run until the proxy holds its message."""
    assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use done
    proxy.armed = True
    save = asyncio.create_task(store.save(KEY, scoped_snapshot(KEY, " x"), None, ctx))
    await proxy.held.wait()
    return save


def refuse_snapshot_writes(admin: psycopg.Connection[Any], schema: str) -> None:
    """Every write of a snapshot fails in the server: the call's transaction is rolled back."""
    admin.execute(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql '
        "AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
    )
    admin.execute(
        f'CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON "{schema}".session_snapshots '
        f'FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
    )


async def test_aclose_waits_for_a_rollback_still_held_inside_a_call(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    refuse_snapshot_writes(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1))
    try:
        with anyio.fail_after(10):
            # the INSERT failed; its ROLLBACK is held on its way
            save = await held_save(store, proxy, OpContext.with_timeout(1.0))
            closing = asyncio.create_task(store.aclose())
            await asyncio.sleep(0.25)
            assert not closing.done(), "aclose() returned while a call's rollback was still unanswered"
            proxy.armed = False
            proxy.release.set()
            await closing
            # The call ends with a typed error (the server's refusal or the close), nothing written.
            with pytest.raises(AgentiumError):
                await save
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        await store.aclose()
        await proxy.close()


async def test_aclose_says_so_when_a_rollback_is_still_unanswered_at_its_bound(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # The wait for such a rollback is bounded (close_timeout_s, 4 s; 0.3 s here). Past it aclose()
    # went on and returned as if all had closed, a connection still open under the unanswered
    # ROLLBACK: it says so now, as it does of a pool that did not close.
    config = attrs.evolve(app_config, max_pool_size=1, close_timeout_s=0.3)
    refuse_snapshot_writes(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    store = PostgresSessionStore(attrs.evolve(config, dsn=dsn))
    try:
        with anyio.fail_after(10):
            save = await held_save(store, proxy, OpContext.with_timeout(0.5))
            with pytest.raises(PostgresSessionStoreError, match="rollback") as caught:
                await store.aclose()
            assert "still unanswered" in str(caught.value), str(caught.value)
            with pytest.raises(AgentiumError):
                await save
    finally:
        await proxy.close()
        await asyncio.sleep(0.05)  # the held ROLLBACK ends; its connection is closed (the pool was)


async def test_aclose_as_a_whole_ends_within_close_timeout_s_and_says_what_it_gave_up(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    admin: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # aclose() waited for such a rollback 10 s, then for the pools 10 s, then for a lent COMMIT 10 s,
    # one after the other: with a stalled server up to 30 s, past the runtime's close bound (5 s),
    # which then gave up on the adapter. All of it now ends within the config's close_timeout_s
    # (4 s by default, within the runtime's; 0.5 s here): the rollback still unanswered is given
    # up, its connection closed, and that is said (the error, a WARNING), never "closed".
    assert PostgresConfig(dsn="dbname=x").close_timeout_s < RuntimeLimits().close_timeout_s
    config = attrs.evolve(app_config, max_pool_size=1, close_timeout_s=0.5)
    refuse_snapshot_writes(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    store = PostgresSessionStore(attrs.evolve(config, dsn=dsn))
    try:
        with anyio.fail_after(3):
            save = await held_save(store, proxy, OpContext.with_timeout(0.5))
            began = anyio.current_time()
            with pytest.raises(PostgresSessionStoreError) as caught:
                await store.aclose()
            took = anyio.current_time() - began
            assert took < 0.5 + 0.3, took  # 10 s before
            assert "rollback was still unanswered after 0.5s" in str(caught.value), str(caught.value)
            assert "given up and its connection closed" in str(caught.value), str(caught.value)
            warned = [r for r in caplog.records if r.levelname == "WARNING" and "closing:" in r.getMessage()]
            assert len(warned) == 1 and "given up" in warned[0].getMessage(), warned
        # The call ends once its rollback, given up, ended: on a loaded machine psycopg's own cancelling
        # of it may outlast close_timeout_s (aclose() then says it "could not be stopped").
        with anyio.fail_after(15), pytest.raises(AgentiumError):
            await save
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        await proxy.close()


@pytest.mark.parametrize("lent", [True, False], ids=["lent-connection", "pooled-no-deadline"])
async def test_aclose_waits_for_a_rollback_run_inside_its_call_too_and_says_what_it_gave_up(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any], lent: bool
) -> None:
    # A failed call's rollback runs inside the call (not in a task of its own) on a lent connection,
    # and on a pooled one when the call has no deadline. aclose() did not know of it: it returned at
    # once, "closed", the ROLLBACK still unanswered (on the host's connection, which the host may
    # then close under it). It is now waited for, and given up at the bound, like any other.
    refuse_snapshot_writes(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    config = attrs.evolve(app_config, dsn=dsn, max_pool_size=1, close_timeout_s=0.5)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True) if lent else None
    store = PostgresSessionStore(config, connection=conn) if lent else PostgresSessionStore(config)
    try:
        with anyio.fail_after(3):
            ctx = OpContext.with_timeout(5) if lent else OpContext()
            # the INSERT failed; its ROLLBACK is held on its way
            save = await held_save(store, proxy, ctx)
            began = anyio.current_time()
            with pytest.raises(PostgresSessionStoreError, match=r"rollback was still unanswered after 0\.5s"):
                await store.aclose()
            assert anyio.current_time() - began < 0.5 + 0.3
        # The call ends once its rollback, given up, ended: on a loaded machine psycopg's own cancelling
        # of it may outlast close_timeout_s (aclose() then says it "could not be stopped").
        with anyio.fail_after(15), pytest.raises(AgentiumError):
            await save
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        await proxy.close()
        if conn is not None:
            await conn.close()


def refuse_snapshot_commits(admin: psycopg.Connection[Any], schema: str) -> None:
    """Every write of a snapshot is refused at its COMMIT (a deferred check): the COMMIT fails."""
    admin.execute(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql '
        "AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
    )
    admin.execute(
        f'CREATE CONSTRAINT TRIGGER refuse AFTER INSERT OR UPDATE ON "{schema}".session_snapshots '
        f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
    )


@pytest.mark.parametrize("deadline_s", [None, 5.0], ids=["no-deadline", "deadline"])
async def test_aclose_waits_for_the_rollback_after_a_pooled_write_whose_commit_failed(
    app_config: PostgresConfig,
    pg_server: Any,
    schema: str,
    admin: psycopg.Connection[Any],
    deadline_s: float | None,
) -> None:
    # A pooled write whose COMMIT the server refused (a deferred check) was rolled back inside its
    # call, shielded, for up to 10 s (past its deadline), and unknown to aclose(): with the ROLLBACK
    # unanswered aclose() returned at once, "closed". It is now settled like any failed call's.
    refuse_snapshot_commits(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1, close_timeout_s=0.5))
    try:
        with anyio.fail_after(3):
            ctx = OpContext() if deadline_s is None else OpContext.with_timeout(deadline_s)
            # the COMMIT failed; the ROLLBACK after it is held on its way
            save = await held_save(store, proxy, ctx)
            began = anyio.current_time()
            with pytest.raises(PostgresSessionStoreError, match=r"rollback was still unanswered"):
                await store.aclose()
            assert anyio.current_time() - began < 0.5 + 0.3
        # The call ends once its rollback, given up, ended: on a loaded machine psycopg's own cancelling
        # of it may outlast close_timeout_s (aclose() then says it "could not be stopped").
        with anyio.fail_after(15), pytest.raises(AgentiumError):
            await save
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        await proxy.close()


async def test_a_pooled_write_whose_commit_failed_ends_by_its_deadline_with_its_rollback_unanswered(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # That rollback held the call, shielded, up to 10 s past its 1 s deadline (where the engine
    # reports a call abandoned); it ends a margin before the deadline now, the rollback going on.
    refuse_snapshot_commits(admin, schema)
    proxy, dsn = await proxied(pg_server, b"ROLLBACK\x00")
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1))
    try:
        assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use done
        proxy.armed = True
        began = anyio.current_time()
        with anyio.fail_after(2), pytest.raises(AgentiumError):
            await store.save(KEY, scoped_snapshot(KEY, " x"), None, OpContext.with_timeout(1.0))
        assert proxy.held.is_set() and anyio.current_time() - began < 1.5  # 10 s before
        proxy.armed = False
        proxy.release.set()
        with anyio.fail_after(2):
            assert await store.load(KEY, OpContext.with_timeout(1)) is None  # the pool's one connection
    finally:
        await store.aclose()
        await proxy.close()


async def test_aclose_waits_for_a_call_it_stopped_and_so_for_the_rollback_it_starts_after_aclose_began(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # aclose() cancels the calls in flight, then looked for their rollbacks once, at once. A call it
    # could not stop at once (its COMMIT shielded, unanswered) went on after aclose() had returned
    # "closed": the COMMIT refused, its ROLLBACK then ran unknown to anyone. aclose() now waits for
    # the calls it stopped to end, and so for their rollbacks, within close_timeout_s.
    refuse_snapshot_commits(admin, schema)
    proxy, dsn = await proxied(pg_server, b"COMMIT\x00")
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1, close_timeout_s=1.0))
    try:
        with anyio.fail_after(3):
            # its COMMIT is held on its way
            save = await held_save(store, proxy, OpContext())
            began = anyio.current_time()
            closing = asyncio.create_task(store.aclose())
            await asyncio.sleep(0.2)
            assert not closing.done(), "aclose() returned while a call it stopped still waited for its COMMIT"
            # The COMMIT goes through (and is refused); the ROLLBACK after it is held.
            commit_held, proxy.release, proxy.held = proxy.release, asyncio.Event(), asyncio.Event()
            proxy._hold = b"ROLLBACK\x00"
            commit_held.set()
            await proxy.held.wait()
            with pytest.raises(PostgresSessionStoreError, match="rollback was still unanswered"):
                await closing
            assert anyio.current_time() - began < 1.0 + 0.3
        # The call ends once its rollback, given up, ended: on a loaded machine psycopg's own cancelling
        # of it may outlast close_timeout_s (aclose() then says it "could not be stopped").
        with anyio.fail_after(15), pytest.raises(AgentiumError):
            await save
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        await proxy.close()


async def test_aclose_names_a_call_it_stopped_still_running_at_its_bound(
    app_config: PostgresConfig, pg_server: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # Such a call whose COMMIT stays unanswered outlasts the close's bound: that is said, never "closed".
    proxy, dsn = await proxied(pg_server, b"COMMIT\x00")
    store = PostgresSessionStore(attrs.evolve(app_config, dsn=dsn, max_pool_size=1, close_timeout_s=0.5))
    try:
        with anyio.fail_after(3):
            # its COMMIT is held on its way
            save = await held_save(store, proxy, OpContext())
            began = anyio.current_time()
            with pytest.raises(
                PostgresSessionStoreError, match=r"a call it stopped was still running after 0\.5s"
            ):
                await store.aclose()
            assert anyio.current_time() - began < 0.5 + 0.3
            proxy.release.set()
            await save  # its COMMIT, answered once let through, is confirmed to it
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (1,)
    finally:
        await proxy.close()


async def test_a_native_cancel_while_a_pooled_call_waits_for_its_rollback_after_a_failed_commit(
    app_config: PostgresConfig,
    schema: str,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A write whose COMMIT failed waits for its rollback (a task of its own) until a margin before
    # its deadline. A host's Task.cancel() in that wait (anyio's shield does not stop it) ended the
    # call before the task was noted in its outcome: the connection went back to its pool with the
    # rollback still to run on it, in its failed transaction (psycopg_pool: "rolling back returned
    # connection"), and the pool handed it out. The rollback's first step is held here until the
    # test lets it go (a loaded loop, a slow network): the call is cancelled first.
    refuse_snapshot_commits(admin, schema)
    store = PostgresSessionStore(attrs.evolve(app_config, max_pool_size=1))
    settling, go_on = calls._settling, asyncio.Event()

    def cancelled_in_its_wait(conn: Any, work: Any, pending: set[asyncio.Task[None]]) -> asyncio.Task[None]:
        async def held() -> None:
            await go_on.wait()
            await work

        task = settling(conn, held(), pending)
        current = asyncio.current_task()
        assert current is not None
        current.cancel()  # the call's (natively): it lands in its next step, its wait for ``task``
        return task

    monkeypatch.setattr(calls, "_settling", cancelled_in_its_wait)
    try:
        with anyio.fail_after(3), caplog.at_level(logging.WARNING):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # first use done
            save = asyncio.create_task(
                store.save(KEY, scoped_snapshot(KEY, " x"), None, OpContext.with_timeout(5))
            )
            with pytest.raises(asyncio.CancelledError):
                await save
            # The rollback has not run: the pool's one connection is not handed out meanwhile.
            with pytest.raises(AgentiumError):
                await store.load(KEY, OpContext.with_timeout(0.3))
            go_on.set()
            assert await store.load(KEY, OpContext.with_timeout(2)) is None  # once it ran: the next call's
        returned = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg.pool")]
        assert not returned, returned
        assert admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone() == (0,)
    finally:
        go_on.set()
        await store.aclose()
