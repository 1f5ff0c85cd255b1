"""The session store's erase reports what it erased, whatever another connection does (real PostgreSQL).

An erase reads the target's keys and sizes, then the snapshots themselves
(for their groups' seqs and digests), then deletes them. Those reads took no
locks: a snapshot deleted by another connection between the size read and
the fetch was reported erased with no groups (the erase deleted nothing
then, yet counted it), and a save committed between the fetch and the
``DELETE`` was deleted at its new revision while the report gave the old
one's groups. The erase now locks the rows it reads (``FOR UPDATE``), so the
rival waits for it and the report is true. A dry run takes no lock (it must
not hold live saves, and may run on a read-only connection): a snapshot
deleted meanwhile is left out of its report, as an erase would not find it.

The rival is a second connection in a thread, started at the step under
test (a hook around ``_snapshot_groups``); the erase goes on once the rival
has finished or is waiting on a lock (``pg_stat_activity``), so the order is
fixed, not left to timing. Should the lock ever not hold (here: taken
away), a snapshot gone between the reads stops the erasure, typed, with
nothing changed, rather than be reported erased.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.abc
import psycopg
import pytest
from psycopg import sql

import agentium_postgres.erase as erase_module
from agentium_harness.plugin_api import (
    EraseTarget,
    OpContext,
    SessionKey,
    encode_segment,
    snapshot_bytes,
)
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore, PostgresSessionStoreError

pytestmark = pytest.mark.anyio

KEEP = SessionKey("acme", "ana", "s0")
VICTIM = SessionKey("acme", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


class _Rival:
    """One statement on the victim's row, run by its own connection in a thread."""

    def __init__(self, dsn: str, statement: sql.Composable, params: Sequence[Any]) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.statement, self.params = statement, params
        self.rowcount = -1
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.rowcount = self.conn.execute(self.statement, self.params).rowcount
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            self.done.set()

    async def start_and_settle(self, admin: psycopg.Connection[Any]) -> None:
        """Start the statement; return once it finished or waits on a row lock."""
        self.thread.start()
        with anyio.fail_after(20):
            while not self.done.is_set():
                row = admin.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (self.pid,)
                ).fetchone()
                if row is not None and row[0] == "Lock":
                    return
                await anyio.sleep(0.01)

    def finish(self) -> None:
        self.thread.join(20)
        assert not self.thread.is_alive(), "the rival statement never finished"
        self.conn.close()
        assert self.error is None, self.error


def _where(schema: str) -> sql.Composable:
    return sql.SQL(
        "{}.session_snapshots WHERE tenant_key = %s AND user_key = %s AND session_key = %s"
    ).format(sql.Identifier(schema))


def _victim_keys() -> list[str]:
    return [encode_segment(VICTIM.tenant), encode_segment(VICTIM.user), encode_segment(VICTIM.session)]


def _hook(
    monkeypatch: pytest.MonkeyPatch, rival: _Rival, admin: psycopg.Connection[Any], *, after: bool
) -> None:
    """Run ``rival`` just before (or just after) the erase fetches the snapshots it sized."""
    original: Callable[..., Awaitable[Any]] = erase_module._snapshot_groups

    async def hooked(*args: Any, **kwargs: Any) -> Any:
        if not after:
            await rival.start_and_settle(admin)
        out = await original(*args, **kwargs)
        if after:
            await rival.start_and_settle(admin)
        return out

    monkeypatch.setattr(erase_module, "_snapshot_groups", hooked)


async def _seed(store: PostgresSessionStore) -> dict[SessionKey, list[tuple[int, str]]]:
    groups = {}
    for key in (KEEP, VICTIM):
        snapshot = scoped_snapshot(key, " stored")
        await store.save(key, snapshot, None, _ctx())
        groups[key] = [(g.seq, g.digest) for g in snapshot.resident]
    return groups


def _remaining(admin: psycopg.Connection[Any], schema: str) -> int:
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {}.session_snapshots").format(sql.Identifier(schema))
    ).fetchone()
    return -1 if row is None else int(row[0])


@pytest.mark.parametrize("dry_run", [False, True])
async def test_a_snapshot_deleted_between_its_size_read_and_its_fetch(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    pg_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    dry_run: bool,
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        stored = await _seed(store)
        rival = _Rival(pg_server.admin_dsn(), sql.SQL("DELETE FROM ") + _where(schema), _victim_keys())
        _hook(monkeypatch, rival, admin, after=False)
        with anyio.fail_after(30):
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=dry_run)
        rival.finish()
        # The old erase reported the victim erased, with no groups, whether it ran for real (when it
        # deleted nothing of it) or dry (when an erase would find nothing of it).
        if dry_run:
            # No lock: the rival deleted the victim at once; the report names only what is left.
            assert rival.rowcount == 1
            assert {s.session: list(s.groups) for s in report.sessions} == {KEEP: stored[KEEP]}
            assert report.count("snapshot") == 1
            assert _remaining(admin, schema) == 1
        else:
            # The rival waited for the erase's transaction: the erase read and deleted the victim,
            # so it reports the victim's groups; the rival then found nothing to delete.
            assert rival.rowcount == 0
            assert {s.session: list(s.groups) for s in report.sessions} == stored
            assert report.count("snapshot") == 2
            assert _remaining(admin, schema) == 0
    finally:
        await store.aclose()


async def test_a_save_between_the_fetch_and_the_delete(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    pg_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        stored = await _seed(store)
        newer = scoped_snapshot(VICTIM, " saved later", groups=4)
        rival = _Rival(
            pg_server.admin_dsn(),
            sql.SQL(
                "UPDATE {}.session_snapshots SET revision = revision + 1, data = %s "
                "WHERE tenant_key = %s AND user_key = %s AND session_key = %s"
            ).format(sql.Identifier(schema)),
            [snapshot_bytes(newer), *_victim_keys()],
        )
        _hook(monkeypatch, rival, admin, after=True)
        with anyio.fail_after(30):
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        rival.finish()
        # What the erase deleted is what it reports: had the save committed before the DELETE, the
        # DELETE took the newer snapshot, whose groups the report must then give.
        deleted = dict(stored)
        if rival.rowcount == 1:
            deleted[VICTIM] = [(g.seq, g.digest) for g in newer.resident]
        assert {s.session: list(s.groups) for s in report.sessions} == deleted
        assert rival.rowcount == 0  # the save waited for the erase, then found the session gone
        assert _remaining(admin, schema) == 0
    finally:
        await store.aclose()


async def test_without_the_lock_a_snapshot_gone_between_the_reads_stops_the_erasure(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    pg_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The lock taken away (a broken erase): the rival's DELETE lands between the reads. Reporting
    # the victim erased, with no groups, by an erase that deleted nothing is what must not happen.
    monkeypatch.setattr(erase_module, "_ROW_LOCK", {False: "", True: ""})
    store = PostgresSessionStore(app_config)
    try:
        await _seed(store)
        floor_before = admin.execute(
            sql.SQL("SELECT revision FROM {}.session_revision_floor").format(sql.Identifier(schema))
        ).fetchone()
        rival = _Rival(pg_server.admin_dsn(), sql.SQL("DELETE FROM ") + _where(schema), _victim_keys())
        _hook(monkeypatch, rival, admin, after=False)
        with anyio.fail_after(30), pytest.raises(PostgresSessionStoreError, match="went between"):
            await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        rival.finish()
        assert rival.rowcount == 1
        # Nothing the erase did stayed: the other session is stored still, the floor did not move.
        assert _remaining(admin, schema) == 1
        assert await store.load(KEEP, _ctx()) is not None
        floor_after = admin.execute(
            sql.SQL("SELECT revision FROM {}.session_revision_floor").format(sql.Identifier(schema))
        ).fetchone()
        assert floor_after == floor_before
    finally:
        await store.aclose()


async def test_a_dry_run_takes_no_lock_so_it_runs_on_a_read_only_connection(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    """A dry run writes nothing: a read-only connection (a replica's, say) serves it, as before."""
    store = PostgresSessionStore(app_config)
    try:
        stored = await _seed(store)
    finally:
        await store.aclose()
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn())
    await conn.set_read_only(True)
    reader = PostgresSessionStore(app_config, connection=conn)
    try:
        with anyio.fail_after(30):
            report = await reader.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=True)
        assert {s.session: list(s.groups) for s in report.sessions} == stored
        assert report.count("snapshot") == 2
        assert _remaining(admin, schema) == 2
    finally:
        await reader.aclose()
        await conn.close()


async def test_a_session_created_in_another_tenant_while_an_erase_reads_is_not_held_by_it(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The erase locked the revision floor (one row for the whole store) before it listed, fetched
    # and decoded its snapshots, so every session created meanwhile, of any tenant, waited for the
    # erase's whole read and failed at its own deadline. The floor is needed only for the DELETE.
    store = PostgresSessionStore(app_config)
    creator = PostgresSessionStore(app_config)
    fresh = SessionKey("globex", "bob", "t1")
    outcome: dict[str, Any] = {}
    reading, settled = anyio.Event(), anyio.Event()
    original: Callable[..., Awaitable[Any]] = erase_module._snapshot_groups

    async def hooked(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        await settled.wait()
        return await original(*args, **kwargs)

    async def create() -> None:
        outcome["revision"] = await creator.save(fresh, scoped_snapshot(fresh, " new"), None, _ctx())

    async def rival(group: anyio.abc.TaskGroup) -> None:
        await reading.wait()
        group.start_soon(create)
        # Until the create finished or waits on a lock (pg_stat_activity): the order is fixed.
        while "revision" not in outcome:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                ("%INSERT INTO%session_snapshots%",),
            ).fetchone()
            if row is not None and row[0] > 0:
                outcome["held"] = True
                break
            await anyio.sleep(0.01)
        settled.set()

    try:
        groups = await _seed(store)
        monkeypatch.setattr(erase_module, "_snapshot_groups", hooked)
        with anyio.fail_after(25):
            async with anyio.create_task_group() as group:
                group.start_soon(rival, group)
                report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert "held" not in outcome, "a create of another tenant waited for the erase's reads"
        assert outcome["revision"] >= 1
        [session] = report.sessions
        assert session.session == VICTIM and list(session.groups) == groups[VICTIM]
        assert report.count("snapshot") == 1
        assert await store.load(KEEP, _ctx()) is not None and await store.load(fresh, _ctx()) is not None
        assert await store.load(VICTIM, _ctx()) is None
    finally:
        await store.aclose()
        await creator.aclose()
