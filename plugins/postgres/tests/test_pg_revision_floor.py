"""Revisions never repeat across erasure: the session store's revision floor (schema version 3).

An erase raises ``session_revision_floor`` to the highest revision it
removed, in its own transaction, and a create stores floor + 1. Without it a
session created again under an erased id started at revision 1, and a writer
holding revision N of the erased session passed the compare-and-set once the
new one reached N: the erased text was written back over the new turns (ABA).
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest
from pg_server import APP_USER, PostgresServer, new_schema_name

from agentium_harness.plugin_api import (
    EraseTarget,
    OpContext,
    SessionConflictError,
    SessionKey,
    encode_segment,
    snapshot_bytes,
)
from agentium_harness.testing import rich_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresSchemaError,
    PostgresSessionStore,
    PostgresSessionStoreError,
    migrate,
)
from agentium_postgres.erase import erase_snapshots
from agentium_postgres.schema import TENANT_SETTING

pytestmark = pytest.mark.anyio

Admin = psycopg.Connection[Any]
KEY = SessionKey("acme", "ana", "s1")
NEIGHBOUR = SessionKey("acme", "ana", "s10")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def floor_of(admin: Admin, schema: str) -> int:
    [(value,)] = admin.execute(f'SELECT revision FROM "{schema}".session_revision_floor').fetchall()
    return int(value)


def snapshots(admin: Admin, schema: str) -> list[tuple[Any, ...]]:
    rows = admin.execute(
        f'SELECT tenant_key, user_key, session_key, revision, data FROM "{schema}".session_snapshots '
        "ORDER BY 1, 2, 3"
    ).fetchall()
    return [tuple(r) for r in rows]


async def _save_times(store: PostgresSessionStore, key: SessionKey, n: int, marker: str) -> int:
    revision = await store.save(key, scoped_snapshot(key, f" {marker} 0"), None, _ctx())
    for i in range(1, n):
        revision = await store.save(key, scoped_snapshot(key, f" {marker} {i}"), revision, _ctx())
    return revision


async def test_a_session_created_again_after_erasure_never_reuses_a_revision(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        erased = await store.save(KEY, scoped_snapshot(KEY, " first"), None, _ctx())
        assert erased == 1  # a fresh store: the floor is 0
        for i in range(4):
            erased = await store.save(KEY, scoped_snapshot(KEY, f" old {i}"), erased, _ctx())
        assert erased == 5
        neighbour = await _save_times(store, NEIGHBOUR, 3, "neighbour")
        before_neighbour = [r for r in snapshots(admin, schema) if r[2] == encode_segment("s10")]
        stale_revisions = range(1, erased + 1)

        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.sessions and report.sessions[0].session == KEY
        assert floor_of(admin, schema) == erased
        assert await store.load(KEY, _ctx()) is None

        # Re-created under the same id: past every revision the erased session had.
        again = await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx())
        assert again == erased + 1
        new_text = snapshots(admin, schema)
        for stale in stale_revisions:
            with pytest.raises(SessionConflictError):
                await store.save(KEY, scoped_snapshot(KEY, f" erased text {stale}"), stale, _ctx())
        assert snapshots(admin, schema) == new_text  # nothing changed
        loaded = await store.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == again
        assert loaded.snapshot == scoped_snapshot(KEY, " new")
        # Later saves count on by one.
        assert await store.save(KEY, scoped_snapshot(KEY, " newer"), again, _ctx()) == again + 1

        # The neighbour (a prefix of whose id is the erased one) is untouched and counts on as before.
        assert [r for r in snapshots(admin, schema) if r[2] == encode_segment("s10")] == before_neighbour
        assert await store.save(NEIGHBOUR, scoped_snapshot(NEIGHBOUR, " on"), neighbour, _ctx()) == 4
        # A session created anew anywhere in the store starts past the floor too (one store-wide number).
        other = SessionKey("globex", "bo", "x")
        assert await store.save(other, scoped_snapshot(other, " x"), None, _ctx()) == erased + 1

        # A dry run raises nothing; an erase of a user raises the floor to the highest it removed.
        await store.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=True)
        assert floor_of(admin, schema) == erased
        await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert floor_of(admin, schema) == again + 1
        assert await store.save(NEIGHBOUR, scoped_snapshot(NEIGHBOUR, " back"), None, _ctx()) == again + 2
    finally:
        await store.aclose()


async def test_the_joint_commit_creates_past_the_floor_too(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    archive, store = PostgresArchive(app_config), PostgresSessionStore(app_config)
    try:
        revision = await _save_times(store, KEY, 3, "old")
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        await archive.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        groups = [rich_group(0, KEY, "evicted zero")]
        with pytest.raises(SessionConflictError):  # the erased incarnation's revision: refused
            await store.commit_with_archive(
                archive, KEY, groups, scoped_snapshot(KEY, " x"), revision, _ctx()
            )
        assert snapshots(admin, schema) == []
        assert admin.execute(f'SELECT count(*) FROM "{schema}".archive_groups').fetchone() == (0,)
        created, _ = await store.commit_with_archive(
            archive, KEY, groups, scoped_snapshot(KEY, " new"), None, _ctx()
        )
        assert created == revision + 1
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_create_racing_an_erase_waits_for_it_and_starts_past_the_erased_revision(
    pg_server: PostgresServer, app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """The erase holds the floor; the create's lock returns the raised floor, not its snapshot's."""
    store = PostgresSessionStore(app_config)
    try:
        erased = await _save_times(store, KEY, 4, "old")
        conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
        try:
            result: list[int] = []
            async with anyio.create_task_group() as tg:
                async with conn.transaction():
                    await conn.execute("SELECT set_config(%s, 'acme', true)", (TENANT_SETTING,))
                    # The erase, in another connection, deletes and raises the floor: not yet committed.
                    report, _ = await erase_snapshots(
                        conn, schema, EraseTarget.session("acme", "ana", "s1"), 10, False
                    )
                    assert report.sessions

                    async def create() -> None:
                        result.append(await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx()))

                    tg.start_soon(create)
                    await anyio.sleep(1.0)
                    assert result == []  # the create waits for the erase's transaction
                # Committed: the create goes on, past the floor the erase raised.
            assert result == [erased + 1]
        finally:
            await conn.close()
        stored = await store.load(KEY, _ctx())
        assert stored is not None and stored.revision == erased + 1
    finally:
        await store.aclose()


async def test_an_erase_waits_for_a_create_holding_the_floor_and_deadlocks_with_nothing(
    pg_server: PostgresServer, app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    """A create that locked the floor first ends first: the erase deletes nothing before it holds it."""
    store = PostgresSessionStore(app_config)
    try:
        erased = await _save_times(store, KEY, 2, "old")
        conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
        try:
            done: list[object] = []
            async with anyio.create_task_group() as tg:
                with pytest.raises(psycopg.Error) as caught:
                    async with conn.transaction():
                        await conn.execute("SELECT set_config(%s, 'acme', true)", (TENANT_SETTING,))
                        # A create of the same key that took the floor FOR SHARE before the erase began.
                        await conn.execute(
                            f'SELECT revision FROM "{schema}".session_revision_floor FOR SHARE'
                        )

                        async def erase() -> None:
                            done.append(await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx()))

                        tg.start_soon(erase)
                        await anyio.sleep(0.5)
                        assert done == []  # the erase waits for the floor
                        # The create's insert: the session still exists (the erase deleted nothing yet),
                        # so it is a conflict at once, not a wait on a deleted row (a deadlock).
                        data = snapshot_bytes(scoped_snapshot(KEY, " new"))
                        await (await store._queue_cas(conn, KEY, data, None)).fetchone()
                assert caught.value.sqlstate == "AG002"
            assert len(done) == 1
        finally:
            await conn.close()
        assert floor_of(admin, schema) == erased
        assert snapshots(admin, schema) == []
    finally:
        await store.aclose()


async def test_the_floor_only_rises_whatever_the_application_role_sends(
    schema: str, app_config: PostgresConfig, admin: Admin, app_conn: psycopg.AsyncConnection[Any]
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        await _save_times(store, KEY, 3, "old")
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
    finally:
        await store.aclose()
    assert floor_of(admin, schema) == 3
    for statement in (
        f'UPDATE "{schema}".session_revision_floor SET revision = 0',
        f'DELETE FROM "{schema}".session_revision_floor',
        f'INSERT INTO "{schema}".session_revision_floor (singleton, revision) VALUES (true, 0)',
    ):
        with pytest.raises(psycopg.Error):
            await app_conn.execute(statement)
    assert floor_of(admin, schema) == 3


async def test_a_version_2_database_is_refused_until_migrated_then_keeps_its_sessions(
    pg_server: PostgresServer, admin: Admin
) -> None:
    schema = new_schema_name()
    owner = PostgresConfig(dsn=pg_server.admin_dsn(), schema=schema)
    await migrate(owner, grant_to=[APP_USER], to_version=2)
    config = PostgresConfig(dsn=pg_server.app_dsn(), schema=schema, min_pool_size=0)
    # A session written at version 2, as the version-2 store wrote it (revision 3).
    old = await migrate_free_save(admin, schema, KEY, revision=3)
    store = PostgresSessionStore(config)
    try:
        with pytest.raises(PostgresSchemaError, match=r"version 2.*agentium postgres migrate"):
            await store.save(KEY, scoped_snapshot(KEY, " x"), 3, _ctx())
    finally:
        await store.aclose()
    assert snapshots(admin, schema) == old

    report = await migrate(owner, grant_to=[APP_USER])
    assert (report.from_version, report.to_version, report.applied) == (2, 4, (3, 4))
    assert floor_of(admin, schema) == 0
    again = await migrate(owner, grant_to=[APP_USER])  # idempotent: nothing applied, the floor kept
    assert again.applied == () and floor_of(admin, schema) == 0

    store = PostgresSessionStore(config)
    try:
        loaded = await store.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == 3
        assert await store.save(KEY, scoped_snapshot(KEY, " on"), 3, _ctx()) == 4
        fresh = SessionKey("acme", "ana", "fresh")
        assert await store.save(fresh, scoped_snapshot(fresh, " a"), None, _ctx()) == 1
        await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert floor_of(admin, schema) == 4
        assert await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx()) == 5
        with pytest.raises(SessionConflictError):
            await store.save(KEY, scoped_snapshot(KEY, " erased"), 4, _ctx())
    finally:
        await store.aclose()


async def migrate_free_save(
    admin: Admin, schema: str, key: SessionKey, revision: int
) -> list[tuple[Any, ...]]:
    """Write ``key``'s snapshot at ``revision`` as the superuser (the adapters refuse this schema)."""
    t, u, s = key.key_segments()
    admin.execute(
        f'INSERT INTO "{schema}".session_snapshots (tenant_key, user_key, session_key, session_id, revision, '
        "data) VALUES (%s, %s, %s, %s, %s, %s)",
        (t, u, s, key.session, revision, snapshot_bytes(scoped_snapshot(key, " v2"))),
    )
    return snapshots(admin, schema)


async def test_a_create_without_the_floor_row_says_so_instead_of_a_conflict_to_retry(
    app_config: PostgresConfig, admin: Admin, schema: str
) -> None:
    # A TRUNCATE (the trigger refuses only DELETE) leaves no floor row: a create then inserted
    # nothing and reported "expected no snapshot, found no snapshot; another writer committed
    # first. Reload and retry", a SessionConflictError no retry could ever get past.
    store = PostgresSessionStore(app_config)
    archive = PostgresArchive(app_config)
    try:
        await _save_times(store, NEIGHBOUR, 2, "neighbour")
        admin.execute(f'TRUNCATE "{schema}".session_revision_floor')
        before = snapshots(admin, schema)
        with pytest.raises(PostgresSessionStoreError, match="revision floor's row is missing"):
            await store.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx())
        with pytest.raises(PostgresSessionStoreError, match="revision floor's row is missing"):
            await store.commit_with_archive(archive, KEY, [], scoped_snapshot(KEY, " new"), None, _ctx())
        assert snapshots(admin, schema) == before
        # A stale writer and a real conflict are still conflicts.
        with pytest.raises(SessionConflictError):
            await store.save(NEIGHBOUR, scoped_snapshot(NEIGHBOUR, " stale"), 1, _ctx())
        assert await store.save(NEIGHBOUR, scoped_snapshot(NEIGHBOUR, " next"), 2, _ctx()) == 3
    finally:
        await store.aclose()
        await archive.aclose()
