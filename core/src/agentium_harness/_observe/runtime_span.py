"""A span under a runtime's own telemetry, for code built on the runtime (the SDK integrations).

An integration finds its degraded outcomes after the core's spans of the
calls it made have ended. Reporting them on "the span current in the call"
reached only OpenTelemetry's *global* tracer provider: a host that gave the
runtime its own (``Telemetry(tracer_provider=...)``) got the WARNING and no
event. :class:`runtime_span` opens a span from the runtime's provider,
under its settings (content capture, id hashing), and makes it the span
current in the block, so the runtime's own operations called inside become
its children and :func:`.spans.current_span_event` puts the integration's
events on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from .._errors import InvalidArgumentError
from .settings import Resolved
from .spans import INTERNAL_KIND, NULL, NullSpan, Span, begin, enter, leave

__all__ = ["runtime_span"]


class runtime_span:
    """A span (kind ``INTERNAL``) from ``runtime``'s tracer provider, under its telemetry settings.

    Use it as a context manager around one operation of code built on a
    :class:`~agentium_harness.HarnessRuntime` (an integration's
    ``get_items``): ``with runtime_span(runtime, "agentium.openai_agents.get_items",
    {"agentium.operation": "get_items"}) as span:``. In the block the span
    is the current one, in this task and the tasks and threads it starts:
    the runtime's operations called inside are its children, and
    ``plugin_api.current_span_event`` (a degraded outcome found deep in the
    block) adds its event to it. Another runtime's operations called in the
    block stay that runtime's: they record under its own telemetry (its
    provider, its content capture), never this one's. ``span.event(name, attributes)`` adds one
    directly; ``span.captures_content`` says whether the host opted in to
    content capture (``span.content(key, value)`` sets an attribute only
    then). An exception leaving the block marks it failed with the
    exception's type (its message only with content capture).

    Nothing is recorded (and nearly nothing paid) when the runtime's
    telemetry records no spans; the block then sees the runtime's telemetry
    as recording nothing, so no event of it goes to another provider's span.
    Attributes must not carry content: operation names, counts, error types.

    :raises InvalidArgumentError: ``runtime`` is no runtime, ``name`` no
        non-empty string, ``attributes`` no mapping with string keys.
    """

    __slots__ = ("_attributes", "_name", "_runtime", "_settings", "_span", "_token")

    def __init__(self, runtime: object, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        settings = getattr(getattr(runtime, "parts", None), "telemetry", None)
        if not isinstance(settings, Resolved):
            raise InvalidArgumentError(f"runtime must be a HarnessRuntime, got {type(runtime).__name__}")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("name must be a non-empty string")
        if attributes is not None and not (
            isinstance(attributes, Mapping) and all(isinstance(k, str) for k in attributes)
        ):
            raise InvalidArgumentError("attributes must be a mapping with string keys")
        self._settings = settings
        self._runtime = runtime
        self._name = name
        self._attributes = dict(attributes or {})
        self._span: Span | None = None
        self._token: Any = None

    def __enter__(self) -> Span | NullSpan:
        active = begin(self._settings, self._runtime)
        self._token = enter(active)
        if active.tracer is None:
            return NULL
        try:
            self._span = Span(active, self._name, INTERNAL_KIND, self._attributes).__enter__()
        except BaseException:
            leave(self._token)
            raise
        return self._span

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span, self._span = self._span, None
        try:
            if span is not None:
                span.__exit__(typ, exc, tb)
        finally:
            leave(self._token)
