"""The span events of an erasure's degraded outcomes, added to its ``agentium.erasure`` span.

:func:`.erasure_run.finish` opens the span and makes it this task's erasure
span (:class:`spanned`); the steps below it that log a WARNING — deep in
the call, where the span object is not at hand — add their event with
:func:`erasure_event`. An event carries no content: error types, step and
store names, outcomes (docs/observability.md).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from .._observe.spans import NULL, NullSpan, Span

__all__ = ["erasure_event", "spanned"]

_SPAN: contextvars.ContextVar[Span | NullSpan] = contextvars.ContextVar("agentium_erasure_span", default=NULL)


class spanned:
    """Make ``span`` the erasure span of this task (and of the tasks it starts) for the block."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span | NullSpan) -> None:
        self._span = span
        self._token: contextvars.Token[Span | NullSpan] | None = None

    def __enter__(self) -> None:
        self._token = _SPAN.set(self._span)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _SPAN.reset(self._token)
            self._token = None


def erasure_event(name: str, attributes: Mapping[str, Any]) -> None:
    """Add the event ``name`` to the span of the erasure under way (none outside one: nothing records)."""
    _SPAN.get().event(name, attributes)
