"""Damaged scores in the erasure index (:mod:`agentium_recall_redis.erase_index`): found, and repaired.

The index's sets are read by range: an id set ``P:is:<prefix>`` by
lexicographic range (``ZRANGEBYLEX``, defined only while every member has
one score; the store writes 0), a row set ``P:ir:<prefix>`` by score from 1
(each row's score is its number; ``SWEEP`` stops at 1e15, which no row
number reaches). A score changed behind the store's back moved its member
out of what those reads reach: a page of ids resumed after the last id read
stepped past a member sorted after its place (its deletion tombstone stayed
in ``P:rev`` while the erase said complete), or read the same page for
ever; a row scored below 1 or at 1e15 and up was never swept.

So before an indexed erase reads the target's sets, ``IX_MARKED`` compares
``ZCOUNT`` of the one valid score range with ``ZCARD`` (two cheap commands
a set). When they differ, the damage is logged (WARNING) and made a span
event, and:

- a real erase repairs it first (``IX_REPAIR``, bounded calls): an id gets
  score 0 again, a row its own number; a row-set member that is no row
  number (no row can be named by it) goes. Nothing else is changed, and the
  erase then reads the sets as usual.
- a dry run, which writes nothing, walks the tenant instead (as for a
  tenant not yet indexed), so it still counts every source.

Damage arriving after that check is caught where the sets are read: each
``IX_SCAN`` page and each indexed ``SWEEP`` page compares the counts again
and fails the call (``RedisRecallError``) before it reads the page; the next
call repairs it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import OpContext, current_span_event

from .errors import RedisRecallError
from .lua import Script

if TYPE_CHECKING:
    from .erase import EraseOps

__all__ = ["IX_REPAIR", "SCORES_DAMAGED", "repair_scores", "scores_damaged"]

logger = logging.getLogger("agentium.plugins.recall_redis")

#: What ``IX_MARKED`` returns for an indexed tenant whose target sets hold a damaged score.
SCORES_DAMAGED: Final = 2
#: Members one ``IX_REPAIR`` call sets right at most (per set).
_REPAIR_PAGE: Final = 1000
#: ``IX_REPAIR`` calls one erase makes at most before it gives up (the damage kept growing).
_MAX_REPAIRS: Final = 10_000

#: Lua: whether every score of id set ``is`` (0) or of row set ``ir`` (1 up to 1e15) is in its range; the
#: key is a sorted set or none (``ZCOUNT`` and ``ZCARD`` of none are both 0).
SCORE_CHECK: Final = """
local function is_scores_ok(key)
  return redis.call('ZCOUNT', key, 0, 0) == redis.call('ZCARD', key)
end
local function ir_scores_ok(key)
  return redis.call('ZCOUNT', key, 1, '(1e15') == redis.call('ZCARD', key)
end
"""

#: Set damaged scores of the target's index sets right. KEYS: P:is:<prefix>, P:ir:<prefix>. ARGV: most
#: members per set. An id gets score 0 again; a row-set member that is a row number (1 to 15 digits, not 0)
#: gets itself as its score, any other member goes (no row is named by it). Returns how many members of
#: either set are still out of range (0: repaired). A key of another type is left alone (IX_MARKED fails
#: the erase on it first).
IX_REPAIR = Script(
    "erase_ix_repair",
    """
local most = tonumber(ARGV[1])
local function kind_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
local left = 0
if kind_of(KEYS[1]) == 'zset' then
  for _, range in ipairs({{'-inf', '(0'}, {'(0', '+inf'}}) do
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], range[1], range[2], 'LIMIT', 0, most)) do
      redis.call('ZADD', KEYS[1], 0, m)
    end
  end
  left = left + redis.call('ZCARD', KEYS[1]) - redis.call('ZCOUNT', KEYS[1], 0, 0)
end
if kind_of(KEYS[2]) == 'zset' then
  for _, range in ipairs({{'-inf', '(1'}, {'1e15', '+inf'}}) do
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], range[1], range[2], 'LIMIT', 0, most)) do
      if #m <= 15 and string.match(m, '^[1-9]%d*$') then
        redis.call('ZADD', KEYS[2], tonumber(m), m)
      else
        redis.call('ZREM', KEYS[2], m)
      end
    end
  end
  left = left + redis.call('ZCARD', KEYS[2]) - redis.call('ZCOUNT', KEYS[2], 1, '(1e15')
end
return left
""",
)


def scores_damaged(okp: str, *, repair: bool) -> None:
    """Log (WARNING) and record as a span event that the index sets of owner-key prefix ``okp`` hold damage.

    Names no id: the prefix is encoded segments of the target's own user and session, which its own
    erasure names anyway, but logs carry no ids by default, so only the kind of damage is said.
    """
    action = (
        "repaired before the erase reads them"
        if repair
        else "not used by this dry run, which walks the tenant instead"
    )
    logger.warning(
        "recall erase: the erasure index's sets of the target hold a damaged score (changed outside the "
        "store), which would hide ids or rows from the erase; they are %s",
        action,
        extra={"agentium_operation": "recall erase"},
    )
    current_span_event("agentium.recall.erase_index_scores_damaged", {"agentium.repaired": repair})


async def repair_scores(store: EraseOps, prefix: str, okp: str, ctx: OpContext) -> None:
    """Set the damaged scores of ``okp``'s index sets right (``IX_REPAIR``), in bounded calls.

    Raises ``RedisRecallError`` when they are still damaged after :data:`_MAX_REPAIRS` calls (damage
    written faster than it is repaired): the erase then reads nothing and removes nothing.
    """
    keys = [f"{prefix}:is:{okp}", f"{prefix}:ir:{okp}"]
    for _ in range(_MAX_REPAIRS):
        await store.renew(ctx)
        left = await store.script(IX_REPAIR, keys, [_REPAIR_PAGE], ctx, "recall erase")
        if isinstance(left, int) and left <= 0:
            return
        ctx.raise_if_expired("recall erase")
    raise RedisRecallError(
        "recall erase: the erasure index's sets of the target kept damaged scores through every repair; "
        "nothing was erased"
    )
