"""Revisions a session store hands out for a key never repeat, even across an erasure of it (ABA).

A writer that loaded revision N of a session, then lost the race to an
erasure of it, used to pass the compare-and-set once the erased id, used
again, was back at revision N (a new session started at 1 again): the erased
text was written over the new session and its turns were lost. The engine
reads the pending-erasure ledger again before a run's commit, but an erasure
and a re-use that both fall between that read and the write are not seen by
it, and ``migrate_legacy_session`` saves on the revision it loaded alone.
The built-in stores now keep a store-wide revision floor that ``erase``
raises to the highest revision it removes; a session created afterwards
starts above it.

Two runtimes over the same stores stand for two processes; the slow one's
store holds its commit's write at a gate, after every check the engine makes.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    SessionConflictError,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SeqRange
from agentium_harness.testing import legacy_snapshot, scoped_snapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
SECRET = "qzerasedsecretq"


class Gate:
    """Holds the next write of ``KEY`` once armed, after saying it is there, until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def pass_(self, key: SessionKey) -> None:
        if self.armed and key == KEY:
            self.armed = False
            self.entered.set()
            await self.release.wait()


class HeldMemoryStore(InMemorySessionStore):
    capabilities = InMemorySessionStore.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        await self.gate.pass_(key)
        return await super().save(key, snapshot, expected_revision, ctx)


class HeldSQLiteStore(SQLiteSessionStore):
    capabilities = SQLiteSessionStore.capabilities

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.gate = Gate()

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        await self.gate.pass_(key)
        return await super().save(key, snapshot, expected_revision, ctx)

    async def commit_with_archive(
        self,
        archive: Any,
        key: SessionKey,
        groups: Any,
        snapshot: Any,
        expected_revision: int | None,
        ctx: Any,
    ) -> Any:
        await self.gate.pass_(key)
        return await super().commit_with_archive(archive, key, groups, snapshot, expected_revision, ctx)


def _runtimes(stores: str, db: Path) -> tuple[Any, Any, Gate]:
    """The slow runtime (its store's writes of ``KEY`` can be held) and the operator's, on one backend."""
    if stores == "memory":
        archive, held = InMemoryArchive(), HeldMemoryStore()
        slow_parts: dict[str, Any] = {"archive": archive, "session_store": held}
        other_parts: dict[str, Any] = {"archive": archive, "session_store": held}
    else:
        config = SQLiteConfig(path=str(db))
        held = HeldSQLiteStore(config)
        slow_parts = {"archive": SQLiteArchive(config), "session_store": held}
        other_parts = {"archive": SQLiteArchive(config), "session_store": SQLiteSessionStore(config)}
    slow = create_harness_runtime(provider=ScriptedProvider(replies=["noted"], cycle=True), **slow_parts)
    other = create_harness_runtime(provider=ScriptedProvider(replies=["ok"], cycle=True), **other_parts)
    return slow, other, held.gate


def _rows_holding(db: Path, text: str) -> list[str]:
    """Tables of the file whose stored bytes hold ``text`` (raw SQL)."""
    needle, found = text.encode(), []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for table, column in (("groups", "data"), ("sessions", "snapshot")):
            for (value,) in conn.execute(f"SELECT {column} FROM {table}"):
                data = value.encode() if isinstance(value, str) else value
                if isinstance(data, bytes) and needle in data:
                    found.append(table)
    return found


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
@pytest.mark.parametrize("writer", ["run", "migrate"])
async def test_a_write_held_past_every_check_never_lands_on_the_reused_session(
    stores: str, writer: str, tmp_path: Path
) -> None:
    # The slow writer has loaded the session (a run at revision 2, past its ledger re-check; a
    # migration of a legacy snapshot at revision 1, which has no such check) and is about to
    # write. The erasure completes and the id is used again for as many revisions as it loaded.
    slow, other, gate = _runtimes(stores, tmp_path / "agentium.db")
    try:
        if writer == "run":
            await slow.run(ANA, "s0", f"first {SECRET}")
            await slow.run(ANA, "s0", "second turn")
        else:
            snapshot = legacy_snapshot(f" {SECRET}")
            await slow.session_store.save(KEY, snapshot, None, OpContext.with_timeout(30))
        loaded = (await slow.session_store.load(KEY, OpContext.with_timeout(30))).revision
        gate.armed = True
        failures: list[BaseException] = []
        results: list[Any] = []

        async def stale() -> None:
            try:
                if writer == "run":
                    results.append(await slow.run(ANA, "s0", "stale turn"))
                else:
                    results.append(
                        await slow.migrate_legacy_session(ANA, "s0", attest_legacy_memory_scope=True)
                    )
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale)
            await gate.entered.wait()  # loaded, checked, about to write on revision `loaded`
            erased = await other.erase(
                EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
            )
            assert erased.tombstone is not None and erased.tombstone.state is ErasureState.COMPLETE
            for i in range(loaded):
                assert (await other.run(ANA, "s0", f"new turn {i}")).committed
            reused = (await other.inspect_session(ANA, "s0")).revision
            gate.release.set()

        assert results == [], "the stale write landed on the re-used session"
        assert reused > loaded  # the store's revision floor: the re-used id never comes back to `loaded`
        (failure,) = failures
        assert isinstance(failure, SessionConflictError), failure
        if writer == "run":  # a migration's conflict is the store's own error, raised as it is
            assert str(getattr(failure, "commit_state", None)) in (
                "not_committed",
                "CommitState.NOT_COMMITTED",
            )
        assert (await other.inspect_session(ANA, "s0")).revision == reused
        texts = repr(await other.read_history(ANA, "s0", max_groups=100, view=False))
        assert all(f"new turn {i}" in texts for i in range(loaded))
        assert SECRET not in texts and "stale turn" not in texts
        if stores == "sqlite":
            assert _rows_holding(tmp_path / "agentium.db", SECRET) == []
        assert (await slow.run(ANA, "s0", "after")).committed  # the slow process carries on
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_the_floor_is_store_wide_and_a_dry_run_or_groups_target_leaves_it(
    stores: str, tmp_path: Path
) -> None:
    store: Any = (
        InMemorySessionStore()
        if stores == "memory"
        else SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "a.db")))
    )
    ctx = OpContext.with_timeout(30)
    other = SessionKey("acme", "bob", "s9")
    try:
        revision = await store.save(KEY, scoped_snapshot(KEY, "a"), None, ctx)
        for _ in range(4):
            revision = await store.save(KEY, scoped_snapshot(KEY, "a"), revision, ctx)
        assert revision == 5
        await store.erase(EraseTarget.session("acme", "ana", "s0"), ctx, dry_run=True)
        await store.erase(EraseTarget.groups_of(KEY, [SeqRange(0, 100)]), ctx)  # removes no snapshot
        assert await store.save(other, scoped_snapshot(other, "b"), None, ctx) == 1  # nothing erased yet
        await store.erase(EraseTarget.session("acme", "ana", "s0"), ctx)
        # Any session created afterwards, of any tenant or user, starts above the floor: the floor
        # names no session, so nothing of the erased one is left but a number.
        assert await store.save(KEY, scoped_snapshot(KEY, "c"), None, ctx) == 6
        third = SessionKey("other", "carl", "x")
        assert await store.save(third, scoped_snapshot(third, "d"), None, ctx) == 6
        # Saves of a session that lived through the erasure keep counting from its own revision.
        assert await store.save(other, scoped_snapshot(other, "e"), 1, ctx) == 2
    finally:
        await store.aclose()


async def test_a_database_written_before_the_floor_existed_opens_and_gains_it(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(db))
    store = SQLiteSessionStore(config)
    ctx = OpContext.with_timeout(30)
    revision = await store.save(KEY, scoped_snapshot(KEY, "old"), None, ctx)
    revision = await store.save(KEY, scoped_snapshot(KEY, "old"), revision, ctx)
    await store.aclose()
    # What code of schema version 2 from before the floor left: version 2, no revision_floor table.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE revision_floor")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.commit()
    store = SQLiteSessionStore(config)
    try:
        loaded = await store.load(KEY, ctx)
        assert loaded is not None and loaded.revision == 2
        await store.erase(EraseTarget.session("acme", "ana", "s0"), ctx)
        assert await store.save(KEY, scoped_snapshot(KEY, "new"), None, ctx) == 3
        with pytest.raises(SessionConflictError):
            await store.save(KEY, scoped_snapshot(KEY, "stale"), 2, ctx)
    finally:
        await store.aclose()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT id, floor FROM revision_floor").fetchall() == [(0, 2)]
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)


async def test_a_damaged_floor_refuses_to_create_a_session_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    ctx = OpContext.with_timeout(30)
    try:
        await store.save(KEY, scoped_snapshot(KEY, "a"), None, ctx)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("DROP TRIGGER revision_floor_update_only_rises")  # it refuses the damage
            conn.execute("UPDATE revision_floor SET floor = 'damaged' WHERE id = 0")
            conn.commit()
        fresh = SessionKey("acme", "ana", "s1")
        with pytest.raises(SnapshotCorruptError, match="revision floor"):
            await store.save(fresh, scoped_snapshot(fresh, "b"), None, ctx)
        assert await store.load(fresh, ctx) is None
        # A session that exists saves as before: only creating one needs the floor.
        assert await store.save(KEY, scoped_snapshot(KEY, "c"), 1, ctx) == 2
    finally:
        await store.aclose()


@pytest.mark.parametrize("at", ["floor", "session"])
async def test_a_revision_past_sqlite_integers_is_a_typed_error_and_changes_nothing(
    at: str, tmp_path: Path
) -> None:
    # A floor (or a stored revision) at SQLite's highest integer leaves no next revision: the
    # save must say so with a typed error, not let the driver's OverflowError escape.
    db = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    ctx = OpContext.with_timeout(30)
    top = 2**63 - 1
    try:
        await store.save(KEY, scoped_snapshot(KEY, "a"), None, ctx)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            if at == "floor":
                conn.execute("UPDATE revision_floor SET floor = ? WHERE id = 0", (top,))
            else:
                conn.execute("UPDATE sessions SET revision = ?", (top,))
            conn.commit()
        key, expected = (SessionKey("acme", "ana", "s1"), None) if at == "floor" else (KEY, top)
        with pytest.raises(SnapshotCorruptError, match="past the highest"):
            await store.save(key, scoped_snapshot(key, "b"), expected, ctx)
        loaded = await store.load(key, ctx)
        assert (loaded is None) if at == "floor" else (loaded is not None and loaded.revision == top)
    finally:
        await store.aclose()
