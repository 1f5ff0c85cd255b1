"""Reading a row set page by page from a (score, member) place, however many members share one score.

The store gives each member of a row set (the tenant's ``P:rows``, the erasure index's ``P:ir:<prefix>``)
its own row number as its score. The walks of an erasure (:mod:`agentium_recall_redis.erase_sweep`) and of
an index build (:mod:`agentium_recall_redis.erase_build`) read those sets in pages by score. They went on
from a *number*: a page that ended at score ``s`` went on from ``s + 1``, or read ``s`` again when more
members shared it; a full page whose members all had one score (1,024 or more members at one score,
which only damage leaves) could do neither without skipping some, and failed the erase closed, every
erase of the tenant, until someone repaired the set by hand.

Now a page goes on from a *place*: ``"<n>"`` (the members scored ``n`` or more: a walk's start, or the
row numbers past a counter) or ``"<score> <member>"`` (the members after that one in the set's own
order: by score, then by the member's bytes). The next page starts at the rank of the place's member
when it is still there at that score (``ZRANK``, one lookup), else at the first member after it, found
by a binary search over the ranks of the members at that score (``ZCOUNT`` twice, then at most about 50
single-member ``ZRANGE`` lookups for 10^15 members). Members are compared byte by byte in Lua, never
with Lua's ``<`` on strings, which follows the server's locale (``strcoll``), not the set's order. A
member removed between pages (erased, given up, or removed by another owner's write) shifts no place,
so no member present throughout the walk is stepped over, and a page is still one script call reading
at most a page of members and O(log n) lookups.

A place keeps at most 64 bytes of its member. A longer member is no row number (at most 15 digits), and
its first 64 bytes sort at or before it, so the next page may read it again, never skip past one. A
page that would go on from where it began (more than a page of members longer than 64 bytes sharing a
score and their first 64 bytes, damage beyond any the store writes) fails the call (``RedisRecallError``)
rather than read the same page for ever: the erase fails closed, nothing is said erased that is not.
A sweep's place goes to the client and back as the bytes the script sent: read as text, a member byte
that is not UTF-8 came back replaced (three bytes for one), a place over 100 bytes that the script
refused, and every erase of the tenant failed while such a member ended a page.

**The walk by number.** Before the row set, a walk read the row numbers ``1`` to the tenant's counter
``P:n`` (one call per 1,024), and still does for the rows it lists past that: a counter damaged upward
to about 10^14 made that walk 10^11 calls, every erase ran until its deadline and none completed (and
a write after the damage took row 10^14 + 1, so the counter then agreed with the rows). Every row
written since the row set exists is listed in it, with its row, by the script that writes it, and the
rows it does not list were written before it, when the counter was lower than for any row it lists. So
a walk by number longer than :data:`MAX_NUMBER_WALK` (16,384 calls) now stops below the lowest row the
set lists (``number_end``: the lowest of its first 8 members whose member and score are one whole number
and whose row exists), and the set, read by place, does the rest: what bounds the walk is then what the
tenant holds. A shorter walk reads every number, as before, so it also finds a row both removed from the
set and unreachable by its id (damage twice over), which the bounded one does not. With no listed row to
bound it, or when the lowest listed row is itself past :data:`MAX_NUMBER_WALK` + 1, a walk by number longer
than :data:`MAX_NUMBER_WALK` is refused (:func:`checked_number_walk`, when the erase reads its bounds, before
its first pass): ``RedisRecallDamagedError``, logged at WARNING and a span event, nothing erased; the
message names the key. The second case is not always damage: a tenant whose first 2^24 row numbers were
all used and are all gone looks the same as a counter damaged upward before its next write, and was
refused too, every tenant erase of it, lowering the counter not helping (its highest row is past the
bound). Telling them apart needs to know where the row set began: the first write of a tenant with
nothing stored (``fresh_tenant``, as it marks the tenant indexed) now writes ``P:rb`` ``"0"``, every row
of the tenant listed in its set from the first. With that marker, a set that lists any row, and a walk by
number still past :data:`MAX_NUMBER_WALK` after the lowest listed row bounds it, the walk by number stops
at the marker and the set does the rest (``tests/test_erase_counter_bounds.py``). A tenant an earlier
version began has no marker and keeps the refusal; so does one whose set lists no row (all gone, or the
set deleted: the marker alone does not say which). The marker goes with the tenant (``TENANT_DROP``).
The bound is read when the erase reads its bounds, not at each page: the first pass erases listed rows,
and a set it emptied would bound nothing. The counter is not repaired:
the store cannot tell which numbers below it older rows hold without walking them.
"""

from __future__ import annotations

import logging
from typing import Final

from agentium_harness.plugin_api import current_span_event

from .errors import RedisRecallDamagedError

__all__ = ["MAX_NUMBER_WALK", "NUMBER_END", "SET_PAGE", "checked_number_walk"]

logger = logging.getLogger("agentium.plugins.recall_redis")

#: The most row numbers a walk by number reads (16,384 calls of 1,024): past it, with no row of the row
#: set to bound it, the counter is taken for damage and the erase fails closed (see the module).
MAX_NUMBER_WALK: Final = 1 << 24

#: Lua: ``number_end(P, last)``, the last number a walk by row number reads: ``last`` up to
#: :data:`MAX_NUMBER_WALK`; past it, one below the lowest row the tenant's row set lists when that is lower,
#: and, still past it, where the row set began (``P:rb``) when the set lists a row (see the module).
NUMBER_END: Final = f"""
local function number_end(P, last)
  if last <= {MAX_NUMBER_WALK} then return last end  -- walked whole, as always: a few thousand calls at most
  local t = redis.call('TYPE', P .. ':rows')
  if (t['ok'] or t) ~= 'zset' then return last end
  local low = redis.call('ZRANGEBYSCORE', P .. ':rows', 1, '(1e15', 'WITHSCORES', 'LIMIT', 0, 8)
  for j = 1, #low, 2 do
    local n = low[j]
    if #n <= 15 and string.match(n, '^[1-9]%d*$') and tonumber(n) == tonumber(low[j + 1])
        and redis.call('EXISTS', P .. ':m:' .. n) == 1 then
      last = math.min(last, tonumber(n) - 1)
      break
    end
  end
  if last <= {MAX_NUMBER_WALK} or #low == 0 then return last end
  -- Where the row set began, when the tenant's first write said (P:rb): no row past it is unlisted.
  t = redis.call('TYPE', P .. ':rb')
  if (t['ok'] or t) ~= 'string' then return last end
  local rb = redis.call('GET', P .. ':rb')
  if #rb <= 15 and string.match(rb, '^%d+$') and tonumber(rb) <= {MAX_NUMBER_WALK} then
    return math.min(last, tonumber(rb))
  end
  return last
end
"""

#: Lua: ``place_ok(p)``, whether ``p`` is a place of a row-set walk (see the module); ``set_page(key,
#: from, count, upto)``, the next page of row set ``key`` after place ``from``: its members as {member,
#: score, the place a call going on at this member resumes from} (at most ``count``, none scored past
#: ``upto`` ("+inf": no end) or at 1e15 and up, which no row number reaches), and the place the next page
#: goes on from (nil once the set is read to its end or ``upto``). Fails when that place is ``from``.
SET_PAGE: Final = """
local function bytes_after(a, b)
  if a == b then return false end
  local n, i = math.min(#a, #b), 1
  while i + 63 <= n and string.sub(a, i, i + 63) == string.sub(b, i, i + 63) do i = i + 64 end
  while i <= n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
    i = i + 1
  end
  return #a > #b
end
local function place_ok(p)
  if #p > 100 then return false end
  local sp = string.find(p, ' ', 1, true)
  if not sp then return #p <= 16 and string.match(p, '^%d+$') ~= nil end
  local s = string.sub(p, 1, sp - 1)
  if not string.match(s, '^[0-9.e+-]+$') then return false end
  local v = tonumber(s)
  return v ~= nil and v >= 1 and v < 1e15
end
local function set_rank(key, from)
  local sp = string.find(from, ' ', 1, true)
  if not sp then return redis.call('ZCOUNT', key, '-inf', '(' .. from) end
  local s, m = string.sub(from, 1, sp - 1), string.sub(from, sp + 1)
  local cur = redis.call('ZSCORE', key, m)
  if cur and tonumber(cur) == tonumber(s) then return redis.call('ZRANK', key, m) + 1 end
  -- The member is gone (or was moved): the first member after it among those at its score.
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. s)
  local hi = lo + redis.call('ZCOUNT', key, s, s)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_after(redis.call('ZRANGE', key, mid, mid)[1], m) then hi = mid else lo = mid + 1 end
  end
  return lo
end
local function set_page(key, from, count, upto)
  local rank = set_rank(key, from)
  local listed = redis.call('ZRANGE', key, rank, rank + count - 1, 'WITHSCORES')
  local items, prev = {}, from
  for j = 1, #listed, 2 do
    local score = tonumber(listed[j + 1])
    if score >= 1e15 or (upto ~= '+inf' and score > tonumber(upto)) then return items, nil end
    items[#items + 1] = {listed[j], score, prev}
    prev = listed[j + 1] .. ' ' .. string.sub(listed[j], 1, 64)
  end
  if #listed < 2 * count then return items, nil end
  if prev == from then
    error('a row set holds more members sharing a score and their first 64 bytes than a page reads')
  end
  return items, prev
end
"""


def checked_number_walk(numbers: int) -> None:
    """Refuse a walk by row number of ``numbers`` numbers past :data:`MAX_NUMBER_WALK` (see the module).

    Logs a WARNING and a span event, then raises ``RedisRecallDamagedError``.
    """
    if numbers <= MAX_NUMBER_WALK:
        return
    logger.warning(
        "recall erase: the tenant's row counter would make the walk of its rows read %d row numbers, past "
        "any its rows explain (no row of its row set bounds it within the walk's limit): taken for damage, "
        "the erase fails closed",
        numbers,
        extra={"agentium_operation": "recall erase"},
    )
    current_span_event("agentium.recall.erase_row_counter_damaged", {"agentium.rows": numbers})
    raise RedisRecallDamagedError(
        f"recall erase: the tenant's row counter (<tenant>:n) would make the walk of its rows read {numbers} "
        f"row numbers (at most {MAX_NUMBER_WALK} are walked) and no row of its row set (<tenant>:rows) "
        "bounds it within that: the counter was damaged, or every row numbered below it is gone. Nothing was "
        "erased. Set the counter to the highest row number <tenant>:m:<n> holds (or delete it if no row is "
        "left) and erase again"
    )
