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

from .._history import MessageGroup, planning_sizes
from .._history_messages import messages_tokens
from .foreign_results import for_model
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


def _tokens_sent(group: MessageGroup) -> int:
    return messages_tokens(for_model(group.messages, group.seq))


def plan_eviction(resident: Sequence[MessageGroup], limits: ResidentLimits) -> EvictionPlan:
    """Plan the eviction of the oldest complete groups until ``resident`` fits ``limits``.

    A group's tokens are at least those ``run()`` sends of it (a foreign tool result is sent
    as a notice and a block: see below).
    """
    # Each group's size is measured once and kept with its encoding (a canonical encoding each),
    # and the totals kept as running sums, so planning is linear in resident groups; the sums and
    # the oversized check run at C speed (itemgetter, max). A foreign tool result is sent as a
    # notice and an escaped ``tool_output`` block (:func:`.foreign_results.for_model`), many times
    # its content's tokens: counted as stored, the history sent could be far over ``max_tokens``.
    # So a group holding foreign items (payloads) counts at least its tokens as sent, computed
    # once per group, as its size is (:func:`~agentium_harness._history.planning_sizes`).
    sizes = planning_sizes(resident, _tokens_sent)
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
    return EvictionPlan(tuple(resident[:first]), tuple(resident[first:]), oversized, blocked)
