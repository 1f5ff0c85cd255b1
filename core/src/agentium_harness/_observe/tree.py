"""The span tree of finished spans as text (``agentium run --trace``), and the SDK set-up behind it.

Needs ``opentelemetry-sdk`` (``pip install 'agentium-harness[otel]'``; from a checkout,
``pip install './core[otel]'``).
:func:`capture` adds an in-memory exporter to the global SDK tracer provider
(creating one when the application has none), so the tree also shows the
spans of instrumented clients; :func:`render` prints one line per span,
children indented under their parent, with its duration and the attributes
that say what happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["SdkMissingError", "capture", "render"]

#: Attributes shown after a span's name in the tree, in this order (when present), with their labels.
SHOWN = {
    "agentium.run.status": "run",
    "agentium.commit_state": "commit",
    "agentium.recall.status": "recall",
    "agentium.recall.decision": "decision",
    "agentium.recall.included": "included",
    "agentium.eviction.status": "eviction",
    "agentium.eviction.groups": "groups",
    "agentium.tool.status": "tool",
    "agentium.verification.verdict": "verdict",
    "agentium.summary.moved": "moved",
    "agentium.drain.completed": "completed",
    "gen_ai.provider.name": "provider",
    "gen_ai.memory.record.count": "records",
    "gen_ai.usage.input_tokens": "in",
    "gen_ai.usage.output_tokens": "out",
    "error.type": "error",
}


class SdkMissingError(RuntimeError):
    """``opentelemetry-sdk`` is not installed, so no spans can be collected."""


def capture() -> Any:
    """An in-memory exporter receiving every span of the global tracer provider from now on."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError as exc:
        raise SdkMissingError(
            "--trace needs the OpenTelemetry SDK: pip install 'agentium-harness[otel]' "
            "(from a checkout: pip install './core[otel]')"
        ) from exc
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def _line(span: Any, depth: int) -> str:
    start, end = span.start_time or 0, span.end_time or span.start_time or 0
    attributes = span.attributes or {}
    shown = [f"{label}={attributes[key]}" for key, label in SHOWN.items() if key in attributes]
    status = getattr(getattr(span, "status", None), "status_code", None)
    failed = " ERROR" if getattr(status, "name", "") == "ERROR" else ""
    extra = f"  [{', '.join(shown)}]" if shown else ""
    return f"{'  ' * depth}{span.name}  {(end - start) / 1e6:.1f} ms{failed}{extra}"


def render(spans: Sequence[Any]) -> str:
    """The spans as an indented tree, roots first and each level in start order."""
    by_id = {span.context.span_id: span for span in spans}
    children: dict[int | None, list[Any]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in by_id else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, ()), key=lambda s: s.start_time or 0):
            lines.append(_line(span, depth))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)
