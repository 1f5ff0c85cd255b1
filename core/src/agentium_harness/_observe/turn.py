"""The span, metrics and log records of one run (``HarnessRuntime.run``), and of a drain.

:func:`traced_run` wraps ``run()``: it opens the turn's span (``invoke_agent
agentium``, with ``gen_ai.conversation.id``, the hashed scope and, at the
end, every status of the result), makes it the parent of every stage span,
and when the run ends logs each diagnostic on its stage's logger, adds it
to the span as an event and counts the outcomes in the metrics. With nothing
recording, only the logging remains (one ``isEnabledFor`` per record).
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from time import perf_counter
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from .._errors import AgentiumError
from .logs import log_diagnostics, would_log
from .settings import Resolved, Telemetry
from .spans import INTERNAL_KIND, NULL, Active, NullSpan, Span, begin, enter, error_type, leave, live

__all__ = [
    "AGENT_NAME",
    "already_said",
    "background_diagnostics",
    "diagnostic_events",
    "observed_drain",
    "settings_of",
    "traced_operation",
    "traced_run",
]

#: ``gen_ai.agent.name`` of the turn span.
AGENT_NAME = "agentium"

_log = logging.getLogger("agentium.engine")
_lifecycle = logging.getLogger("agentium.engine.lifecycle")

#: Diagnostics the operation under way in this context carries in its result that a background summary
#: update already said as it ended (logged, an event, counted): the operation does not say them again.
_SAID: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("agentium_said", default=())

P = ParamSpec("P")
R = TypeVar("R")
_DEFAULT: list[Resolved] = []


def settings_of(owner: object) -> Resolved:
    """The resolved telemetry settings of a runtime (``owner.parts.telemetry``), the defaults without one."""
    resolved = getattr(getattr(owner, "parts", None), "telemetry", None)
    if isinstance(resolved, Resolved):
        return resolved
    if not _DEFAULT:
        _DEFAULT.append(Telemetry().resolve())
    return _DEFAULT[0]


def _scope_attributes(settings: Resolved, identity: Any, session_id: object) -> dict[str, Any]:
    tenant, user = str(getattr(identity, "tenant", "")), str(getattr(identity, "user", ""))
    session = str(session_id)
    return {
        "gen_ai.conversation.id": settings.ident(tenant, user, session),
        "agentium.scope.tenant": settings.ident(tenant),
        "agentium.scope.user": settings.ident(tenant, user),
    }


def _value(x: object) -> object:
    return getattr(x, "value", x)


def _outcome(result: Any) -> dict[str, Any]:
    """The statuses of a run's result, as span attributes and log fields (no content)."""
    usage = result.usage
    out: dict[str, Any] = {
        "agentium.run.status": _value(result.status),
        "agentium.commit_state": _value(result.commit_state),
        "agentium.eviction.status": _value(result.eviction),
        "agentium.sources.status": _value(result.sources),
        "agentium.snapshot.revision": result.snapshot_revision,
        "agentium.tool_calls": len(result.tool_outcomes),
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if result.group_seq is not None:
        out["agentium.group.seq"] = result.group_seq
    if result.recall is not None:
        out["agentium.recall.status"] = _value(result.recall.status)
        out["agentium.recall.decision"] = _value(result.recall.decision)
    if result.verification is not None:
        out["agentium.verification.verdict"] = _value(result.verification.verdict)
    return {k: v for k, v in out.items() if v is not None}


def _field(key: str) -> str:
    """The log field of a span attribute: ``agentium.run.status`` → ``agentium_run_status``."""
    if key == "gen_ai.conversation.id":
        return "agentium_session"
    if key.startswith("agentium."):
        return key.replace(".", "_")
    return "agentium_" + key.removeprefix("gen_ai.usage.").replace(".", "_")


def _fields(attributes: Mapping[str, Any]) -> dict[str, object]:
    """Log ``extra=`` fields from span attributes (no content: statuses, counts, hashed ids)."""
    return {_field(k): v for k, v in attributes.items()}


def diagnostic_events(
    span: Span | NullSpan, instruments: Any, settings: Resolved, notes: Iterable[Any]
) -> None:
    """An ``agentium.diagnostic`` event on ``span`` per diagnostic, counted in ``agentium.diagnostics``."""
    for note in notes:
        severity = str(_value(note.severity))
        event = {"agentium.diagnostic.code": note.code, "agentium.diagnostic.severity": severity}
        if settings.capture_content:
            event["agentium.diagnostic.message"] = note.message
        span.event("agentium.diagnostic", event)
        if instruments is not None:
            counted = {"agentium.diagnostic.code": note.code, "agentium.diagnostic.severity": severity}
            instruments.record("diagnostics", 1, counted)


def background_diagnostics(span: Span | NullSpan, notes: Iterable[Any]) -> None:
    """Say the diagnostics of work that ends after its run returned (a background summary update) now.

    An ``agentium.diagnostic`` event each on ``span``, counted in
    ``agentium.diagnostics``, and a record each on its stage's logger (a
    WARNING for a degraded outcome), the text only with content capture,
    under the settings of the operation it belongs to. Without this, an
    update whose session saw no later run said nothing of what it degraded.
    The later run that carries them in its result does not say them again
    (:func:`already_said`): one degraded outcome is one record and one count.
    """
    notes = tuple(notes)
    if not notes:
        return
    active = live()
    settings = active.settings if active is not None else settings_of(None)
    diagnostic_events(span, active.instruments if active is not None else None, settings, notes)
    if would_log(notes):
        log_diagnostics(
            notes, {"agentium_operation": "summary update"}, capture_content=settings.capture_content
        )


def already_said(notes: Iterable[Any]) -> None:
    """Mark ``notes``, carried into the result of the operation under way, as said already.

    A background summary update said them as it ended
    (:func:`background_diagnostics`); the run or history write whose result
    carries them neither logs, adds an event for nor counts them again.
    """
    notes = tuple(notes)
    if notes:
        _SAID.set(_SAID.get() + notes)


def _unsaid(notes: tuple[Any, ...]) -> tuple[Any, ...]:
    """``notes`` less those :func:`already_said` marked (by identity: an equal one of its own stays)."""
    said = _SAID.get()
    if not said:
        return notes
    return tuple(n for n in notes if not any(n is s for s in said))


def _finish(
    span: Span | NullSpan,
    active: Active | None,
    settings: Resolved,
    scope: dict[str, Any],
    diagnostics: Iterable[Any],
    outcome: dict[str, Any],
    elapsed: float,
) -> None:
    """Everything said about a run once it ended: span attributes and events, metrics, log records."""
    notes = _unsaid(tuple(diagnostics))
    for key, value in outcome.items():
        span.set(key, value)
    instruments = active.instruments if active is not None else None
    diagnostic_events(span, instruments, settings, notes)
    if instruments is not None:
        status = {"agentium.run.status": outcome.get("agentium.run.status", "error")}
        if "error.type" in outcome:
            status["error.type"] = outcome["error.type"]
        instruments.record("turn_duration", elapsed, status)
        if "agentium.recall.status" in outcome:
            instruments.record("recall", 1, {"agentium.recall.status": outcome["agentium.recall.status"]})
        eviction = outcome.get("agentium.eviction.status")
        if eviction not in (None, "not_needed"):
            instruments.record("evictions", 1, {"agentium.eviction.status": eviction})
        if outcome.get("agentium.archived", 0):
            instruments.record("archived_groups", outcome["agentium.archived"], {})
        if "agentium.verification.verdict" in outcome:
            verdict = outcome["agentium.verification.verdict"]
            instruments.record("verdicts", 1, {"agentium.verification.verdict": verdict})
    failed = "error.type" in outcome
    fields = _fields({**scope, **outcome}) if notes or failed or _log.isEnabledFor(logging.INFO) else {}
    if notes:
        log_diagnostics(notes, fields, capture_content=settings.capture_content)
    if failed:
        _log.warning("run failed: %s", outcome["error.type"], extra=fields)
    elif _log.isEnabledFor(logging.INFO):
        run_status, state = outcome.get("agentium.run.status"), outcome.get("agentium.commit_state")
        _log.info("run %s, %s", run_status, state, extra=fields)


def traced_run(
    run: Callable[Concatenate[Any, Any, Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Any, Any, Any, P], Coroutine[Any, Any, R]]:
    """Wrap ``HarnessRuntime.run(self, identity, session_id, …)`` in the turn's span, metrics and logs."""

    @functools.wraps(run)
    async def observed(self: Any, identity: Any, session_id: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        settings = settings_of(self)
        active = begin(settings, self)
        token = enter(active)
        said = _SAID.set(())  # this run's own (a run nested in a tool's call has its own)
        started = perf_counter()
        scope: dict[str, Any] = {}
        span: Span | NullSpan = NULL
        try:
            if active.on or _log.isEnabledFor(logging.INFO):
                scope = _scope_attributes(settings, identity, session_id)
            if active.on:
                attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME}
                attributes.update(scope)
                span = Span(active, f"invoke_agent {AGENT_NAME}", INTERNAL_KIND, attributes)
            with span:
                try:
                    result = await run(self, identity, session_id, *args, **kwargs)
                except AgentiumError as exc:
                    failed = getattr(exc, "run_result", None)
                    outcome = _outcome(failed) if failed is not None else {}
                    outcome["error.type"] = error_type(exc)
                    if exc.commit_state is not None:
                        outcome["agentium.commit_state"] = _value(exc.commit_state)
                    notes = failed.diagnostics if failed is not None else ()
                    _finish(span, active, settings, scope, notes, outcome, perf_counter() - started)
                    raise
                notes = result.diagnostics  # type: ignore[attr-defined]
                # Nothing records and no record would be emitted: the run pays for nothing more.
                if active.on or _log.isEnabledFor(logging.INFO) or would_log(notes):
                    outcome = _outcome(result)
                    outcome["agentium.archived"] = len(getattr(result, "archived", ()))
                    _finish(span, active, settings, scope, notes, outcome, perf_counter() - started)
                return result
        finally:
            _SAID.reset(said)
            leave(token)

    return cast(Callable[Concatenate[Any, Any, Any, P], Coroutine[Any, Any, R]], observed)


class traced_operation:
    """The root span of a host operation other than a run (``agentium.history.append`` …) and its state.

    Its stages (load, commit, eviction, summary) become its children, under
    the owner's telemetry settings, as in a run. A class rather than a
    ``contextmanager``: every history read and write opens one, and the
    generator machinery was a measurable part of a short operation.
    """

    __slots__ = (
        "_active",
        "_kind",
        "_name",
        "_owner",
        "_said",
        "_session",
        "_span",
        "_tenant",
        "_token",
        "_user",
    )

    def __init__(
        self, owner: object, kind: str, tenant: str, user: str, session: str, name: str | None = None
    ) -> None:
        self._owner = owner
        self._kind = kind
        self._name = name
        self._tenant, self._user, self._session = tenant, user, session
        self._span: Span | None = None
        self._token: Any = None
        self._said: Any = None
        self._active: Active | None = None

    def __enter__(self) -> Span | NullSpan:
        settings = settings_of(self._owner)
        self._active = active = begin(settings, self._owner)
        self._token = token = enter(active)
        self._said = said = _SAID.set(())
        if not active.on:
            return NULL
        try:
            scope = _scope_attributes(settings, _Who(self._tenant, self._user), self._session)
            attributes = {"agentium.operation": self._kind, **scope}
            name = self._name or "agentium.history." + self._kind.replace(" ", "_")
            span = Span(active, name, INTERNAL_KIND, attributes)
            self._span = span.__enter__()
        except BaseException:
            _SAID.reset(said)
            leave(token)
            raise
        return span

    def _fields(self, settings: Resolved) -> dict[str, object]:
        scope = _scope_attributes(settings, _Who(self._tenant, self._user), self._session)
        return {"agentium_operation": self._kind, **_fields(scope)}

    def report(self, diagnostics: Iterable[Any], *, log: bool = True) -> None:
        """Say what the operation's result reports: its diagnostics as span events, metrics and log records.

        As for a run: one ``agentium.diagnostic`` event per diagnostic on the
        operation's span, each counted, and each logged on its stage's logger
        at its severity (a degraded outcome is a WARNING or an ERROR), its
        text only with content capture. ``log=False``: the caller logs them itself.
        """
        notes = _unsaid(tuple(diagnostics))
        if not notes:
            return
        settings = settings_of(self._owner)
        active = self._active
        span: Span | NullSpan = self._span if self._span is not None else NULL
        diagnostic_events(span, active.instruments if active is not None else None, settings, notes)
        if log and would_log(notes):
            log_diagnostics(notes, self._fields(settings), capture_content=settings.capture_content)

    def failed(self, exc: BaseException, commit_state: object = None) -> None:
        """Log an error leaving the operation: a WARNING on ``agentium.engine``, its type only.

        ``commit_state`` is what a write's error says was committed; a read has none (``None``).
        """
        if not _log.isEnabledFor(logging.WARNING):
            return
        fields = self._fields(settings_of(self._owner))
        fields["agentium_error_type"] = error_type(exc)
        if commit_state is not None:
            fields["agentium_commit_state"] = _value(commit_state)
        _log.warning("%s failed: %s", self._kind, error_type(exc), extra=fields)

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span, self._span = self._span, None
        try:
            if span is not None:
                span.__exit__(typ, exc, tb)
        finally:
            _SAID.reset(self._said)
            leave(self._token)


class _Who:
    __slots__ = ("tenant", "user")

    def __init__(self, tenant: str, user: str) -> None:
        self.tenant, self.user = tenant, user


def observed_drain(result: Any, elapsed_s: float) -> None:
    """Log a drain's outcome (WARNING when anything failed or was cancelled) and count its items."""
    from .spans import current

    count = getattr(result, "count", None)
    # A DrainResult counts the items it dropped unlisted (more ended between drains than it keeps) too.
    counts = {
        k: count(k) if callable(count) else len(getattr(result, k, ()))
        for k in ("completed", "failed", "cancelled")
    }
    active = current()
    if active is not None and active.instruments is not None:
        for outcome, count in counts.items():
            if count:
                active.instruments.record("drain", count, {"agentium.drain.outcome": outcome})
    fields = {f"agentium_drain_{k}": v for k, v in counts.items()}
    if counts["failed"] or counts["cancelled"]:
        _lifecycle.warning(
            "drain incomplete: %d completed, %d failed, %d cancelled",
            counts["completed"],
            counts["failed"],
            counts["cancelled"],
            extra=fields,
        )
    else:
        _lifecycle.info("drain settled %d item(s) in %.3fs", counts["completed"], elapsed_s, extra=fields)
