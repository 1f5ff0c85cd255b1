"""A session store refuses, at save, a snapshot that is another session's (``check_snapshot_scope``).

The contract suite's ``test_save_refuses_another_sessions_snapshot`` covers
``save`` of every store; here: the shared check itself (its error is in both
families, names no id, and may be a store's own subclass), and the SQLite
store's joint commit, which writes the archive's groups in the same
transaction and must write none of them either.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentium_harness import ScopeMismatchError, SessionStoreError, SnapshotScopeMismatchError
from agentium_harness._ports import OpContext
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import SessionKey, check_snapshot_scope, snapshot_scope_issue
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "mine")
SIBLING = SessionKey("acme", "ana", "theirs")


class OwnScopeError(SnapshotScopeMismatchError):
    """A store's own subclass, as the S3 store has."""


def test_the_check_names_no_id_and_raises_in_both_families() -> None:
    assert snapshot_scope_issue(KEY, scoped_snapshot(KEY)) is None
    check_snapshot_scope(KEY, scoped_snapshot(KEY), "a store")  # its own: nothing raised
    with pytest.raises(SnapshotScopeMismatchError, match=r"^a store: .*nothing was written$") as caught:
        check_snapshot_scope(KEY, scoped_snapshot(SIBLING), "a store")
    assert isinstance(caught.value, SessionStoreError) and isinstance(caught.value, ScopeMismatchError)
    assert not any(part in str(caught.value) for part in ("acme", "ana", "mine", "theirs"))
    with pytest.raises(OwnScopeError):
        check_snapshot_scope(KEY, scoped_snapshot(SIBLING), "a store", error=OwnScopeError)


async def test_the_sqlite_joint_commit_refuses_another_sessions_snapshot_and_writes_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agentium.db"
    config = SQLiteConfig(path=str(db))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    try:
        for expected in (None, 1):
            with pytest.raises(SnapshotScopeMismatchError, match="nothing was written"):
                await store.commit_with_archive(
                    archive, KEY, [plain_group(4)], scoped_snapshot(SIBLING), expected, OpContext()
                )
        assert await store.load(KEY, OpContext()) is None
        assert await archive.read_groups(KEY, 0, 10, OpContext()) == []
    finally:
        await store.aclose()
        await archive.aclose()
    with sqlite3.connect(str(db)) as conn:
        # Every row, even one of a group the archive's reads would not show: none was written.
        for table in ("sessions", "groups"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
