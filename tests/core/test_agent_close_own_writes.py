"""An Agent's ``close()`` waits, bounded, for its own ``remember`` calls in flight.

It used to close at once what it owns (its session store, its manager and
the manager's memory store) while a ``remember`` of its own was still
writing: the write then ran into a closed store (the caller got an error and
the fact was lost) or its second erasure read met a closed session store
(the fact stood "not checked again against erasures"). Now ``close()``
waits for them, up to ``close_timeout_s``, before it withdraws its erasure
fence and tears anything down; a ``remember`` begun once the close began is
refused (``AgentLifecycleError``) and writes nothing; and one still running
past the bound is said: a WARNING, the event
``agentium.agent.remember_unfinished`` on an ``agentium.agent.close`` span,
and a note on that call's acknowledgment (docs/memory.md, docs/observability.md).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from _memory_support import GatedMemoryStore, HookedLock, sqlite_store
from _telemetry_support import Telemetered

from agentium_harness import (
    Agent,
    AgentLifecycleError,
    DrainResult,
    MemoryAck,
    MemoryFact,
    MemoryManager,
    MemoryScope,
)
from agentium_harness._engine.memory_fence import current_fences
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")


class WatchedSessions(SQLiteSessionStore):
    """A session store that says when its close begins (the agent owns it)."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.closing = anyio.Event()

    async def aclose(self) -> None:
        self.closing.set()
        await super().aclose()


def _parts(
    tmp_path: Path, make: type[MemoryManager] = MemoryManager, **manager_kw: Any
) -> tuple[GatedMemoryStore, Any, WatchedSessions]:
    """A gated memory store, a manager over it (``make(memory, **manager_kw)``), a watched session store."""
    memory = GatedMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    sessions = WatchedSessions(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    return memory, make(memory, **manager_kw), sessions


def _agent(manager: MemoryManager, sessions: WatchedSessions, owns_memory: bool = True, **kw: float) -> Agent:
    return Agent(
        ScriptedProvider(replies=["noted"], cycle=True),
        manager,
        ANA,
        extraction=False,
        session_store=sessions,
        owned=[sessions],
        owns_memory=owns_memory,
        **kw,
    )


async def _write_held(
    tg: anyio.abc.TaskGroup, agent: Agent, memory: GatedMemoryStore, acks: list[MemoryAck]
) -> anyio.Event:
    """Ana's ``remember`` started in ``tg``, back once its write is held in the store (till ``memory.gate``).

    Its acknowledgment goes to ``acks``; the event returned is set once the call ended.
    """
    written = anyio.Event()

    async def write() -> None:
        acks.append(await agent.remember(MemoryFact(ANA, "Ana's desk is 4B")))
        written.set()

    memory.hold_write = True
    tg.start_soon(write)
    await memory.entered.wait()  # the write is in the store now
    return written


async def _kept(tmp_path: Path) -> list[str]:
    """The facts the memory database holds for Ana, read by a store of its own (the agent's is closed)."""
    store = SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
    try:
        return sorted(f.text for f in await store.list_facts(ANA, 50, OpContext.with_timeout(10)))
    finally:
        await store.aclose()


async def test_close_waits_for_a_remember_in_flight_and_refuses_new_ones(tmp_path: Path) -> None:
    memory, manager, sessions = _parts(tmp_path, owns_store=True)
    agent = _agent(manager, sessions)
    acks: list[MemoryAck] = []
    refused: list[str] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await _write_held(tg, agent, memory, acks)
            tg.start_soon(agent.close)
            while agent.state != "closing":
                await anyio.lowlevel.checkpoint()
            try:
                await agent.remember(MemoryFact(ANA, "begun after the close began"))
            except AgentLifecycleError as exc:
                refused.append(type(exc).__name__)
            # The old close did not wait: it reached the owned session store at once. Given a
            # bounded while to get there, the new one must still be waiting for the write.
            with anyio.move_on_after(1):
                await sessions.closing.wait()
            closed_under_the_write = sessions.closing.is_set()
            memory.gate.set()
        assert agent.state == "closed" and sessions.closing.is_set()
    assert refused == ["AgentLifecycleError"]
    assert not closed_under_the_write
    [ack] = acks
    assert (ack.status, ack.notes) == ("stored", ())
    assert await _kept(tmp_path) == ["Ana's desk is 4B"]


async def test_a_remember_past_the_close_bound_is_said_to_be_unconfirmed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = Telemetered()
    memory, manager, sessions = _parts(tmp_path, telemetry=t.telemetry())
    agent = _agent(manager, sessions, owns_memory=False, close_timeout_s=0.2)
    acks: list[MemoryAck] = []
    caplog.set_level(logging.WARNING, logger="agentium")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await _write_held(tg, agent, memory, acks)
            await agent.close()  # bounded: it goes on once the bound passed, and says so
            assert agent.state == "closed" and sessions.closing.is_set()
            memory.gate.set()
        await manager.aclose()
        await memory.aclose()
    [ack] = acks
    assert ack.status == "stored"  # the write landed after all: its answer says the close did not wait
    assert any("close" in note and "0.2" in note for note in ack.notes), ack.notes
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "agent close" in r.getMessage()]
    assert len(warned) == 1 and "Ana" not in warned[0].getMessage()
    assert t.events("agentium.agent.") == [
        ("agentium.agent.close", "agentium.agent.remember_unfinished", {"agentium.agent.remember.running": 1})
    ]


async def test_a_close_with_no_remember_in_flight_opens_no_span(tmp_path: Path) -> None:
    t = Telemetered()
    _, manager, sessions = _parts(tmp_path, owns_store=True, telemetry=t.telemetry())
    agent = _agent(manager, sessions)
    with anyio.fail_after(30):
        ack = await agent.remember(MemoryFact(ANA, "Ana's desk is 4B"))
        await agent.close()
    assert (ack.status, ack.notes, agent.state) == ("stored", (), "closed")
    assert t.named("agentium.agent.close") == []
    assert await _kept(tmp_path) == ["Ana's desk is 4B"]


async def test_a_close_from_another_thread_as_a_remember_is_admitted_keeps_the_fence_while_it_runs(
    tmp_path: Path,
) -> None:
    """A close on another thread, right after a ``remember`` was admitted, sees that call in flight.

    The call's loop is held while the close runs (so it outlasts the
    close's bound): the close keeps the agent's erasure fence while the call
    runs (its write is checked against the agent's store, not against
    none). The agent owns nothing, so its close closed nothing under the
    call: its acknowledgment carries no "not confirmed" note.
    The fence goes once the call ended. Before, a ``remember`` was admitted
    without the state lock and known to no close: the fence went at once.
    """
    shared = MemoryManager(sqlite_store(tmp_path), owns_store=True)
    sessions = SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    elsewhere = SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "elsewhere.db")))
    outcomes: list[str] = []
    fenced: list[bool] = []

    def fencing() -> bool:
        return any(f.store is sessions for f in current_fences(shared))

    with anyio.fail_after(30):
        bystander = Agent(ScriptedProvider(replies=["x"]), shared, ANA, session_store=elsewhere)
        agent = Agent(
            ScriptedProvider(replies=["noted"], cycle=True),
            shared,
            ANA,
            session_store=sessions,
            close_timeout_s=0.3,
        )
        lock = agent._state_lock = HookedLock()  # type: ignore[assignment]

        async def close() -> None:
            await agent.close()
            outcomes.append(agent.state.value)
            fenced.append(fencing())

        def close_on_another_thread() -> None:  # the remember's loop is held meanwhile
            thread = threading.Thread(target=anyio.run, args=(close,))
            thread.start()
            thread.join(20)

        lock.hook = close_on_another_thread
        ack = await agent.remember(MemoryFact(ANA, "Ana's desk is 4B"))
        fenced.append(fencing())  # the call ended: the agent's fence is gone
        await bystander.close()
        await shared.aclose()
        await sessions.aclose()
        await elsewhere.aclose()
    assert (outcomes, fenced) == (["closed"], [True, False])
    assert (ack.status, ack.notes) == ("stored", ())


class SlowDrain(MemoryManager):
    """A manager whose ``drain`` says when it begins, then waits for ``release`` (work still draining)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.draining, self.release = anyio.Event(), anyio.Event()

    async def drain(self, timeout_s: float | None = None) -> DrainResult:
        self.draining.set()
        await self.release.wait()
        return await super().drain(timeout_s)


async def test_a_remember_that_ends_before_anything_closes_is_not_said_unconfirmed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``remember`` the close stopped waiting for, but that ended before anything closed, is not flagged.

    The close's bound for the write passes, then its drain takes a while;
    the write ends meanwhile, against open stores and under the agent's
    fence, as any other. Its acknowledgment used to say it was "not
    confirmed" (what the agent owns "closed while it ran"), and a WARNING
    and a span event said a call was left running under the teardown: none
    was. Said only of a call still running as the close tears down.
    """
    t = Telemetered()
    memory, manager, sessions = _parts(tmp_path, SlowDrain, owns_store=True, telemetry=t.telemetry())
    agent = _agent(manager, sessions, close_timeout_s=0.1)
    acks: list[MemoryAck] = []
    caplog.set_level(logging.WARNING, logger="agentium")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            written = await _write_held(tg, agent, memory, acks)
            tg.start_soon(agent.close)
            await manager.draining.wait()  # the close is past its bound for the write: it drains
            assert not sessions.closing.is_set()
            memory.gate.set()
            await written.wait()  # the write ended before anything closed
            manager.release.set()
        assert agent.state == "closed" and sessions.closing.is_set()
    [ack] = acks
    assert (ack.status, ack.notes) == ("stored", ())
    assert [r for r in caplog.records if "agent close went on" in r.getMessage()] == []
    assert t.named("agentium.agent.close") == []
    assert await _kept(tmp_path) == ["Ana's desk is 4B"]
