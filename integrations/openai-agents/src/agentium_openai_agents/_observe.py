"""What the session reports of its degraded outcomes: a WARNING and a span event, never content.

The core logs and traces its own calls (a ``read_history`` failing closed on
damage is a WARNING on ``agentium.engine`` and fails its
``agentium.history.read`` span). What fails *after* the core answered is
this integration's: a message read that is no item of this SDK
(:class:`ForeignItemError`), a pop refused (:class:`PopRefusedError`), a view
that changed at every read (:class:`HistoryChangedError`), native tool calls
a read leaves out. Each is a WARNING on :data:`LOGGER_NAME` naming the
operation and the error's type (its text may quote ids or content: never
logged), and an event with the same fields as attributes on the span of the
session's call: each of ``get_items``, ``pop_item`` and ``clear_session`` is a
span ``agentium.openai_agents.<operation>`` from the *runtime's* tracer
provider and under its telemetry settings (``plugin_api.runtime_span``; the
core's spans of the reads it makes are its children, and have ended when the
integration finds these), a child of the host's span current in the call. No
session id: the core logs those hashed with its runtime's key, which is not
the integration's to read. A refusal of the host's own input (``add_items`` of
items that are no items) is the caller's error, raised, not logged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, ParamSpec, TypeVar

from agentium_harness.plugin_api import current_span_event, one_line, runtime_span

from ._errors import ForeignItemError, HistoryChangedError

__all__ = ["FAILED_EVENT", "LEFT_OUT_EVENT", "LOGGER_NAME", "SPAN_PREFIX", "failed", "left_out", "reported"]

#: The integration's logger, under the core's ``agentium`` root (which holds a NullHandler).
LOGGER_NAME: Final = "agentium.openai_agents"
#: The session's spans: ``agentium.openai_agents.get_items`` (``pop_item``, ``clear_session``).
SPAN_PREFIX: Final = "agentium.openai_agents."
#: The span event of a call that failed closed: ``agentium.operation``, ``error.type`` (and
#: ``agentium.commit_state`` when the error carries one).
FAILED_EVENT: Final = "agentium.openai_agents.failed"
#: The span event of a read that left native tool calls out: ``agentium.items.left_out`` (how many).
LEFT_OUT_EVENT: Final = "agentium.openai_agents.items_left_out"

_log: Final = logging.getLogger("agentium.openai_agents")  # LOGGER_NAME, literal: docs tests read it

P = ParamSpec("P")
R = TypeVar("R")


def failed(operation: str, exc: BaseException) -> None:
    """Report ``exc`` leaving ``operation``: its type (and commit state), never its text."""
    kind = one_line(type(exc).__qualname__)  # a class name is code's, but escaped as the core does
    attributes: dict[str, str] = {"agentium.operation": operation, "error.type": kind}
    fields: dict[str, str] = {"agentium_operation": operation, "agentium_error_type": kind}
    state = getattr(getattr(exc, "commit_state", None), "value", None)
    if isinstance(state, str):  # a pop that retracted all the same says so: ``committed``
        attributes["agentium.commit_state"] = fields["agentium_commit_state"] = state
    _log.warning("%s failed: %s", operation, kind, extra=fields)
    current_span_event(FAILED_EVENT, attributes)


def left_out(count: int) -> None:
    """Report a read that left ``count`` native tool calls out (no output answers them in the view)."""
    _log.warning(
        "get_items: %d tool calls of Agentium's run() without their output in the view left out",
        count,
        extra={"agentium_operation": "get_items", "agentium_items_left_out": count},
    )
    current_span_event(LEFT_OUT_EVENT, {"agentium.operation": "get_items", "agentium.items.left_out": count})


def reported(
    operation: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a session method: its span, and this integration's own errors leaving it :func:`failed`.

    The span (``SPAN_PREFIX + operation``, attribute ``agentium.operation``)
    is the runtime's (``self.runtime``): what the call reports goes where the
    runtime's spans go. Only :class:`ForeignItemError` and
    :class:`HistoryChangedError` are reported: an error of the core's passing
    through was reported by the core already (it still fails the span).
    """

    def decorate(method: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(method)
        async def observed(*args: P.args, **kwargs: P.kwargs) -> R:
            runtime = getattr(args[0], "runtime")  # noqa: B009  # the session's borrowed HarnessRuntime
            with runtime_span(runtime, SPAN_PREFIX + operation, {"agentium.operation": operation}):
                try:
                    return await method(*args, **kwargs)
                except (ForeignItemError, HistoryChangedError) as exc:
                    failed(operation, exc)
                    raise

        return observed

    return decorate
