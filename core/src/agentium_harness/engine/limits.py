"""Runtime limits that config files set."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ResidentLimits", "RuntimeLimits"]


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen(slots=True)
class ResidentLimits:
    """Bounds on resident history (R2). Exceeding any one evicts the oldest complete groups.

    A single group larger than a bound is kept whole and flagged, never split.
    """

    max_groups: int = attrs.field(default=8, validator=_positive)
    max_tokens: int = attrs.field(default=8192, validator=_positive)
    max_bytes: int = attrs.field(default=262_144, validator=_positive)


def _positive_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _positive_float(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


@attrs.frozen(slots=True)
class RuntimeLimits:
    """Limits of the runtime as a whole.

    - ``resident``: resident history bounds (groups, estimated tokens, bytes).
    - ``max_steps``: model calls per run (tool loops end there with ``STEP_LIMIT``).
    - ``source_tokens``: prompt budget for labeled source data, wrappers included.
    - ``settle_timeout_s``: how long ``close_session``/``aclose`` wait for admitted runs.
    - ``op_timeout_s``: deadline of each adapter operation; the engine cancels a call past it.
    - ``tool_timeout_s``: deadline of each tool handler call; past it the call is cancelled
      and reported to the model as timed out.
    - ``close_timeout_s``: how long ``aclose`` gives cancelled operations to stop and each
      owned adapter's ``aclose`` to finish, on top of ``settle_timeout_s``.
    """

    resident: ResidentLimits = attrs.field(factory=ResidentLimits)
    max_steps: int = attrs.field(default=8, validator=_positive_int)
    source_tokens: int = attrs.field(default=2048, validator=_positive_int)
    settle_timeout_s: float = attrs.field(default=30.0, validator=_positive_float)
    op_timeout_s: float = attrs.field(default=30.0, validator=_positive_float)
    tool_timeout_s: float = attrs.field(default=30.0, validator=_positive_float)
    close_timeout_s: float = attrs.field(default=5.0, validator=_positive_float)
