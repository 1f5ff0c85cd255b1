"""Spans and metrics through OpenTelemetry, when it is installed and configured; nothing otherwise.

The core imports and runs without ``opentelemetry-api``. With it but with no
SDK configured (the global providers are still the API's proxies) a turn
records nothing either: :func:`begin` finds no live provider once per turn,
and every helper below then returns :data:`NULL`, whose ``with`` costs a
method call (``benchmarks/otel_overhead.py`` measures it).

Inside a turn the live state (:mod:`.state`: whose operation it is, and
its tracer, instruments and settings) travels in a context variable, so stage
modules, adapter calls in their own tasks (:func:`~.._engine.bounded.bounded`)
and worker threads (``anyio.to_thread`` copies the context) all see it, and
OpenTelemetry's own context (also a context variable) makes the spans of
instrumented clients — botocore, redis, httpx — children of the adapter call
that made them.

Nothing here may fail a turn: every call into OpenTelemetry is guarded, and
a failure (a span processor or metric reader that raises) is logged once on
``agentium.telemetry`` and otherwise ignored.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Any

from .logs import one_line
from .metrics import Instruments
from .state import (
    ACTIVE,
    HAVE_OTEL,
    INTERNAL_KIND,
    Active,
    begin,
    current,
    enter,
    error_type,
    leave,
    live,
    silent,
    unattributed,
    using,
)
from .state import CLIENT_KIND as _CLIENT
from .state import report_broken as _broken

__all__ = [
    "HAVE_OTEL",
    "INTERNAL_KIND",
    "NULL",
    "Active",
    "NullSpan",
    "Span",
    "adapter_call",
    "begin",
    "caller_span_event",
    "chat",
    "client_span",
    "current",
    "current_span_event",
    "enter",
    "error_type",
    "internal_span",
    "leave",
    "live",
    "operation",
    "silent",
    "stage",
    "tool",
    "unattributed",
    "using",
]

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ImportError:  # the core runs without OpenTelemetry (tests/core/test_observability_off.py)
    _context = _trace = None  # type: ignore[assignment]

# -- spans ---------------------------------------------------------------------------------------


class NullSpan:
    """The span of an operation nothing records: every method does nothing."""

    __slots__ = ()

    def __enter__(self) -> NullSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: object) -> None:
        """Nothing records."""

    def content(self, key: str, value: object) -> None:
        """Nothing records."""

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Nothing records."""

    def fail(self, kind: str, exc: BaseException | None = None) -> None:
        """Nothing records."""

    def result(self, value: object) -> None:
        """Nothing records."""

    @property
    def recording(self) -> bool:
        """False: nothing records."""
        return False

    @property
    def captures_content(self) -> bool:
        """False: nothing records, content least of all."""
        return False


#: The span every helper returns when nothing records.
NULL = NullSpan()

#: The OpenTelemetry span the innermost :class:`Span` of this context made current, and the tracer
#: that made it: :func:`current_span_event` tells a span of another runtime's telemetry by it.
_OPENED: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "agentium_opened_span", default=None
)


class Span:
    """One span (and its duration metric) of a live operation; use it as a context manager.

    An exception leaving the block marks it failed with the exception's type
    only (``error.type``, status ``ERROR``, an ``exception`` event with
    ``exception.type``); the message is added only with content capture on,
    since it may quote content.
    """

    __slots__ = (
        "_active",
        "_attrs",
        "_error",
        "_kind",
        "_metric",
        "_name",
        "_opened",
        "_otel",
        "_stage",
        "_started",
        "_token",
    )

    def __init__(
        self,
        active: Active,
        name: str,
        kind: Any,
        attributes: dict[str, Any],
        metric: tuple[str, dict[str, Any]] | None = None,
        stage: str | None = None,
    ) -> None:
        self._active = active
        self._stage = stage
        self._name = name
        self._kind = kind
        self._attrs = attributes
        self._metric = metric
        self._otel: Any = None
        self._token: Any = None
        self._opened: contextvars.Token[tuple[Any, Any] | None] | None = None
        self._error: str | None = None
        self._started = 0.0

    @property
    def recording(self) -> bool:
        """True when this span goes to a tracer (attributes set on it are kept)."""
        return self._otel is not None

    @property
    def captures_content(self) -> bool:
        """True when :meth:`content` keeps what it is given (recording, and the host opted in).

        Callers test it before building a content attribute, so a turn that
        records no content does not pay for rendering messages it would drop.
        """
        return self._otel is not None and self._active.settings.capture_content

    def __enter__(self) -> Span:
        self._started = perf_counter()
        tracer = self._active.tracer
        if tracer is not None:
            try:
                span = tracer.start_span(self._name, kind=self._kind, attributes=self._attrs)
                self._token = _context.attach(_trace.set_span_in_context(span))
                self._opened = _OPENED.set((span, tracer))
                self._otel = span
            except Exception as exc:
                _broken("starting a span", exc)
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.fail(error_type(exc), exc)
        elapsed = perf_counter() - self._started
        span, self._otel = self._otel, None
        if span is not None:
            try:
                _context.detach(self._token)
            except Exception as err:  # pragma: no cover - only a foreign context could refuse it
                _broken("leaving a span's context", err)
            opened, self._opened = self._opened, None
            if opened is not None:
                try:
                    _OPENED.reset(opened)
                except ValueError as err:  # pragma: no cover - left in another context than it was entered in
                    _broken("leaving a span's context", err)
            try:
                span.end()
            except Exception as err:
                _broken("ending a span", err)
        instruments = self._active.instruments
        if instruments is None:
            return
        failed = {"error.type": self._error} if self._error is not None else {}
        if self._metric is not None:
            name, attributes = self._metric
            instruments.record(name, elapsed, {**attributes, **failed})
        if self._stage is not None:
            instruments.record("stage_duration", elapsed, {"agentium.stage": self._stage, **failed})

    def set(self, key: str, value: object) -> None:
        """Set one attribute (``None`` is skipped); also on the duration metric when it is a GenAI one."""
        if value is None:
            return
        if self._metric is not None and key in _METRIC_KEYS:
            self._metric[1][key] = value
        if self._otel is not None:
            try:
                self._otel.set_attribute(key, value)
            except Exception as exc:
                _broken("setting a span attribute", exc)

    def content(self, key: str, value: object) -> None:
        """Set an attribute that carries content: only when the host opted in to content capture."""
        if self._otel is not None and self._active.settings.capture_content and value is not None:
            self.set(key, value if isinstance(value, str | int | float | bool) else _json(value))

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Add an event (a diagnostic, a decision) to the span."""
        if self._otel is not None:
            try:
                self._otel.add_event(name, dict(attributes or {}))
            except Exception as exc:
                _broken("adding a span event", exc)

    def fail(self, kind: str, exc: BaseException | None = None) -> None:
        """Mark the operation failed with ``kind`` as its ``error.type`` (a type name, never a message)."""
        self._error = kind
        span = self._otel
        if span is None:
            return
        try:
            span.set_attribute("error.type", kind)
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, kind))
            if exc is not None:
                event = {"exception.type": one_line(type(exc).__qualname__)}  # the adapter's: escaped
                if self._active.settings.capture_content:
                    event["exception.message"] = str(exc)
                span.add_event("exception", event)
        except Exception as err:
            _broken("marking a span failed", err)

    def result(self, value: object) -> None:
        """Describe an adapter call's result (a memory acknowledgment, a count of records)."""
        if self._otel is None or self._attrs.get("gen_ai.operation.name") not in _MEMORY_NAMES:
            return
        fact_id = getattr(value, "fact_id", None)
        if isinstance(fact_id, str):
            # An id is content, as in the engine's diagnostics (``memory_refused``): only with capture.
            self.content("gen_ai.memory.record.id", fact_id)
            self.set("gen_ai.memory.record.count", 1)
            status = getattr(value, "status", None)
            self.set("agentium.memory.ack", str(getattr(status, "value", status)))
        elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
            self.set("gen_ai.memory.record.count", len(value))


#: Attributes that also go on a GenAI duration metric (low cardinality).
_METRIC_KEYS = frozenset({"gen_ai.request.model", "gen_ai.response.model"})


def _json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    except Exception:
        return str(value)


def stage(
    name: str, attributes: Mapping[str, Any] | None = None, *, span_name: str | None = None
) -> Span | NullSpan:
    """The span of one stage of a turn (``agentium.<name>`` unless ``span_name``) and its duration."""
    active = ACTIVE.get()  # what current() answers, without its call while an operation is under way
    active = current() if active is None else active if active.on else None
    if active is None:
        return NULL
    return Span(active, span_name or f"agentium.{name}", INTERNAL_KIND, dict(attributes or {}), stage=name)


def operation(
    name: str, span_name: str, kind: str = "client", metric_stage: str | None = None, **attributes: Any
) -> Span | NullSpan:
    """A GenAI operation span (``gen_ai.operation.name`` = ``name``) with the GenAI duration metric.

    ``metric_stage`` also records it as that stage of the turn.
    """
    active = current()
    if active is None:
        return NULL
    attributes["gen_ai.operation.name"] = name
    metric = ("operation_duration", {"gen_ai.operation.name": name})
    if "gen_ai.provider.name" in attributes:
        metric[1]["gen_ai.provider.name"] = attributes["gen_ai.provider.name"]
    if "gen_ai.request.model" in attributes:
        metric[1]["gen_ai.request.model"] = attributes["gen_ai.request.model"]
    span_kind = _CLIENT if kind == "client" else INTERNAL_KIND
    return Span(active, span_name, span_kind, attributes, metric, metric_stage)


#: Adapter calls that are GenAI memory operations (``gen_ai.operation.name``).
MEMORY_OPERATIONS: dict[str, str] = {
    "memory remember": "create_memory",
    "memory correct": "update_memory",
    "memory forget": "delete_memory",
    "memory select": "search_memory",
    "memory list": "search_memory",
    "memory history": "search_memory",
}
_MEMORY_NAMES = frozenset(MEMORY_OPERATIONS.values())
#: Adapter calls whose span the caller opens itself, with what only it knows: the chat span; a memory
#: write's, around its erasure fence and hooks' broadcast too, and a listing's, around the engine's check
#: of it (``memory_fence.write_span``): what those find is an event on the call's own span.
CALLER_TRACED = frozenset(
    {"provider complete", "memory remember", "memory correct", "memory forget", "memory list"}
)


def adapter_call(operation_name: str) -> Span | NullSpan:
    """The span of one adapter call through ``Ticket.call``: ``agentium.<operation>``, or a GenAI one."""
    active = ACTIVE.get()  # as in stage()
    active = current() if active is None else active if active.on else None
    if active is None or operation_name in CALLER_TRACED:
        return NULL
    memory = MEMORY_OPERATIONS.get(operation_name)
    if memory is not None:
        return operation(memory, memory, **{"agentium.operation": operation_name})
    if active.tracer is None:
        return NULL  # plain adapter calls have no metric of their own
    name = "agentium." + operation_name.replace(" ", ".")
    return Span(active, name, _CLIENT, {"agentium.operation": operation_name})


def chat(provider: object) -> Span | NullSpan:
    """The span of one model call: ``chat {model}``, with the provider's GenAI name and model if it says them.

    A provider may declare ``gen_ai_provider_name`` (e.g. ``"openai"``) and
    ``gen_ai_request_model``; otherwise its class name is the provider name.
    Each is the provider's to choose, and ``agentium run --trace`` prints them:
    escaped as a log line's class name is (``one_line``: line breaks, ANSI
    escapes, lone surrogates), so one cannot forge a line of the tree.
    """
    active = ACTIVE.get()  # as in stage()
    if (current() if active is None else active if active.on else None) is None:
        return NULL
    name = getattr(provider, "gen_ai_provider_name", None)
    model = getattr(provider, "gen_ai_request_model", None)
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": one_line(name if isinstance(name, str) and name else type(provider).__name__)
    }
    if isinstance(model, str) and model:
        attributes["gen_ai.request.model"] = one_line(model)
    shown = attributes.get("gen_ai.request.model")
    span_name = f"chat {shown}" if shown is not None else "chat"
    return operation("chat", span_name, **attributes)


def tool(name: str, call_id: str, *, registered: bool = True) -> Span | NullSpan:
    """The span of one tool call: ``execute_tool {name}``.

    A name that is not ``registered`` (the model made it up) is text the
    model wrote, which may quote content and has no bound on how many
    distinct values it takes: the span is then plain ``execute_tool``, and
    ``gen_ai.tool.name`` is set only with content capture.
    """
    active = current()
    if active is None:
        return NULL
    attributes = {"gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}
    if registered or active.settings.capture_content:
        attributes["gen_ai.tool.name"] = name
    span_name = f"execute_tool {name}" if registered else "execute_tool"
    return operation("execute_tool", span_name, kind="internal", **attributes)


def client_span(name: str, attributes: Mapping[str, Any] | None = None) -> Span | NullSpan:
    """A span for one request an adapter sends its backend (kind ``CLIENT``), under the adapter call's span.

    For a backend whose client library has no OpenTelemetry instrumentation,
    or that the adapter drives below the instrumented layer (raw pipelines).
    Use it as a context manager: ``with client_span("redis PIPELINE",
    {"db.system.name": "redis"}) as span:``; ``span.set(key, value)`` adds an
    attribute, and an exception leaving the block marks it failed with the
    exception's type. Nothing is recorded (and nearly nothing paid) unless
    the runtime's telemetry records. Attributes must not carry content:
    no keys, values or statements with data (docs/observability.md).
    """
    active = current()
    if active is None or active.tracer is None:
        return NULL
    return Span(active, name, _CLIENT, dict(attributes or {}))


def internal_span(name: str, attributes: Mapping[str, Any] | None = None) -> Span | NullSpan:
    """A span (kind ``INTERNAL``) of the engine's own work outside a stage (a late write's take-back)."""
    active = current()
    if active is None or active.tracer is None:
        return NULL
    return Span(active, name, INTERNAL_KIND, dict(attributes or {}))


def current_span_event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Add an event to the span current in this task (a stage's, an operation's) while something records.

    For a degraded outcome found deep in shared code (a fence's read), where
    no span object is at hand and the span depends on the caller: a turn's
    load or commit stage, a history write's, a memory write's; an adapter's
    (``plugin_api.current_span_event``) for a degraded outcome its call still
    answers, next to its WARNING (a lost reply settled by reading back): on the
    adapter call's span. Nothing when no tracer records, and nothing when the span
    current is another runtime's (its ``runtime_span``, with no span of this
    telemetry opened inside it): its provider is not this one's. No content in attributes.
    """
    active = current()
    if active is None or active.tracer is None or _trace is None:
        return
    try:
        span = _trace.get_current_span()
        opened = _OPENED.get()
        if opened is not None and opened[0] is span and opened[1] is not active.tracer:
            # Another runtime's span (its runtime_span block, with no span of this telemetry opened
            # inside it yet): its provider is not this one's, so the event has no span to go on.
            return
        if span.is_recording():
            span.add_event(name, dict(attributes or {}))
    except Exception as exc:
        _broken("adding a span event", exc)


def caller_span_event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Add an event to the span the caller has current (a host's own), if it records; make no span.

    For what no runtime's telemetry can be attributed to (a call into plugin
    code abandoned while no runtime's operation was under way): opening a
    span would pick a provider (the global one) for it; the host's own
    span, made by whichever provider the host chose, is the caller's. A span
    the engine opened (a runtime's ``runtime_span`` or operation, current
    because the host built a runtime inside it) is that runtime's, not the
    caller's own: the event goes on no span then (the WARNING stays).
    """
    if _trace is None:
        return
    try:
        span = _trace.get_current_span()
        opened = _OPENED.get()
        if opened is not None and opened[0] is span:
            return
        if span.is_recording():
            span.add_event(name, dict(attributes or {}))
    except Exception as exc:
        _broken("adding a span event", exc)


def current_instruments() -> Instruments | None:
    """The metric instruments of the operation under way, if metrics record."""
    active = current()
    return active.instruments if active is not None else None


def record(instrument: str, value: float, attributes: Mapping[str, Any]) -> None:
    """Add to one metric instrument of the operation under way, if metrics record."""
    active = current()
    if active is not None and active.instruments is not None:
        active.instruments.record(instrument, value, attributes)


def tokens(span: Span | NullSpan, input_tokens: int | None, output_tokens: int | None) -> None:
    """Put a model call's token usage on its span and on ``gen_ai.client.token.usage``."""
    if not isinstance(span, Span):
        return
    span.set("gen_ai.usage.input_tokens", input_tokens)
    span.set("gen_ai.usage.output_tokens", output_tokens)
    instruments = span._active.instruments
    if instruments is None or span._metric is None:
        return
    base = dict(span._metric[1])
    for kind, count in (("input", input_tokens), ("output", output_tokens)):
        if count is not None:
            instruments.record("token_usage", count, {**base, "gen_ai.token.type": kind})


def messages_json(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' shape (role and text parts), for content capture only."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = getattr(getattr(message, "role", None), "value", "user")
        parts: list[dict[str, Any]] = []
        text = getattr(message, "content", "")
        if text and role == "tool":
            parts.append({"type": "tool_call_response", "id": message.tool_call_id, "result": text})
        elif text:
            parts.append({"type": "text", "content": text})
        for call in getattr(message, "tool_calls", ()) or ():
            parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments})
        out.append({"role": role, "parts": parts})
    return out
