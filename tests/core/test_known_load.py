"""A run's load takes what the SQLite store knows unchanged at once, without a bounded call.

Every run and every history write reads the tenant's erasure fence and the
session's snapshot. When the built-in SQLite store wrote or read both rows
last and nothing committed to the file since, it answers them on the calling
thread (``SQLiteSessionStore._agentium_load_known``) and the engine takes
those answers instead of running a bounded call (a task, a cancel scope and a
loop iteration) around a load that would not wait either. The answers are
checked as a load's are; anything the store cannot answer so is loaded as
before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentium_harness import Message, OpContext, Role, SessionKey, VerifiedIdentity, create_harness_runtime
from agentium_harness._engine.erasure_ledger import pending_key
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports.sessions import StoredSnapshot
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import seal_snapshot
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

ID = VerifiedIdentity("tenant", "user", "benchmark")
KEY = SessionKey("tenant", "user", "session")


class CountingStore(SQLiteSessionStore):
    """Counts the loads that went through :meth:`load` (the bounded path)."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.loads: list[SessionKey] = []

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        self.loads.append(key)
        return await super().load(key, ctx)


def _config(tmp_path: Path) -> SQLiteConfig:
    return SQLiteConfig(path=str(tmp_path / "agentium.db"))


async def test_a_run_on_a_session_known_unchanged_loads_it_without_a_bounded_load(tmp_path: Path) -> None:
    store, archive = CountingStore(_config(tmp_path)), SQLiteArchive(_config(tmp_path))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        owned=(archive, store),
    )
    async with runtime:
        first = await runtime.run(ID, "session", "one")  # reads both rows: nothing is known yet
        assert len(store.loads) == 2
        store.loads.clear()
        for n in range(12):  # past the resident bound: eviction and joint commits on the way
            result = await runtime.run(ID, "session", f"turn {n}")
            assert result.snapshot_revision == first.snapshot_revision + n + 1
        # An append loads the same way.
        appended = await runtime.append(
            ID, "session", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")]
        )
        assert appended.seq == 13
        assert store.loads == []
        view = await runtime.inspect_session(ID, "session")
        assert view.next_seq == 14


async def test_a_commit_by_another_store_on_the_file_is_loaded_through_the_store(tmp_path: Path) -> None:
    store, archive = CountingStore(_config(tmp_path)), SQLiteArchive(_config(tmp_path))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        owned=(archive, store),
    )
    other = SQLiteSessionStore(_config(tmp_path))
    async with runtime:
        done = await runtime.run(ID, "session", "one")
        await runtime.run(ID, "session", "two")
        store.loads.clear()
        # Another connection commits to the file: what this store knows may be stale now.
        key = SessionKey("tenant", "user", "session")
        loaded = await other.load(key, OpContext())
        assert loaded is not None
        await other.save(key, loaded.snapshot, loaded.revision, OpContext())
        result = await runtime.run(ID, "session", "three")
        assert store.loads, "the fence and the session must be read again after another commit"
        assert result.snapshot_revision == done.snapshot_revision + 3  # on the other store's revision
    await other.aclose()


async def test_the_known_answers_are_none_for_another_store_or_an_expired_context(tmp_path: Path) -> None:
    from agentium_harness._engine.load import known_fence_and_session

    store = SQLiteSessionStore(_config(tmp_path))
    try:
        revision = await store.save(KEY, seal_snapshot(scoped_snapshot(KEY, "a")), None, OpContext())
        loaded = await store.load(KEY, OpContext())
        assert loaded is not None and loaded.revision == revision
        ticket = Ticket(KEY, "run", 30.0)
        # The fence was never read: only a load can say it is absent.
        assert known_fence_and_session(ticket, store, KEY) is None
        assert await store.load(pending_key(KEY.tenant), OpContext()) is None
        known = known_fence_and_session(ticket, store, KEY)
        assert known is not None and known[0] is None and known[1] is loaded
        ticket.signal.cancel("stopped")  # a cancelled operation reads through the bounded call
        assert known_fence_and_session(ticket, store, KEY) is None

        class Plain:
            async def load(self, key: SessionKey, ctx: OpContext) -> None:
                return None

        assert known_fence_and_session(Ticket(KEY, "run", 30.0), Plain(), KEY) is None  # type: ignore[arg-type]
    finally:
        await store.aclose()


async def test_the_fence_and_the_session_are_known_from_one_look_at_the_file(tmp_path: Path) -> None:
    # Both answers as of one data_version peek: they agree with each other as the rows did then.
    peeks: list[int | None] = []

    class Peeking(SQLiteSessionStore):
        def _peek_data_version(self) -> int | None:
            version = super()._peek_data_version()
            peeks.append(version)
            return version

    store = Peeking(_config(tmp_path))
    try:
        await store.save(KEY, seal_snapshot(scoped_snapshot(KEY, "a")), None, OpContext())
        loaded = await store.load(KEY, OpContext())
        assert await store.load(pending_key(KEY.tenant), OpContext()) is None
        peeks.clear()
        answers = store._agentium_load_known((pending_key(KEY.tenant), KEY), OpContext())
        assert answers == (None, loaded) and answers[1] is loaded
        assert len(peeks) == 1
        # One row not known: no answer at all (and no peek needed to say so).
        peeks.clear()
        assert store._agentium_load_known((SessionKey("tenant", "user", "other"), KEY), OpContext()) is None
        assert peeks == []
    finally:
        await store.aclose()
