"""What the store tells its host when the server changes under it: a WARNING and a span event each.

A (re)connected connection's check, or ``health()``, brings the store's
:class:`~agentium_recall_redis.link.ServerReport` up to date
(:func:`~agentium_recall_redis.server.recheck`). A new ``run_id`` (the
server restarted: without persistence, what was indexed is gone) or other
persistence settings (``appendonly``, ``appendfsync``) are degraded
outcomes the call still answers: each is logged at WARNING on
``agentium.plugins.recall_redis`` and added, through
:func:`agentium_harness.plugin_api.current_span_event`, to the span current
in the call: the ``redis <command>`` client span of the round trip whose
check found it, under the engine's ``agentium.recall.*`` adapter-call span
(for ``health()``, the caller's span). Nothing is added when no tracer
records. The event carries no content and none of
the server's own words: the restart count and whether acknowledged writes
are now durable (``"true"``, ``"false"``, ``"unknown"``).
"""

from __future__ import annotations

import logging
from typing import Final

from agentium_harness.plugin_api import current_span_event

from .link import ServerReport

__all__ = ["PERSISTENCE_CHANGED", "SERVER_RESTARTED", "note_server_change"]

logger = logging.getLogger("agentium.plugins.recall_redis")

#: The server's ``run_id`` changed: it restarted (or another process answers at the address).
SERVER_RESTARTED: Final = "agentium.recall.redis_server_restarted"
#: The server's ``appendonly`` or ``appendfsync`` changed (``CONFIG SET``, or seen on a reconnection).
PERSISTENCE_CHANGED: Final = "agentium.recall.redis_persistence_changed"


def _durable(report: ServerReport) -> str:
    durable = report.durable
    return "unknown" if durable is None else str(durable).lower()


def note_server_change(where: str, before: ServerReport, after: ServerReport) -> None:
    """Log (WARNING) and record as a span event a restart, else a persistence change, from ``before``.

    ``where`` is the server's location without credentials; nothing when neither changed.
    """
    attributes = {"agentium.restarts": after.restarts, "agentium.durable": _durable(after)}
    if after.restarts > before.restarts:
        logger.warning(
            "redis recall store at %s: the server restarted (its run_id changed): %s",
            where,
            after.describe(),
        )
        current_span_event(SERVER_RESTARTED, attributes)
    elif (after.appendonly, after.appendfsync) != (before.appendonly, before.appendfsync):
        logger.warning(
            "redis recall store at %s: the server's persistence changed: %s", where, after.describe()
        )
        current_span_event(PERSISTENCE_CHANGED, attributes)
