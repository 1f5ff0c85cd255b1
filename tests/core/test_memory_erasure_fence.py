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
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.memory import GroupRef
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


# -- a write that passed the first check and lands after the erasure's memory step ----------------


class _Gates:
    """Where the test holds the writer's store write and the eraser's memory verification."""

    def __init__(self) -> None:
        self.hold_remember = False
        self.hold_check = False
        self.remember_entered, self.remember_gate = anyio.Event(), anyio.Event()
        self.check_entered, self.check_gate = anyio.Event(), anyio.Event()
        #: The fact ids the stores acknowledged (a refusal names them only with content capture).
        self.stored: list[str] = []


def _gated(base: type[Any]) -> type[Any]:
    class Gated(base):  # type: ignore[misc,valid-type]
        gates: _Gates

        async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
            if self.gates.hold_remember:
                self.gates.hold_remember = False
                self.gates.remember_entered.set()
                await self.gates.remember_gate.wait()
            ack = await super().remember(fact, ctx)
            self.gates.stored.append(ack.fact_id)
            return ack

        async def correct(
            self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
        ) -> Any:
            if self.gates.hold_remember:
                self.gates.hold_remember = False
                self.gates.remember_entered.set()
                await self.gates.remember_gate.wait()
            return await super().correct(scope, fact_id, replacement, ctx)

        async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
            report: EraseReport = await super().erase(target, ctx, **options)
            if self.gates.hold_check and options.get("dry_run") and options.get("max_items") == 1:
                # The erasure's verification of memory is done (nothing left): hold it there.
                self.gates.hold_check = False
                self.gates.check_entered.set()
                await self.gates.check_gate.wait()
            return report

    return Gated


def _pair(kind: str, tmp_path: Path, gates: _Gates) -> tuple[HarnessRuntime, HarnessRuntime]:
    """An eraser and a writer sharing one session store, archive and memory (two processes' view)."""
    provider = ScriptedProvider(replies=["noted"], cycle=True)
    if kind == "sqlite":
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        stores = [_gated(SQLiteMemoryStore)(config) for _ in range(2)]
        for store in stores:
            store.gates = gates
        return (_runtime(tmp_path / "agentium.db", stores[0]), _runtime(tmp_path / "agentium.db", stores[1]))
    from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

    memory = _gated(InMemoryMemoryStore)()
    memory.gates = gates
    archive, sessions = InMemoryArchive(), InMemorySessionStore()
    return tuple(  # type: ignore[return-value]
        create_harness_runtime(provider=provider, archive=archive, session_store=sessions, memory=memory)
        for _ in range(2)
    )


async def _erase(runtime: HarnessRuntime, user: str) -> ErasureState:
    result = await runtime.erase(EraseTarget.user("acme", user), reason="DSR", attestation=OPERATOR)
    assert result.tombstone is not None
    return result.tombstone.state


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_write_landing_after_a_whole_erasure_is_taken_back(kind: str, tmp_path: Path) -> None:
    """The write passed the check, then an erasure of its user ran to complete before it landed."""
    gates = _Gates()
    eraser, writer = _pair(kind, tmp_path, gates)
    refused: list[BaseException] = []
    async with eraser, writer:
        memory = writer.memory
        assert memory is not None

        async def write() -> None:
            with pytest.raises(ErasureInProgressError, match="was not kept") as info:
                await memory.remember(MemoryFact(ANA, "Ana's desk is 4B"))
            refused.append(info.value)

        gates.hold_remember = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await gates.remember_entered.wait()  # past the fence's first read
            assert await _erase(eraser, "ana") is ErasureState.COMPLETE
            gates.remember_gate.set()
        assert refused
        assert await memory.list(ANA) == ()
        [fact_id] = gates.stored
        assert fact_id not in str(refused[0])  # an id is content: named only with content capture
        # Forgotten: no revision keeps its text.
        assert all(not r.text for r in await memory.history(ANA, fact_id))


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_write_landing_after_the_memory_verification_is_taken_back(kind: str, tmp_path: Path) -> None:
    """The write lands while the erasure is pending, after its memory step and its verification."""
    gates = _Gates()
    eraser, writer = _pair(kind, tmp_path, gates)
    states: list[ErasureState] = []
    async with eraser, writer:
        memory = writer.memory
        assert memory is not None
        written = anyio.Event()

        async def write() -> None:
            try:
                with pytest.raises(ErasureInProgressError, match="was not kept"):
                    await memory.remember(MemoryFact(ANA, "Ana's desk is 4B"))
            finally:
                written.set()

        async def erase() -> None:
            states.append(await _erase(eraser, "ana"))

        gates.hold_remember = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await gates.remember_entered.wait()  # past the fence's first read
            gates.hold_check = True
            tg.start_soon(erase)
            await gates.check_entered.wait()  # memory erased and verified empty; still pending
            gates.remember_gate.set()
            await written.wait()
            gates.check_gate.set()
        assert states == [ErasureState.COMPLETE]
        assert await memory.list(ANA) == ()


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_an_erasure_of_another_user_during_a_write_keeps_the_fact(kind: str, tmp_path: Path) -> None:
    """The ledger moving during a write refuses it only for an erasure covering the fact that joined since.

    Ana's erasure finished just before the write: her join record says it
    joined before the write's first check, so it does not take the fact back.
    """
    gates = _Gates()
    eraser, writer = _pair(kind, tmp_path, gates)
    async with eraser, writer:
        memory = writer.memory
        assert memory is not None
        # Ana was erased before the write began: her memory takes facts again.
        assert await _erase(eraser, "ana") is ErasureState.COMPLETE
        acks: list[Any] = []

        async def write() -> None:
            acks.append(await memory.remember(MemoryFact(ANA, "Ana's desk is 5C")))

        gates.hold_remember = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await gates.remember_entered.wait()
            assert await _erase(eraser, "bob") is ErasureState.COMPLETE
            gates.remember_gate.set()
        assert [a.status for a in acks] == ["stored"]
        assert [f.text for f in await memory.list(ANA)] == ["Ana's desk is 5C"]


# -- a memory manager outside a runtime: the Agent ----------------------------------------------


async def test_an_agent_given_the_session_store_is_refused_while_its_user_is_being_erased(
    tmp_path: Path,
) -> None:
    """The erasure runs in a runtime (another process); the Agent's writes read the same ledger."""
    from agentium_harness import Agent, MemoryManager

    db = tmp_path / "agentium.db"
    held = _HeldErase(SQLiteConfig(path=str(db)))
    held.entered, held.gate = anyio.Event(), anyio.Event()
    config = SQLiteConfig(path=str(db))
    sessions = SQLiteSessionStore(config)
    manager = MemoryManager(SQLiteMemoryStore(config), owns_store=True)
    agent = Agent(ScriptedProvider(replies=["noted"]), manager, ANA, owns_memory=True, session_store=sessions)
    states: list[ErasureState] = []
    async with _runtime(db, held) as eraser:

        async def erase() -> None:
            states.append(await _erase(eraser, "ana"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(erase)
            await held.entered.wait()  # the erasure is recorded, pending
            with pytest.raises(ErasureInProgressError, match="nothing was written"):
                await agent.remember(MemoryFact(ANA, "Ana's desk is 4B"))
            assert (await agent.remember_with_result(MemoryFact(BOB, "Bob is on call"))).status == "stored"
            held.gate.set()
        assert states == [ErasureState.COMPLETE]
        assert await manager.list(ANA) == ()
        assert (await agent.remember(MemoryFact(ANA, "Ana's desk is 5C"))).status == "stored"
    await agent.close()
    await sessions.aclose()


def test_an_agent_refuses_a_session_store_that_is_not_one(tmp_path: Path) -> None:
    from agentium_harness import Agent, AgentiumError, MemoryManager

    manager = MemoryManager(SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "m.db"))))
    with pytest.raises(AgentiumError):
        Agent(ScriptedProvider(replies=["x"]), manager, ANA, session_store="sqlite")  # type: ignore[arg-type]


# -- the session store failing around a write ---------------------------------------------------


async def test_a_failed_second_read_keeps_the_write_and_its_ack_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The write committed: a session store failing afterwards is a note and a WARNING, never a bare error."""
    from agentium_harness import MemoryManager
    from agentium_harness._engine.memory_fence import fence_memory
    from agentium_harness.adapters.memory import InMemorySessionStore
    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

    class Failing(InMemorySessionStore):
        fail = False

        async def load(self, key: Any, ctx: OpContext) -> Any:
            if self.fail:
                raise OSError("disk gone")
            return await super().load(key, ctx)

    gates = _Gates()
    store = _gated(InMemoryMemoryStore)()
    store.gates = gates
    sessions = Failing()
    manager = MemoryManager(store)
    fence_memory(manager, sessions, 5.0)
    acks: list[Any] = []

    async def write() -> None:
        acks.append(await manager.remember(MemoryFact(ANA, "Ana's desk is 4B")))

    gates.hold_remember = True
    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        await gates.remember_entered.wait()
        sessions.fail = True
        gates.remember_gate.set()
    (ack,) = acks
    assert ack.status == "stored" and any("not checked again" in n for n in ack.notes)
    assert "not confirmed against erasures: SessionStoreError" in caplog.text
    # Before a write, the same failure refuses it, typed, and nothing is written.
    with pytest.raises(SessionStoreError, match="nothing was written"):
        await manager.remember(MemoryFact(ANA, "Ana's desk is 5C"))
    assert [f.text for f in await manager.list(ANA)] == ["Ana's desk is 4B"]


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_correction_naming_a_session_erased_while_it_was_written_is_taken_back(
    kind: str, tmp_path: Path
) -> None:
    """The fact was not the erasure's; its correction, naming the erased session, landed after it."""
    gates = _Gates()
    eraser, writer = _pair(kind, tmp_path, gates)
    async with eraser, writer:
        memory = writer.memory
        assert memory is not None
        kept = await memory.remember(MemoryFact(ANA, "Ana deploys on Tuesdays"))
        assert kept.fact_id is not None
        fixed = MemoryFact(
            ANA, "Ana deploys on Thursdays", provenance=[GroupRef("s1", 0, "sha256:" + "a" * 64)]
        )

        async def write() -> None:
            with pytest.raises(ErasureInProgressError, match="was not kept"):
                await memory.correct(ANA, kept.fact_id, fixed)  # type: ignore[arg-type]

        gates.hold_remember = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await gates.remember_entered.wait()  # past the fence's first read
            target = EraseTarget.session("acme", "ana", "s1")
            result = await eraser.erase(target, reason="DSR", attestation=OPERATOR)
            assert result.state is ErasureState.COMPLETE
            gates.remember_gate.set()
        assert await memory.list(ANA) == ()
