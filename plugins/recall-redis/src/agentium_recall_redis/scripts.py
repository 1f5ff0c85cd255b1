"""The Lua scripts of the Redis recall store, and their SHA1 digests for ``EVALSHA``.

Each script touches the keys of one tenant only (one hash-tag slot; see
:mod:`agentium_recall_redis.keys`), and declares at least one of them in
``KEYS`` so a cluster client routes it to that slot. Lua scripts run
atomically on the server: nothing else runs between their commands.

The writing scripts (``INDEX``, ``DELETE``) first read and check everything
they need and only then write, so a refusal (or a key of the wrong type)
stops them before their first write. Each carries a one-time token
(``KEYS[2]``): a script whose token is already settled does nothing, and the
token records the outcome. After a write loses its reply the store never
re-sends it; ``SETTLE`` reads the token and, if the write has not run,
fences it, so a copy of it still in flight can never apply later.

Numbers go into keys and scores through ``string.format`` (``%d`` / ``%.0f``):
Lua's ``tostring`` would write large numbers in exponent form.
"""

from __future__ import annotations

import hashlib
from typing import Final

import attrs

__all__ = [
    "DELETE",
    "DISCOVER",
    "INDEX",
    "READ",
    "REQUIRED_COMMANDS",
    "SCRIPTS",
    "SEEK",
    "SETTLE",
    "TOKEN_TTL_MS",
    "Script",
]

#: How long a write's settlement token lives: far longer than any write can stay in flight.
TOKEN_TTL_MS: Final = 600_000


@attrs.frozen(slots=True)
class Script:
    """A Lua script's name, source and SHA1 (what ``SCRIPT LOAD`` returns for it)."""

    name: str
    source: str
    sha: str = attrs.field(init=False)

    @sha.default
    def _sha(self) -> str:
        return hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()


# Checking before writing. A Lua script is not a transaction: a command that fails part way leaves
# the writes before it in place. So every writing script first checks each key it will write (its
# type, and that a counter holds an integer) and only then writes; a check that fails raises before
# the first write. Messages name no key: keys hold tenant ids and words of the content.
_CHECK = """
local checked = {}
local function refuse(what)
  error('WRONGTYPE ' .. what .. ' under the key prefix holds another type of value')
end
local function need(key, kind)
  if checked[key] then return end
  local t = redis.call('TYPE', key)
  t = t['ok'] or t
  if t ~= 'none' and t ~= kind then refuse('a key') end
  checked[key] = true
end
local function need_int(value)
  if value and not string.match(value, '^%-?%d+$') then refuse('a counter') end
end
local function need_count(P, b)
  need(P .. ':bn', 'hash')
  need_int(redis.call('HGET', P .. ':bn', b))
end
"""

# Removing a row: its postings, its group entry, its keys and its bucket count; check_row checks
# every key remove_row writes.
_REMOVE = """
local function check_row(P, b, terms, kind)
  for term in string.gmatch(terms or '', '%S+') do need(P .. ':p:' .. b .. ':' .. term, 'zset') end
  if kind == 'g' then need(P .. ':g:' .. b, 'zset') end
  need_count(P, b)
end
local function remove_row(P, n, b, terms, kind)
  for term in string.gmatch(terms or '', '%S+') do
    redis.call('ZREM', P .. ':p:' .. b .. ':' .. term, n)
  end
  if kind == 'g' then redis.call('ZREM', P .. ':g:' .. b, n) end
  redis.call('DEL', P .. ':m:' .. n, P .. ':t:' .. n, P .. ':c:' .. n)
  redis.call('HINCRBY', P .. ':bn', b, -1)
end
"""

#: Index a batch of sources. KEYS: P:ids, the token key. ARGV: P, token ttl, count, then per source
#: sid, rev, kind (d|g), owner key, title, text, canonical bytes, seq, receipt digest, term count,
#: (term, tf)*. Returns {'ok', fresh} or {'settled', token value}.
INDEX = Script(
    "index",
    _CHECK
    + _REMOVE
    + """
local P = ARGV[1]
local settled = redis.call('GET', KEYS[2])
if settled then return {'settled', settled} end
-- Phase 1: read and check everything; no write before the loop below.
local count = tonumber(ARGV[3])
local plan = {}
local i = 4
for s = 1, count do
  local src = {sid = ARGV[i], rev = ARGV[i + 1], kind = ARGV[i + 2], okey = ARGV[i + 3], title = ARGV[i + 4],
               text = ARGV[i + 5], canon = ARGV[i + 6], seq = ARGV[i + 7], dg = ARGV[i + 8],
               nt = tonumber(ARGV[i + 9]), t0 = i + 10}
  i = i + 10 + 2 * src.nt
  local cur = redis.call('HGET', P .. ':ids', src.sid)
  if cur then
    local old = redis.call('HMGET', P .. ':m:' .. cur, 'rev', 'b', 'terms', 'kind')
    if old[1] == src.rev then
      src.same = true
    else
      src.old, src.oldb, src.oldterms, src.oldkind = cur, old[2], old[3], old[4]
    end
  end
  if not src.same then src.b = redis.call('HGET', P .. ':bk', src.okey) end
  plan[s] = src
end
for _, key in ipairs({':ids', ':rev', ':bk', ':bn'}) do need(P .. key, 'hash') end
need(P .. ':n', 'string')
need(P .. ':nb', 'string')
local lastv, nbv = redis.call('GET', P .. ':n'), redis.call('GET', P .. ':nb')
need_int(lastv)
need_int(nbv)
local last = tonumber(lastv or '0')
-- Every key phase 2 writes, checked with the bucket and row numbers it will use.
local nb, planned, row = tonumber(nbv or '0'), {}, last
for s = 1, count do
  local src = plan[s]
  if not src.same then
    if src.old and src.oldb then check_row(P, src.oldb, src.oldterms, src.oldkind) end
    local b = planned[src.okey] or src.b
    if not b then
      nb = nb + 1
      b = string.format('%d', nb)
    end
    planned[src.okey] = b
    row = row + 1
    need(P .. ':m:' .. string.format('%d', row), 'hash')
    for k = 0, src.nt - 1 do need(P .. ':p:' .. b .. ':' .. ARGV[src.t0 + 2 * k], 'zset') end
    if src.kind == 'g' then need(P .. ':g:' .. b, 'zset') end
    need_count(P, b)
  end
end
-- Phase 2: write.
local fresh = 0
local buckets = {}
for s = 1, count do
  local src = plan[s]
  if not src.same then
    if src.old and src.oldb then remove_row(P, src.old, src.oldb, src.oldterms, src.oldkind) end
    local b = buckets[src.okey] or src.b
    if not b then
      b = string.format('%d', redis.call('INCR', P .. ':nb'))
      redis.call('HSET', P .. ':bk', src.okey, b)
    end
    buckets[src.okey] = b
    last = last + 1
    local n = string.format('%d', last)
    local terms = {}
    for k = 0, src.nt - 1 do
      local term = ARGV[src.t0 + 2 * k]
      local tf = tonumber(ARGV[src.t0 + 2 * k + 1])
      if tf > 1023 then tf = 1023 end
      redis.call('ZADD', P .. ':p:' .. b .. ':' .. term, string.format('%.0f', last * 1024 + tf), n)
      terms[#terms + 1] = term
    end
    redis.call('HSET', P .. ':m:' .. n, 'sid', src.sid, 'rev', src.rev, 'title', src.title,
               'size', string.format('%d', #src.text), 'o', src.okey, 'b', b, 'kind', src.kind,
               'terms', table.concat(terms, ' '), 'seq', src.seq, 'dg', src.dg)
    redis.call('SET', P .. ':t:' .. n, src.text)
    if src.kind == 'g' then
      redis.call('SET', P .. ':c:' .. n, src.canon)
      redis.call('ZADD', P .. ':g:' .. b, src.seq, n)
    end
    redis.call('HSET', P .. ':ids', src.sid, n)
    redis.call('HSET', P .. ':rev', src.sid, src.rev)
    redis.call('HINCRBY', P .. ':bn', b, 1)
    fresh = fresh + 1
  end
end
redis.call('SET', P .. ':n', string.format('%d', last))
local result = string.format('%d', fresh)
redis.call('SET', KEYS[2], 'done:' .. result, 'PX', ARGV[2])
return {'ok', result}
""",
)

#: Delete one source of a kind. KEYS: P:ids, the token key. ARGV: P, token ttl, sid, kind.
#: Leaves the revision tombstone ``-<revision>`` in P:rev. Returns {'ok', '1'|'0'} or {'settled', value}.
DELETE = Script(
    "delete",
    _CHECK
    + _REMOVE
    + """
local P = ARGV[1]
local settled = redis.call('GET', KEYS[2])
if settled then return {'settled', settled} end
local n = redis.call('HGET', P .. ':ids', ARGV[3])
local result = '0'
if n then
  local old = redis.call('HMGET', P .. ':m:' .. n, 'rev', 'b', 'terms', 'kind')
  if old[4] == ARGV[4] and old[1] and old[2] then
    need(P .. ':rev', 'hash')
    check_row(P, old[2], old[3], old[4])
    remove_row(P, n, old[2], old[3], old[4])
    redis.call('HDEL', P .. ':ids', ARGV[3])
    redis.call('HSET', P .. ':rev', ARGV[3], '-' .. old[1])
    result = '1'
  end
end
redis.call('SET', KEYS[2], 'done:' .. result, 'PX', ARGV[2])
return {'ok', result}
""",
)

#: Settle cut-off writes. KEYS: their token keys. ARGV: token ttl. A token not yet settled is fenced.
#: Returns each token's value: 'done:<result>' (the write ran) or 'fenced' (it never will).
SETTLE = Script(
    "settle",
    """
local out = {}
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if not value then
    redis.call('SET', key, 'fenced', 'PX', ARGV[1])
    value = 'fenced'
  end
  out[i] = value
end
return out
""",
)

#: Rank visible sources. KEYS: P:bk. ARGV: P, max candidates, per-term cap, byte budget (-1: none),
#: term count, owner key count, terms..., owner keys...
#: Returns rows {sid, rev, title, size, owner key, score}, best first, within the byte budget.
DISCOVER = Script(
    "discover",
    """
local P = ARGV[1]
local maxc, per, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local nt, no = tonumber(ARGV[5]), tonumber(ARGV[6])
local owners = {}
for i = 1, no do owners[i] = ARGV[6 + nt + i] end
local found = redis.call('HMGET', P .. ':bk', unpack(owners))
local buckets = {}
for i = 1, no do if found[i] then buckets[#buckets + 1] = found[i] end end
if #buckets == 0 then return {} end
local counts = redis.call('HMGET', P .. ':bn', unpack(buckets))
local N = 0
for i = 1, #buckets do if counts[i] then N = N + tonumber(counts[i]) end end
local total, order = {}, {}
for t = 1, nt do
  local term = ARGV[6 + t]
  local df, lists = 0, {}
  for _, b in ipairs(buckets) do
    local key = P .. ':p:' .. b .. ':' .. term
    local c = redis.call('ZCARD', key)
    if c > 0 then
      df = df + c
      lists[#lists + 1] = redis.call('ZRANGE', key, 0, per - 1, 'REV', 'WITHSCORES')
    end
  end
  if df > 0 then
    local idf = math.log(1 + N / df)
    local merged = {}
    for _, l in ipairs(lists) do
      for j = 1, #l, 2 do merged[#merged + 1] = {l[j], tonumber(l[j + 1])} end
    end
    -- One list is already newest first; several are merged by recency.
    if #lists > 1 then table.sort(merged, function(a, b) return a[2] > b[2] end) end
    for j = 1, math.min(per, #merged) do
      local n = merged[j][1]
      local tf = merged[j][2] % 1024
      if not total[n] then
        total[n] = 0
        order[#order + 1] = n
      end
      total[n] = total[n] + tf * idf
    end
  end
end
table.sort(order, function(a, b)
  if total[a] ~= total[b] then return total[a] > total[b] end
  return tonumber(a) > tonumber(b)
end)
local out, spent = {}, 0
for i = 1, math.min(maxc, #order) do
  local n = order[i]
  local key = P .. ':m:' .. n
  local m = redis.call('HMGET', key, 'sid', 'rev', 'size', 'o')
  if m[1] and m[2] and m[3] and m[4] then
    local tlen = redis.call('HSTRLEN', key, 'title')
    local cost = #m[1] + #m[2] + tlen
    if budget >= 0 and spent + cost > budget then break end
    spent = spent + cost
    local title = ''
    if tlen > 0 then title = redis.call('HGET', key, 'title') end
    out[#out + 1] = {m[1], m[2], title, m[3], m[4], string.format('%.17g', total[n])}
  end
end
return out
""",
)

#: Read texts at their revisions. KEYS: P:ids. ARGV: P, read cap (>= 1), then (sid, rev) pairs.
#: Returns per ref {full size, first <cap> bytes} or nil (unknown, deleted or at another revision).
READ = Script(
    "read",
    """
local P, cap = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local entry = false
  local n = redis.call('HGET', P .. ':ids', ARGV[i])
  if n and redis.call('HGET', P .. ':m:' .. n, 'rev') == ARGV[i + 1] then
    local key = P .. ':t:' .. n
    entry = {redis.call('STRLEN', key), redis.call('GETRANGE', key, 0, cap - 1)}
  end
  out[#out + 1] = entry
end
return out
""",
)

#: Seek a session's archived groups. KEYS: P:bk. ARGV: P, owner key, start seq, max groups (>= 1), cap.
#: Returns {seq, receipt digest, size[, canonical bytes]} ascending; bytes left out when size > cap.
SEEK = Script(
    "seek",
    """
local P = ARGV[1]
local b = redis.call('HGET', P .. ':bk', ARGV[2])
if not b then return {} end
local cap = tonumber(ARGV[5])
local rows = redis.call('ZRANGE', P .. ':g:' .. b, ARGV[3], '+inf', 'BYSCORE', 'WITHSCORES',
                       'LIMIT', 0, ARGV[4])
local out = {}
for j = 1, #rows, 2 do
  local n = rows[j]
  local key = P .. ':c:' .. n
  local size = redis.call('STRLEN', key)
  local digest = redis.call('HGET', P .. ':m:' .. n, 'dg') or ''
  if size > cap then
    out[#out + 1] = {rows[j + 1], digest, size}
  else
    out[#out + 1] = {rows[j + 1], digest, size, redis.call('GET', key)}
  end
end
return out
""",
)

#: Every script, loaded with ``SCRIPT LOAD`` when the store first connects.
SCRIPTS: Final = (INDEX, DELETE, SETTLE, DISCOVER, READ, SEEK)

#: Every command the store and its scripts call: each must exist on the server (``COMMAND INFO``).
REQUIRED_COMMANDS: Final = (
    "eval",
    "evalsha",
    "script",
    "get",
    "set",
    "del",
    "incr",
    "strlen",
    "getrange",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hincrby",
    "hstrlen",
    "zadd",
    "zrem",
    "zcard",
    "zrange",
    "info",
)
