"""An ``unknown`` verdict is an event on the verifier call's span too, next to its WARNING (no paths).

The standard (docs/observability.md, "Plugin authors"): a degraded outcome
an adapter's call still answers is a WARNING on the plugin's logger and an
event on the adapter call's span (``plugin_api.current_span_event``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import pytest
from fs_verifier_helpers import root_fixture, verifier_for
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import Telemetry, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

root = root_fixture()


async def test_an_unknown_verdict_is_an_event_on_the_verifier_span(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Sparse: too large to judge under the default max_file_bytes.
    (root / "big.bin").touch()
    os.truncate(root / "big.bin", 2 * 1024**3)
    exporter, tracer_provider = InMemorySpanExporter(), TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier_for(root, "big.bin"),
        telemetry=Telemetry(tracer_provider=tracer_provider),
    )
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.verifier_fs"), anyio.fail_after(30):
        async with runtime:
            result = await runtime.run(
                VerifiedIdentity("acme", "ana", "test"), "s1", "build it", completion=True
            )
    assert result.verification is not None and result.verification.verdict.value == "unknown"
    assert len([r for r in caplog.records if r.name == "agentium.plugins.verifier_fs"]) == 1
    [span] = [s for s in exporter.get_finished_spans() if s.name == "agentium.verifier.verify"]
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert events == [
        (
            "agentium.verifier_fs.unknown",
            {
                "agentium.verifier_fs.checks": 1,
                "agentium.verifier_fs.unknown_checks": 1,
                "agentium.verifier_fs.kinds": ("too large",),
            },
        )
    ]
    assert "big.bin" not in repr([s.attributes for s in exporter.get_finished_spans()] + events)
