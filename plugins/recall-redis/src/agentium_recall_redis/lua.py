"""What the Redis recall store's Lua scripts share: the :class:`Script` record and common Lua pieces.

The pieces are Lua source text, prepended to the writing scripts of
:mod:`agentium_recall_redis.write_scripts`:

- :data:`CHECK`: checking before writing. A Lua script is not a
  transaction: a command that fails part way leaves the writes before it in
  place. So every writing script first checks each key it will write (its
  type, and that a counter holds an integer) and only then writes; a check
  that fails raises before the first write. Messages name no key: keys hold
  tenant ids and words of the content.
- :data:`ROWS`: finding a source's current row (``current_row``: the row
  ``P:ids`` names only if it says it is the source's, else a group's row
  in its group set by seq), removing a row and collecting garbage, each split into a
  plan (reads and checks, phase 1) and its execution (writes, phase 2), so
  a script can plan everything before it writes anything. A removed row
  disappears at once (its row hash, text, group entry, bucket count and
  vector: the bucket's vector set and the tenant's vector count);
  its postings go in the same call when they fit the call's removal room,
  else its term list is queued on ``P:gc`` and collected in later calls, at
  most ``room`` postings per call. Postings without a row are invisible to
  readers (every script that returns rows reads the row hash first, and
  discovery skips a context posting whose lending row is gone). A row's
  postings are its own words (``P:p``) and, for a group, its edge lines as
  its neighbours' context (``P:x``): both leave with it.

Numbers go into keys and scores through ``string.format`` (``%d`` / ``%.0f``):
Lua's ``tostring`` would write large numbers in exponent form.
"""

from __future__ import annotations

import hashlib
from typing import Final

import attrs

__all__ = [
    "CHECK",
    "ERASED_LAYOUT",
    "IX",
    "LAYOUT",
    "LAYOUT_CHECK",
    "LEASE_MS",
    "MODEL_KEY",
    "ROWS",
    "TOKEN",
    "TOKEN_TTL_MS",
    "Script",
]

#: The key layout this version writes (``P:v``): 4, terms stemmed, archived groups indexed with their
#: neighbouring context (``P:x:<b>:<term>``) and every row with its text's block digests (``td``, what
#: reads check; :mod:`agentium_recall_redis.text_blocks`). Layout 3 (no ``td``), layout 1 (no ``P:v``,
#: terms unstemmed) and layout 2 (no
#: context) are refused.
LAYOUT: Final = 4
#: ``P:v`` of a layout-4 tenant once an erase of this version raised its fence on it (rows present): the
#: same data, read and written by this version as layout 4 and never set back, but refused by every older
#: version's layout check (which accepts ``4`` only) before its first write. Those versions' writers lack
#: checks this version's erase relies on (``COMMIT`` gives up a staging whose bucket its owner no longer
#: holds), so in a rolling upgrade an older writer is refused, typed, from an erase of this version on.
ERASED_LAYOUT: Final = 5

#: How long a write's settlement token lives: far longer than any write can stay in flight.
TOKEN_TTL_MS: Final = 600_000

#: The settlement token's preamble, for every script a write or erase settles once (KEYS[2] the token,
#: ARGV[1] the tenant prefix ``P``, ARGV[2] the token's ttl in ms): a call already settled returns
#: {'settled', value} before doing anything; ``done(result, more)`` records the call's result in the
#: token and returns {'ok', result, more}.
TOKEN: Final = """
local P = ARGV[1]
local settled = redis.call('GET', KEYS[2])
if settled then return {'settled', settled} end
local function done(result, more)
  redis.call('SET', KEYS[2], 'done:' .. result, 'PX', ARGV[2])
  return {'ok', result, more}
end
"""

#: How long a staged source (a source written over several calls) may take before it is abandoned and
#: its postings collected. A staged write that outlives it fails, having written nothing visible.
LEASE_MS: Final = 600_000


@attrs.frozen(slots=True)
class Script:
    """A Lua script's name, source and SHA1 (what ``SCRIPT LOAD`` returns for it)."""

    name: str
    source: str
    sha: str = attrs.field(init=False)

    @sha.default
    def _sha(self) -> str:
        return hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()


#: The key layout check, for every script that ranks or adds postings: a tenant with rows (``P:n``) whose
#: ``P:v`` is not :data:`LAYOUT` was written by an earlier version of the store (layout 1, no ``P:v``:
#: terms unstemmed; layout 2: groups without neighbouring context; layout 3: rows without block
#: digests, whose texts reads cannot check); it is refused (the client raises
#: ``RedisRecallLayoutError``), never mixed with this layout's postings. ``LAYOUT`` is the Lua string
#: the writing scripts store in ``P:v``.
LAYOUT_CHECK: Final = (
    f"local LAYOUT, ERASED_LAYOUT = '{LAYOUT}', '{ERASED_LAYOUT}'\n"
    + """
-- Layout 4, or layout 4 marked by an erase of this version (lua.py's ERASED_LAYOUT): the same data.
local function layout_ok(v) return v == LAYOUT or v == ERASED_LAYOUT end
local function old_layout(P)
  return redis.call('EXISTS', P .. ':n') == 1 and not layout_ok(redis.call('GET', P .. ':v'))
end
local function layout_error()
  return redis.error_reply('AGENTIUM_LAYOUT the tenant index was written by an earlier version of the store')
end
"""
)

#: The tenant's vector model key (``P:vm``), or false when it has none. At most its first 2 KiB are read:
#: a key is ``"<model>/<dimension>"``, a model id at most 256 characters (1 KiB of UTF-8), so a longer
#: value (grown behind the store's back) differs from every model and is refused as a mismatch, and the
#: error reply that names it stays one short line (redis-py refuses a longer one with a bare ValueError).
MODEL_KEY: Final = """
local function model_key(P)
  local have = redis.call('GETRANGE', P .. ':vm', 0, 2047)
  if have == '' and redis.call('EXISTS', P .. ':vm') == 0 then return false end
  return have
end
"""

CHECK: Final = (
    LAYOUT_CHECK
    + MODEL_KEY
    + """
local checked = {}
local function refuse(what)
  error('WRONGTYPE ' .. what .. ' under the key prefix holds another type of value')
end
local function type_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
local function need(key, kind)
  if checked[key] then return end
  local t = type_of(key)
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
local function fmt(x) return string.format('%d', x) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Whether an erasure covering owner key `okey` is running: the erasure fence P:ef (field: an owner-key
-- prefix, "" for the tenant, "u/", "u/s/", or a session's own key "u/s/~/~" for a groups target; value:
-- when the fence ends, server time in ms) holds an unexpired field the owner key starts with. A write
-- it covers is refused before its first write (``erasing_error``): landing after the erasure read the
-- rows, it would leave erased words searchable.
local fence_kind = nil  -- P:ef's type, read once per call (a batch checks each of its sources)
local function erasing(P, okey)
  fence_kind = fence_kind or type_of(P .. ':ef')
  if fence_kind == 'none' then return false end
  if fence_kind ~= 'hash' then refuse('a key') end
  local fields = {'', okey}
  local u, s = string.match(okey, '^([^/]*)/([^/]*)/')
  if u then
    fields[3] = u .. '/'
    fields[4] = u .. '/' .. s .. '/'
  end
  local now = nil
  for _, v in ipairs(redis.call('HMGET', P .. ':ef', unpack(fields))) do
    if v then
      now = now or now_ms()
      local ends = tonumber(v)
      if ends and ends > now then return true end
    end
  end
  return false
end
local function erasing_error()
  return redis.error_reply('AGENTIUM_ERASING an erasure of this owner is running')
end
-- A term-list entry names one posting of row n in bucket b: a word of the row's own text ('term': key
-- P:p:b:term, member n) or of one of its edge lines, which is neighbouring context of the group before
-- it ('<term': its first line) or after it ('>term': its last line), in key P:x:b:term, member n .. '<'
-- or n .. '>'. Encoded terms never start with '<' or '>'.
local function posting(P, b, n, entry)
  local c = string.sub(entry, 1, 1)
  if c == '<' or c == '>' then return P .. ':x:' .. b .. ':' .. string.sub(entry, 2), n .. c end
  return P .. ':p:' .. b .. ':' .. entry, n
end
-- Postings of row n in bucket b for the entries ARGV[t0], ARGV[t0 + 2], ... with their tf after each.
local function need_postings(P, b, t0, nt)
  for k = 0, nt - 1 do need((posting(P, b, '', ARGV[t0 + 2 * k])), 'zset') end
end
local function add_postings(P, b, n, t0, nt)
  local score, list, terms = tonumber(n) * 1024, P .. ':k:' .. n, {}
  for k = 0, nt - 1 do
    local term = ARGV[t0 + 2 * k]
    local tf = tonumber(ARGV[t0 + 2 * k + 1])
    if tf > 1023 then tf = 1023 end
    local key, member = posting(P, b, n, term)
    redis.call('ZADD', key, string.format('%.0f', score + tf), member)
    terms[#terms + 1] = term
    if #terms == 512 then
      redis.call('RPUSH', list, unpack(terms))
      terms = {}
    end
  end
  if #terms > 0 then redis.call('RPUSH', list, unpack(terms)) end
end
local function backlog(P)
  if type_of(P .. ':gc') == 'list' then return redis.call('LLEN', P .. ':gc') end
  return 0
end
"""
)

#: The erasure index (``P:is:<p>``, ``P:ir:<p>``; :mod:`agentium_recall_redis.erase_index`): the keys of a
#: source's owner-key prefixes ``<user>/`` and ``<user>/<session>/`` (``p``), which a user's or a session's
#: erasure reads instead of walking the tenant. ``ix_keys(P, kind, okey, sid)`` gives the distinct keys
#: ``P:<kind>:<p>`` of the prefixes an owner key ``u/s/p/r`` and a source id name (an absent user, ``~``,
#: none; an absent session, only the user's). Encoded segments hold no ``/`` or ``~``, so each key is one
#: user's or one session's. ``fresh_tenant(P)``: nothing of the tenant is stored yet, so every row it will
#: hold is written with its entries and the tenant can be marked indexed (``P:ixm``) at once.
IX: Final = """
local function ix_prefixes(okey, out)
  local u, s = string.match(okey or '', '^([^/]+)/([^/]+)/')
  if u and u ~= '~' then
    out[#out + 1] = u .. '/'
    if s ~= '~' then out[#out + 1] = u .. '/' .. s .. '/' end
  end
end
local function sid_okey(sid)
  local u, s = string.match(sid or '', '^doc/[^/]*/([^/]+)/([^/]+)/')
  if not u then u, s = string.match(sid or '', '^group/[^/]*/([^/]+)/([^/]+)/') end
  if not u then return '' end
  return u .. '/' .. s .. '/'
end
local function ix_keys(P, kind, okey, sid)
  local prefixes, out, seen = {}, {}, {}
  ix_prefixes(okey, prefixes)
  ix_prefixes(sid_okey(sid), prefixes)
  for _, p in ipairs(prefixes) do
    local key = P .. ':' .. kind .. ':' .. p
    if not seen[key] then
      seen[key] = true
      out[#out + 1] = key
    end
  end
  return out
end
local function fresh_tenant(P)
  return redis.call('EXISTS', P .. ':n', P .. ':ids', P .. ':rev', P .. ':rows') == 0
end
"""

ROWS: Final = (
    IX
    + """
-- The current row of source `sid` (owner key `okey`; a group's `seq`, '' for a document): the row P:ids
-- names, if that row says it is the source's (its id or its owner field: either vouches, so one field
-- edited behind the store's back still finds it), else, for a group, a row the owner's group set files
-- at that seq that says so. An ids entry edited to name another owner's row must never make a write
-- replace or delete that row, and must not hide the group's own row from the write that replaces it.
-- nil when there is none.
local function current_row(P, sid, okey, seq)
  local function says(n)
    local f = redis.call('HMGET', P .. ':m:' .. n, 'o', 'sid')
    return f[1] == okey or f[2] == sid
  end
  local n = redis.call('HGET', P .. ':ids', sid)
  if n and says(n) then return n end
  if not seq or seq == '' or type_of(P .. ':bk') ~= 'hash' then return nil end
  local b = redis.call('HGET', P .. ':bk', okey)
  if not b or type_of(P .. ':g:' .. b) ~= 'zset' then return nil end
  for _, m in ipairs(redis.call('ZRANGE', P .. ':g:' .. b, seq, seq, 'BYSCORE', 'LIMIT', 0, 16)) do
    if says(m) then return m end
  end
  return nil
end
-- Removing row n (bucket b, kind) of a source. Its term list is P:k:n; a row written before term lists
-- existed keeps its terms in the row hash ('legacy') and is removed whole, as it always was.
local function plan_drop(P, n, b, kind, legacy, room)
  -- Out of the tenant's row set too, when it is one (a set damaged to another type must never stop a
  -- removal, least of all an erasure's: the sweep reads it only when it is a sorted set).
  local d = {n = n, b = b, kind = kind, later = false, terms = {}, listed = type_of(P .. ':rows') == 'zset'}
  -- Out of the erasure index's row sets of its owner key and of its id (both, so one of them edited
  -- behind the store's back still takes it out of the set it was written to); best effort, as above.
  local f = redis.call('HMGET', P .. ':m:' .. n, 'o', 'sid')
  d.ix = {}
  for _, key in ipairs(ix_keys(P, 'ir', f[1], f[2])) do
    if type_of(key) == 'zset' then d.ix[#d.ix + 1] = key end
  end
  local list = P .. ':k:' .. n
  need(list, 'list')
  if legacy then
    for term in string.gmatch(legacy, '%S+') do d.terms[#d.terms + 1] = term end
  elseif redis.call('LLEN', list) <= room then
    d.terms = redis.call('LRANGE', list, 0, -1)
  else
    d.later = true
    need(P .. ':gc', 'list')
  end
  for _, term in ipairs(d.terms) do need((posting(P, b, n, term)), 'zset') end
  -- Out of the bucket's group set whatever the row's kind field says (damaged, it must not keep a
  -- removed group listed there); a document was never in it, and ZREM of it is a no-op.
  need(P .. ':g:' .. b, 'zset')
  need_count(P, b)
  -- Its vector goes with it: out of the bucket's vector set and the tenant's vector count.
  d.vec = redis.call('HEXISTS', P .. ':m:' .. n, 'vec') == 1
  if d.vec then
    need(P .. ':vs:' .. b, 'zset')
    need(P .. ':vc', 'string')
    need_int(redis.call('GET', P .. ':vc'))
  end
  return d, #d.terms
end
local function drop(P, d)
  for _, term in ipairs(d.terms) do redis.call('ZREM', posting(P, d.b, d.n, term)) end
  redis.call('ZREM', P .. ':g:' .. d.b, d.n)
  if d.vec then
    redis.call('ZREM', P .. ':vs:' .. d.b, d.n)
    redis.call('DECR', P .. ':vc')
  end
  redis.call('DEL', P .. ':m:' .. d.n, P .. ':t:' .. d.n, P .. ':c:' .. d.n)
  if d.listed then redis.call('ZREM', P .. ':rows', d.n) end
  for _, key in ipairs(d.ix) do redis.call('ZREM', key, d.n) end
  if d.later then
    redis.call('RPUSH', P .. ':gc', d.b .. ' ' .. d.n)
  else
    redis.call('DEL', P .. ':k:' .. d.n)
  end
  redis.call('HINCRBY', P .. ':bn', d.b, -1)
end
-- Collecting garbage: staged rows whose lease ran out are queued, then up to `room` postings of queued
-- rows are removed, oldest first. Best effort: a key of another type is skipped, never an error, so
-- damage in the garbage can never stop a write.
local function plan_collect(P, room)
  local c = {reap = {}, zrem = {}, trim = nil, dels = {}, pops = 0}
  local gc = type_of(P .. ':gc')
  if gc ~= 'list' and gc ~= 'none' then return c end
  if type_of(P .. ':pend') == 'zset' then
    c.reap = redis.call('ZRANGEBYSCORE', P .. ':pend', '-inf', now_ms(), 'LIMIT', 0, 16)
  end
  if gc == 'none' then return c end
  for _, entry in ipairs(redis.call('LRANGE', P .. ':gc', 0, 63)) do
    if room <= 0 then break end
    local b, n = string.match(entry, '^(%d+) (%d+)$')
    if b then
      local list = P .. ':k:' .. n
      local len, ours = 0, type_of(list) == 'list'
      if ours then len = redis.call('LLEN', list) end
      local take = math.min(len, room)
      if take > 0 then
        for _, term in ipairs(redis.call('LRANGE', list, 0, take - 1)) do
          local key, member = posting(P, b, n, term)
          if type_of(key) == 'zset' then c.zrem[#c.zrem + 1] = {key, member} end
        end
      end
      room = room - take
      if take < len then
        c.trim = {list, take}
        break
      end
      if ours then c.dels[#c.dels + 1] = list end
    end
    c.pops = c.pops + 1
  end
  return c
end
local function collect(P, c)
  for _, z in ipairs(c.zrem) do redis.call('ZREM', z[1], z[2]) end
  if c.trim then redis.call('LTRIM', c.trim[1], c.trim[2], -1) end
  for _, list in ipairs(c.dels) do redis.call('DEL', list) end
  if c.pops > 0 then redis.call('LTRIM', P .. ':gc', c.pops, -1) end
  for _, member in ipairs(c.reap) do
    redis.call('ZREM', P .. ':pend', member)
    redis.call('RPUSH', P .. ':gc', member)
  end
end
"""
)
