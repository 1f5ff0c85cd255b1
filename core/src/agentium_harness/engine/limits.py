"""Runtime limits that config files set."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ResidentLimits"]


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
