"""A pooled connection goes back to its pool even when the call was cancelled as it returned it.

The call returns its connection (``putconn``) in its ``finally``, inside the
call's cancel scope. A call cancelled by then (its deadline, the runtime, the
host) whose return had to wait for the pool's lock (held a moment by another
task returning or taking a connection) was interrupted there: the connection
was never returned, and a pool of one had none left for any later call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


async def test_a_call_cancelled_while_it_returns_its_connection_still_returns_it(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        pg_server.app_dsn(), min_size=0, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    store = PostgresSessionStore(app_config, pool=pool)
    try:
        with anyio.fail_after(10):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(5))
            with psycopg.connect(pg_server.admin_dsn()) as holder:
                holder.execute(  # the next save waits for this row lock, holding the pool's connection
                    f'SELECT 1 FROM "{schema}".session_snapshots FOR UPDATE'
                )
                call_scope = anyio.CancelScope()

                async def call() -> None:
                    with call_scope:
                        await store.save(KEY, scoped_snapshot(KEY, " x"), base, OpContext.with_timeout(5))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await anyio.sleep(0.2)
                    # Another task holds the pool's lock as the save ends and returns its connection.
                    await pool._lock.acquire()
                    holder.rollback()
                    await anyio.sleep(0.2)  # the save committed; its return waits for the lock
                    call_scope.cancel()  # the call is cancelled then (its deadline, the host)
                    await anyio.sleep(0.05)
                    pool._lock.release()
            assert pool.get_stats()["pool_available"] == 1, pool.get_stats()
            stored = await store.load(KEY, OpContext.with_timeout(1))  # the pool's one connection
            assert stored is not None
    finally:
        await store.aclose()
        await pool.close()


async def test_a_call_natively_cancelled_while_it_returns_its_connection_still_returns_it(
    app_config: PostgresConfig, pg_server: Any, schema: str
) -> None:
    # As above, with asyncio's own Task.cancel() (a host's, asyncio.wait_for's): it passes anyio's
    # shield, and interrupted the return waiting for the pool's lock. The return now runs in a task
    # of its own, which the call awaits: the cancellation stops the call's wait, not the return.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        pg_server.app_dsn(), min_size=0, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    store = PostgresSessionStore(app_config, pool=pool)
    try:
        with anyio.fail_after(10):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(5))
            with psycopg.connect(pg_server.admin_dsn()) as holder:
                holder.execute(f'SELECT 1 FROM "{schema}".session_snapshots FOR UPDATE')
                save = asyncio.create_task(
                    store.save(KEY, scoped_snapshot(KEY, " x"), base, OpContext.with_timeout(5))
                )
                await anyio.sleep(0.2)
                await pool._lock.acquire()
                holder.rollback()
                await anyio.sleep(0.2)  # the save committed; its return waits for the lock
                save.cancel()
                await asyncio.sleep(0.05)
                pool._lock.release()
                with pytest.raises(asyncio.CancelledError):
                    await save
            for _ in range(100):  # the return ends in its own task
                if pool.get_stats()["pool_available"] == 1:
                    break
                await asyncio.sleep(0.01)
            assert pool.get_stats()["pool_available"] == 1, pool.get_stats()
            stored = await store.load(KEY, OpContext.with_timeout(1))  # the pool's one connection
            assert stored is not None
    finally:
        await store.aclose()
        await pool.close()


async def test_a_return_that_need_not_wait_costs_no_task(app_config: PostgresConfig, pg_server: Any) -> None:
    # The native-cancel fix above ran every pooled call's return in a task of its own: a task and a
    # loop iteration per call, on the hot path. A return that does not wait (the pool's lock free,
    # the connection idle: the common case) now runs in the call's task, where nothing can
    # interrupt it; only one that waits goes on in a task (the test above).
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        pg_server.app_dsn(), min_size=0, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    store = PostgresSessionStore(app_config, pool=pool)
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    created: list[str] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    try:
        with anyio.fail_after(10):
            assert await store.load(KEY, OpContext.with_timeout(5)) is None  # the first use's check
            loop.set_task_factory(counting)
            try:
                for _ in range(3):
                    assert await store.load(KEY, OpContext.with_timeout(5)) is None
            finally:
                loop.set_task_factory(before)
            assert created == [], created
            assert pool.get_stats()["pool_available"] == 1, pool.get_stats()
    finally:
        await store.aclose()
        await pool.close()
