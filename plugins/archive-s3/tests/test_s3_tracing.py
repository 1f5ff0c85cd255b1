"""With botocore's OpenTelemetry instrumentation on, the S3 requests nest under the engine's spans (issue 24).

The adapters call boto3 in worker threads; the engine's adapter-call span is
current there (``anyio.to_thread`` copies the context), so each S3 request's
span (``S3.PutObject`` …) is a child of ``agentium.archive.append`` or
``agentium.session.save``, itself under the turn's ``invoke_agent`` span.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import (
    ResidentLimits,
    RuntimeLimits,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider, exporter
    finally:
        instrumentor.uninstrument()


def _ancestors(spans: tuple[ReadableSpan, ...], span: ReadableSpan) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        above = by_id[parent.span_id]
        names.append(above.name)
        parent = above.parent
    return names


async def test_s3_requests_nest_under_the_adapter_call_and_the_turn(
    config: S3Config, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    archive, store = S3Archive(config), S3SessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=Telemetry(tracer_provider=provider),
        owned=[archive, store],
    )
    async with runtime:
        for text in ("one", "two"):
            result = await runtime.run(VerifiedIdentity("acme", "ana", "auth"), "traced", text)
            assert result.committed
    spans = tuple(exporter.get_finished_spans())
    s3 = [s for s in spans if s.name.startswith("S3.")]
    assert s3, [s.name for s in spans]
    puts: dict[str, list[Any]] = {}
    for span in s3:
        chain = _ancestors(spans, span)
        assert chain, f"{span.name} has no agentium parent"
        assert chain[-1] == "invoke_agent agentium", (span.name, chain)
        puts.setdefault(chain[0], []).append(span.name)
    # The archive's objects are written under the eviction's append, the snapshot under the save.
    assert "S3.PutObject" in puts.get("agentium.archive.append", []), puts
    assert "S3.PutObject" in puts.get("agentium.session.save", []), puts
    assert "S3.GetObject" in puts.get("agentium.session.load", []), puts
