"""What the provider reports of its degraded outcomes: a WARNING and a span event, never content.

The core logs and traces its own calls (a ``read_history`` failing closed on
damage is a WARNING on ``agentium.engine`` and fails its
``agentium.history.read`` span; so is an ``append`` refused). What the
provider finds *after* the core answered is its own: a stored message of
this framework that does not decode (:class:`ForeignMessageError`, on a
load or in a save's replay check), a load or a save given up on a session
that changed at every read, a save refused past the replay check's read
bound, a group over a load's bound cut, tool contents without their other
half left out of a load. Each is a WARNING on ``agentium.agent_framework``
(counts, a group's seq, an error's type: never its text, which names the
session and may quote what the decoder read) and an event on the span of
the provider's call: ``get_messages`` and ``save_messages`` are each a span
``agentium.agent_framework.<operation>`` from the *runtime's* tracer
provider and under its telemetry settings (``plugin_api.runtime_span``; the
core's spans of the reads and writes it makes are its children, and have
ended when the provider finds these), a child of the span current in the
call (the framework's ``invoke_agent`` when its instrumentation is on, or
the host's).
No session id: the core logs those hashed with its runtime's key, which is
not the provider's to read. A refusal of the host's own messages
(``save_messages`` of what is no message) is the caller's error, raised,
not logged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, ParamSpec, TypeVar

from agentium_harness import SessionConflictError
from agentium_harness.plugin_api import current_span_event, one_line, runtime_span

from ._messages import ForeignMessageError

__all__ = [
    "CUT_EVENT",
    "FAILED_EVENT",
    "LEFT_OUT_EVENT",
    "LOGGER_NAME",
    "SPAN_PREFIX",
    "failed",
    "group_cut",
    "halves_left_out",
    "reported",
    "traced",
]

#: The provider's logger, under the core's ``agentium`` root (which holds a NullHandler).
LOGGER_NAME: Final = "agentium.agent_framework"
#: The provider's spans: ``agentium.agent_framework.get_messages`` (``save_messages``).
SPAN_PREFIX: Final = "agentium.agent_framework."
#: A call that failed closed: ``agentium.operation``, ``error.type``, ``agentium.commit_state`` (when set).
FAILED_EVENT: Final = "agentium.agent_framework.failed"
#: A group alone over a load's bound, cut to its newest messages: ``agentium.group.seq``,
#: ``agentium.messages.kept``, ``agentium.messages.stored``.
CUT_EVENT: Final = "agentium.agent_framework.group_cut"
#: Tool contents without their other half left out of a load: ``agentium.contents.left_out``,
#: ``agentium.messages.left_out`` (messages with nothing else left).
LEFT_OUT_EVENT: Final = "agentium.agent_framework.half_exchanges_left_out"

_log: Final = logging.getLogger("agentium.agent_framework")  # LOGGER_NAME, literal: docs tests read it

P = ParamSpec("P")
R = TypeVar("R")


def _report(message: str, event: str, attributes: dict[str, str | int], *args: object) -> None:
    """One WARNING (``message % args``, fields from ``attributes``) and one event on the current span."""
    fields = {
        "agentium_" + key.removeprefix("agentium.").replace(".", "_"): v for key, v in attributes.items()
    }
    _log.warning(message, *args, extra=fields)
    current_span_event(event, attributes)


def failed(operation: str, exc: BaseException, detail: str = "") -> None:
    """Report ``exc`` leaving ``operation``: its type (and commit state), never its text.

    Log fields ``agentium_operation``, ``agentium_error_type`` (from the
    event's ``error.type``), ``agentium_commit_state``. ``detail`` (no
    content: a bound, a count) ends the message.
    """
    kind = one_line(type(exc).__qualname__)  # a class name is code's, but escaped as the core does
    attributes: dict[str, str | int] = {"agentium.operation": operation, "error.type": kind}
    state = getattr(getattr(exc, "commit_state", None), "value", None)
    if isinstance(state, str):
        attributes["agentium.commit_state"] = state
    _report("%s failed: %s%s", FAILED_EVENT, attributes, operation, kind, f" ({detail})" if detail else "")


def group_cut(seq: int, kept: int, stored: int) -> None:
    """Report a load that gave ``kept`` of the ``stored`` messages of group ``seq``, alone over its bound."""
    attributes: dict[str, str | int] = {
        "agentium.operation": "get_messages",
        "agentium.group.seq": seq,
        "agentium.messages.kept": kept,
        "agentium.messages.stored": stored,
    }
    message = "get_messages: group %d alone is over the bound; %d of its %d messages returned"
    _report(message, CUT_EVENT, attributes, seq, kept, stored)


def halves_left_out(contents: int, messages: int) -> None:
    """Report a load that left out ``contents`` tool calls or results without their other half."""
    attributes: dict[str, str | int] = {
        "agentium.operation": "get_messages",
        "agentium.contents.left_out": contents,
        "agentium.messages.left_out": messages,
    }
    message = (
        "get_messages: %d tool call or result contents without their other half in the view left out "
        "(%d messages with nothing else left out with them)"
    )
    _report(message, LEFT_OUT_EVENT, attributes, contents, messages)


def reported(
    operation: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a load: its span (:func:`traced`), and its own errors leaving it reported.

    For ``get_messages``, whose core calls (reads) raise neither: a :class:`SessionConflictError`
    (the view changed at every read) and a message that does not decode are its own.
    """

    def decorate(method: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @traced(operation)
        @functools.wraps(method)
        async def observed(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await method(*args, **kwargs)
            except (ForeignMessageError, SessionConflictError) as exc:
                failed(operation, exc)
                raise

        return observed

    return decorate


def traced(
    operation: str,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a provider method: it runs in its span, ``SPAN_PREFIX + operation`` of ``self.runtime``.

    What the call reports goes where the runtime's spans go (its ``Telemetry``), with
    ``agentium.operation``; an error leaving it fails the span with its type.
    """

    def decorate(method: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(method)
        async def in_span(*args: P.args, **kwargs: P.kwargs) -> R:
            runtime = getattr(args[0], "runtime")  # noqa: B009  # the provider's borrowed HarnessRuntime
            with runtime_span(runtime, SPAN_PREFIX + operation, {"agentium.operation": operation}):
                return await method(*args, **kwargs)

        return in_span

    return decorate
