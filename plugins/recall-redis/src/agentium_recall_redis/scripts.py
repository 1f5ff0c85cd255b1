"""The Redis recall store's Lua scripts, and their SHA1 digests for ``EVALSHA``.

Each script touches the keys of one tenant only (one hash-tag slot; see
:mod:`agentium_recall_redis.keys`), and declares at least one of them in
``KEYS`` so a cluster client routes it to that slot. Lua scripts run
atomically on the server: nothing else runs between their commands.

The reading scripts (``DISCOVER``, ``READ``, ``SEEK``) are here; the
writing ones, bounded per call and checked before their first write, are in
:mod:`agentium_recall_redis.write_scripts`, and what they share in
:mod:`agentium_recall_redis.lua`. Every script that returns a source reads
its row hash first: postings without a row (a staged source not yet
published, a removed one not yet collected) are never returned and take no
place.

Numbers go into keys and scores through ``string.format`` (``%d`` / ``%.0f``):
Lua's ``tostring`` would write large numbers in exponent form.
"""

from __future__ import annotations

from typing import Final

from .lua import LAYOUT_CHECK, LEASE_MS, MODEL_KEY, TOKEN_TTL_MS, Script
from .text_blocks import BLOCK, DIGEST
from .write_scripts import (
    ABORT,
    BEGIN,
    COLLECT,
    COMMIT,
    DELETE,
    INDEX,
    SETTLE,
    STAGE,
    VECTORS,
    WRITE_SCRIPTS,
)

__all__ = [
    "ABORT",
    "BEGIN",
    "COLLECT",
    "COMMIT",
    "DELETE",
    "DIGEST_CAP",
    "DISCOVER",
    "FIELD_CAP",
    "HYBRID",
    "INDEX",
    "LEASE_MS",
    "MISSING",
    "READ",
    "REQUIRED_COMMANDS",
    "REVISION_CAP",
    "SCRIPTS",
    "SEEK",
    "SETTLE",
    "STAGE",
    "TOKEN_TTL_MS",
    "VECTORS",
    "VALIDATE",
    "Script",
]

#: The longest source id or owner key a row may hold (bytes). The longest the store
#: writes is a document's source id: six segments of at most 256 characters, each character escaped to at
#: most 12 bytes, about 18.5 KB. A longer field was written outside the store: the scripts read its
#: length (``HSTRLEN``) first and leave the row out, so such a field is never copied into a reply.
FIELD_CAP: Final = 32_768

#: The longest receipt digest ``SEEK`` fetches, and the longest revision or size field discovery reads:
#: ``sha256:`` and 64 hex digits. A longer one is damage: ``SEEK`` returns ``""`` instead (never
#: transferred), which the strict decode then refuses, and discovery leaves the row out.
DIGEST_CAP: Final = 71

#: The longest value of ``P:rev`` the store writes: a revision, or ``-`` and one (a deletion tombstone).
REVISION_CAP: Final = DIGEST_CAP + 1

# Whether row hash `key` holds each of `names` within `cap` bytes, read without copying any of them.
_WITHIN = (
    f"local FIELD_CAP, DIGEST_CAP = {FIELD_CAP}, {DIGEST_CAP}\n"
    + """
local function within(key, names, cap)
  for _, f in ipairs(names) do
    if redis.call('HSTRLEN', key, f) > cap then return false end
  end
  return true
end
"""
)

# Ranking, shared by lexical and hybrid discovery. For the terms ARGV[t0 + 1 .. t0 + nt] in the buckets
# of the owner keys ARGV[o0 + 1 .. o0 + no]: each term's newest `per` visible postings, of a row's own
# words (P:p) and of neighbouring context (P:x) merged by recency, each row scored
# sum(idf * (sat(tf) + CONTEXT * sat(ctf))) over the terms it holds, where sat(x) = x * (K1 + 1) / (x + K1)
# (bm25's saturation, no length norm), tf counts the term in the row's own text and ctf in its context
# (the edge lines of the groups before and after it: half weight, as the SQLite store's context column),
# with the weight it matched, sum(idf) (a term matched only through context counts: so it does in the
# SQLite store). idf is the smoothed ln(1 + (N - n + 0.5) / (n + 0.5)) over exact visible counts of
# rows holding the term in their own text (n at least 1: a word never seen weighs as a word seen once).
# A context posting (member "<n><" or "<n>>") belongs to the group before (after) its contributor, row
# n, found by seq in the bucket's group set; a contributor or neighbour that is not published is
# skipped. Returns every ranked row, best first, its score and matched weight, and the query's whole
# weight (for the relevance floor).
_RANK = """
local K1, CONTEXT = 1.2, 0.5
local function sat(x) return x * (K1 + 1) / (x + K1) end
local near = {}
-- The published group a context posting of bucket b belongs to, or false (cached per call).
local function neighbour(P, b, member)
  local id = b .. ' ' .. member
  local found = near[id]
  if found == nil then
    found = false
    local n, dir = string.sub(member, 1, -2), string.sub(member, -1)
    local seq = redis.call('HGET', P .. ':m:' .. n, 'seq')
    if seq and seq ~= '' then
      local s = tonumber(seq) + (dir == '<' and -1 or 1)
      local r = redis.call('ZRANGE', P .. ':g:' .. b, s, s, 'BYSCORE', 'LIMIT', 0, 1)
      if r[1] then found = r[1] end
    end
    near[id] = found
  end
  return found
end
local function rank(P, per, nt, t0, no, o0)
  local owners, buckets = {}, {}
  for i = 1, no do owners[i] = ARGV[o0 + i] end
  local found = redis.call('HMGET', P .. ':bk', unpack(owners))
  for i = 1, no do if found[i] then buckets[#buckets + 1] = found[i] end end
  local total, matched, order, weight = {}, {}, {}, 0
  if #buckets == 0 then return buckets, order, total, matched, weight end
  local counts = redis.call('HMGET', P .. ':bn', unpack(buckets))
  local N = 0
  for i = 1, #buckets do if counts[i] then N = N + tonumber(counts[i]) end end
  for t = 1, nt do
    local term = ARGV[t0 + t]
    local df, lists = 0, {}
    for _, b in ipairs(buckets) do
      local key = P .. ':p:' .. b .. ':' .. term
      local c = redis.call('ZCARD', key)
      if c > 0 then
        df = df + c
        lists[#lists + 1] = {b, false, redis.call('ZRANGE', key, 0, per - 1, 'REV', 'WITHSCORES')}
      end
      local x = redis.call('ZRANGE', P .. ':x:' .. b .. ':' .. term, 0, per - 1, 'REV', 'WITHSCORES')
      if #x > 0 then lists[#lists + 1] = {b, true, x} end
    end
    local n = math.max(df, 1)
    local idf = math.log(1 + (math.max(N, n) - n + 0.5) / (n + 0.5))
    weight = weight + idf
    if #lists > 0 then
      local merged = {}
      for _, l in ipairs(lists) do
        local b, ctx, items = l[1], l[2], l[3]
        for j = 1, #items, 2 do merged[#merged + 1] = {items[j], tonumber(items[j + 1]), b, ctx} end
      end
      -- One list is already newest first; several are merged by recency.
      if #lists > 1 then table.sort(merged, function(a, b) return a[2] > b[2] end) end
      local own, ctf, rows = {}, {}, {}
      for j = 1, math.min(per, #merged) do
        local e = merged[j]
        local r, tf = e[1], e[2] % 1024
        if e[4] then r = neighbour(P, e[3], r) end
        if r then
          if not own[r] then
            own[r], ctf[r] = 0, 0
            rows[#rows + 1] = r
          end
          if e[4] then ctf[r] = ctf[r] + tf else own[r] = own[r] + tf end
        end
      end
      for _, r in ipairs(rows) do
        if not total[r] then
          total[r], matched[r] = 0, 0
          order[#order + 1] = r
        end
        total[r] = total[r] + idf * (sat(own[r]) + CONTEXT * sat(ctf[r]))
        matched[r] = matched[r] + idf
      end
    end
  end
  table.sort(order, function(a, b)
    if total[a] ~= total[b] then return total[a] > total[b] end
    return tonumber(a) > tonumber(b)
  end)
  return buckets, order, total, matched, weight
end
"""

#: Rank visible sources. KEYS: P:bk. ARGV: P, max candidates, per-term cap, byte budget (-1: none),
#: term count, owner key count, relevance floor (a share of the query's weight, 0 to 1), longest title,
#: terms..., owner keys... Returns rows {sid, rev, title, size, owner key, score}, best first, each
#: matching at least the floor's share of the query's weight, within the byte budget. A row with a field
#: over FIELD_CAP or a title over the longest title was changed outside the store: left out, unread.
DISCOVER = Script(
    "discover",
    LAYOUT_CHECK
    + _WITHIN
    + _RANK
    + """
local P = ARGV[1]
if old_layout(P) then return layout_error() end
local maxc, per, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local nt, no, share, tmax = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local _, order, total, matched, weight = rank(P, per, nt, 8, no, 8 + nt)
-- A hair under the exact share, so a row matching every term passes at 1.
local floor = share * weight * (1 - 1e-9)
local out, spent = {}, 0
for i = 1, #order do
  if #out >= maxc then break end
  local n = order[i]
  if matched[n] >= floor then
    local key = P .. ':m:' .. n
    local m = {}
    if within(key, {'sid', 'o'}, FIELD_CAP) and within(key, {'rev', 'size'}, DIGEST_CAP) then
      m = redis.call('HMGET', key, 'sid', 'rev', 'size', 'o')
    end
    local tlen = redis.call('HSTRLEN', key, 'title')
    if m[1] and m[2] and m[3] and m[4] and tlen <= tmax then
      local cost = #m[1] + #m[2] + tlen
      if budget >= 0 and spent + cost > budget then break end
      spent = spent + cost
      local title = ''
      if tlen > 0 then title = redis.call('HGET', key, 'title') end
      out[#out + 1] = {m[1], m[2], title, m[3], m[4], string.format('%.17g', total[n])}
    end
  end
end
return out
""",
)

#: Hybrid discovery's candidates, in one call. KEYS: P:bk. ARGV: P, pool size, per-term cap, term count,
#: owner key count, relevance floor, model key, vector scan, title cap, longest vector, longest title,
#: terms..., owner keys...
#: The lexical pool is the ranking's best `pool` published rows (no floor applied, each flagged whether
#: it passes it); the vector scan the newest `scan` rows with a vector in the visible buckets (a merge of
#: at most 16 bucket sets by row number). Returns {rows, vectors}: rows is one JSON array (cjson) of
#: [n, sid, rev, size, owner key, title length, title (empty when longer than the title cap), vector
#: length (0: none), lexical score, passes the floor (1/0), in the lexical pool (1/0)], the pool's rows
#: first, best first, then the scan's; vectors is every row's vector concatenated, in row order. Two
#: bulk replies instead of ten per row: a reply of hundreds of rows otherwise costs redis-py's pure-Python
#: parser far more than the script's work. Refused when the tenant's vectors are of another model. A row
#: with a field over FIELD_CAP, a vector over the longest vector or a title over the longest title was
#: changed outside the store: left out, unread.
HYBRID = Script(
    "hybrid",
    LAYOUT_CHECK
    + MODEL_KEY
    + _WITHIN
    + _RANK
    + """
local P = ARGV[1]
if old_layout(P) then return layout_error() end
local pool, per, nt, no = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local share, model, scan, tcap = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local vmax, tmax = tonumber(ARGV[10]), tonumber(ARGV[11])
local have, vc = model_key(P), tonumber(redis.call('GET', P .. ':vc') or '0')
if have and have ~= model and vc and vc > 0 then
  return redis.error_reply('AGENTIUM_MODEL ' .. have .. ' | ' .. model)
end
local buckets, order, total, matched, weight = rank(P, per, nt, 11, no, 11 + nt)
local floor = share * weight * (1 - 1e-9)
local rows, blobs = {}, {}
-- Adds row n (published only, and for the scan only with a vector); whether it was added.
local function add(n, score, pass, lexical)
  local key = P .. ':m:' .. n
  if not (within(key, {'sid', 'o'}, FIELD_CAP) and within(key, {'rev', 'size'}, DIGEST_CAP)) then
    return false
  end
  if not within(key, {'vec'}, vmax) then
    return false
  end
  local tlen = redis.call('HSTRLEN', key, 'title')
  if tlen > tmax then return false end
  local m = redis.call('HMGET', key, 'sid', 'rev', 'size', 'o', 'vec')
  if not (m[1] and m[2] and m[3] and m[4]) then return false end
  if lexical == 0 and not m[5] then return false end
  local title = ''
  if tlen > 0 and tlen <= tcap then title = redis.call('HGET', key, 'title') end
  local vlen = 0
  if m[5] then
    vlen = #m[5]
    blobs[#blobs + 1] = m[5]
  end
  rows[#rows + 1] = {n, m[1], m[2], m[3], m[4], tlen, title, vlen, score, pass, lexical}
  return true
end
local taken, seen = 0, {}
for i = 1, #order do
  if taken >= pool then break end
  local n = order[i]
  local pass = 0
  if matched[n] >= floor then pass = 1 end
  if add(n, string.format('%.17g', total[n]), pass, 1) then
    taken = taken + 1
    seen[n] = true
  end
end
if vc and vc > 0 and scan > 0 then
  local newest = {}
  for _, b in ipairs(buckets) do
    local l = redis.call('ZRANGE', P .. ':vs:' .. b, 0, scan - 1, 'REV')
    for j = 1, #l do newest[#newest + 1] = tonumber(l[j]) end
  end
  if #buckets > 1 then table.sort(newest, function(a, b) return a > b end) end
  for j = 1, math.min(scan, #newest) do
    local n = string.format('%d', newest[j])
    if not seen[n] then add(n, '0', 0, 0) end
  end
end
if #rows == 0 then return {'[]', ''} end
return {cjson.encode(rows), table.concat(blobs)}
""",
)

#: Read texts at their revisions. KEYS: P:ids. ARGV: P, read cap (>= 1: max_read_bytes), excerpt cap
#: (>= 0: the caller's bytes per excerpt), byte budget (-1: none; the caller's remaining bytes), then
#: (sid, rev) pairs. A text whose excerpt can still take bytes (excerpt cap > 0, budget not spent) is
#: fetched up to the read cap, so its excerpt can be cut around the query's words wherever they are;
#: any other is fetched one block only (its size and first block, nothing of it can be shown). The
#: budget goes down by what the excerpt can take of it (the bytes fetched, at most the excerpt cap). So
#: a read transfers at most the read cap per ref its budgets leave room for, and one block per other
#: ref, whatever the texts' sizes. Returns per
#: ref {full size, the bytes fetched, the digests of the blocks read (nil: the row has no ``td``), the
#: length of the row's whole ``td``} or nil (unknown, deleted or at another revision).
READ = Script(
    "read",
    f"local BLOCK, DIGEST = {BLOCK}, {DIGEST}\n"
    + """
local P, cap, ecap, left = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for i = 5, #ARGV, 2 do
  local entry = false
  local n = redis.call('HGET', P .. ':ids', ARGV[i])
  local row = n and redis.call('HMGET', P .. ':m:' .. n, 'rev', 'td')
  if row and row[1] == ARGV[i + 1] then
    local key = P .. ':t:' .. n
    local want = cap
    if ecap <= 0 or left == 0 then want = 1 end
    local span = math.max(1, math.ceil(want / BLOCK)) * BLOCK
    local data = redis.call('GETRANGE', key, 0, span - 1)
    if left >= 0 then left = math.max(0, left - math.min(#data, ecap)) end
    local td = row[2]
    local digests = false
    if td then digests = string.sub(td, 1, DIGEST * math.ceil(#data / BLOCK)) end
    entry = {redis.call('STRLEN', key), data, digests, td and #td or 0}
  end
  out[#out + 1] = entry
end
return out
""",
)

#: Current revisions of sources, for validation. KEYS: P:rev. ARGV: longest revision, sids.... Returns
#: per sid its ``P:rev`` value (a revision, ``-<revision>`` once deleted), nil when it has none, or, when
#: the value is longer than any the store writes (changed outside it), its length as an integer: the
#: value itself is never copied into the reply.
VALIDATE = Script(
    "validate",
    """
local cap = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local size = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if size > cap then out[#out + 1] = size else out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
end
return out
""",
)

#: Seek a session's archived groups. KEYS: P:bk. ARGV: P, owner key, start seq, max groups (>= 1), cap.
#: Returns {seq, receipt digest, size[, canonical bytes]} ascending; bytes left out when size > cap, and
#: the digest "" (unread) when it is longer than DIGEST_CAP. A row whose owner field is not the owner key
#: (a group-set member edited to name another session's row) comes back as {seq, "", -1}, unread.
SEEK = Script(
    "seek",
    f"local DIGEST_CAP = {DIGEST_CAP}\n"
    + """
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
  if redis.call('HGET', P .. ':m:' .. n, 'o') ~= ARGV[2] then
    out[#out + 1] = {rows[j + 1], '', -1}
  else
    local size = redis.call('STRLEN', key)
    local digest = ''
    if redis.call('HSTRLEN', P .. ':m:' .. n, 'dg') <= DIGEST_CAP then
      digest = redis.call('HGET', P .. ':m:' .. n, 'dg') or ''
    end
    if size > cap then
      out[#out + 1] = {rows[j + 1], digest, size}
    else
      out[#out + 1] = {rows[j + 1], digest, size, redis.call('GET', key)}
    end
  end
end
return out
""",
)

#: Archived groups a session's index lacks. KEYS: P:bk. ARGV: P, owner key, end seq, max seqs, window,
#: start seq. Returns ascending seqs from start below end with no indexed group: at most max, all within
#: `window` seqs of the first one. Bounded: a binary search of ZCOUNTs for the first, then one ZRANGE
#: over the window.
MISSING = Script(
    "missing",
    """
local P = ARGV[1]
local stop, max, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local first = tonumber(ARGV[6] or '0')
local out = {}
if stop <= first or max <= 0 then return out end
local b = redis.call('HGET', P .. ':bk', ARGV[2])
local g = b and (P .. ':g:' .. b)
-- Indexed groups with seq in [first, hi]; seqs are distinct in a session's group set.
local function count(hi)
  if not g then return 0 end
  return redis.call('ZCOUNT', g, first, hi)
end
if count(stop - 1) >= stop - first then return out end
-- The first missing seq: the smallest s with fewer than s - first + 1 indexed groups in [first, s].
local lo, hi = first, stop - 1
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if count(mid) < mid - first + 1 then hi = mid else lo = mid + 1 end
end
local last = math.min(stop - 1, lo + window - 1)
local present = {}
if g then
  local rows = redis.call('ZRANGE', g, lo, last, 'BYSCORE', 'WITHSCORES')
  for j = 2, #rows, 2 do present[tonumber(rows[j])] = true end
end
for s = lo, last do
  if #out >= max then break end
  if not present[s] then out[#out + 1] = s end
end
return out
""",
)

#: Every script, loaded with ``SCRIPT LOAD`` when the store first connects.
SCRIPTS: Final = (*WRITE_SCRIPTS, DISCOVER, HYBRID, READ, SEEK, MISSING, VALIDATE)

#: Every command the store and its scripts call: each must exist on the server (``COMMAND INFO``).
REQUIRED_COMMANDS: Final = (
    "eval",
    "evalsha",
    "script",
    "get",
    "set",
    "del",
    "exists",
    "decr",
    "incr",
    "strlen",
    "getrange",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hincrby",
    "hstrlen",
    "hexists",
    "zadd",
    "zrem",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zscore",
    "rpush",
    "lrange",
    "llen",
    "ltrim",
    "type",
    "time",
    "info",
)
