"""A deadline on calls into plugin code made outside the engine: imports, hooks, config classes, factories.

The engine bounds every adapter call and lifecycle broadcast, but loading the
registry (importing a plugin, calling its registration hooks) and building an
adapter (its factory) are synchronous calls into plugin code. One that never
returns used to hang ``PluginRegistry.load``, ``build_runtime`` and so every
``agentium`` command.

A Python thread cannot be killed, so the call runs in a *daemon* worker
thread that the caller stops waiting for at the deadline: the caller gets a
:class:`HookTimeoutError` and goes on, the abandoned thread is left to run (or
block) on its own, and being a daemon it never keeps the process from exiting.
Whatever it returns or raises late is discarded.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from .._errors import InvalidArgumentError, PluginError
from .._observe.logs import one_line
from .._observe.spans import INTERNAL_KIND, Active, Span, caller_span_event, enter, live, silent
from .._validators import exact_number, shown_number

__all__ = [
    "DEFAULT_HOOK_TIMEOUT_S",
    "ENV_HOOK_TIMEOUT",
    "HookTimeoutError",
    "call_with_deadline",
    "hook_timeout",
]

T = TypeVar("T")

#: How long one plugin import, registration hook, config class or adapter factory may take by default.
#: They must do no I/O (docs/plugins.md), so this is only a backstop against a hang.
DEFAULT_HOOK_TIMEOUT_S = 30.0
#: The environment variable that sets that bound, in seconds, for the CLI and every host.
ENV_HOOK_TIMEOUT = "AGENTIUM_HOOK_TIMEOUT"
#: The largest accepted bound (a day): beyond it ``Event.wait`` overflows on some platforms.
_MAX_TIMEOUT_S = 86_400.0
#: The longest the main thread sleeps at a stretch waiting for a call (see :func:`_wait`).
_WAIT_SLICE_S = 0.1

_log = logging.getLogger("agentium.registry")


class HookTimeoutError(PluginError):
    """A call into plugin code did not return by its deadline; it was abandoned, still running."""


def check_timeout(value: object, name: str) -> float:
    """``value`` as a deadline in seconds; :class:`InvalidArgumentError` unless finite and in (0, 1 day]."""
    number = exact_number(value)  # a subclass as its number: its own __float__ and comparisons not run
    if number is None:
        raise InvalidArgumentError(f"{name} must be a number of seconds, got {type(value).__name__}")
    # Compared before any conversion: float() of a huge int would raise OverflowError.
    if not 0 < number <= _MAX_TIMEOUT_S:
        raise InvalidArgumentError(
            f"{name} must be more than 0 and at most {_MAX_TIMEOUT_S:g} seconds, got {shown_number(value)}"
        )
    return float(number)


def hook_timeout(environ: Mapping[str, str]) -> float:
    """The bound :data:`ENV_HOOK_TIMEOUT` sets in ``environ``, else :data:`DEFAULT_HOOK_TIMEOUT_S`.

    :raises InvalidArgumentError: the variable is set to something that is not a valid bound.
    """
    raw = environ.get(ENV_HOOK_TIMEOUT)
    if raw is None or not raw.strip():
        return DEFAULT_HOOK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"{ENV_HOOK_TIMEOUT} must be a number of seconds, got {raw!r}; no plugin was loaded"
        ) from None
    return check_timeout(value, ENV_HOOK_TIMEOUT)


def process_hook_timeout() -> float:
    """The bound of the process environment (:func:`hook_timeout` of :data:`os.environ`)."""
    return hook_timeout(os.environ)


def call_with_deadline(call: Callable[[], T], timeout_s: float, what: str, bound: str | None = None) -> T:
    """``call()`` in a daemon thread, waited for at most ``timeout_s``; its result or its exception.

    The call runs in a copy of the caller's context (context variables such as
    the build context reach it). Its telemetry is captured as it starts: the
    runtime's operation under way then (its ``runtime_span``, a turn), whose
    telemetry the call and what it does late (finishing after its deadline,
    outside any operation) report under; with none under way (or only an
    unattributed call's, this one made inside it) it records
    nothing on any provider, the global one included (code it runs with
    settings of its own, a runtime's operations, records under them). Calls
    that are no runtime's whatever is under way (loading plugins, building a
    runtime) are made under ``unattributed()``, so they are nobody's too.
    ``what`` names the call in the error and the log: a plugin and hook,
    never data. ``bound`` names the setting that gave
    ``timeout_s``, for the error (default :data:`ENV_HOOK_TIMEOUT`; a plugin
    command's ``timeout_s``, say, is not set there). The main thread waits in
    short slices, so Ctrl-C interrupts the wait at once (``KeyboardInterrupt``).

    :raises HookTimeoutError: ``call`` had not returned at the deadline; it is
        abandoned (still running in its thread) and its late outcome discarded.
    """
    # Captured now: whatever is current later (at the deadline, when it ends), the call is this one's.
    active = live()
    if active is silent():
        active = None  # made by plugin code no runtime's telemetry covers: no runtime's either
    context = contextvars.copy_context()
    if active is None:
        context.run(enter, silent())  # no runtime's: never the global providers'
    outcome: list[tuple[bool, object]] = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append((True, context.run(call)))
        except BaseException as exc:  # handed to the waiting caller; nothing escapes the thread
            outcome.append((False, exc))
        finally:
            done.set()

    worker = threading.Thread(target=work, name="agentium-plugin-call", daemon=True)
    worker.start()
    if not _wait(done, timeout_s):
        _log.warning(
            "%s did not return within %ss; abandoned, still running in a daemon thread", what, timeout_s
        )
        _abandoned(what, timeout_s, active)
        raise HookTimeoutError(
            f"{what} did not return within {timeout_s:g}s ({bound or ENV_HOOK_TIMEOUT} sets this bound); "
            "it was abandoned"
        )
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]  # ``call``'s own result


def _wait(done: threading.Event, timeout_s: float) -> bool:
    """Whether ``done`` is set within ``timeout_s``; in the main thread, waited for in short slices.

    CPython runs a signal's Python handler (Ctrl-C's ``KeyboardInterrupt``) only in the main
    thread, between bytecodes, and a lock wait is cut short only when the signal interrupts that
    very system call. A SIGINT taken by the call's thread (the kernel gives a process's signal to
    any thread not blocking it) or by the main thread just before it went to sleep left the
    handler pending until the wait ended: Ctrl-C ignored for the whole bound (a plugin command's
    ``timeout_s``, minutes). Waking every :data:`_WAIT_SLICE_S` runs a pending handler within one
    slice, whichever thread took the signal. (Blocking SIGINT in the call's thread instead would
    not close the main thread's own window, and its child processes would inherit the mask.)
    Other threads never run handlers, so they wait in one piece.
    """
    if threading.current_thread() is not threading.main_thread():
        return done.wait(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return done.is_set()
        if done.wait(min(left, _WAIT_SLICE_S)):
            return True


#: The span of a call into plugin code abandoned at its deadline, and its event.
ABANDONED_SPAN = "agentium.plugin.call"
ABANDONED_EVENT = "agentium.plugin.abandoned"


def _abandoned(what: str, timeout_s: float, active: Active | None) -> None:
    """Say an abandoned call on a span of its own: there is no span of the call (none is opened per import).

    Under ``active``, the telemetry captured when the call started (a runtime's), a child of
    the span current in the caller; nothing when that records nothing. Started under no
    runtime's (a registry load: no runtime exists yet), no span is made, since that would pick
    the global provider for it: the event goes on the caller's own span (a host's start-up
    span) if one records. ``what`` names a plugin and a hook, never data.
    """
    event = {"agentium.plugin.call": one_line(what), "agentium.plugin.timeout_s": timeout_s}
    if active is None:
        caller_span_event(ABANDONED_EVENT, event)
        return
    if active.tracer is None:
        return
    with Span(active, ABANDONED_SPAN, INTERNAL_KIND, {}) as span:
        span.event(ABANDONED_EVENT, event)
        span.fail(HookTimeoutError.__name__)
