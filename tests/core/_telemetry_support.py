"""An SDK tracer and meter provider with in-memory exporters: what the observability tests read back."""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import Telemetry


class Telemetered:
    """An SDK tracer and meter provider with in-memory exporters, for one test."""

    def __init__(self, *processors: SpanProcessor) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        for processor in processors:
            self.tracer_provider.add_span_processor(processor)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def telemetry(self, **kw: Any) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kw)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span

    def events(self, prefix: str) -> list[tuple[str, str, dict[str, Any]]]:
        """Every span event whose name starts with ``prefix``: (span name, event name, attributes)."""
        return [
            (s.name, e.name, dict(e.attributes or {}))
            for s in self.spans
            for e in s.events
            if e.name.startswith(prefix)
        ]

    def child_of(self, child: str, parent: ReadableSpan) -> bool:
        """Whether a span named ``child`` has ``parent`` as its parent."""
        return any(
            s.name == child and s.parent is not None and s.parent.span_id == parent.context.span_id
            for s in self.spans
        )

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def carried(self) -> list[str]:
        """Every string on a span or a metric point: names, attributes, events, statuses."""
        out: list[str] = []
        for span in self.spans:
            out += [span.name, str(span.status.description or "")]
            out += [str(v) for v in (span.attributes or {}).values()]
            for event in span.events:
                out += [event.name, *(str(v) for v in (event.attributes or {}).values())]
        for points in self.metrics().values():
            for point in points:
                out += [str(v) for v in dict(point.attributes).values()]
        return out


class SpanEnded(SpanProcessor):
    """Sets ``ended`` when a span of ``name`` ends: for spans that end after the call under test returned."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ended = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == self.name:
            self.ended.set()


def outcome_events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    """The ``agentium.*`` events on ``span`` (not the ``exception`` event a failed span carries)."""
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith("agentium.")]
