"""A memory extraction never hands its extractor a turn an erasure that began since the turn covers.

An extraction runs as owned work after the turn (an ``Agent``'s, or the
host's ``manager.extract_in_background``), and its extractor may call a
model with the turn's messages. An erasure of the turn's session, its user
or its tenant in another process (here a runtime on the same SQLite file,
in a thread of its own) may begin in between: the write fence kept the
facts out, but the extractor was still handed the erased text. Now the
extraction reads the erasures again just before the extractor call, from
the reading the Agent took as its turn started, and is skipped.

The ordering is by events and one blocked loop: after ``agent.run()``
returns, the test's loop is held (a thread's ``join``) while the other
"process" erases to completion, so the extraction's work cannot run
before the erasure has finished.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    Agent,
    EraseTarget,
    ErasureState,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    Role,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import EraseReport, Message, OpContext
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
BOB = MemoryScope("acme", "bob")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
SECRET = "my badge number is qz7731"
DIGEST = "sha256:" + "a" * 64


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Recording:
    """An extractor that records what it was handed and proposes one fact of the scope it is given."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        self.handed.extend(m.content for m in messages)
        return [MemoryFact(scope, "badge on file")]


class _HeldErase(SQLiteMemoryStore):
    """A memory store whose erase waits for the test: the erasure stays under way meanwhile."""

    entered: anyio.Event
    gate: anyio.Event

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.entered.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


def _eraser(db: Path, memory: SQLiteMemoryStore | None = None) -> HarnessRuntime:
    """Another process's runtime on the same file (its own store objects: it shares nothing in memory)."""
    config = SQLiteConfig(path=str(db))
    store = memory if memory is not None else SQLiteMemoryStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=store,
        owned=(store,),
    )


def _erase_in_other_process(db: Path, target: EraseTarget) -> ErasureState:
    """Erase ``target`` to completion on a thread and loop of its own, holding the caller's loop meanwhile."""
    states: list[ErasureState] = []

    async def erase() -> None:
        async with _eraser(db) as runtime:
            result = await runtime.erase(target, reason="DSR", attestation=OPERATOR)
            states.append(result.state)

    thread = threading.Thread(target=anyio.run, args=(erase,))
    thread.start()
    thread.join(30)  # the test's loop is held: the extraction's work cannot run before the erasure ends
    assert not thread.is_alive()
    return states[0]


async def _drained(manager: MemoryManager) -> Any:
    """The manager's drain result, whether the drain returned it or raised it (not all went well)."""
    try:
        return await manager.drain(20)
    except MemoryDrainError as exc:
        return exc.result


def _chat_agent(manager: MemoryManager, sessions: SQLiteSessionStore) -> Agent:
    """Ana's agent on session ``chat``, owning ``manager`` and ``sessions`` (closed with it)."""
    return Agent(
        ScriptedProvider(replies=["noted"], cycle=True),
        manager,
        ANA,
        session="chat",
        owns_memory=True,
        owned=(sessions,),
        session_store=sessions,
    )


def _agent(
    db: Path, extractor: Recording, recorder: SpanRecorder | None = None
) -> tuple[Agent, MemoryManager]:
    config = SQLiteConfig(path=str(db))
    telemetry = Telemetry(tracer_provider=recorder.provider) if recorder is not None else None
    manager = MemoryManager(
        SQLiteMemoryStore(config), extractor=extractor, owns_store=True, telemetry=telemetry
    )
    sessions = SQLiteSessionStore(config)
    agent = _chat_agent(manager, sessions)
    return agent, manager


TARGETS = {
    "session": EraseTarget.session("acme", "ana", "chat"),
    "user": EraseTarget.user("acme", "ana"),
    "tenant": EraseTarget.tenant("acme"),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
async def test_an_erasure_completed_after_the_turn_skips_its_extraction(
    target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "agentium.db"
    extractor, recorder = Recording(), SpanRecorder()
    agent, manager = _agent(db, extractor, recorder)
    with anyio.fail_after(30):
        reply = await agent.run(SECRET)
        assert reply.extraction is not None  # started: the turn's reading saw no erasure
        assert _erase_in_other_process(db, TARGETS[target]) is ErasureState.COMPLETE
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            drained = await _drained(manager)
        assert extractor.handed == []  # the erased turn never reached the extractor's model
        assert not drained.ok
        [item] = drained.items
        assert (
            item.status == "failed" and "the extraction was skipped before its extractor call" in item.detail
        )
        assert await manager.list(ANA) == ()
        await agent.close()
    assert any("memory extraction skipped" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if SECRET in r.getMessage()]
    events = [(s.name, e.name, dict(e.attributes or {})) for s in recorder.finished for e in s.events]
    assert (
        "agentium.memory.extraction",
        "agentium.memory.extraction_skipped",
        {"agentium.memory.reason": "erasure"},
    ) in events
    assert not [text for text in recorder.carried() if SECRET in text]


async def test_an_erasure_of_another_user_after_the_turn_does_not_skip_it(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    extractor = Recording()
    agent, manager = _agent(db, extractor)
    with anyio.fail_after(30):
        await agent.run(SECRET)
        assert _erase_in_other_process(db, EraseTarget.user("acme", "bob")) is ErasureState.COMPLETE
        result = await manager.drain(20)
        assert result.ok
        assert extractor.handed == [SECRET, "noted"]
        assert [f.text for f in await manager.list(ANA)] == ["badge on file"]
        await agent.close()


async def test_an_erasure_under_way_as_the_turn_ends_skips_its_extraction(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    held = _HeldErase(SQLiteConfig(path=str(db)))
    held.entered, held.gate = anyio.Event(), anyio.Event()
    extractor = Recording()
    agent, manager = _agent(db, extractor)
    states: list[ErasureState] = []
    with anyio.fail_after(30):
        async with _eraser(db, held) as eraser:

            async def erase() -> None:
                result = await eraser.erase(
                    EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR
                )
                states.append(result.state)

            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await held.entered.wait()  # recorded, pending
                await agent.run(SECRET)
                with pytest.raises(MemoryDrainError):
                    await manager.drain(20)
                held.gate.set()
        assert states == [ErasureState.COMPLETE]
        assert extractor.handed == []
        await agent.close()


async def test_a_hosts_extraction_is_skipped_while_an_erasure_covering_it_is_under_way(
    tmp_path: Path,
) -> None:
    """A host's ``extract_in_background``: no reading of the turn; the pending erasures are read."""
    db = tmp_path / "agentium.db"
    held = _HeldErase(SQLiteConfig(path=str(db)))
    held.entered, held.gate = anyio.Event(), anyio.Event()
    extractor = Recording()
    agent, manager = _agent(db, extractor)  # gives the manager the session store's fence
    source = GroupRef("s1", 0, DIGEST)
    with anyio.fail_after(30):
        async with _eraser(db, held) as eraser:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: eraser.erase(
                        EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=OPERATOR
                    )
                )
                await held.entered.wait()
                manager.extract_in_background(
                    ANA, [Message(Role.USER, SECRET)], "host extraction", sources=[source]
                )
                with pytest.raises(MemoryDrainError):
                    await manager.drain(20)
                # Another session of the same user is not the erasure's: it is extracted.
                other = GroupRef("s2", 0, DIGEST)
                manager.extract_in_background(ANA, [Message(Role.USER, "desk 4B")], "other", sources=[other])
                assert (await manager.drain(20)).ok
                held.gate.set()
        assert extractor.handed == ["desk 4B"]
        await agent.close()


class _Counting(SQLiteSessionStore):
    """Counts the loads that reach the store (the known path answers without one)."""

    loads = 0

    async def load(self, key: Any, ctx: OpContext) -> Any:
        type(self).loads += 1
        return await super().load(key, ctx)


async def test_the_fence_reads_nothing_when_nothing_changed_on_sqlite(tmp_path: Path) -> None:
    """The turn's reading and the check before the call: no store read once the ledger is known unchanged."""
    db, memory_db = tmp_path / "agentium.db", tmp_path / "memory.db"
    extractor = Recording()
    sessions = _Counting(SQLiteConfig(path=str(db)))
    manager = MemoryManager(
        SQLiteMemoryStore(SQLiteConfig(path=str(memory_db))), extractor=extractor, owns_store=True
    )
    agent = _chat_agent(manager, sessions)
    with anyio.fail_after(30):
        await agent.run("warm up")  # the first reading reads the (absent) ledger row once
        assert (await manager.drain(20)).ok
        before = _Counting.loads
        for turn in range(5):
            await agent.run(f"turn {turn}")
            assert (await manager.drain(20)).ok
        assert _Counting.loads == before  # 5 turns, 5 extractions and their writes' fences: no read
        assert len(extractor.handed) == 12
        await agent.close()


async def test_a_closed_runtimes_erasure_since_the_turn_is_not_waved_through_by_its_withdrawn_fence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime on another file shares the agent's manager, erases the user after the turn, and closes.

    Its fence was in the turn's reading; withdrawn at its close, with its store
    closed, it cannot be read again and no other fence reads its file: the
    extraction is not started (typed failure, nothing sent), rather than
    taken as unerased. The extraction's work is held just before its reads
    (an ordering hook around the real ``covering``) while the runtime erases and closes.
    """
    from agentium_harness._engine import extraction_fence

    entered, gate = anyio.Event(), anyio.Event()
    real = extraction_fence.covering

    async def held(seen: Any, manager: Any) -> Any:
        entered.set()
        await gate.wait()
        return await real(seen, manager)

    monkeypatch.setattr(extraction_fence, "covering", held)
    extractor = Recording()
    agent, manager = _agent(tmp_path / "agentium.db", extractor)
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    # Open throughout: ``other`` is not the last runtime on the manager (its close drains its own work only).
    keeper = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=manager,
    )
    other_config = SQLiteConfig(path=str(tmp_path / "other.db"))
    sessions = SQLiteSessionStore(other_config)
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"], cycle=True),
        archive=SQLiteArchive(other_config),
        session_store=sessions,
        memory=manager,
        owned=(sessions,),
    )
    with anyio.fail_after(30):
        reply = await agent.run(SECRET)
        assert reply.extraction is not None  # started: the turn's reading (both files) saw no erasure
        await entered.wait()  # the extraction's work, about to read its fences again
        result = await other.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert result.state is ErasureState.COMPLETE
        await other.aclose()  # its fence is withdrawn, then its own store closed
        gate.set()
        drained = await _drained(manager)
        assert extractor.handed == []  # the erased turn never reached the extractor's model
        assert not drained.ok
        assert await manager.list(ANA) == ()
        await keeper.aclose()
        await agent.close()


async def test_a_turn_read_with_no_fence_then_a_runtime_built_extracts_as_usual(tmp_path: Path) -> None:
    """No fence as the turn started (an Agent without a session store); a runtime given the manager since.

    The empty reading is not compared with the new fence (there is nothing to
    compare): its pending erasures are read at the call instead, and with none
    the extraction runs (it used to fail on the empty reading, IndexError).
    """
    extractor = Recording()
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    manager = MemoryManager(SQLiteMemoryStore(config), extractor=extractor, owns_store=True)
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), manager, ANA, session="chat")
    with anyio.fail_after(30):
        reply = await agent.run(SECRET)
        assert reply.extraction is not None
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["x"], cycle=True),
            archive=SQLiteArchive(config),
            session_store=SQLiteSessionStore(config),
            memory=manager,
        )
        result = await manager.drain(20)
        assert result.ok, result.items
        assert extractor.handed == [SECRET, "noted"]
        assert [f.text for f in await manager.list(ANA)] == ["badge on file"]
        await runtime.aclose()
        await agent.close()


class _ErasingDuringTheCall(ScriptedProvider):
    """A model whose call lasts while another process erases ``target`` to completion."""

    def __init__(self, db: Path, target: EraseTarget) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.db, self.target = db, target
        self.states: list[ErasureState] = []

    async def complete(self, request: Any, ctx: OpContext) -> Any:
        self.states.append(_erase_in_other_process(self.db, self.target))
        return await super().complete(request, ctx)


@pytest.mark.parametrize("target", sorted(TARGETS))
async def test_an_erasure_begun_and_finished_during_the_model_call_skips_its_extraction(
    target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The turn's reading is taken as the turn starts: an erasure over before the turn ends is seen.

    It used to be taken as the turn ended, after the erasure said complete:
    the turn's text went to the extractor and its facts were written.
    """
    db = tmp_path / "agentium.db"
    extractor, recorder = Recording(), SpanRecorder()
    manager = MemoryManager(
        SQLiteMemoryStore(SQLiteConfig(path=str(db))),
        extractor=extractor,
        owns_store=True,
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    sessions = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    provider = _ErasingDuringTheCall(db, TARGETS[target])
    agent = Agent(
        provider, manager, ANA, session="chat", owns_memory=True, owned=(sessions,), session_store=sessions
    )
    with anyio.fail_after(30):
        reply = await agent.run(SECRET)
        assert provider.states == [ErasureState.COMPLETE]
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            drained = await _drained(manager)
        assert extractor.handed == []  # nothing sent to the extractor
        [item] = drained.items
        assert item.name == reply.extraction and item.status == "failed"
        assert "the extraction was skipped before its extractor call" in item.detail
        assert await manager.list(ANA) == ()  # nothing written
        await agent.close()
    assert any("memory extraction skipped" in r.getMessage() for r in caplog.records)
    events = [(s.name, e.name, dict(e.attributes or {})) for s in recorder.finished for e in s.events]
    assert (
        "agentium.memory.extraction",
        "agentium.memory.extraction_skipped",
        {"agentium.memory.reason": "erasure"},
    ) in events
