"""Faults against the real server: statement timeouts and deadlines, a host's cancellation, a
connection dropped mid-transaction, the server killed mid-commit and restarted, and two processes
racing on one session (R3, R12, R13).

A call is made to block inside its transaction by holding, from a superuser
connection, the row lock its statement waits for; the fault is injected while
it waits. After every fault: nothing the call was doing is committed (no
archive row of its batch, the snapshot unchanged), and the next call
succeeds without help.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import psycopg
import pytest
from pg_server import APP_USER, PostgresServer

from agentium_harness import ResidentLimits, RuntimeLimits, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import OpContext, OperationCancelledError, SessionConflictError, SessionKey
from agentium_harness.testing import rich_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresSessionStore,
    PostgresSessionStoreError,
    PostgresStatementTimeoutError,
    PostgresUnavailableError,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
ANA = VerifiedIdentity("acme", "ana", "test-auth")


def _ctx(seconds: float = 30) -> OpContext:
    return OpContext.with_timeout(seconds)


@contextmanager
def holding_snapshot_lock(dsn: str, schema: str, key: SessionKey) -> Iterator[psycopg.Connection[Any]]:
    """A superuser transaction holding the row lock of ``key``'s snapshot until the block ends."""
    conn = psycopg.connect(dsn)
    try:
        conn.execute(
            f'SELECT 1 FROM "{schema}".session_snapshots '
            "WHERE tenant_key = %s AND user_key = %s AND session_key = %s FOR UPDATE",
            key.key_segments(),
        )
        yield conn
    finally:
        try:
            conn.rollback()
            conn.close()
        except psycopg.Error:  # the server may have been killed meanwhile
            pass


async def blocked_backend(dsn: str, wait_s: float = 20) -> int:
    """The pid of the application role's backend waiting on a lock (polls until one does)."""
    deadline = time.monotonic() + wait_s
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = await (
                await conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
                    (APP_USER,),
                )
            ).fetchone()
            if row is not None:
                return int(row[0])
            await anyio.sleep(0.02)
    raise AssertionError("no application backend started waiting on the lock")


def stored_state(dsn: str, schema: str, key: SessionKey) -> tuple[list[int], int | None]:
    """(archived seqs, snapshot revision) of ``key``, read by the superuser."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        seqs = [
            int(r[0])
            for r in conn.execute(
                f'SELECT seq FROM "{schema}".archive_groups '
                "WHERE tenant_key = %s AND user_key = %s AND session_key = %s ORDER BY seq",
                key.key_segments(),
            ).fetchall()
        ]
        row = conn.execute(
            f'SELECT revision FROM "{schema}".session_snapshots '
            "WHERE tenant_key = %s AND user_key = %s AND session_key = %s",
            key.key_segments(),
        ).fetchone()
    return seqs, None if row is None else int(row[0])


async def test_statement_timeout_and_deadline_stop_a_blocked_call_and_commit_nothing(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    short = PostgresSessionStore(PostgresConfig(dsn=app_config.dsn, schema=schema, statement_timeout_s=0.5))
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        groups = [rich_group(0, KEY, "zero")]
        with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
            # The configured ceiling: the server cancels the statement.
            started = time.monotonic()
            with pytest.raises(PostgresStatementTimeoutError):
                await short.save(KEY, scoped_snapshot(KEY, " late"), base, _ctx())
            assert time.monotonic() - started < 0.5 + 5
            # The call's own deadline: OperationCancelledError, by the deadline plus slack.
            started = time.monotonic()
            with pytest.raises(OperationCancelledError) as caught:
                await store.commit_with_archive(
                    archive, KEY, groups, scoped_snapshot(KEY, " x"), base, _ctx(0.5)
                )
            assert not isinstance(caught.value, PostgresStatementTimeoutError)
            assert time.monotonic() - started < 0.5 + 5
            # The host cancels (an anyio cancel scope): the in-flight transaction is discarded.
            with anyio.move_on_after(0.5) as scope:
                await store.commit_with_archive(
                    archive, KEY, groups, scoped_snapshot(KEY, " y"), base, _ctx()
                )
            assert scope.cancelled_caught
        assert stored_state(pg_server.admin_dsn(), schema, KEY) == ([], base)
        revision, _ = await store.commit_with_archive(
            archive, KEY, groups, scoped_snapshot(KEY, " next"), base, _ctx()
        )
        assert stored_state(pg_server.admin_dsn(), schema, KEY) == ([0], revision)
    finally:
        for adapter in (archive, store, short):
            await adapter.aclose()


async def test_a_connection_dropped_mid_transaction_commits_nothing_and_the_next_call_works(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        groups = [rich_group(0, KEY, "zero"), rich_group(1, KEY, "one")]
        failure: list[BaseException] = []

        async def commit() -> None:
            try:
                await store.commit_with_archive(
                    archive, KEY, groups, scoped_snapshot(KEY, " x"), base, _ctx()
                )
            except BaseException as exc:
                failure.append(exc)

        with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY) as admin:
            async with anyio.create_task_group() as tg:
                tg.start_soon(commit)
                pid = await blocked_backend(pg_server.admin_dsn())
                # Its archive rows are inserted, its snapshot UPDATE waits: now drop its connection.
                with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as killer:
                    killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            del admin
        assert len(failure) == 1 and isinstance(failure[0], PostgresUnavailableError), failure
        assert stored_state(pg_server.admin_dsn(), schema, KEY) == ([], base)
        revision, _ = await store.commit_with_archive(
            archive, KEY, groups, scoped_snapshot(KEY, " retry"), base, _ctx()
        )
        assert stored_state(pg_server.admin_dsn(), schema, KEY) == ([0, 1], revision)
    finally:
        await archive.aclose()
        await store.aclose()


async def test_the_server_killed_mid_commit_leaves_nothing_half_committed_and_the_next_run_succeeds(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        for i in range(3):
            assert (await runtime.run(ANA, "s1", f"message {i}")).committed
        before = stored_state(pg_server.admin_dsn(), schema, KEY)
        outcome: list[Any] = []

        async def run() -> None:
            try:
                outcome.append(await runtime.run(ANA, "s1", "message during the crash"))
            except Exception as exc:
                outcome.append(exc)

        with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await blocked_backend(pg_server.admin_dsn())
                # The run's transaction holds its archive rows and waits on the snapshot: crash.
                pg_server.kill()
        # While the server is down, calls fail at once with the typed error (no pool backoff wait).
        started = time.monotonic()
        with pytest.raises(PostgresUnavailableError):
            await store.load(KEY, _ctx(20))
        assert time.monotonic() - started < 10
        pg_server.start()
        assert len(outcome) == 1
        assert not getattr(outcome[0], "committed", False), outcome
        assert stored_state(pg_server.admin_dsn(), schema, KEY) == before
        # No help from anyone: the same runtime's next runs reconnect and commit.
        for i in range(3, 6):
            result = await runtime.run(ANA, "s1", f"message {i}")
            assert result.committed, result
        seqs, _ = stored_state(pg_server.admin_dsn(), schema, KEY)
        stored = await store.load(KEY, _ctx())
        assert stored is not None
        assert seqs == list(range(stored.snapshot.boundary))
        assert [g.seq for g in stored.snapshot.resident] == list(
            range(stored.snapshot.boundary, stored.snapshot.next_seq)
        )
    finally:
        await runtime.aclose()
        await archive.aclose()
        await store.aclose()


_RACER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import anyio
    from agentium_harness.plugin_api import OpContext, SessionConflictError, SessionKey
    from agentium_harness.testing import scoped_snapshot
    from agentium_postgres import PostgresConfig, PostgresSessionStore

    dsn, schema, me, folder = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    key = SessionKey("acme", "ana", "s1")

    async def main():
        store = PostgresSessionStore(PostgresConfig(dsn=dsn, schema=schema, min_pool_size=0))
        try:
            stored = await store.load(key, OpContext.with_timeout(30))
            (folder / f"ready-{me}").write_text("")
            deadline = time.monotonic() + 30
            while len(list(folder.glob("ready-*"))) < 2 and time.monotonic() < deadline:
                await anyio.sleep(0.005)
            try:
                revision = await store.save(
                    key, scoped_snapshot(key, " " + me), stored.revision, OpContext.with_timeout(30)
                )
                print(json.dumps({"who": me, "won": revision}))
            except SessionConflictError:
                print(json.dumps({"who": me, "won": None}))
        finally:
            await store.aclose()

    anyio.run(main)
    """
)


def test_two_processes_racing_on_one_session_have_one_winner(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    async def create() -> int:
        store = PostgresSessionStore(app_config)
        try:
            return await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        finally:
            await store.aclose()

    base = anyio.run(create)
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), app_config.dsn, schema, who, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("first", "second")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    winners = [r for r in results if r["won"] is not None]
    assert len(winners) == 1, results
    assert winners[0]["won"] == base + 1

    async def check() -> None:
        store = PostgresSessionStore(app_config)
        try:
            stored = await store.load(KEY, _ctx())
            assert stored is not None and stored.revision == base + 1
            assert stored.snapshot == scoped_snapshot(KEY, " " + winners[0]["who"])
            with pytest.raises(SessionConflictError):
                await store.save(KEY, scoped_snapshot(KEY, " stale"), base, _ctx())
        finally:
            await store.aclose()

    anyio.run(check)


@contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """The backends ``pids`` stopped (SIGSTOP) until the block ends: a server that stalls mid-call."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def application_backends(dsn: str) -> list[int]:
    """The pids of the application role's backends (the adapters' pooled connections)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s", (APP_USER,)).fetchall()
    return [int(r[0]) for r in rows]


async def test_a_stalled_server_holds_no_call_past_its_deadline_and_a_commit_is_never_called_undone(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    # A read's round trip ran inside the COMMIT's shield, so a read of a stalled server took 10 s
    # whatever its deadline. A COMMIT that stalled held the call 10 s too, and then the deadline's
    # cancellation (delivered as the connection went back to the pool) turned "outcome unknown" into
    # OperationCancelledError "nothing was committed", while the commit landed once the server resumed.
    store = PostgresSessionStore(attrs.evolve(app_config, max_pool_size=1))
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        with stopped(application_backends(pg_server.admin_dsn())):
            started = time.monotonic()
            with pytest.raises(OperationCancelledError):
                await store.load(KEY, _ctx(1.0))
            assert time.monotonic() - started < 1.0 + 3
        # A COMMIT that stalls: a deferred trigger sleeps in it, and its backend is stopped there.
        with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as admin:
            admin.execute(
                f'CREATE FUNCTION "{schema}".slow() RETURNS trigger LANGUAGE plpgsql '
                "AS $$ BEGIN PERFORM pg_sleep(1.0); RETURN NULL; END $$"
            )
            admin.execute(
                f'CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON "{schema}".session_snapshots '
                f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".slow()'
            )
            halted: list[int] = []

            async def stop_in_commit() -> None:
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

            # The save below must reach its COMMIT well within its 1.5 s: its connection is made now,
            # not inside that deadline (the load above left the pool's one connection cancelled).
            assert await store.load(KEY, _ctx()) is not None
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(stop_in_commit)
                    started = time.monotonic()
                    with pytest.raises(PostgresUnavailableError, match="outcome is unknown") as caught:
                        await store.save(KEY, scoped_snapshot(KEY, " late"), base, _ctx(1.5))
                    assert time.monotonic() - started < 1.5 + 3
                    assert not isinstance(caught.value, OperationCancelledError)
                    tg.cancel_scope.cancel()
            finally:
                for pid in halted:
                    os.kill(pid, signal.SIGCONT)
            assert halted, "the COMMIT was never seen stalling"
            admin.execute(f'DROP TRIGGER slow ON "{schema}".session_snapshots')
        # Whatever the server decided, the store answers at once and truthfully afterwards.
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.revision in (base, base + 1)
    finally:
        await store.aclose()


async def test_one_call_timing_out_on_a_busy_pool_fails_no_other_waiting_call(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    # A pool timeout (every connection busy) was taken for a connection failure: the adapter
    # closed its pool, and every other call waiting on it failed at once with
    # PostgresUnavailableError, however much of its own deadline was left.
    store = PostgresSessionStore(attrs.evolve(app_config, max_pool_size=1))
    try:
        base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
        results: dict[str, object] = {}
        short_ended = anyio.Event()

        async def call(name: str, run: Any) -> None:
            try:
                results[name] = await run()
            except Exception as exc:
                results[name] = exc
            if name == "short":
                short_ended.set()

        with holding_snapshot_lock(pg_server.admin_dsn(), schema, KEY) as holder:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    call, "holds", lambda: store.save(KEY, scoped_snapshot(KEY, " x"), base, _ctx())
                )
                await blocked_backend(pg_server.admin_dsn())  # it holds the pool's one connection
                tg.start_soon(call, "short", lambda: store.load(KEY, _ctx(0.5)))
                tg.start_soon(call, "patient", lambda: store.load(KEY, _ctx(30)))
                # The lock is let go once the short call has ended, not after a sleep: a stall could
                # let the release come first, and the short call then got the connection in time.
                with anyio.fail_after(30):
                    await short_ended.wait()
                holder.rollback()
        assert isinstance(results["short"], PostgresUnavailableError), results
        assert results["holds"] == base + 1, results
        patient = results["patient"]
        assert not isinstance(patient, Exception), patient
    finally:
        await store.aclose()


async def test_aclose_stops_calls_running_on_a_frozen_server_and_later_calls_fail_at_once(
    app_config: PostgresConfig, pg_server: PostgresServer, schema: str
) -> None:
    # A call with no deadline (OpContext()) on a frozen server kept waiting after aclose() returned:
    # aclose closed the pool, and psycopg_pool leaves a connection in use alone until it comes back.
    store = PostgresSessionStore(app_config)
    base = await store.save(KEY, scoped_snapshot(KEY, " base"), None, _ctx())
    results: dict[str, object] = {}

    async def call(name: str, run: Any) -> None:
        try:
            results[name] = await run()
        except Exception as exc:
            results[name] = exc

    assert pg_server.process is not None
    # The server this test session started: its postmaster (new connections hang) and the
    # adapter's backends (its queries hang). SIGCONT whatever happens.
    with stopped([pg_server.process.pid, *application_backends(pg_server.admin_dsn())]):
        with anyio.move_on_after(30) as guard:  # without the fix the calls never return
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "load", lambda: store.load(KEY, OpContext()))
                tg.start_soon(
                    call, "save", lambda: store.save(KEY, scoped_snapshot(KEY, " x"), base, OpContext())
                )
                await anyio.sleep(0.5)
                assert not results, results  # both are waiting on the frozen server
                started = time.monotonic()
                await store.aclose()
                closed_in = time.monotonic() - started
        assert not guard.cancelled_caught, f"calls still running after aclose: {results}"
        assert closed_in < 5
        assert time.monotonic() - started < 5
        for name in ("load", "save"):
            error = results[name]
            assert isinstance(error, PostgresSessionStoreError), error
            assert "the adapter was closed while it ran" in str(error) and "nothing was committed" in str(
                error
            )
        started = time.monotonic()
        with pytest.raises(PostgresSessionStoreError, match="the adapter is closed"):
            await store.load(KEY, OpContext())
        assert time.monotonic() - started < 5  # the frozen server would hold it for good
    assert stored_state(pg_server.admin_dsn(), schema, KEY)[1] == base  # the stopped save committed nothing
