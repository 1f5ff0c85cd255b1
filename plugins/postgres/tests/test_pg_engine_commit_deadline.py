"""A COMMIT left unconfirmed at the deadline, under the engine: the store's own report reaches it.

The engine cancels an adapter call at its deadline and abandons one that has
not stopped 0.1 s later. The stores waited for an unconfirmed COMMIT until
the deadline plus 0.25 s (shielded), so under the engine their "outcome
unknown" (the typed error and its WARNING) came after the engine had given
up on the call: the engine reported a hung adapter ("abandoned ... blocked
in a worker thread?") and the WARNING came later, or, when the engine woke
late on a loaded machine, the store's own error instead: which one depended
on load. The wait now ends a margin before the deadline (the same rule as
the Redis store's settling), so the call ends with the store's report.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import anyio
import attrs
import psycopg
import pytest
from pg_server import APP_USER

from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import (
    PostgresConfig,
    PostgresSessionStore,
    PostgresSessionStoreError,
    PostgresUnavailableError,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
LOGGER = "agentium.plugins.postgres"


def _slow_commits(admin: psycopg.Connection[Any], schema: str) -> None:
    """Make a save's COMMIT run a deferred trigger sleeping 1 s (then stopped where it sleeps)."""
    admin.execute(
        f'CREATE FUNCTION "{schema}".slow() RETURNS trigger LANGUAGE plpgsql '
        "AS $$ BEGIN PERFORM pg_sleep(1.0); RETURN NULL; END $$"
    )
    admin.execute(
        f'CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON "{schema}".session_snapshots '
        f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".slow()'
    )


async def _stop_in_commit(admin: psycopg.Connection[Any], halted: list[int]) -> None:
    """SIGSTOP the application's backend once it sleeps in a COMMIT (its pid is added to ``halted``)."""
    while not halted:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s AND query = 'COMMIT' "
            "AND wait_event = 'PgSleep'",
            (APP_USER,),
        ).fetchone()
        if row is not None:
            os.kill(int(row[0]), signal.SIGSTOP)
            halted.append(int(row[0]))
        await anyio.sleep(0.01)


async def test_an_unconfirmed_commit_is_the_stores_unknown_outcome_not_an_abandoned_call(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = PostgresSessionStore(attrs.evolve(app_config, max_pool_size=1))
    halted: list[int] = []
    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(30))
            _slow_commits(admin, schema)
            # The save below must reach its COMMIT within its deadline: the pool's one connection is
            # made and checked now, not inside it.
            assert await store.load(KEY, OpContext.with_timeout(30)) is not None
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stop_in_commit, admin, halted)
                    with (
                        caplog.at_level(logging.WARNING, logger=LOGGER),
                        pytest.raises(PostgresUnavailableError, match="outcome is unknown"),
                    ):
                        await Ticket(None, "test", 30.0).call(
                            "session save",
                            lambda ctx: store.save(KEY, scoped_snapshot(KEY, " late"), base, ctx),
                            timeout_s=1.0,
                        )
                    # Said when the call returned, not some time after the engine gave up on it.
                    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
                    assert any("outcome unknown" in m for m in said), said
                    tg.cancel_scope.cancel()
            finally:
                for pid in halted:
                    os.kill(pid, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            admin.execute(f'DROP TRIGGER slow ON "{schema}".session_snapshots')
            stored = await store.load(KEY, OpContext.with_timeout(30))
            assert stored is not None and stored.revision in (base, base + 1)
    finally:
        await store.aclose()


async def test_a_call_waiting_for_a_lent_connections_commit_is_refused_by_the_store_not_timed_out(
    pg_server: Any,
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
) -> None:
    # A call on a lent connection whose earlier COMMIT is still unanswered waits for it until its
    # deadline, then is refused ("still waiting for the answer ... try again"). Under the engine that
    # wait ended at the very deadline the engine cancels the call at: which of the two was reported
    # (the refusal, or a bare timeout) depended on the order of two timers due at the same instant.
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    halted: list[int] = []
    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(30))
            _slow_commits(admin, schema)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stop_in_commit, admin, halted)
                    with pytest.raises(PostgresUnavailableError, match="outcome is unknown"):
                        await Ticket(None, "test", 30.0).call(
                            "session save",
                            lambda ctx: store.save(KEY, scoped_snapshot(KEY, " late"), base, ctx),
                            timeout_s=1.0,
                        )
                    tg.cancel_scope.cancel()
                for _ in range(5):  # each a race of two timers before: one round rarely showed it
                    with pytest.raises(PostgresSessionStoreError, match="still waiting for the answer"):
                        await Ticket(None, "test", 30.0).call(
                            "session load", lambda ctx: store.load(KEY, ctx), timeout_s=0.1
                        )
            finally:
                for pid in halted:
                    os.kill(pid, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            stored = await store.load(KEY, OpContext.with_timeout(30))
            assert stored is not None and stored.revision in (base, base + 1)
    finally:
        await store.aclose()
        await conn.close()


async def test_a_call_queued_behind_a_lent_connections_unconfirmed_commit_is_refused_before_its_deadline(
    pg_server: Any,
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
) -> None:
    # A call that first waited its turn on the lent connection (another call held it, waiting for its
    # own COMMIT's answer) then waits for that COMMIT until a margin before its deadline. The margin
    # was counted from the time left when the call began, not from when its turn came: the wait ran
    # past the deadline by the time spent queued, and the engine cancelled the call there (a bare
    # timeout) instead of the store's refusal ("still waiting for the answer ... try again").
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    seen: dict[str, BaseException] = {}

    async def call(name: str, timeout_s: float, work: Any) -> None:
        try:
            await Ticket(None, "test", 30.0).call(name, work, timeout_s=timeout_s)
        except Exception as exc:
            seen[name] = exc

    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, OpContext.with_timeout(30))
            _slow_commits(admin, schema)  # the save's COMMIT takes 1 s
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    call,
                    "session save",
                    0.4,
                    lambda ctx: store.save(KEY, scoped_snapshot(KEY, " late"), base, ctx),
                )
                await anyio.sleep(0.05)  # the save holds the connection, its COMMIT unanswered to 0.35 s
                tg.start_soon(call, "session load", 0.6, lambda ctx: store.load(KEY, ctx))
            assert isinstance(seen["session save"], PostgresUnavailableError), seen
            load = seen["session load"]
            assert isinstance(load, PostgresSessionStoreError), repr(load)
            assert "still waiting for the answer" in str(load)
            with anyio.fail_after(5):  # the COMMIT's answer came (1 s): the connection serves again
                while True:
                    try:
                        stored = await store.load(KEY, OpContext.with_timeout(5))
                        break
                    except PostgresSessionStoreError:
                        await anyio.sleep(0.05)
            assert stored is not None and stored.revision == base + 1
    finally:
        await store.aclose()
        await conn.close()
