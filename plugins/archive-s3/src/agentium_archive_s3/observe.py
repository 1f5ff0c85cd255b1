"""The plugin's degraded outcomes: each a WARNING on its logger and an event on the adapter call's span.

A degraded outcome a call still answers (a lost reply settled by reading
back, a damaged upload sent again, a create moved past the revision floor)
or one it can only report as unknown is logged on
``agentium.plugins.archive_s3`` and added, through
:func:`agentium_harness.plugin_api.current_span_event`, to the span current
in the call: the engine's adapter-call span (``agentium.session.save``,
``agentium.archive.append``), which the worker thread sees because
``anyio.to_thread`` copies the context. Nothing is added when no tracer
records. Neither carries content or ids: event attributes are an outcome,
a reason and an S3 error code (the README lists them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from agentium_harness.plugin_api import current_span_event

__all__ = [
    "APPEND_RESENT",
    "CREATE_MOVED",
    "SAVE_RESENT",
    "SAVE_SETTLED",
    "SAVE_UNKNOWN",
    "degraded",
    "logger",
]

#: Saves settled by reading back, outcomes that stayed unknown, uploads sent again (WARNING); no content.
logger = logging.getLogger("agentium.plugins.archive_s3")

#: A session save sent again: its reply was lost with the session unchanged, or it arrived damaged.
SAVE_RESENT: Final = "agentium.s3.save_resent"
#: A session save whose reply was lost (or failed) and whose read-back shows it landed.
SAVE_SETTLED: Final = "agentium.s3.save_settled"
#: A session save that failed and whose read-back could not tell whether it landed.
SAVE_UNKNOWN: Final = "agentium.s3.save_outcome_unknown"
#: A session create moved past the revision floor an erasure in another process raised meanwhile.
CREATE_MOVED: Final = "agentium.s3.create_moved_past_floor"
#: An archived group's upload that reached the server damaged, sent again.
APPEND_RESENT: Final = "agentium.s3.append_resent"


def degraded(
    event: str,
    attributes: Mapping[str, str],
    message: str,
    *args: object,
    extra: Mapping[str, object] | None = None,
) -> None:
    """Log ``message`` as a WARNING and add ``event`` with ``attributes`` to the current span.

    ``attributes`` hold no content: outcomes, reasons, S3 error codes (escaped by the caller).
    """
    logger.warning(message, *args, extra=extra)
    current_span_event(event, attributes)
