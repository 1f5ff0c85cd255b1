"""A retried attempt and the give-up are span events on the model call's ``chat`` span, next to their WARNING.

The standard (docs/observability.md): every degraded outcome logs a WARNING
and becomes a span event; an adapter's call that still answers (a 503 retried
into a success) says so on the adapter call's span with
``plugin_api.current_span_event``. Against the stub server over real HTTP;
the server's error text (which may echo the request) is on no span.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from openai_helpers import make_provider
from openai_stub_server import Reply, StubServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import ProviderError, Telemetry, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore

pytestmark = pytest.mark.anyio

ME = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
ECHO = "overloaded: your prompt was zq-private-77"


async def _run(stub: StubServer, max_retries: int) -> tuple[list[ReadableSpan], BaseException | None]:
    exporter, tracer_provider = InMemorySpanExporter(), TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider = make_provider(stub, max_retries=max_retries)
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        owned=[provider],
        telemetry=Telemetry(tracer_provider=tracer_provider),
    )
    failed: BaseException | None = None
    with anyio.fail_after(30):
        async with runtime:
            try:
                await runtime.run(ME, "s1", "hello zq-private-77")
            except ProviderError as exc:
                failed = exc
    return list(exporter.get_finished_spans()), failed


def _events(spans: list[ReadableSpan], prefix: str) -> list[tuple[str, dict[str, Any]]]:
    [chat] = [s for s in spans if s.name.startswith("chat")]
    return [(e.name, dict(e.attributes or {})) for e in chat.events if e.name.startswith(prefix)]


def _carried(spans: list[ReadableSpan]) -> str:
    return repr(
        [
            (s.name, s.status.description, s.attributes, [(e.name, e.attributes) for e in s.events])
            for s in spans
        ]
    )


async def test_a_retried_attempt_is_an_event_on_the_chat_span(
    stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    stub.add(Reply.error(503, ECHO), Reply.recorded("plain_answer"))
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
        spans, failed = await _run(stub, max_retries=2)
    assert failed is None
    assert len([r for r in caplog.records if r.name == "agentium.plugins.provider_openai"]) == 1
    assert _events(spans, "agentium.openai.") == [
        ("agentium.openai.retry", {"agentium.openai.attempt": 1, "http.response.status_code": 503})
    ]
    assert "zq-private-77" not in _carried(spans)


async def test_giving_up_is_an_event_on_the_chat_span(
    stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    stub.add(*(Reply.error(503, ECHO) for _ in range(2)))
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
        spans, failed = await _run(stub, max_retries=1)
    assert failed is not None
    assert len([r for r in caplog.records if r.name == "agentium.plugins.provider_openai"]) == 2
    assert _events(spans, "agentium.openai.") == [
        ("agentium.openai.retry", {"agentium.openai.attempt": 1, "http.response.status_code": 503}),
        (
            "agentium.openai.retries_exhausted",
            {"agentium.openai.attempt": 2, "http.response.status_code": 503},
        ),
    ]
    assert "zq-private-77" not in _carried(spans)
