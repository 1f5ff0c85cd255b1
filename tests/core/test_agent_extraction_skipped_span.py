"""An ``Agent`` turn it cannot extract from is reported under its manager's telemetry, not the global one.

A turn holding a lone surrogate has no digest to cite, so it is not
extracted: a WARNING and the span event ``agentium.memory.extraction_skipped``.
That event went to "the span current in the call" through OpenTelemetry's
global provider, whatever the manager's ``Telemetry`` said: a manager whose
telemetry records nothing still put it on the host's span, and a host
tracing only through the manager's own provider never got it. It is now a
short ``agentium.memory.extraction`` span from the manager's provider,
carrying the event.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import opentelemetry.trace as otel_trace
import pytest

from agentium_harness import Agent, MemoryManager, MemoryScope, Telemetry
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing import SpanRecorder, recording_spans

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
SECRET = "4321"


class NoFacts:
    """An extractor that proposes nothing (it is never called for a skipped turn)."""

    async def extract(self, scope: object, messages: object, ctx: object) -> list[object]:
        return []


@pytest.fixture
def no_global(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", None)
    yield


async def _skipped_turn(telemetry: Telemetry) -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=NoFacts(), telemetry=telemetry)
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), manager, ANA, session="s1")
    with anyio.fail_after(30):
        reply = await agent.run(f"my pin is \ud800 {SECRET}")
        assert reply.extraction is None
        await agent.close()


async def test_the_event_goes_to_the_managers_provider(no_global: None) -> None:
    recorder = SpanRecorder()
    await _skipped_turn(Telemetry(tracer_provider=recorder.provider))
    events = [(s.name, e.name, dict(e.attributes or {})) for s in recorder.finished for e in s.events]
    assert events == [
        (
            "agentium.memory.extraction",
            "agentium.memory.extraction_skipped",
            {"agentium.memory.reason": "encoding"},
        )
    ]
    assert not [text for text in recorder.carried() if SECRET in text]


async def test_a_manager_recording_nothing_puts_nothing_on_the_hosts_global_span() -> None:
    with recording_spans() as spans:
        with otel_trace.get_tracer("host").start_as_current_span("host turn"):
            await _skipped_turn(Telemetry(tracer_provider=otel_trace.NoOpTracerProvider()))
    assert [(s.name, s.events) for s in spans.finished] == [("host turn", ())]
