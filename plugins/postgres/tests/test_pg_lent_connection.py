"""A lent ``AsyncConnection``: each call commits on its own, or is refused with nothing sent.

psycopg nests a transaction begun on a connection already inside one as a
savepoint. A host that lent a connection after using it itself (psycopg's
default is not autocommit, so any statement leaves a transaction open) had
every write reported committed, with a revision, while only a savepoint was
released; the host's rollback, or closing the connection, then dropped it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg
import pytest
from pg_server import APP_USER, new_schema_name

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_postgres import (
    SCHEMA_VERSION,
    PostgresArchive,
    PostgresConfig,
    PostgresSessionStore,
    lent,
    migrate,
)
from agentium_postgres.errors import PostgresError, PostgresSessionStoreError, PostgresUnavailableError

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


def _slow_commits(admin: psycopg.Connection[Any], schema: str) -> None:
    """Make a save's COMMIT run a deferred trigger sleeping 1 s (then stopped by _stop_in_commit)."""
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


@pytest.mark.parametrize("autocommit", [True, False])
async def test_a_lent_connection_whose_commit_was_cut_off_serves_the_next_call(
    pg_server: Any,
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    autocommit: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A save's COMMIT outlived its deadline (the backend stalled in it): the call said "outcome
    # unknown", as it must, but left the host's connection with the COMMIT's answer unread (or
    # psycopg closed it), and every later call on it was refused, or failed, for good.
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=autocommit)
    store = PostgresSessionStore(app_config, connection=conn)
    _slow_commits(admin, schema)
    halted: list[int] = []

    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stop_in_commit, admin, halted)
                    with pytest.raises(PostgresUnavailableError, match="outcome is unknown"):
                        await store.save(
                            KEY, scoped_snapshot(KEY, " late"), base, OpContext.with_timeout(0.6)
                        )
                    tg.cancel_scope.cancel()
                # While the server still owes the answer, a call waits for it until its own deadline,
                # then is refused with nothing sent (it may not run inside that transaction).
                with pytest.raises(PostgresSessionStoreError, match="still waiting for the answer"):
                    await store.load(KEY, OpContext.with_timeout(0.2))
            finally:
                for pid in halted:
                    os.kill(pid, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            # The next call on the same connection finishes what was left, then runs and answers.
            stored = await store.load(KEY, _ctx())
            assert stored is not None and stored.revision in (base, base + 1)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            # What the server decided is logged once known (a WARNING naming the operation only).
            late = [
                r.getMessage() for r in caplog.records if "reported as of unknown outcome" in r.getMessage()
            ]
            decided = "it committed" if stored.revision == base + 1 else "it failed and was rolled back"
            assert len(late) == 1 and late[0].startswith("session save: ") and decided in late[0], late
            admin.execute(f'DROP TRIGGER slow ON "{schema}".session_snapshots')
            revision = await store.save(KEY, scoped_snapshot(KEY, " next"), stored.revision, _ctx())
            assert revision == stored.revision + 1
            row = admin.execute(f'SELECT revision FROM "{schema}".session_snapshots').fetchone()
            assert row == (revision,)
    finally:
        await store.aclose()
        await conn.close()


async def test_a_lent_connection_refuses_a_call_from_a_second_event_loop_and_nothing_is_written(
    pg_server: Any, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # Documented only: one lent connection used from a thread's own loop while its first loop still
    # ran. The lock of the first loop did not order the second's calls, whose statements then
    # interleaved with the first's on one socket.
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    archive = PostgresArchive(app_config, connection=conn)
    try:
        with anyio.fail_after(30):
            revision = await store.save(KEY, scoped_snapshot(KEY, " a"), None, _ctx())

            def other_loop() -> list[str]:
                async def calls() -> list[str]:
                    refused = []
                    for call in (
                        lambda: store.save(KEY, scoped_snapshot(KEY, " b"), revision, _ctx()),
                        lambda: archive.append(KEY, [plain_group(0, "b")], _ctx()),
                        lambda: migrate(app_config, connection=conn),
                    ):
                        with pytest.raises(PostgresError, match="used by another event loop") as caught:
                            await call()
                        refused.append(type(caught.value).__name__)
                    return refused

                return asyncio.run(calls())

            refused = await anyio.to_thread.run_sync(other_loop)
            assert refused == ["PostgresSessionStoreError", "PostgresArchiveError", "PostgresError"]
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            row = admin.execute(f'SELECT revision FROM "{schema}".session_snapshots').fetchone()
            assert row == (revision,)
            groups = admin.execute(f'SELECT count(*) FROM "{schema}".archive_groups').fetchone()
            assert groups == (0,)
            # Its own loop goes on using it.
            assert await store.save(KEY, scoped_snapshot(KEY, " c"), revision, _ctx()) == revision + 1
    finally:
        await store.aclose()
        await archive.aclose()
        await conn.close()


@pytest.mark.parametrize("closing_loop", ["the connection's", "another thread's"])
async def test_aclose_waits_for_a_cut_off_commit_so_the_host_may_close_its_connection(
    pg_server: Any,
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    caplog: pytest.LogCaptureFixture,
    closing_loop: str,
) -> None:
    # After "outcome unknown" the task finishing the COMMIT still waited on the connection's socket
    # when aclose() returned. The host then closed its connection (as the README says to, after
    # aclose) and the task's reader stayed registered on the closed socket's descriptor: the next
    # connection given that descriptor failed to connect ("connection socket closed").
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    _slow_commits(admin, schema)
    halted: list[int] = []
    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stop_in_commit, admin, halted)
                    with pytest.raises(PostgresUnavailableError, match="outcome is unknown"):
                        await store.save(
                            KEY, scoped_snapshot(KEY, " late"), base, OpContext.with_timeout(0.6)
                        )
                    tg.cancel_scope.cancel()
            finally:
                for pid in halted:
                    os.kill(pid, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            if closing_loop == "another thread's":  # the COMMIT's task runs on this loop meanwhile
                await anyio.to_thread.run_sync(lambda: asyncio.run(store.aclose()))
            else:
                await store.aclose()
            # aclose() returned once the server's answer was read: the connection is the host's again.
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert any("reported as of unknown outcome" in r.getMessage() for r in caplog.records)
            await conn.close()
            fresh = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
            try:
                assert await (await fresh.execute("SELECT 1")).fetchone() == (1,)
            finally:
                await fresh.close()
            row = admin.execute(f'SELECT revision FROM "{schema}".session_snapshots').fetchone()
            assert row in ((base,), (base + 1,))
    finally:
        await store.aclose()
        await conn.close()


@pytest.mark.parametrize("lent", [True, False])
async def test_migrate_whose_commit_was_cut_off_says_the_outcome_is_unknown(
    pg_server: Any, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture, lent: bool
) -> None:
    # migrate() cut off by timeout_s in its COMMIT said "the server did not answer in time; nothing
    # was written" while the server, once it went on, committed the migration; and psycopg closed
    # the host's lent connection.
    name = new_schema_name()
    config = PostgresConfig(dsn=pg_server.admin_dsn(), schema=name)
    await migrate(config, to_version=SCHEMA_VERSION - 1)
    admin.execute(
        f'CREATE FUNCTION "{name}".slow() RETURNS trigger LANGUAGE plpgsql '
        "AS $$ BEGIN PERFORM pg_sleep(1.2); RETURN NULL; END $$"
    )
    admin.execute(
        f'CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON "{name}".schema_meta '
        f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{name}".slow()'
    )
    conn = await psycopg.AsyncConnection.connect(pg_server.admin_dsn(), autocommit=True)
    halted: list[int] = []

    async def stop_in_commit() -> None:
        while not halted:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query = 'COMMIT' "
                "AND wait_event = 'PgSleep'"
            ).fetchone()
            if row is not None:
                os.kill(int(row[0]), signal.SIGSTOP)
                halted.append(int(row[0]))
            await anyio.sleep(0.01)

    try:
        with anyio.fail_after(30):
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(stop_in_commit)
                    with pytest.raises(PostgresUnavailableError, match="the outcome is unknown"):
                        await migrate(config, connection=conn if lent else None, timeout_s=1.0)
                    tg.cancel_scope.cancel()
            finally:
                for stopped in halted:
                    os.kill(stopped, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            assert any("outcome unknown" in r.getMessage() for r in caplog.records)
            # The next migration (on the lent connection: after the answer) runs; what it found says
            # what the server decided, and on the lent connection so does the WARNING logged then.
            admin.execute(f'DROP TRIGGER slow ON "{name}".schema_meta')
            report = await migrate(config, connection=conn if lent else None)
            assert report.to_version == SCHEMA_VERSION and not conn.closed
            if lent:
                late = [m for r in caplog.records if "reported as of unknown" in (m := r.getMessage())]
                assert len(late) == 1 and late[0].startswith("migrate: "), late
                assert ("it committed" in late[0]) == (report.applied == ())
    finally:
        await conn.close()
        admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


async def test_a_commit_task_that_gave_up_before_its_call_is_of_unknown_outcome(
    pg_server: Any,
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The task finishing a lent connection's COMMIT gives up after its own bound (10 s), the call
    # waits at most as long: only the order in which the two started kept the task's TimeoutError
    # from reaching the call, which then said "the server did not answer in time; nothing was
    # written" of a COMMIT the server could still apply. The task's bound is shortened here.
    monkeypatch.setattr(lent, "_LATE_COMMIT_S", 0.3)
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    store = PostgresSessionStore(app_config, connection=conn)
    _slow_commits(admin, schema)
    try:
        with anyio.fail_after(30):
            base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
            with pytest.raises(PostgresUnavailableError, match="outcome is unknown"):
                await store.save(KEY, scoped_snapshot(KEY, " late"), base, _ctx())
    finally:
        await store.aclose()
        await conn.close()
