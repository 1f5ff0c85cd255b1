"""A host's extraction whose facts could not be checked again after its writes: a WARNING and a span event.

After a host's extraction wrote its facts, the erasure ledgers it read as
its turn started are read again (``after_writes``), so that an erasure of
its groups that began meanwhile takes its facts back. When that read fails
(the session store cannot be read), or when a drain's cancel cut the writes
short and the shielded check ran past its bound, the facts stand
unconfirmed: said in a WARNING on ``agentium.engine.memory`` and the span
event ``agentium.memory.extraction_unchecked`` (``error.type`` only: no
fact, no id, no content) on the manager's ``agentium.memory.extraction``
span.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from agentium_harness import (
    GroupRef,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Role,
    RuntimeLimits,
    Telemetry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import Message, OpContext, SessionKey, StoredSnapshot
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
SECRET = "my badge number is qz7731"
FACTS = ("badge qz7731 on file", "badge kept in the drawer")
TURN = [Message(Role.USER, SECRET), Message(Role.ASSISTANT, "noted")]
SOURCES = [GroupRef("s1", 0, "sha256:" + "a" * 64)]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Ledger(InMemorySessionStore):
    """Its reads fail (``raise``) or never answer (``hang``) once ``mode`` is set: the store went away."""

    mode = ""

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        if self.mode == "raise":
            raise ConnectionError("the session store went away")
        if self.mode == "hang":
            await anyio.sleep_forever()
        return await super().load(key, ctx)


class _Said(logging.Handler):
    """Sets ``event`` when a record saying ``text`` is logged (in the loop's own thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.event = text, anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


class _Facts(InMemoryMemoryStore):
    """Sets ``ledger.mode`` to ``after`` once a fact is stored; the ``hold``-th write waits, cancelled."""

    def __init__(self, ledger: _Ledger, after: str, hold: int = 0) -> None:
        super().__init__()
        self.ledger, self.after, self.hold, self.writes = ledger, after, hold, 0
        self.held = anyio.Event()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
        self.writes += 1
        if self.writes == self.hold:
            self.ledger.mode = self.after
            self.held.set()
            await anyio.sleep_forever()
        ack = await super().remember(fact, ctx)
        if not self.hold:
            self.ledger.mode = self.after  # the check after this write, and the one after the writes, fail
        return ack


class _Extractor:
    """Proposes ``texts`` (a second write after an unreadable store would be refused before it)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return [MemoryFact(scope, text) for text in self.texts]


def _host(
    store: _Facts, ledger: _Ledger, recorder: SpanRecorder, texts: Sequence[str] = FACTS
) -> tuple[Any, MemoryManager]:
    manager = MemoryManager(
        store, extractor=_Extractor(texts), telemetry=Telemetry(tracer_provider=recorder.provider)
    )
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=ledger,
        memory=manager,
        limits=RuntimeLimits(op_timeout_s=20.0),  # the store's own deadline past the check's bound
    )
    return runtime, manager


def _unchecked(recorder: SpanRecorder) -> list[tuple[str, dict[str, Any]]]:
    return [
        (s.name, dict(e.attributes or {}))
        for s in recorder.finished
        for e in s.events
        if e.name == "agentium.memory.extraction_unchecked"
    ]


def _no_content(recorder: SpanRecorder, caplog: pytest.LogCaptureFixture, fact_ids: Sequence[str]) -> None:
    """No text in a log or span; no fact id in a log or the extraction's span.

    (A ``create_memory`` span names the fact it wrote only with content capture: test_observability's.)
    """
    logged = [r.getMessage() for r in caplog.records]
    extraction = [
        str(v)
        for s in recorder.finished
        if s.name == "agentium.memory.extraction"
        for e in s.events
        for v in (e.name, *(e.attributes or {}).values())
    ]
    for text in (SECRET, *FACTS):
        assert not [s for s in logged + list(recorder.carried()) if text in s], text
    for fact_id in fact_ids:
        assert not [s for s in logged + extraction if fact_id in s], fact_id


@pytest.mark.parametrize("with_reading", [True, False])
async def test_facts_not_checked_again_after_the_writes_are_a_warning_and_a_span_event(
    with_reading: bool, caplog: pytest.LogCaptureFixture
) -> None:
    ledger, recorder = _Ledger(), SpanRecorder()
    store = _Facts(ledger, "raise")
    runtime, manager = _host(store, ledger, recorder, FACTS[:1])
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"]) if with_reading else None
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            manager.extract_in_background(ANA, TURN, "host turn", sources=SOURCES, reading=reading)
            drained = await manager.drain(20)
        ledger.mode = ""
        assert drained.ok  # the facts stand, unconfirmed
        stored = [f.fact_id for f in await manager.list(ANA)]
        assert [f.text for f in await manager.list(ANA)] == [FACTS[0]]
        await runtime.aclose()
        await manager.aclose()
    [warning] = [r for r in caplog.records if "were not checked again against erasures" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "SessionStoreError" in warning.getMessage()
    assert _unchecked(recorder) == [("agentium.memory.extraction", {"error.type": "SessionStoreError"})]
    _no_content(recorder, caplog, stored)


async def test_facts_a_cancelled_extraction_could_not_check_again_are_a_warning_and_a_span_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A drain cuts the second write short; the shielded check after it runs past its bound (5 s)."""
    ledger, recorder = _Ledger(), SpanRecorder()
    store = _Facts(ledger, "hang", hold=2)
    runtime, manager = _host(store, ledger, recorder)
    said = _Said("cancelled after its writes")
    logging.getLogger("agentium.engine.memory").addHandler(said)
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            manager.extract_in_background(ANA, TURN, "host turn", sources=SOURCES, reading=reading)
            await store.held.wait()
            try:
                drained = await manager.drain(0.1, grace_s=0.5)
            except MemoryDrainError as exc:
                drained = exc.result
            assert not drained.ok
            await said.event.wait()  # the shielded check ends at its bound, after the drain gave up
        ledger.mode = ""
        stored = [f.fact_id for f in await manager.list(ANA)]
        assert [f.text for f in await manager.list(ANA)] == [FACTS[0]]  # stands, unconfirmed
        await runtime.aclose()
        await manager.aclose()
    logging.getLogger("agentium.engine.memory").removeHandler(said)
    [warning] = [r for r in caplog.records if "cancelled after its writes" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "could not be checked again" in warning.getMessage()
    assert _unchecked(recorder) == [("agentium.memory.extraction", {"error.type": "Overrun"})]
    _no_content(recorder, caplog, stored)
