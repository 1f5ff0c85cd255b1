"""Observability: loggers per stage, and OpenTelemetry spans and metrics when it is installed.

The engine's stage modules open their spans through :mod:`.spans`
(``with spans.stage("commit"):``); the run as a whole is wrapped by
:func:`.turn.traced_run`. docs/observability.md lists every logger, span,
attribute and metric.
"""

from __future__ import annotations

from .logs import LOGGERS, stage_logger
from .settings import Telemetry

__all__ = ["LOGGERS", "Telemetry", "stage_logger"]
