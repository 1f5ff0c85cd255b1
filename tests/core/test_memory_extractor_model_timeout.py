"""A memory manager's extractor call runs under the model deadline, not the store deadline.

Before, ``memory extract`` ran under ``MemoryLimits.op_timeout_s`` (10 s by
default), the deadline meant to catch a hung memory store, though an
extractor is host code that may well call a model: a model that needs a
minute was cut off at the store's deadline, whatever the manager's or the
runtime's ``model_timeout_s`` said, and a short model deadline did not bound a
hung extractor. Now the deadline is, as for an ``Agent``'s model call, the
manager's ``MemoryLimits.model_timeout_s``, else the ``model_timeout_s`` of the
runtime the manager belongs to, else ``MemoryLimits.op_timeout_s`` — and an
extractor blocked in a worker thread is walked away from at it. A drain still
bounds extraction whatever its model deadline.

Only the call a test wants to time out gets a short deadline; what must
succeed gets 30 s. A test whose store deadline is short has its extractor
propose nothing, so no store call has to finish under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agentium_harness import (
    GroupRef,
    MemoryDrainError,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness._history import Message, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.memory import MemoryFact
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

#: The group an extraction reads (its facts cite it): any one will do here.
SOURCES = (GroupRef("agent", 0, "sha256:" + "0" * 64),)

ALICE = MemoryScope("acme", "alice")
SAID = (Message(Role.USER, "please remember the boiler is red"), Message(Role.ASSISTANT, "Noted."))
#: The deadline of everything a test expects to succeed.
ROOMY_S = 30.0
#: Scheduling slack on a loaded two-core machine: far under what a bound left unenforced would take.
SLACK_S = 10.0
#: How long a blocked worker thread blocks at most (the test releases it earlier); past SLACK_S.
BLOCK_S = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def thread_gate() -> Iterator[threading.Event]:
    """Released at the end of the test so the blocked thread returns (late) instead of waiting BLOCK_S."""
    event = threading.Event()
    yield event
    event.set()


class SlowExtractor:
    """An extractor behind a model that answers after ``delay`` seconds, or never (``hang``)."""

    def __init__(self, delay: float = 0.0, hang: bool = False, propose: bool = True) -> None:
        self.delay = delay
        self.hang = hang
        self.propose = propose
        self.contexts: list[OpContext] = []

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        self.contexts.append(ctx)
        if self.hang:
            await anyio.sleep_forever()
        await anyio.sleep(self.delay)
        return [MemoryFact(scope, "the boiler is red")] if self.propose else []


class BlockingClientExtractor:
    """An extractor over a blocking model client: its call blocks a worker thread cancellation cannot stop."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        await anyio.to_thread.run_sync(self.gate.wait, BLOCK_S)
        return [MemoryFact(scope, "the boiler is red")]


def manager(
    extractor: Any, op_timeout_s: float = ROOMY_S, model_timeout_s: float | None = None
) -> MemoryManager:
    limits = MemoryLimits(op_timeout_s=op_timeout_s, drain_timeout_s=ROOMY_S, model_timeout_s=model_timeout_s)
    return MemoryManager(InMemoryMemoryStore(), extractor=extractor, limits=limits)


def runtime(memory: MemoryManager, **limits: Any) -> Any:
    """A runtime the manager belongs to (``runtime.memory``)."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory,
        limits=RuntimeLimits(**limits),
    )


async def extraction_times_out(memory: MemoryManager, deadline: float) -> str:
    """Extract from a model that does not answer: the item fails at ``deadline``, nothing is written."""
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    started = time.monotonic()
    with anyio.fail_after(SLACK_S), pytest.raises(MemoryDrainError) as caught:
        await memory.drain(ROOMY_S)
    assert time.monotonic() - started < SLACK_S
    [item] = caught.value.result.items
    assert item.name == "ex 1" and item.status.value == "failed", item
    assert f"memory extract did not finish within {deadline}s" in item.detail
    # Nothing was written. Read from the store under a deadline of its own: the manager's store
    # deadline may be the short one a test is about, and this read is meant to succeed.
    assert await memory.store.list_facts(ALICE, 50, OpContext.with_timeout(ROOMY_S)) == []
    return item.detail


# -- a slow model is not cut off by the store's short deadline ----------------------------------------


async def test_a_slow_extractor_completes_under_the_memory_model_deadline() -> None:
    # The store deadline (0.2 s) would cut the 0.5 s extractor off; memory's model deadline is 30 s.
    memory = manager(SlowExtractor(delay=0.5, propose=False), op_timeout_s=0.2, model_timeout_s=ROOMY_S)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    result = await memory.drain(ROOMY_S)
    assert result.completed == ("ex 1",) and result.ok


async def test_a_slow_extractor_completes_under_the_runtimes_model_deadline() -> None:
    memory = manager(SlowExtractor(delay=0.5, propose=False), op_timeout_s=0.2)
    rt = runtime(memory, model_timeout_s=ROOMY_S)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    result = await memory.drain(ROOMY_S)
    assert result.completed == ("ex 1",) and result.ok
    await rt.aclose()


async def test_a_slow_extractors_facts_are_written() -> None:
    memory = manager(SlowExtractor(delay=0.5), model_timeout_s=ROOMY_S)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    result = await memory.drain(ROOMY_S)
    assert result.ok
    assert [f.fact.text for f in await memory.list(ALICE)] == ["the boiler is red"]


# -- a hung model is still bounded, by the model deadline ---------------------------------------------


async def test_a_hung_extractor_times_out_at_the_runtimes_model_deadline() -> None:
    extractor = SlowExtractor(hang=True)
    memory = manager(extractor)  # the store deadline is 30 s: not what bounds the extractor now
    rt = runtime(memory, model_timeout_s=0.3)
    await extraction_times_out(memory, 0.3)
    assert extractor.contexts[0].signal.cancelled
    await rt.aclose()


async def test_the_memory_model_deadline_comes_before_the_runtimes() -> None:
    memory = manager(SlowExtractor(hang=True), model_timeout_s=0.3)
    rt = runtime(memory, model_timeout_s=ROOMY_S)
    await extraction_times_out(memory, 0.3)
    await rt.aclose()


async def test_an_extractor_blocked_in_a_worker_thread_is_walked_away_from(
    thread_gate: threading.Event,
) -> None:
    memory = manager(BlockingClientExtractor(thread_gate), model_timeout_s=0.3)
    detail = await extraction_times_out(memory, 0.3)
    assert "abandoned" in detail  # the thread did not stop when cancelled: the engine walked away from it
    thread_gate.set()
    await anyio.sleep(0.2)  # its late result is discarded: still nothing written
    assert await memory.list(ALICE) == ()


# -- which deadline applies, and what still bounds extraction -----------------------------------------


async def test_without_a_model_deadline_the_store_deadline_still_bounds_the_extractor() -> None:
    await extraction_times_out(manager(SlowExtractor(hang=True), op_timeout_s=0.3), 0.3)


async def test_a_drain_bounds_extraction_whatever_its_model_deadline() -> None:
    memory = manager(SlowExtractor(hang=True), model_timeout_s=3600)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    with anyio.fail_after(SLACK_S), pytest.raises(MemoryDrainError) as caught:
        await memory.drain(0.3)
    assert caught.value.result.cancelled == ("ex 1",)
    assert await memory.list(ALICE) == ()


async def test_aclose_of_the_runtime_bounds_extraction_whatever_its_model_deadline() -> None:
    extractor = SlowExtractor(hang=True)
    memory = manager(extractor, model_timeout_s=3600)
    rt = runtime(memory, settle_timeout_s=0.3, close_timeout_s=ROOMY_S)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    with anyio.fail_after(SLACK_S):
        await rt.aclose()  # waits settle_timeout_s, then cancels it (a warning), not the hour
    assert rt.state.value == "closed"
    assert memory.running() == ()  # cancelled and stopped, not left running
