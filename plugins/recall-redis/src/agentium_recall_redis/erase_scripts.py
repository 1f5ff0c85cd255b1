"""The Redis recall store's erasure scripts besides ``ERASE`` itself (:mod:`agentium_recall_redis.erase`).

Finding a target's sources (``REV_SCAN``, ``ROW_INFO``, ``GROUP_SIDS``),
giving up its stagings (``PEND_ABORT``), fencing its owners' writes while
it runs (``FENCE``) and dropping an emptied tenant's keys (``TENANT_DROP``).
Each touches one tenant's keys only (its hash-tag slot).
"""

from __future__ import annotations

from .erase_sweep import MINE, VOUCHED
from .lua import CHECK, Script

__all__ = ["FENCE", "GROUP_SIDS", "PEND_ABORT", "REV_SCAN", "ROW_INFO", "TENANT_DROP"]

#: One page of ``HSCAN`` over ``P:rev``. KEYS: P:rev. ARGV: cursor, page size, longest id. Returns
#: {next cursor, sid, mark, sid, mark...}: mark is "-" for a deletion tombstone, "+" for a current source.
#: Neither revisions nor ids longer than any source id (both changed outside the store: such an id names
#: no owner) are copied into the reply, whatever their size.
REV_SCAN = Script(
    "erase_scan",
    """
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local out, cap = {page[1]}, tonumber(ARGV[3])
local fields = page[2]
for i = 1, #fields, 2 do
  if #fields[i] <= cap then
    out[#out + 1] = fields[i]
    out[#out + 1] = string.sub(fields[i + 1], 1, 1) == '-' and '-' or '+'
  end
end
return out
""",
)

#: Read what erasing rows would remove (a dry run). KEYS: P:ids. ARGV: P, (sid, its owner key) pairs....
#: Returns per sid {its digest as ``ERASE`` reports it (``VOUCHED``: "" unless of the digest form), its
#: row number}, or false when ``ERASE`` would not drop a row for it (none current, or one of another
#: owner).
ROW_INFO = Script(
    "erase_info",
    VOUCHED
    + MINE
    + """
local P = ARGV[1]
local out = {}
for i = 2, #ARGV, 2 do
  local n = redis.call('HGET', P .. ':ids', ARGV[i])
  local key = n and (P .. ':m:' .. n)
  if key and redis.call('HEXISTS', key, 'b') == 1 and mine(key, ARGV[i], ARGV[i + 1]) then
    out[#out + 1] = {vouched(key), n}
  else out[#out + 1] = false end
end
return out
""",
)

#: A session's indexed groups in seq ranges. KEYS: P:bk. ARGV: P, owner key, limit, then (start, stop)*
#: (stop exclusive). Returns the seqs (scores) of those with a row, ascending, at most limit. Never the
#: row's ``sid`` field: the caller builds each id from the target's session and the seq, so a row whose
#: id was edited (to another session's group, or to 100 MB) can neither redirect the erase nor be fetched.
GROUP_SIDS = Script(
    "erase_groups",
    """
local P, limit = ARGV[1], tonumber(ARGV[3])
local b = redis.call('HGET', P .. ':bk', ARGV[2])
local out = {}
if not b then return out end
for i = 4, #ARGV, 2 do
  if #out >= limit then break end
  local rows = redis.call('ZRANGE', P .. ':g:' .. b, ARGV[i], '(' .. ARGV[i + 1], 'BYSCORE', 'WITHSCORES',
                          'LIMIT', 0, limit - #out)
  for j = 1, #rows, 2 do
    if redis.call('EXISTS', P .. ':m:' .. rows[j]) == 1 then out[#out + 1] = rows[j + 1] end
  end
end
return out
""",
)

#: Give up the stagings of the target's owners (their postings queued as garbage). KEYS: P:pend.
#: ARGV: P, owner-key prefix ("" for every owner of the tenant; owner-key segments never hold "/", so
#: "<user>/" or "<user>/<session>/" names exactly that user's or session's owners). Safe to repeat.
#: Returns how many were given up. Reads the tenant's bucket map (its owners), never another tenant's.
PEND_ABORT = Script(
    "erase_stagings",
    CHECK
    + """
local P, okp = ARGV[1], ARGV[2]
if type_of(KEYS[1]) ~= 'zset' or redis.call('ZCARD', KEYS[1]) == 0 then return 0 end
local gc = type_of(P .. ':gc')
if gc ~= 'list' and gc ~= 'none' then return 0 end
local ours = {}
if type_of(P .. ':bk') == 'hash' then
  local map = redis.call('HGETALL', P .. ':bk')
  for i = 1, #map, 2 do
    if string.sub(map[i], 1, #okp) == okp then ours[map[i + 1]] = true end
  end
end
local n = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if okp == '' or ours[string.match(member, '^(%d+) ') or ''] then
    redis.call('ZREM', KEYS[1], member)
    redis.call('RPUSH', P .. ':gc', member)
    n = n + 1
  end
end
return n
""",
)

#: Drop a tenant's remaining keys once it holds no row, staging or garbage. KEYS: P:ids. ARGV: P.
#: Safe to repeat. Returns 1 when dropped, 0 when something is still there.
TENANT_DROP = Script(
    "erase_tenant",
    """
local P = ARGV[1]
local function size(key, kind)
  local t = redis.call('TYPE', key)
  t = t['ok'] or t
  if t == 'none' then return 0 end
  if t ~= kind then return 1 end
  if kind == 'hash' then return redis.call('HLEN', key) end
  if kind == 'zset' then return redis.call('ZCARD', key) end
  return redis.call('LLEN', key)
end
if size(P .. ':ids', 'hash') + size(P .. ':pend', 'zset') + size(P .. ':gc', 'list') > 0 then return 0 end
-- The layout, vector model and count keys of later layouts go too when present.
redis.call('DEL', P .. ':ids', P .. ':rev', P .. ':bk', P .. ':bn', P .. ':n', P .. ':nb', P .. ':pend',
           P .. ':gc', P .. ':v', P .. ':vm', P .. ':vc', P .. ':rows')
return 1
""",
)


#: Raise or lower the erasure fence of an owner-key prefix. KEYS: P:ef. ARGV: owner-key prefix ("" for the
#: tenant, "u/", "u/s/", or a session's own key for a groups target), then how long it holds in ms, or
#: "0" to lower it. While it holds, the writing scripts refuse a write of an owner it covers (``erasing``
#: in :data:`~agentium_recall_redis.lua.CHECK`) before their first write: a write in flight when an
#: erasure began can then not land after the erasure read what to erase. The value is when it ends
#: (server time, ms): a fence an erasure left behind (it crashed, or stopped partial) ends by itself.
#: Safe to repeat. Returns 1.
FENCE = Script(
    "erase_fence",
    CHECK
    + """
local okp, hold = ARGV[1], tonumber(ARGV[2])
local t = type_of(KEYS[1])
if t ~= 'none' and t ~= 'hash' then refuse('a key') end
if hold > 0 then
  redis.call('HSET', KEYS[1], okp, fmt(now_ms() + hold))
else
  redis.call('HDEL', KEYS[1], okp)
end
return 1
""",
)
