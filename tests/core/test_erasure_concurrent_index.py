"""An erasure in another process while a commit indexes what it archived leaves no erased text for recall.

Two runtimes on one SQLite file stand for two worker processes of one host.
The first commits a turn that archives a group; before it indexes that group
for recall, the second erases the session, to completion. The first
process's index write then lands after the erasure's recall step and its
verification: without a check on the indexing side, the recall index kept
the erased text under a tombstone that says ``complete``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from agentium_harness import (
    EraseTarget,
    ErasureState,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ArchiveReceipt, MessageGroup, OpContext, SessionKey
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")


class _SlowIndexing(SQLiteRecallStore):
    """A recall store whose next ``index_groups`` first lets another process's work run."""

    before: Callable[[], Awaitable[None]] | None = None

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> None:
        hook, self.before = self.before, None
        if hook is not None:
            await hook()
        await super().index_groups(key, groups, receipts, ctx)


def _runtime(db: Path, recall: SQLiteRecallStore) -> HarnessRuntime:
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        owned=(recall,),
    )


async def test_groups_indexed_after_another_process_erased_them_leave_the_index(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    recall = _SlowIndexing(SQLiteRecallConfig(path=str(db)))
    other = _runtime(db, SQLiteRecallStore(SQLiteRecallConfig(path=str(db))))
    erased: list[ErasureState] = []

    async def erase_meanwhile() -> None:
        result = await other.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=OPERATOR
        )
        assert result.tombstone is not None
        erased.append(result.tombstone.state)

    async with other, _runtime(db, recall) as runtime:
        await runtime.append(ANA, "s1", [Message(Role.USER, "first secretmarker0 text")])
        assert b"secretmarker0" in database_bytes(db)
        recall.before = erase_meanwhile
        # Archives the first group (one resident group), then indexes it: the erasure comes first.
        await runtime.append(ANA, "s1", [Message(Role.USER, "second secretmarker1 text")])
        assert erased == [ErasureState.COMPLETE]
    data = database_bytes(db)
    assert b"secretmarker0" not in data
