"""A memory manager shared by two runtimes on separate session stores is fenced by both stores.

A host-built ``MemoryManager`` given to two tenants' runtimes used to take the
*first* runtime's session store as its erasure fence, and keep it: the second
runtime's store, where that runtime's erasures are recorded, was never read
around the manager's writes. So a fact written for a user the second runtime
was erasing was stored (nothing refused it), and one that landed after the
second runtime's erasure had scrubbed and verified memory outlived an erasure
that said ``complete``: erased memory written back. Now every write through
the manager is fenced by every session store it was given to (one memory
store, so an erasure recorded in any of them scrubs the same facts), inside a
runtime's operation or outside any (docs/erasure.md, "One manager, several
runtimes").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _memory_support import GatedMemoryStore

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    ErasureState,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext, runtime_span

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
BOB = MemoryScope("acme", "bob")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
S1 = GroupRef("s1", 0, "sha256:" + "a" * 64)


def _tenant_runtime(db: Path, manager: MemoryManager) -> HarnessRuntime:
    """A runtime on its own SQLite file (its own session store, where its erasures are recorded)."""
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=manager,
        owned=(archive, sessions),
    )


def _in_memory_runtime(sessions: Any, manager: MemoryManager) -> HarnessRuntime:
    """A runtime on ``sessions`` and an in-memory archive, given the shared ``manager``."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"]),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=manager,
    )


def _shared(tmp_path: Path) -> tuple[MemoryManager, GatedMemoryStore]:
    store = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    return MemoryManager(store, owns_store=True), store


async def _outcome(write: Any) -> str:
    """``stored`` or ``refused`` (the fence's typed refusal); anything else fails the test."""
    try:
        ack = await write
    except ErasureInProgressError:
        return "refused"
    return str(ack.status)


async def test_an_erasure_under_way_in_the_second_runtimes_store_refuses_the_shared_managers_writes(
    tmp_path: Path,
) -> None:
    """The host's calls, and calls inside either runtime's block, are refused: nothing is written."""
    shared, store = _shared(tmp_path)
    states: list[ErasureState] = []
    with anyio.fail_after(30):
        async with _tenant_runtime(tmp_path / "a.db", shared) as first:
            async with _tenant_runtime(tmp_path / "b.db", shared) as second:
                kept = await shared.remember(MemoryFact(ANA, "Ana deploys on Tuesdays"))
                assert kept.fact_id is not None

                async def erase() -> None:
                    result = await second.erase(
                        EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR
                    )
                    states.append(result.state)

                outcomes: list[str] = []
                store.hold_erase = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(erase)
                    await store.entered.wait()  # recorded in the second's store, pending
                    outcomes.append(await _outcome(shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))))
                    fixed = MemoryFact(ANA, "Ana deploys on Thursdays")
                    outcomes.append(await _outcome(shared.correct(ANA, kept.fact_id, fixed)))
                    with runtime_span(first, "host.first"):
                        outcomes.append(await _outcome(shared.remember(MemoryFact(ANA, "in first's block"))))
                    with runtime_span(second, "host.second"):
                        outcomes.append(await _outcome(shared.remember(MemoryFact(ANA, "in second's block"))))
                    # Another user's memory is not fenced by it.
                    outcomes.append(await _outcome(shared.remember(MemoryFact(BOB, "Bob is on call"))))
                    store.gate.set()
                assert outcomes == ["refused", "refused", "refused", "refused", "stored"]
                assert states == [ErasureState.COMPLETE]
                # The erasure's memory scrub, through the shared manager, removed what was there.
                assert await shared.list(ANA) == ()
                assert [f.text for f in await shared.list(BOB)] == ["Bob is on call"]
                # The first runtime's erasure scrubs the same shared memory.
                bob = await first.erase(EraseTarget.user("acme", "bob"), reason="DSR", attestation=OPERATOR)
                assert bob.state is ErasureState.COMPLETE
                assert await shared.list(BOB) == ()
                # Once complete, the user's memory takes facts again.
                assert (await shared.remember(MemoryFact(ANA, "Ana's desk is 5C"))).status == "stored"
        await shared.aclose()


@pytest.mark.parametrize("target", ["user", "session"])
async def test_a_write_landing_after_the_second_runtimes_whole_erasure_is_taken_back(
    target: str, tmp_path: Path
) -> None:
    """The write passed its first check; the second runtime's erasure ran to complete before it landed."""
    shared, store = _shared(tmp_path)
    outcomes: list[str] = []
    erase = EraseTarget.user("acme", "ana") if target == "user" else EraseTarget.session("acme", "ana", "s1")
    with anyio.fail_after(30):
        async with (
            _tenant_runtime(tmp_path / "a.db", shared),
            _tenant_runtime(tmp_path / "b.db", shared) as second,
        ):

            async def write() -> None:
                fact = MemoryFact(ANA, "Ana's desk is 4B", provenance=[S1])
                outcomes.append(await _outcome(shared.remember(fact)))

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()  # past the fence's first read
                result = await second.erase(erase, reason="DSR", attestation=OPERATOR)
                assert result.state is ErasureState.COMPLETE
                store.gate.set()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert (outcomes, left) == (["refused"], [])


async def test_a_manager_given_to_one_runtime_is_fenced_by_its_store_once(tmp_path: Path) -> None:
    """Two runtimes on one session store (one process's workers): its ledger is read once per check."""

    class Counting(InMemorySessionStore):
        loads = 0

        async def load(self, key: Any, ctx: OpContext) -> Any:
            Counting.loads += 1
            return await super().load(key, ctx)

    sessions = Counting()
    shared, _ = _shared(tmp_path)
    runtimes = [_in_memory_runtime(sessions, shared) for _ in range(2)]
    with anyio.fail_after(30):
        async with runtimes[0], runtimes[1]:
            before = Counting.loads
            assert (await shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))).status == "stored"
            assert Counting.loads - before == 2  # the fence's two reads, not four
        await shared.aclose()


async def test_one_store_failing_refuses_the_write_typed_and_writes_nothing(tmp_path: Path) -> None:
    """The manager cannot tell which store's erasures cover the fact: one unread, the write is refused."""

    class Failing(InMemorySessionStore):
        async def load(self, key: Any, ctx: OpContext) -> Any:
            raise OSError("disk gone")

    shared, _ = _shared(tmp_path)
    runtimes = [_in_memory_runtime(sessions, shared) for sessions in (InMemorySessionStore(), Failing())]
    with anyio.fail_after(30):
        async with runtimes[0], runtimes[1]:
            with pytest.raises(SessionStoreError, match="nothing was written"):
                await shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))
            assert await shared.list(ANA) == ()
        await shared.aclose()


async def test_a_runtime_and_an_agent_sharing_a_manager_are_fenced_by_both_stores(tmp_path: Path) -> None:
    """The agent's session store is read too, though a runtime fenced the manager first.

    The eraser stands for another process: a runtime on the agent's session
    store and on the same memory file, erasing the user the agent writes for.
    """
    from agentium_harness import Agent

    shared, _ = _shared(tmp_path)
    agent_sessions = SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "agent.db")))
    elsewhere, held = _shared(tmp_path)  # the same memory file, as another process opens it
    outcomes: list[str] = []
    with anyio.fail_after(30):
        async with (
            _tenant_runtime(tmp_path / "a.db", shared),
            _tenant_runtime(tmp_path / "agent.db", elsewhere) as eraser,
        ):
            agent = Agent(ScriptedProvider(replies=["noted"]), shared, ANA, session_store=agent_sessions)

            async def erase() -> None:
                await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

            held.hold_erase = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await held.entered.wait()  # pending in the agent's session store
                outcomes.append(await _outcome(agent.remember(MemoryFact(ANA, "Ana's desk is 4B"))))
                outcomes.append(await _outcome(shared.remember(MemoryFact(ANA, "Ana's desk is 4C"))))
                held.gate.set()
            left = [f.text for f in await shared.list(ANA)]
            await agent.close()
        await agent_sessions.aclose()
        await shared.aclose()
        await elsewhere.aclose()
    assert (outcomes, left) == (["refused", "refused"], [])


async def test_a_store_its_runtime_closed_no_longer_fences_the_manager_another_runtime_holds(
    tmp_path: Path,
) -> None:
    """Withdrawn at its runtime's close (docs/erasure.md): a closed store would refuse every write after."""
    shared, _ = _shared(tmp_path)
    with anyio.fail_after(30):
        async with _tenant_runtime(tmp_path / "a.db", shared):
            second = _tenant_runtime(tmp_path / "b.db", shared)
            await second.aclose()  # closes its own session store (owned)
            assert (await shared.remember(MemoryFact(BOB, "Bob is on call"))).status == "stored"
            assert [f.text for f in await shared.list(BOB)] == ["Bob is on call"]
        await shared.aclose()


async def test_a_write_under_way_when_a_runtime_joins_is_checked_against_its_store_too(
    tmp_path: Path,
) -> None:
    """The second runtime was built after the first reads and erased before the write landed."""
    shared, store = _shared(tmp_path)
    outcomes: list[str] = []
    landed = anyio.Event()
    with anyio.fail_after(30):
        async with _tenant_runtime(tmp_path / "a.db", shared):

            async def write() -> None:
                fact = MemoryFact(ANA, "Ana's desk is 4B", provenance=[S1])
                outcomes.append(await _outcome(shared.remember(fact)))
                landed.set()

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()  # past the first reads: of the first runtime's store only
                async with _tenant_runtime(tmp_path / "b.db", shared) as second:
                    result = await second.erase(
                        EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR
                    )
                    assert result.state is ErasureState.COMPLETE
                    store.gate.set()
                    await landed.wait()  # checked while the second's store is open
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert (outcomes, left) == (["refused"], [])


async def test_an_erasure_finished_before_the_write_in_a_store_joining_meanwhile_keeps_the_write(
    tmp_path: Path,
) -> None:
    """The joining store's erasures are judged by the clocks: one finished before the write takes nothing."""
    from agentium_harness._engine.memory_fence import fence_memory  # the first read's clock, skewed

    shared, store = _shared(tmp_path)
    other = MemoryManager(SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "other.db"))), owns_store=True)
    async with _tenant_runtime(tmp_path / "b.db", other) as earlier:
        done = await earlier.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert done.state is ErasureState.COMPLETE
    await other.aclose()
    config = SQLiteConfig(path=str(tmp_path / "a.db"))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    later = datetime.now(UTC) + timedelta(hours=1)  # the erasure above is an hour old by this clock
    fence_memory(shared, sessions, 30.0, clock=lambda: later)
    outcomes: list[str] = []
    landed = anyio.Event()
    with anyio.fail_after(30):
        async with create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            memory=shared,
            owned=(archive, sessions),
        ):

            async def write() -> None:
                outcomes.append(await _outcome(shared.remember(MemoryFact(ANA, "Ana's desk is 4B"))))
                landed.set()

            store.hold_write = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await store.entered.wait()
                async with _tenant_runtime(tmp_path / "b.db", shared):
                    store.gate.set()
                    await landed.wait()
            left = [f.text for f in await shared.list(ANA)]
        await shared.aclose()
    assert (outcomes, left) == (["stored"], ["Ana's desk is 4B"])
