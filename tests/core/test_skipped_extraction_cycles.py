"""An extraction skipped for an erasure leaves no reference cycle behind.

The refusal a skipped extraction raises (:func:`extraction_fence.refused`)
was a local of the frames it was raised from, so its traceback held those
frames and they held it: the refusal, its frames' fence checks, sources,
telemetry and the work item all waited for the cycle collector after every
skipped extraction (a host's with an ``ErasureReading``, or an ``Agent``'s).
The same counting as ``test_reference_cycles.py``: only agentium's types.
"""

from __future__ import annotations

import gc
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import _cycles_support
import anyio
import pytest

from agentium_harness import (
    Agent,
    EraseTarget,
    GroupRef,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import Message, OpContext

#: The reference-cycle tests' fixture (collections only when the test says), shared.
collector = _cycles_support.collector

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
TURN = [Message(Role.USER, "my badge number is qz7731"), Message(Role.ASSISTANT, "noted")]
SOURCE = GroupRef("s1", 0, "sha256:" + "a" * 64)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Recording:
    """An extractor that records what it was handed."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        self.handed.extend(m.content for m in messages)
        return []


async def _cyclic_garbage(call: Callable[[], Awaitable[object]], times: int = 3) -> Counter[str]:
    """The agentium objects only the cycle collector frees, after ``call`` ran ``times`` times."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            await call()
        gc.collect()
        return Counter(
            type(o).__qualname__
            for o in gc.garbage
            if (type(o).__module__ or "").startswith("agentium_harness")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _erase_elsewhere(config: SQLiteConfig) -> None:
    """Ana's user erased to completion by another runtime on a thread and loop of its own (this loop held)."""

    async def erase() -> None:
        archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
        async with create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            owned=(archive, sessions),
        ) as runtime:
            await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)

    thread = threading.Thread(target=anyio.run, args=(erase,))
    thread.start()
    thread.join(30)
    assert not thread.is_alive()


async def _failed_drain(manager: MemoryManager) -> str:
    """The detail of the one item a drain says failed (caught plainly: ``pytest.raises`` keeps a cycle)."""
    try:
        await manager.drain(20)
    except MemoryDrainError as exc:
        [item] = exc.result.items
        return item.detail
    raise AssertionError("the drain said every item went well")


async def test_a_hosts_extraction_skipped_by_its_reading_leaves_no_cycle(
    tmp_path: Path, collector: None
) -> None:
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    extractor = Recording()
    manager = MemoryManager(SQLiteMemoryStore(config), extractor=extractor, owns_store=True)
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=manager,
        owned=(archive, sessions),
    )
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        await runtime.erase(EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=OPERATOR)

        async def skipped() -> None:
            manager.extract_in_background(ANA, TURN, "host turn", sources=[SOURCE], reading=reading)
            assert "skipped before its extractor call" in await _failed_drain(manager)

        assert await _cyclic_garbage(skipped) == Counter()
        assert extractor.handed == []
        await runtime.aclose()
        await manager.aclose()


async def test_an_agents_extraction_skipped_for_an_erasure_since_its_turn_leaves_no_cycle(
    tmp_path: Path, collector: None
) -> None:
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    extractor = Recording()
    manager = MemoryManager(SQLiteMemoryStore(config), extractor=extractor, owns_store=True)
    sessions = SQLiteSessionStore(config)
    agent = Agent(
        ScriptedProvider(replies=["noted"], cycle=True),
        manager,
        ANA,
        session="chat",
        owns_memory=True,
        owned=(sessions,),
        session_store=sessions,
    )
    with anyio.fail_after(30):
        # A first turn and erasure outside the count: what they make once (caches) is not a cycle.
        await agent.run("my badge number is qz7731")
        _erase_elsewhere(config)
        await _failed_drain(manager)

        garbage: Counter[str] = Counter()
        for _ in range(3):
            # Started, then skipped when it runs (in the drain): the erasure completes after the
            # turn's reading. Only the drain is counted: the other runtime's erasure is not this.
            reply = await agent.run("my badge number is qz7731")
            assert reply.extraction is not None
            _erase_elsewhere(config)

            async def skipped() -> None:
                assert "skipped before its extractor call" in await _failed_drain(manager)

            garbage += await _cyclic_garbage(skipped, times=1)
        assert extractor.handed == []
        await agent.close()
    assert garbage == Counter()


async def test_a_hosts_extraction_taken_back_after_its_writes_leaves_no_cycle(
    tmp_path: Path, collector: None
) -> None:
    """The extractor's call sees the fact forgotten with its sources: the facts it wrote are forgotten."""
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    manager = MemoryManager(SQLiteMemoryStore(config), owns_store=True)
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=manager,
        owned=(archive, sessions),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    identity = VerifiedIdentity("acme", "ana", "test-auth")
    with anyio.fail_after(30):
        await runtime.run(identity, "s1", "My vault code is 4471.")
        await runtime.run(identity, "s1", "The weather is fine today.")
        [group] = await archive.read_groups(SessionKey("acme", "ana", "s1"), 0, 1, OpContext())
        source = GroupRef("s1", 0, group.digest)
        ack = await manager.remember(MemoryFact(ANA, "ana's vault code is 4471", provenance=[source]))
        assert ack.fact_id is not None
        fact_id = ack.fact_id

        class ForgettingMeanwhile:
            async def extract(
                self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
            ) -> list[MemoryFact]:
                await runtime.forget(ANA, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
                return [MemoryFact(scope, "ana's vault code is 4471")]

        manager.extractor = ForgettingMeanwhile()

        async def taken_back() -> None:
            reading = await manager.erasure_reading(ANA, sessions=["s1"])
            manager.extract_in_background(ANA, group.messages, "group 0", sources=[source], reading=reading)
            assert "were forgotten: none was kept" in await _failed_drain(manager)

        # Once: the forget erases group 0, and a second would find it erased already.
        assert await _cyclic_garbage(taken_back, times=1) == Counter()
        assert await manager.list(ANA) == ()
        await runtime.aclose()
        await manager.aclose()
