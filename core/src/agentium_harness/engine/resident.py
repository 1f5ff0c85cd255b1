"""Resident history bounds and the eviction plan (R2, R3).

Eviction takes the oldest groups first and stops at the first incomplete one,
so the archive always receives a contiguous run of complete groups. The
newest group always stays resident, even when it alone is over a bound; it is
then flagged as oversized, never split.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..history import MessageGroup
from .limits import ResidentLimits

__all__ = ["EvictionPlan", "plan_eviction"]


@attrs.frozen(slots=True)
class EvictionPlan:
    """Which groups to archive and which to keep, and why eviction stopped short."""

    evict: tuple[MessageGroup, ...]
    keep: tuple[MessageGroup, ...]
    oversized: tuple[int, ...] = ()
    blocked_by_incomplete: int | None = None


def _over(groups: Sequence[MessageGroup], limits: ResidentLimits) -> bool:
    if len(groups) > limits.max_groups:
        return True
    if sum(g.estimated_tokens for g in groups) > limits.max_tokens:
        return True
    return sum(g.size_bytes for g in groups) > limits.max_bytes


def plan_eviction(resident: Sequence[MessageGroup], limits: ResidentLimits) -> EvictionPlan:
    """Plan the eviction of the oldest complete groups until ``resident`` fits ``limits``."""
    keep = list(resident)
    evict: list[MessageGroup] = []
    blocked: int | None = None
    while len(keep) > 1 and _over(keep, limits):
        oldest = keep[0]
        if not oldest.is_complete:
            blocked = oldest.seq
            break
        evict.append(keep.pop(0))
    oversized = tuple(
        g.seq for g in keep if g.estimated_tokens > limits.max_tokens or g.size_bytes > limits.max_bytes
    )
    return EvictionPlan(tuple(evict), tuple(keep), oversized, blocked)
