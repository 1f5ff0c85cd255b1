"""Each Redis round trip is a client span under the engine's adapter-call span (issue 24).

The store pipelines below redis-py's instrumented layer (``RedisInstrumentor``
never sees its commands), so it opens one ``redis <command>`` span per round
trip itself (``plugin_api.client_span``), with the command names and never
their keys or arguments. They run in the tasks the engine starts for each
adapter call, so every one of a turn is under ``retrieval RedisRecallStore``
(or the commit fence), under the turn's ``invoke_agent`` span.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import Telemetry, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SourceOwner
from agentium_recall_redis import RedisRecallStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter


def _ancestors(spans: tuple[ReadableSpan, ...], span: ReadableSpan) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        above = by_id[parent.span_id]
        names.append(above.name)
        parent = above.parent
    return names


async def test_redis_commands_nest_under_the_recall_stage_and_the_turn(
    store: RedisRecallStore, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    owner = SourceOwner("acme", "ana", "s1")
    await store.index_document(owner, "launch", "the launch is in march", OpContext())
    assert not exporter.get_finished_spans()  # outside a runtime with telemetry nothing records
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        telemetry=Telemetry(tracer_provider=provider),
    )
    async with runtime:
        result = await runtime.run(VerifiedIdentity("acme", "ana", "auth"), "s1", "when is the launch")
    assert result.recall is not None and len(result.recall.included) == 1
    spans = tuple(exporter.get_finished_spans())
    engine = {"invoke_agent agentium", "retrieval RedisRecallStore"}
    redis = [s for s in spans if s.name.startswith("redis ")]
    assert redis, [s.name for s in spans]
    for span in redis:
        chain = _ancestors(spans, span)
        assert chain and chain[-1] == "invoke_agent agentium", (span.name, chain)
        assert chain[0].startswith("agentium.recall."), (span.name, chain)
        attributes = span.attributes or {}
        assert attributes["db.system.name"] == "redis" and attributes["db.operation.batch.size"] >= 1
        assert "march" not in str(attributes) and "launch" not in str(attributes)
    assert any(engine <= set(_ancestors(spans, s)) for s in redis)
