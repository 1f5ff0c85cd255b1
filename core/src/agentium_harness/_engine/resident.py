"""Resident history bounds and the eviction plan (R2, R3).

Eviction takes the oldest groups first and stops at the first incomplete one,
so the archive always receives a contiguous run of complete groups. The
newest group always stays resident, even when it alone is over a bound; it is
then flagged as oversized, never split.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import attrs

from .._history import MessageGroup, tokens_and_size
from .limits import ResidentLimits

__all__ = ["EvictionPlan", "plan_eviction"]

_TOKENS = operator.itemgetter(0)
_BYTES = operator.itemgetter(1)


@attrs.frozen(slots=True)
class EvictionPlan:
    """Which groups to archive and which to keep, and why eviction stopped short."""

    evict: tuple[MessageGroup, ...]
    keep: tuple[MessageGroup, ...]
    oversized: tuple[int, ...] = ()
    blocked_by_incomplete: int | None = None
    #: ``(estimated tokens, bytes)`` of each group planned for, ``evict`` then ``keep``.
    sizes: tuple[tuple[int, int], ...] = ()


def plan_eviction(
    resident: Sequence[MessageGroup],
    limits: ResidentLimits,
    measured: tuple[Sequence[MessageGroup], Sequence[tuple[int, int]]] | None = None,
) -> EvictionPlan:
    """Plan the eviction of the oldest complete groups until ``resident`` fits ``limits``.

    ``measured`` is groups and their sizes an earlier plan measured (the
    last commit's resident groups, :func:`~.._ports.snapshot.resident_sizes`):
    used for the leading groups of ``resident`` that are those very objects
    (a group is frozen and its encoding cached, so its size cannot have
    changed); any other group is measured.
    """
    # Each group's size is measured once (a canonical encoding each) and the
    # totals kept as running sums, so planning is linear in resident groups;
    # the sums and the oversized check run at C speed (itemgetter, max).
    sizes = list(_carried(resident, measured) if measured is not None else ())
    sizes += map(tokens_and_size, resident[len(sizes) :])
    tokens = sum(map(_TOKENS, sizes))
    size = sum(map(_BYTES, sizes))
    first = 0
    blocked: int | None = None
    while len(resident) - first > 1 and (
        len(resident) - first > limits.max_groups or tokens > limits.max_tokens or size > limits.max_bytes
    ):
        oldest = resident[first]
        if not oldest.is_complete:
            blocked = oldest.seq
            break
        tokens -= sizes[first][0]
        size -= sizes[first][1]
        first += 1
    kept = sizes[first:]
    oversized: tuple[int, ...] = ()
    if kept and (max(map(_TOKENS, kept)) > limits.max_tokens or max(map(_BYTES, kept)) > limits.max_bytes):
        oversized = tuple(
            g.seq
            for g, (t, b) in zip(resident[first:], kept, strict=True)
            if t > limits.max_tokens or b > limits.max_bytes
        )
    return EvictionPlan(tuple(resident[:first]), tuple(resident[first:]), oversized, blocked, tuple(sizes))


def _carried(
    resident: Sequence[MessageGroup], measured: tuple[Sequence[MessageGroup], Sequence[tuple[int, int]]]
) -> Sequence[tuple[int, int]]:
    """The measured sizes when ``resident`` begins with exactly the measured group objects; else none."""
    groups, sizes = measured
    if len(sizes) != len(groups) or len(groups) > len(resident):
        return ()
    # Identity, not equality: equal groups may encode differently (0.0 and -0.0 are equal).
    return sizes if all(map(operator.is_, groups, resident)) else ()
