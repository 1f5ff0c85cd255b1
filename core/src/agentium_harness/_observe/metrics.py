"""The metric instruments (docs/observability.md, "Metrics"), created once per meter provider."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from .logs import one_line

__all__ = ["Instruments", "instruments_of"]

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry.metrics import _internal
except ImportError:  # the core runs without OpenTelemetry
    _metrics = _internal = None  # type: ignore[assignment]

_ABSENT = object()
_UNSET_FAST = "OTEL_PYTHON_METER_PROVIDER" not in os.environ

_log = logging.getLogger("agentium.telemetry")
_reported: set[tuple[str, type[BaseException]]] = set()


def _broken(what: str, exc: BaseException) -> None:
    """Report a metrics failure once per kind; the turn goes on."""
    # Once per kind of failure and exception class: a broken exporter must not flood the log.
    if (what, type(exc)) not in _reported:
        _reported.add((what, type(exc)))
        name = one_line(type(exc).__name__)
        _log.warning("telemetry: %s failed (%s); the run goes on without it", what, name)


class Instruments:
    """The metric instruments (docs/observability.md, "Metrics"), created once per meter provider."""

    __slots__ = (
        "archived_groups",
        "diagnostics",
        "drain",
        "evictions",
        "operation_duration",
        "recall",
        "stage_duration",
        "token_usage",
        "turn_duration",
        "verdicts",
    )

    def __init__(self, meter: Any) -> None:
        self.turn_duration = meter.create_histogram(
            "agentium.turn.duration", unit="s", description="Duration of one run(), admission to result"
        )
        self.stage_duration = meter.create_histogram(
            "agentium.stage.duration", unit="s", description="Duration of one stage of a turn"
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used"
        )
        self.recall = meter.create_counter(
            "agentium.recall.outcomes", unit="{run}", description="Runs with recall, by recall status"
        )
        self.evictions = meter.create_counter(
            "agentium.evictions", unit="{commit}", description="Commits that had to evict, by eviction status"
        )
        self.archived_groups = meter.create_counter(
            "agentium.archive.groups", unit="{group}", description="Groups archived by commits"
        )
        self.verdicts = meter.create_counter(
            "agentium.verification.verdicts", unit="{verdict}", description="Completion verdicts"
        )
        self.drain = meter.create_counter(
            "agentium.drain.items", unit="{item}", description="Owned work items a drain settled, by outcome"
        )
        self.diagnostics = meter.create_counter(
            "agentium.diagnostics", unit="{diagnostic}", description="Diagnostics recorded, by code"
        )

    def record(self, instrument: str, value: float, attributes: Mapping[str, Any]) -> None:
        """Add ``value`` to one instrument; a failing SDK is reported once and ignored."""
        try:
            target = getattr(self, instrument)
            if hasattr(target, "record"):
                target.record(value, attributes)
            else:
                target.add(value, attributes)
        except Exception as exc:
            _broken("recording a metric", exc)


_METERS: dict[int, tuple[Any, Instruments | None]] = {}


def version() -> str:
    """The core's version (the instrumentation scope's)."""
    from .. import __version__

    return __version__


def instruments_of(provider: Any) -> Instruments | None:
    """The instruments of ``provider`` (the global one when ``None``), or ``None`` if nothing records."""
    if _metrics is None:
        return None
    if provider is None:
        if _UNSET_FAST and getattr(_internal, "_METER_PROVIDER", _ABSENT) is None:
            return None  # no provider set, none named in the environment (see spans._UNSET_FAST)
        provider = _metrics.get_meter_provider()
        # Until the application sets one, the global provider is the API's proxy (a private class).
        if isinstance(provider, _metrics.NoOpMeterProvider) or type(provider).__name__.startswith("_Proxy"):
            return None
    held = _METERS.get(id(provider))
    if held is not None and held[0] is provider:
        return held[1]
    try:
        instruments: Instruments | None = Instruments(provider.get_meter("agentium_harness", version()))
    except Exception as exc:
        _broken("creating the metric instruments", exc)
        instruments = None
    _METERS[id(provider)] = (provider, instruments)
    return instruments
