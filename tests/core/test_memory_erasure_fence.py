"""A fact remembered (or corrected) in another process while its user is being erased is refused.

Two runtimes on one SQLite file stand for two worker processes of one host.
The first erases a user and is held inside its memory store's erase; the
second remembers a fact for that user meanwhile. Without the fence, the fact
was written and, landing after the erasure's memory step and verification,
outlived an erasure that said ``complete``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    ErasureState,
    HarnessRuntime,
    MemoryFact,
    MemoryScope,
    OperatorAttestation,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import EraseReport, OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
BOB = MemoryScope("acme", "bob")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")


class _HeldErase(SQLiteMemoryStore):
    """A memory store whose erase calls wait for the test's signal."""

    entered: anyio.Event
    gate: anyio.Event

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.entered.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


def _runtime(db: Path, memory: SQLiteMemoryStore) -> HarnessRuntime:
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=memory,
        owned=(memory,),
    )


async def test_a_fact_written_while_its_user_is_being_erased_is_refused_and_not_kept(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    held = _HeldErase(SQLiteConfig(path=str(db)))
    held.entered, held.gate = anyio.Event(), anyio.Event()
    states: list[ErasureState] = []

    async with (
        _runtime(db, held) as eraser,
        _runtime(db, SQLiteMemoryStore(SQLiteConfig(path=str(db)))) as writer,
    ):
        memory = writer.memory
        assert memory is not None
        kept = await memory.remember(MemoryFact(ANA, "Ana deploys on Tuesdays"))

        async def erase() -> None:
            result = await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
            assert result.tombstone is not None
            states.append(result.tombstone.state)

        async with anyio.create_task_group() as tg:
            tg.start_soon(erase)
            await held.entered.wait()  # the erasure is recorded, pending
            with pytest.raises(ErasureInProgressError, match="nothing was written"):
                await memory.remember(MemoryFact(ANA, "Ana's desk is 4B"))
            with pytest.raises(ErasureInProgressError):
                await memory.correct(ANA, kept.fact_id, MemoryFact(ANA, "Ana deploys on Thursdays"))
            # Another user's memory is not fenced.
            assert (await memory.remember(MemoryFact(BOB, "Bob deploys on Fridays"))).status == "stored"
            held.gate.set()
        assert states == [ErasureState.COMPLETE]
        assert await memory.list(ANA) == ()
        # Once the erasure completed, the user's memory takes facts again.
        assert (await memory.remember(MemoryFact(ANA, "Ana's desk is 5C"))).status == "stored"
        assert [f.text for f in await memory.list(BOB)] == ["Bob deploys on Fridays"]
