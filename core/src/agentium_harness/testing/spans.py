"""Recording OpenTelemetry spans in memory, for tests of what an integration puts on spans.

Needs ``opentelemetry-sdk`` (``pip install 'agentium-harness[otel]'``; from a checkout,
``pip install './core[otel]'``); it is imported when a :class:`SpanRecorder` is made, so importing
:mod:`agentium_harness.testing` does not require it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class SpanRecorder:
    """An SDK tracer provider exporting every finished span to memory.

    Pass :attr:`provider` to ``Telemetry(tracer_provider=...)``, or install it
    as the global provider for a test with :func:`recording_spans`.
    """

    def __init__(self) -> None:
        # Imported here, not at module level: the core runs without the SDK.
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self._exporter = InMemorySpanExporter()
        #: The ``opentelemetry.sdk.trace.TracerProvider`` the spans are recorded from.
        self.provider: Any = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self._exporter))

    @property
    def finished(self) -> tuple[Any, ...]:
        """The spans finished so far (``ReadableSpan``), in the order they ended."""
        return tuple(self._exporter.get_finished_spans())

    def clear(self) -> None:
        """Forget the spans finished so far."""
        self._exporter.clear()

    def carried(self) -> list[str]:
        """Every string on a finished span: names, attributes, events, statuses.

        What a privacy test searches for content that must not reach a span.
        """
        out: list[str] = []
        for span in self.finished:
            out += [span.name, str(span.status.description or "")]
            out += [str(v) for v in (span.attributes or {}).values()]
            for event in span.events:
                out += [event.name, *(str(v) for v in (event.attributes or {}).values())]
        return out


@contextmanager
def recording_spans() -> Iterator[SpanRecorder]:
    """A :class:`SpanRecorder` installed as the global tracer provider for the ``with`` block.

    The previous global provider is restored at exit and the recorder's
    provider shut down. OpenTelemetry's ``set_tracer_provider`` takes effect
    once per process, so a test cannot install (and later remove) a provider
    through it; this sets and restores the API's module global
    ``opentelemetry.trace._TRACER_PROVIDER`` directly, the one place
    ``get_tracer_provider`` reads. Being process-wide, it is not for tests
    that run concurrently in one process.
    """
    from opentelemetry import trace

    recorder = SpanRecorder()
    previous = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER = recorder.provider
    try:
        yield recorder
    finally:
        trace._TRACER_PROVIDER = previous
        recorder.provider.shutdown()
