"""The live telemetry state of one operation, and which runtime it belongs to.

An operation (a turn, a history write, a close, a runtime's ``runtime_span``
block) records through one :class:`Active`: tracer, instruments and
settings, in a context variable, so its stage modules, its adapter calls in
their own tasks and its worker threads (their context is a copy) see it.

Each :class:`Active` names its *owner*, the runtime (or memory manager)
whose operation it is. A host runs runtimes for many tenants in one process
and may call one runtime's operation inside another's block: an entry point
of a runtime (:class:`using` with its owner) keeps the state under way only
when it is its own, and otherwise records under its own settings. So one
runtime's providers and content capture never apply to another's work,
whatever is current.
"""

from __future__ import annotations

import contextvars
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

from .logs import one_line
from .metrics import Instruments, instruments_of, version
from .settings import Resolved, Telemetry

__all__ = [
    "ACTIVE",
    "CLIENT_KIND",
    "HAVE_OTEL",
    "INTERNAL_KIND",
    "Active",
    "begin",
    "current",
    "enter",
    "error_type",
    "leave",
    "live",
    "report_broken",
    "silent",
    "unattributed",
    "using",
]

try:
    from opentelemetry import trace as _trace
except ImportError:  # the core runs without OpenTelemetry (tests/core/test_observability_off.py)
    _trace = None  # type: ignore[assignment]

#: True when ``opentelemetry-api`` is importable.
HAVE_OTEL = _trace is not None

_log = logging.getLogger("agentium.telemetry")

_ABSENT = object()
#: ``get_tracer_provider()`` reads the environment on every call until a provider is set; when no
#: provider is named there (OTEL_PYTHON_TRACER_PROVIDER), an unset global means nothing records,
#: which a read of the API's global tells at once. Any other state takes the API's own path.
_UNSET_FAST = "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
_reported: set[tuple[str, type[BaseException]]] = set()

# Span kinds by name, so this module never touches the API when it is absent.
#: OpenTelemetry's span kind of a request to a backend (``None`` without OpenTelemetry).
CLIENT_KIND = _trace.SpanKind.CLIENT if _trace is not None else None
#: OpenTelemetry's span kind of an operation inside the process (``None`` without OpenTelemetry).
INTERNAL_KIND = _trace.SpanKind.INTERNAL if _trace is not None else None


def report_broken(what: str, exc: BaseException) -> None:
    """Report an instrumentation failure once per kind; the turn goes on."""
    # Once per kind of failure and exception class: a broken exporter must not flood the log.
    if (what, type(exc)) not in _reported:
        _reported.add((what, type(exc)))
        _log.warning(
            "telemetry: %s failed (%s); the run goes on without it",
            what,
            error_type(exc),
            extra={"agentium_error_type": error_type(exc)},
        )


def error_type(exc: BaseException) -> str:
    """The low-cardinality ``error.type`` of an exception: its class name, never its message.

    The name is an adapter's to choose (``type()`` takes any string): it
    goes into log messages too, so whatever could break a log line is escaped.
    """
    name = one_line(type(exc).__qualname__)
    return "cancelled" if name in ("CancelledError", "Cancelled") else name


# -- providers ----------------------------------------------------------------------------------


_TRACERS: dict[int, tuple[Any, Any]] = {}


def _tracer(provider: Any) -> Any:
    """The agentium tracer of ``provider`` (the global one when ``None``), or ``None`` if nothing records."""
    if _trace is None:
        return None
    if provider is None:
        if _UNSET_FAST and getattr(_trace, "_TRACER_PROVIDER", _ABSENT) is None:
            return None  # no provider set, none to load from the environment: the common disabled case
        provider = _trace.get_tracer_provider()
        if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
            return None
    held = _TRACERS.get(id(provider))
    if held is not None and held[0] is provider:
        return held[1]
    try:
        tracer = provider.get_tracer("agentium_harness", version())
    except Exception as exc:
        report_broken("getting a tracer", exc)
        return None
    _TRACERS[id(provider)] = (provider, tracer)
    return tracer


# -- the live state of one operation -------------------------------------------------------------


class Active:
    """What one operation (a turn, a drain, a memory call) records through: tracer, instruments, settings.

    ``owner`` is the runtime (or memory manager) whose operation it is;
    ``None`` for a state no runtime made (an ``Agent``'s, the defaults'), or
    once that owner is gone.
    """

    __slots__ = ("_owner", "instruments", "on", "settings", "tracer")

    def __init__(
        self, tracer: Any, instruments: Instruments | None, settings: Resolved, owner: object = None
    ) -> None:
        self.tracer = tracer
        self.instruments = instruments
        self.settings = settings
        # Held weakly: a context that outlives the operation (a worker thread's copy, an abandoned
        # plugin call's) must not keep the runtime and all it holds alive until it ends.
        self._owner: Callable[[], object] = _strong(owner)
        if owner is not None:
            try:
                self._owner = weakref.ref(owner)
            except TypeError:  # a sentinel (``object()``) takes no weak reference; it holds nothing
                pass
        #: True when anything records (set once: every span helper asks, and neither part changes).
        self.on = tracer is not None or instruments is not None

    @property
    def owner(self) -> object:
        """The runtime or memory manager whose operation this is; ``None`` if none (or it is gone)."""
        return self._owner()


def _strong(value: object) -> Callable[[], object]:
    """A callable returning ``value``, the way a weak reference's call returns its object."""
    return lambda: value


#: The state of the operation under way in this context (read directly on the hot path: a stage, a call).
ACTIVE: contextvars.ContextVar[Active | None] = contextvars.ContextVar("agentium_telemetry", default=None)
_DEFAULT: list[tuple[Any, Any, Active]] = []
_SILENT: list[Active] = []
#: The owner of :func:`silent`'s state: nobody's, so any code with settings of its own records under them.
_NOBODY = object()


def begin(settings: Resolved, owner: object = None) -> Active:
    """The live state for one operation of ``owner`` under ``settings`` (checks the providers once)."""
    chosen = settings.settings
    return Active(_tracer(chosen.tracer_provider), instruments_of(chosen.meter_provider), settings, owner)


def silent() -> Active:
    """A state that records nothing: for work no runtime's telemetry can be attributed to.

    Entered, it stops the fallback of :func:`current` to the global
    providers, so such work reaches no provider of anyone's; code under it
    that has settings of its own (a runtime's operation, :class:`using`
    with settings) still records under them.
    """
    if not _SILENT:
        _SILENT.append(Active(None, None, Telemetry(capture_content=False).resolve(), _NOBODY))
    return _SILENT[0]


class unattributed:
    """Run the block as work of no runtime's: loading plugins, building a runtime (its adapters' factories).

    Host code may do either inside a runtime's block (building runtime B in
    runtime A's ``runtime_span``, a tool or hook of A's): the plugin code run
    then (an import, a registration hook, a config class, a factory) is not A's
    operation, and B does not exist yet. Under :func:`silent`'s state, it
    records on no provider (A's and the global one included), and a call of
    it abandoned at its deadline is an event on the host's own span only
    (``caller_span_event``), never on a span of A's. A runtime's operation
    inside the block still records under that runtime's own settings.
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: contextvars.Token[Active | None] | None = None

    def __enter__(self) -> None:
        self._token = ACTIVE.set(silent())

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            ACTIVE.reset(self._token)
            self._token = None


def live() -> Active | None:
    """The state entered in this context (an operation's), ``None`` when none is: no fallback."""
    return ACTIVE.get()


def current() -> Active | None:
    """The state of the operation under way, or of a standalone call (global providers, default settings)."""
    active = ACTIVE.get()
    if active is not None:
        return active if active.on else None
    if _trace is None:
        return None
    tracer, instruments = _tracer(None), instruments_of(None)
    if tracer is None and instruments is None:
        return None
    if _DEFAULT and _DEFAULT[0][0] is tracer and _DEFAULT[0][1] is instruments:
        return _DEFAULT[0][2]
    active = Active(tracer, instruments, Telemetry().resolve())
    _DEFAULT[:] = [(tracer, instruments, active)]
    return active


def enter(active: Active) -> contextvars.Token[Active | None]:
    """Make ``active`` the state of this task (and of the tasks and threads it starts)."""
    return ACTIVE.set(active)


def leave(token: contextvars.Token[Active | None]) -> None:
    """Undo :func:`enter`."""
    ACTIVE.reset(token)


def _belongs(active: Active, owner: object) -> bool:
    """Whether ``active`` is ``owner``'s operation's, or (``owner`` a memory manager) its runtime's."""
    held = active.owner
    # A runtime's manager follows the runtime's operation it is called in (its turn, its drain).
    return held is owner or (held is not None and getattr(held, "memory", None) is owner)


class using:
    """Record under ``settings`` for the block, as ``owner``'s operation.

    With no ``owner`` (code that belongs to no runtime: an ``Agent``), an
    operation already under way keeps its state. With one (a runtime, a
    memory manager), the state under way is kept only when it is that
    owner's own (or, for a manager, the operation of the runtime it serves);
    under another runtime's, ``owner`` records under its own ``settings``
    (the defaults when ``None``), never the other's. With nothing under way,
    ``None`` changes nothing (the global providers and default settings apply).
    """

    __slots__ = ("_owner", "_settings", "_token")

    def __init__(self, settings: Resolved | None, owner: object = None) -> None:
        self._settings = settings
        self._owner = owner
        self._token: contextvars.Token[Active | None] | None = None

    def __enter__(self) -> None:
        under, settings, owner = ACTIVE.get(), self._settings, self._owner
        if under is None:
            if settings is not None:
                self._token = ACTIVE.set(begin(settings, owner))
            return
        if under.owner is not _NOBODY and (owner is None or _belongs(under, owner)):
            return
        if settings is None and owner is None:
            return  # no settings, no owner: what is under way (nobody's: nothing) stays
        self._token = ACTIVE.set(begin(settings or Telemetry().resolve(), owner))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            ACTIVE.reset(self._token)
            self._token = None
