"""``plugin_api.runtime_span``: a span from a runtime's own tracer provider, for code built on it.

The SDK integrations reported their degraded outcomes on the span current in
the call through OpenTelemetry's global provider: a host tracing only through
``Telemetry(tracer_provider=...)`` got no event (the integrations' tests show
that end to end). This is the core's side: the span goes to the runtime's
provider, under its settings, whatever the global provider is.
"""

from __future__ import annotations

from collections.abc import Iterator

import opentelemetry.trace as otel_trace
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    InvalidArgumentError,
    Message,
    Role,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import current_span_event, runtime_span
from agentium_harness.testing import SpanRecorder, recording_spans

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
SECRET = "QZV-secret-7731"


@pytest.fixture
def no_global(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", None)
    yield


def _runtime(telemetry: Telemetry) -> object:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=telemetry,
    )


async def test_the_span_is_the_runtimes_and_the_current_one_in_the_block(no_global: None) -> None:
    t = Telemetered()
    runtime = _runtime(t.telemetry())
    async with runtime:  # type: ignore[attr-defined]
        with runtime_span(runtime, "host.op", {"agentium.operation": "op"}) as span:
            assert span.recording and not span.captures_content
            current_span_event("host.degraded", {"agentium.items.left_out": 2})
            span.content("host.text", SECRET)  # no content capture: dropped
            await runtime.append(ANA, "s1", [Message(Role.USER, SECRET)])  # type: ignore[attr-defined]
    op = t.one("host.op")
    assert dict(op.attributes or {}) == {"agentium.operation": "op"}
    assert [(e.name, dict(e.attributes or {})) for e in op.events] == [
        ("host.degraded", {"agentium.items.left_out": 2})
    ]
    assert t.child_of("agentium.history.append", op)
    assert SECRET not in str([(s.attributes, s.events) for s in t.spans])


async def test_content_goes_on_it_only_when_the_host_opted_in(no_global: None) -> None:
    t = Telemetered()
    runtime = _runtime(t.telemetry(capture_content=True))
    with runtime_span(runtime, "host.op") as span:
        assert span.captures_content
        span.content("host.text", SECRET)
    assert dict(t.one("host.op").attributes or {}) == {"host.text": SECRET}


async def test_a_runtime_recording_nothing_records_nothing_not_even_on_the_global_provider() -> None:
    with recording_spans() as spans:
        runtime = _runtime(Telemetry(tracer_provider=otel_trace.NoOpTracerProvider()))
        with otel_trace.get_tracer("host").start_as_current_span("host turn"):
            with runtime_span(runtime, "host.op"):
                current_span_event("host.degraded")
    assert [(s.name, s.events) for s in spans.finished] == [("host turn", ())]


async def test_an_error_leaving_the_block_fails_the_span_with_its_type_only(no_global: None) -> None:
    recorder = SpanRecorder()
    runtime = _runtime(Telemetry(tracer_provider=recorder.provider))
    with pytest.raises(ValueError), runtime_span(runtime, "host.op"):
        raise ValueError(SECRET)
    [span] = recorder.finished
    assert dict(span.attributes or {}) == {"error.type": "ValueError"}
    assert not [text for text in recorder.carried() if SECRET in text]


@pytest.mark.parametrize(
    ("runtime", "name", "attributes"),
    [
        (object(), "host.op", None),
        (None, "host.op", None),
        ("runtime", "", None),
        ("runtime", 3, None),
        ("runtime", "host.op", [("a", 1)]),
        ("runtime", "host.op", {1: "a"}),
    ],
)
async def test_bad_arguments_are_a_typed_error_and_record_nothing(
    runtime: object, name: object, attributes: object, no_global: None
) -> None:
    recorder = SpanRecorder()
    real = _runtime(Telemetry(tracer_provider=recorder.provider))
    with pytest.raises(InvalidArgumentError):
        runtime_span(real if runtime == "runtime" else runtime, name, attributes)  # type: ignore[arg-type]
    assert recorder.finished == ()
