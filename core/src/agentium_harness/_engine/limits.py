"""Runtime limits that config files set."""

from __future__ import annotations

from typing import Any

import attrs

from .._validators import bounded_count, bounded_duration, require_instance

__all__ = ["ResidentLimits", "RuntimeLimits"]


@attrs.frozen(slots=True)
class ResidentLimits:
    """Bounds on resident history (R2). Exceeding any one evicts the oldest complete groups.

    A single group larger than a bound is kept whole and flagged, never split.
    """

    max_groups: int = attrs.field(default=8, validator=bounded_count())
    max_tokens: int = attrs.field(default=8192, validator=bounded_count())
    max_bytes: int = attrs.field(default=262_144, validator=bounded_count())


def _resident(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # A dict such as {"max_groups": 4} was taken, and every run then failed as an engine bug.
    require_instance(value, ResidentLimits, "resident")


@attrs.frozen(slots=True)
class RuntimeLimits:
    """Limits of the runtime as a whole.

    Every count is an integer from 1 to
    :data:`~agentium_harness._validators.MAX_COUNT` and every duration a finite
    number of seconds above 0 and at most
    :data:`~agentium_harness._validators.MAX_DURATION_S` (3600), here and in
    ``[runtime]`` alike.

    - ``resident``: resident history bounds (groups, estimated tokens, bytes), a
      :class:`ResidentLimits` (anything else is ``InvalidArgumentError``).
    - ``max_steps``: model calls per run (tool loops end there with ``STEP_LIMIT``).
    - ``source_tokens``: prompt budget for labeled source data, wrappers included.
    - ``settle_timeout_s``: how long ``close_session``/``aclose`` wait for admitted runs.
    - ``op_timeout_s``: deadline of each adapter operation; the engine cancels a call past it.
    - ``model_timeout_s``: deadline of each model call (the provider's ``complete``); ``None``
      (the default) means ``op_timeout_s``. Model calls are slow and store calls fast: a host
      whose model needs a minute sets this, and a hung store is still caught at ``op_timeout_s``.
      When set it also bounds the summarizer call of a summary update, unless
      ``SummaryLimits.model_timeout_s`` sets the summary's own (neither set:
      ``SummaryLimits.timeout_s``); shutdown stays bounded by the settle and close limits.
    - ``tool_timeout_s``: deadline of each tool handler call; past it the call is cancelled
      and reported to the model as timed out.
    - ``close_timeout_s``: how long ``aclose`` gives cancelled operations to stop and each
      owned adapter's ``aclose`` to finish, on top of ``settle_timeout_s``; also how long
      the runtime waits for each lifecycle-hook broadcast.
    """

    resident: ResidentLimits = attrs.field(factory=ResidentLimits, validator=_resident)
    max_steps: int = attrs.field(default=8, validator=bounded_count())
    source_tokens: int = attrs.field(default=2048, validator=bounded_count())
    settle_timeout_s: float = attrs.field(default=30.0, validator=bounded_duration())
    op_timeout_s: float = attrs.field(default=30.0, validator=bounded_duration())
    tool_timeout_s: float = attrs.field(default=30.0, validator=bounded_duration())
    close_timeout_s: float = attrs.field(default=5.0, validator=bounded_duration())
    # Last, so that positional construction of the fields above keeps its meaning.
    model_timeout_s: float | None = attrs.field(default=None, validator=bounded_duration(optional=True))
