"""The SQLite recall store says which archived groups it lacks (``unindexed_groups``), bounded.

Before, it answered ``None`` (it could not tell), so the engine's catch-up
never ran for the built-in store: groups whose indexing failed stayed
unfindable until an operator ran ``agentium recall rebuild``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentium_harness import (
    OpContext,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import UNINDEXED_WINDOW, SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ArchiveReceipt
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def test_unindexed_groups_lists_the_gaps_below_a_seq(tmp_path: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "r.db")))
    try:
        assert await store.unindexed_groups(KEY, 3, 16, ctx()) == [0, 1, 2]  # nothing indexed yet
        groups = [plain_group(seq, f"group {seq}") for seq in (0, 1, 2, 5, 6, 9)]
        await store.index_groups(KEY, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
        assert await store.unindexed_groups(KEY, 12, 16, ctx()) == [3, 4, 7, 8, 10, 11]
        assert await store.unindexed_groups(KEY, 12, 2, ctx()) == [3, 4]  # at most max_groups
        assert await store.unindexed_groups(KEY, 3, 16, ctx()) == []
        assert await store.unindexed_groups(KEY, 0, 16, ctx()) == []
        assert await store.unindexed_groups(SessionKey("acme", "ana", "other"), 2, 16, ctx()) == [0, 1]
        assert await store.unindexed_groups(SessionKey("acme", "bob", "s1"), 2, 16, ctx()) == [0, 1]
    finally:
        await store.aclose()


async def test_a_long_session_is_read_through_a_bounded_window(tmp_path: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "r.db")))
    try:
        total = UNINDEXED_WINDOW + 904
        groups = [plain_group(seq, f"group {seq}") for seq in range(total) if seq not in (10, total - 10)]
        await store.index_groups(KEY, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
        # The recent gap is found; one older than the window is left to `agentium recall rebuild`.
        assert await store.unindexed_groups(KEY, total, 16, ctx()) == [total - 10]
        assert await store.unindexed_groups(KEY, total + 2, 16, ctx()) == [total - 10, total, total + 1]
        assert await store.unindexed_groups(KEY, 100, 16, ctx()) == [10]
        assert await store.unindexed_groups(KEY, 10**9, 2, ctx()) == [total - 10, total]
    finally:
        await store.aclose()


async def test_groups_the_index_lost_are_indexed_again_by_the_next_commits(tmp_path: Path) -> None:
    path = str(tmp_path / "agentium.db")
    store = SQLiteRecallStore(SQLiteRecallConfig(path=path))
    archive, sessions = SQLiteArchive(SQLiteConfig(path=path)), SQLiteSessionStore(SQLiteConfig(path=path))
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=sessions,
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ana = VerifiedIdentity("acme", "ana", "test")
    try:
        for i in range(6):
            await runtime.run(ana, "s1", f"q{i}z")
        assert [g.seq for g in await store.seek_groups(KEY, 0, 100, ctx())] == [0, 1, 2, 3, 4]
        conn = sqlite3.connect(path)  # the index loses groups 1 and 3 behind the store's back
        with conn:
            conn.execute("DELETE FROM recall_sources WHERE kind = 'group' AND seq IN (1, 3)")
        conn.close()
        result = await runtime.run(ana, "s1", "q6z")
        assert result.committed
        assert "recall_index_caught_up" in [d.code for d in result.diagnostics]
        assert [g.seq for g in await store.seek_groups(KEY, 0, 100, ctx())] == [0, 1, 2, 3, 4, 5]
    finally:
        await runtime.aclose()
        for adapter in (store, archive, sessions):
            await adapter.aclose()
