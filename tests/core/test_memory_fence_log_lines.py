"""The memory fences' WARNINGs name an adapter's error by its class, escaped: one record, one line.

A session store or memory store may raise an error of the engine's typed
kinds (a ``SessionStoreError`` or ``MemoryStoreError`` subclass), which the
engine passes on as it is; its class name is the adapter's to choose
(``type()`` takes any string). The write fence (``_engine/memory_fence.py``)
and a host's extraction fence (``_engine/memory/erasure_reading.py``)
wrote it as it was: a line break started what read as a record of its own
(``CRITICAL agentium ...``) and an ANSI escape reached the terminal,
whatever the content capture setting (docs/observability.md: "One record
is one line").

Scenarios from tests/core/test_memory_fence_span_events.py and
tests/core/test_host_erasure_reading_unchecked.py.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import anyio.to_thread
import pytest
from test_memory_fence_take_back import (
    GENEROUS,
    OPERATOR,
    SCOPE,
    SESSION_B,
    Proposes,
    StallsOneLoad,
    StallsTheTakeBack,
    Store,
    _ref,
    _strand_a_correct,
)

from agentium_harness import (
    ErasureInProgressError,
    GroupRef,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness._engine.memory_fence import fence_memory
from agentium_harness._history import Message, Role
from agentium_harness._ports.memory import MemoryAck
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import MemoryStoreError, OpContext, SessionKey, SessionStoreError

pytestmark = pytest.mark.anyio

#: A class name that would forge a record and colour the terminal.
ODD = "Gone\nCRITICAL agentium.engine forged \x1b[31mred"
_OddSessionError: type[SessionStoreError] = type(ODD, (SessionStoreError,), {})
_OddMemoryError: type[MemoryStoreError] = type(ODD, (MemoryStoreError,), {})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _one_line(caplog: pytest.LogCaptureFixture, says: str) -> None:
    [message] = [r.getMessage() for r in caplog.records if says in r.getMessage()]
    assert message.isprintable(), message
    assert "Gone\\x0aCRITICAL" in message and "\\x1b[31m" in message


class _Ledger(InMemorySessionStore):
    """Its reads raise the odd error once ``fail`` is set (a fence's read after the write)."""

    fail = False

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.fail:
            raise _OddSessionError("the session store went away")
        return await super().load(key, ctx)


def _runtime(facts: Any, sessions: InMemorySessionStore) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=facts,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )


async def _erase_b(operator: HarnessRuntime) -> None:
    assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone


async def test_a_write_not_confirmed_against_erasures_names_the_error_on_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, sessions = Store(), _Ledger()
    manager = MemoryManager(store)
    fence_memory(manager, sessions, GENEROUS)

    async def fail_from_now() -> None:
        sessions.fail = True

    store.before_write = fail_from_now
    with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
        ack = await manager.remember(MemoryFact(SCOPE, "pin is 4321"))
    assert ack.status == "stored"
    _one_line(caplog, "memory write not confirmed against erasures")


class _FailsToForget(Store):
    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        raise _OddMemoryError("gone")


async def test_a_failed_take_back_of_a_fact_names_the_error_on_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A host call remembers a fact from sB, erased before the store answers; its forget fails."""
    store, sessions = _FailsToForget(), InMemorySessionStore()
    async with _runtime(store, sessions) as writer, _runtime(Store(), sessions) as operator:
        memory = writer.memory
        assert memory is not None
        store.before_write = lambda: _erase_b(operator)
        with (
            caplog.at_level(logging.WARNING, logger="agentium.engine.memory"),
            anyio.fail_after(30),
            pytest.raises(ErasureInProgressError, match="taking it back failed"),
        ):
            await memory.remember(MemoryFact(SCOPE, "pin is 4321", provenance=[_ref("sB")]))
    _one_line(caplog, "a fact written during an erasure could not be taken back")


class _Heard(logging.Handler):
    """Sets ``heard`` once a record saying ``text`` is logged (from whichever thread)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text, self.heard = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.heard.set()


async def test_a_failed_late_take_back_names_the_error_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A correct abandoned past its deadline lands after sB was erased; the late take-back's forget fails."""
    says = "a fact written past its deadline could not be taken back"
    heard, log = _Heard(says), logging.getLogger("agentium.engine.memory")
    sessions, facts = InMemorySessionStore(), _FailsToForget()
    log.addHandler(heard)
    try:
        async with _runtime(facts, sessions) as writer, _runtime(Store(), sessions) as operator:
            memory = writer.memory
            assert memory is not None
            target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
            with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"), anyio.fail_after(30):
                await _strand_a_correct(writer, facts, target.fact_id)
                await _erase_b(operator)
                facts.release.set()
                assert await anyio.to_thread.run_sync(heard.heard.wait, GENEROUS)
    finally:
        facts.release.set()  # no thread outlives the test blocked
        log.removeHandler(heard)
    _one_line(caplog, says)


class _StallsThenFailsToForget(StallsTheTakeBack):
    """The fence's first forget waits for the drain's cancel; the shielded one after it fails."""

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        if self.stalled.is_set():
            raise _OddMemoryError("gone")
        return await super().forget(scope, fact_id, ctx)


async def test_a_failed_take_back_after_a_cancelled_write_names_the_error_on_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sessions = StallsOneLoad()
    store = _StallsThenFailsToForget("forget", sessions)
    limits = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    memory = MemoryManager(store, extractor=Proposes(), limits=limits)
    writer = _runtime(memory, sessions)
    try:
        async with _runtime(Store(), sessions) as operator:
            store.before_write = lambda: _erase_b(operator)
            with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"), anyio.fail_after(30):
                memory.extract_in_background(
                    SCOPE, (Message(Role.USER, "my pin is 4321"),), "ex 1", sources=[_ref("sB")]
                )
                await store.stalled.wait()
                with pytest.raises(MemoryDrainError):
                    await memory.drain(0, grace_s=GENEROUS)
    finally:
        await writer.aclose()
    _one_line(caplog, "its write then cancelled, could not be taken back")


ANA = MemoryScope("acme", "ana")


class _Extractor:
    async def extract(self, scope: MemoryScope, messages: object, ctx: OpContext) -> list[MemoryFact]:
        return [MemoryFact(scope, "badge on file")]


class _FailsTheLedgerAfter(InMemoryMemoryStore):
    """Once a fact is stored, the ledger's reads fail (the check after the extraction's writes)."""

    def __init__(self, ledger: _Ledger) -> None:
        super().__init__()
        self.ledger = ledger

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
        ack = await super().remember(fact, ctx)
        self.ledger.fail = True
        return ack


async def test_an_extraction_not_checked_again_names_the_error_on_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = _Ledger()
    manager = MemoryManager(_FailsTheLedgerAfter(ledger), extractor=_Extractor())
    runtime = _runtime(manager, ledger)
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            manager.extract_in_background(
                ANA,
                [Message(Role.USER, "badge")],
                "host turn",
                sources=[GroupRef("s1", 0, "sha256:" + "a" * 64)],
                reading=reading,
            )
            assert (await manager.drain(20)).ok  # the facts stand, unconfirmed
        ledger.fail = False
        await runtime.aclose()
        await manager.aclose()
    _one_line(caplog, "were not checked again against erasures of its sources")
