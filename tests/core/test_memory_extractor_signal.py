"""A drain or ``runtime.aclose()`` that cancels an extraction sets its ``ctx.signal``, not only its scope.

Before, a drain cancelled owned memory work through its cancel scope alone:
an extractor (host or plugin code) blocked in a worker thread, where a
cancel scope cannot reach, watching ``ctx.signal`` as the ports ask, never
saw the cancellation and ran on until its own end; the drain reported it as
not stopped. Now each owned item has a cancel signal the drain sets first,
and every call the item makes gets a child of it, as an admitted run's calls
get their ticket's.

The extractor's thread gives up by itself after BLOCK_S (a test on the old
code fails, it does not hang); what must succeed gets 30 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

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
ROOMY_S = 30.0
#: Longest the extractor's thread polls before giving up by itself (past the drain's grace).
BLOCK_S = 8.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SignalWatchingExtractor:
    """A plugin extractor over a blocking client: its worker thread polls ``ctx.signal`` to stop."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.released = threading.Event()  # the test's own way out, so no thread outlives it
        self.saw: list[str] = []  # the signal's reason, when the thread saw it

    def _poll(self, ctx: OpContext) -> None:
        self.started.set()
        until = time.monotonic() + BLOCK_S
        while time.monotonic() < until and not self.released.is_set():
            if ctx.signal.cancelled:
                self.saw.append(ctx.signal.reason)
                return
            time.sleep(0.01)

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        # Not abandon_on_cancel: the task waits for the thread, as a blocking client's would.
        await anyio.to_thread.run_sync(self._poll, ctx)
        return [MemoryFact(scope, "the boiler is red")]


@pytest.fixture
def extractor() -> Iterator[SignalWatchingExtractor]:
    made = SignalWatchingExtractor()
    yield made
    made.released.set()


def manager(extractor: SignalWatchingExtractor) -> MemoryManager:
    limits = MemoryLimits(op_timeout_s=ROOMY_S, drain_timeout_s=ROOMY_S, model_timeout_s=ROOMY_S)
    return MemoryManager(InMemoryMemoryStore(), extractor=extractor, limits=limits)


async def _started(extractor: SignalWatchingExtractor) -> None:
    assert await anyio.to_thread.run_sync(extractor.started.wait, ROOMY_S)


async def test_a_drain_that_cancels_an_extraction_sets_its_signal_and_the_thread_stops(
    extractor: SignalWatchingExtractor,
) -> None:
    memory = manager(extractor)
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    await _started(extractor)
    with pytest.raises(MemoryDrainError) as caught:
        await memory.drain(0.2, grace_s=ROOMY_S)  # only the wait for the extraction is short
    [item] = caught.value.result.items
    assert item.name == "ex 1" and item.status.value == "cancelled", item
    assert item.stopped, item  # its thread saw the signal and returned within the grace
    assert extractor.saw and "cancelled" in extractor.saw[0]  # the drain's reason, not the deadline
    assert memory.running() == ()
    assert await memory.list(ALICE) == ()  # cancelled before its writes: nothing was written


async def test_runtime_aclose_that_cancels_an_extraction_sets_its_signal(
    extractor: SignalWatchingExtractor,
) -> None:
    memory = manager(extractor)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory,
        limits=RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=ROOMY_S),
    )
    memory.extract_in_background(ALICE, SAID, "ex 1", sources=SOURCES)
    await _started(extractor)
    with anyio.fail_after(ROOMY_S):
        await rt.aclose()  # waits settle_timeout_s, then cancels the extraction
    assert rt.state.value == "closed"
    assert extractor.saw and "cancelled" in extractor.saw[0]
    assert memory.running() == ()
