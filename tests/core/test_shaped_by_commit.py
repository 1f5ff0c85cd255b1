"""A joint commit notes the snapshot it saved as well formed; only that very object skips the shape check.

The engine's load checks the shape of every snapshot a store hands back
(``check_snapshot_shape``), except the object it last found well formed for
the session. A joint commit (the SQLite pair on one file) notes the snapshot
it saved the same way, so the next load, handed that object back, does not
check it again. Any other object for the session, however it came, is
checked in full: a sealed snapshot (its digest right) whose shape is
impossible is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness import (
    OpContext,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import StoredSnapshot, seal_snapshot

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-suite")
KEY = SessionKey("acme", "alice", "s")


async def test_only_the_snapshot_a_joint_commit_saved_skips_the_shape_check(tmp_path: Path) -> None:
    path = str(tmp_path / "history.db")
    store = SQLiteSessionStore(SQLiteConfig(path=path))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=path)),
        session_store=store,
    )
    async with runtime:
        # Past the resident bound (8 groups), so the turns archive through the joint commit.
        for _ in range(10):
            await runtime.run(ALICE, "s", "hello")
        result = await runtime.run(ALICE, "s", "hello")  # loads the object the last commit saved
        assert result.archived
        saved = store._agentium_load_known((KEY,), OpContext.with_timeout(30.0))
        assert saved is not None and saved[0] is not None
        good = saved[0]
        # Sealed (its digest is right) but impossible: one seq more than its resident groups.
        bad = seal_snapshot(attrs.evolve(good.snapshot, next_seq=good.snapshot.next_seq + 1, digest=None))
        answers: dict[str, Any] = {"snapshot": StoredSnapshot(bad, good.revision)}

        def known(keys: tuple[SessionKey, ...], ctx: Any) -> tuple[object, ...]:
            return tuple(answers["snapshot"] if k == KEY else None for k in keys)

        store._agentium_load_known = known  # type: ignore[method-assign]  # the store hands back another object
        with pytest.raises(SnapshotCorruptError, match="inconsistent"):
            await runtime.run(ALICE, "s", "hello")
        # The saved object itself still loads, and the turn commits on it.
        answers["snapshot"] = good
        assert (await runtime.run(ALICE, "s", "hello")).snapshot_revision == good.revision + 1
