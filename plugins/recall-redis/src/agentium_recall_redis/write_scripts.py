"""The Redis recall store's writing Lua scripts: bounded per call, checked before the first write.

Every script touches one tenant's keys (one hash-tag slot) and runs
atomically. Each first plans: it reads and checks every key it will write
(:data:`~agentium_recall_redis.lua.CHECK`), and only then writes, so a
refusal or a foreign key of the wrong type changes nothing.

Work per call is bounded by ``room`` (the store's ``max_terms_per_call``): a
call adds at most ``room`` postings and removes at most ``room`` (the
replaced or deleted row's, when they fit, then queued garbage).

- ``INDEX`` writes a batch of sources whose terms fit one call together.
- A source with more terms is **staged**: ``BEGIN`` allocates its row and
  adds the first slice of postings, ``STAGE`` adds one slice each, and
  ``COMMIT`` publishes the row (row hash, text, ids, revision) and removes
  the old one in one atomic step. Until ``COMMIT`` the staged postings have
  no row, so readers see the old version whole; after it, the new one whole.
  A staged row holds a lease in ``P:pend``; ``ABORT`` gives it up, and one
  whose lease ran out is collected as garbage.
- ``DELETE`` removes one source, ``COLLECT`` only collects garbage.
- ``VECTORS`` stores the vectors of published rows (hybrid recall); a
  removed or replaced row loses its vector in the call that removes it.

Each writing call but ``ABORT`` and ``COLLECT`` (which are safe to repeat)
carries a one-time token (``KEYS[2]``): a script whose token is already
settled does nothing, and the token records the outcome. After a write
loses its reply the store never re-sends it; ``SETTLE`` reads the token and,
if the write has not run, fences it, so a copy of it still in flight can
never apply later.
"""

from __future__ import annotations

from typing import Final

from .lua import CHECK, ROWS, TOKEN, Script

__all__ = [
    "ABORT",
    "BEGIN",
    "COLLECT",
    "COMMIT",
    "DELETE",
    "INDEX",
    "SETTLE",
    "STAGE",
    "VECTORS",
    "WRITE_SCRIPTS",
]

# Writing a row's hash, text and canonical bytes, and making it the source's current row.
_PUBLISH = """
local function publish(P, n, b, src)
  redis.call('HSET', P .. ':m:' .. n, 'sid', src.sid, 'rev', src.rev, 'title', src.title,
             'size', string.format('%d', #src.text), 'o', src.okey, 'b', b, 'kind', src.kind,
             'seq', src.seq, 'dg', src.dg, 'td', src.td)
  redis.call('SET', P .. ':t:' .. n, src.text)
  -- Listed with the tenant's rows, so an erasure's sweep finds it even when the row counter is damaged.
  redis.call('ZADD', P .. ':rows', n, n)
  -- Listed in the erasure index of its user and session, so their erasures read only their own rows.
  for _, key in ipairs(ix_keys(P, 'is', '', src.sid)) do redis.call('ZADD', key, 0, src.sid) end
  for _, key in ipairs(ix_keys(P, 'ir', src.okey, src.sid)) do redis.call('ZADD', key, n, n) end
  if src.kind == 'g' then
    redis.call('SET', P .. ':c:' .. n, src.canon)
    redis.call('ZADD', P .. ':g:' .. b, src.seq, n)
  end
  redis.call('HSET', P .. ':ids', src.sid, n)
  redis.call('HSET', P .. ':rev', src.sid, src.rev)
  redis.call('HINCRBY', P .. ':bn', b, 1)
end
-- Whether row number n is in use: its row hash, text, canonical bytes or term list (a staged row) exists.
local function in_use(P, n)
  local s = fmt(n)
  return redis.call('EXISTS', P .. ':m:' .. s, P .. ':t:' .. s, P .. ':c:' .. s, P .. ':k:' .. s) > 0
end
-- The number of a new row after `last` (the counter's value, or the previous new row of this call): past
-- the tenant's highest listed row and never a number in use. The counter alone would do if nothing edited
-- it; lowered behind the store's back, it made a write take a live row's number and overwrite that row.
-- Only a listed row that is one counts (member and score the same whole number, its keys there): a junk
-- entry of the set made a write take its number, setting the counter there, and every later erase's
-- sweep then walked up to it (10^14 numbers, never ending). Past a number in use, the next tries are 1,
-- 2, 4, ... further (any free number will do): a counter lowered below many live rows costs a write a
-- few dozen lookups at most, not one per row.
local top_read = false
local function next_row(P, last)
  -- A row number is 1 to 15 digits, what the erase sweep reads: a counter damaged past 15 digits made a
  -- write take row 10^15 + 1 (past 2^53, numbers Lua cannot hold exactly), which no sweep reads (an
  -- erasure reported complete with its text left); it is refused, as a counter that is not a number is.
  -- One damaged to a negative value (which took row -4) counts from 0, as a deleted one does.
  local n = math.max(last, 0) + 1
  if n >= 1e15 then refuse('a counter') end
  if not top_read and type_of(P .. ':rows') == 'zset' then  -- once a call: later rows come after it
    top_read = true
    local top = redis.call('ZREVRANGEBYSCORE', P .. ':rows', '(1000000000000000', fmt(n), 'WITHSCORES',
                           'LIMIT', 0, 8)
    for j = 1, #top, 2 do
      local score = tonumber(top[j + 1])
      if score == math.floor(score) and top[j] == fmt(score) and in_use(P, score) then
        n = score + 1
        break
      end
    end
  end
  local step = 1
  while in_use(P, n) do
    n = n + step
    step = step * 2
    if n >= 1e15 then refuse('a counter') end
  end
  return n
end
local function need_publish(P, n, b, src)
  need(P .. ':m:' .. n, 'hash')
  need(P .. ':rows', 'zset')
  for _, key in ipairs(ix_keys(P, 'is', '', src.sid)) do need(key, 'zset') end
  for _, key in ipairs(ix_keys(P, 'ir', src.okey, src.sid)) do need(key, 'zset') end
  if src.kind == 'g' then need(P .. ':g:' .. b, 'zset') end
  need_count(P, b)
end
-- An erase takes P:kb's owner of a staging's bucket, once P:bk confirms it, for the bucket's only owner
-- (erase_stagings). So a write never files an owner under a bucket P:kb gives another owner, nor makes a
-- "new" bucket whose number is in use (P:bk edited, or P:nb lowered: damage): that owner's stagings would
-- then be left by its own erase. Refused before the first write.
local function bucket_mine(P, b, okey, newb)
  local o = redis.call('HGET', P .. ':kb', b)
  if (o and o ~= okey) or (newb and redis.call('HEXISTS', P .. ':bn', b) == 1) then
    error('a bucket of the tenant bucket map is filed under another owner (damaged; nothing written)')
  end
end
"""

_PRELUDE = CHECK + ROWS + TOKEN + _PUBLISH

#: Index a batch of sources. KEYS: P:ids, token. ARGV: P, token ttl, room, count, then per source sid,
#: rev, kind (d|g), owner key, title, text, canonical bytes, seq, receipt digest, block digests, term
#: count, (term, tf)*.
#: The client keeps the batch's terms within room. Returns {'ok', fresh, garbage backlog} or
#: {'settled', token value}.
INDEX = Script(
    "index",
    _PRELUDE
    + """
local room, count = tonumber(ARGV[3]), tonumber(ARGV[4])
local plan, i = {}, 5
for s = 1, count do
  plan[s] = {sid = ARGV[i], rev = ARGV[i + 1], kind = ARGV[i + 2], okey = ARGV[i + 3], title = ARGV[i + 4],
             text = ARGV[i + 5], canon = ARGV[i + 6], seq = ARGV[i + 7], dg = ARGV[i + 8], td = ARGV[i + 9],
             nt = tonumber(ARGV[i + 10]), t0 = i + 11}
  i = i + 11 + 2 * plan[s].nt
end
-- Phase 1: read and check everything; no write before phase 2.
for _, key in ipairs({':ids', ':rev', ':bk', ':kb', ':bn'}) do need(P .. key, 'hash') end
need(P .. ':n', 'string')
need(P .. ':nb', 'string')
need(P .. ':v', 'string')
if old_layout(P) then return layout_error() end
for s = 1, count do
  if erasing(P, plan[s].okey) then return erasing_error() end
end
local new_layout = not layout_ok(redis.call('GET', P .. ':v'))  -- an erase's mark stays
need(P .. ':ixm', 'string')
local empty_tenant = fresh_tenant(P)  -- nothing stored yet: every row of the tenant is in the erasure index
local lastv, nbv = redis.call('GET', P .. ':n'), redis.call('GET', P .. ':nb')
need_int(lastv)
need_int(nbv)
local last, nb, nb0 = tonumber(lastv or '0'), tonumber(nbv or '0'), tonumber(nbv or '0')
local buckets, out = {}, room
for s = 1, count do
  local src = plan[s]
  local cur = current_row(P, src.sid, src.okey, src.kind == 'g' and src.seq or '')
  if cur then
    local old = redis.call('HMGET', P .. ':m:' .. cur, 'rev', 'b', 'kind', 'terms')
    if old[1] == src.rev then
      src.same = true
    elseif old[2] then
      local used
      src.drop, used = plan_drop(P, cur, old[2], old[3], old[4], out)
      out = out - used
    end
  end
  if not src.same then
    local b = buckets[src.okey] or redis.call('HGET', P .. ':bk', src.okey)
    if not b then
      nb = nb + 1
      b = fmt(nb)
      src.newb = true
    end
    if not buckets[src.okey] then bucket_mine(P, b, src.okey, src.newb) end
    buckets[src.okey] = b
    last = next_row(P, last)
    src.b, src.n = b, fmt(last)
    need(P .. ':k:' .. src.n, 'list')
    need_postings(P, b, src.t0, src.nt)
    need_publish(P, src.n, b, src)
  end
end
local c = plan_collect(P, out)
-- Phase 2: write.
local fresh = 0
for s = 1, count do
  local src = plan[s]
  if not src.same then
    if src.drop then drop(P, src.drop) end
    if src.newb then  -- the bucket, and its reverse entry (the erase finds a staging's owner by it)
      redis.call('HSET', P .. ':bk', src.okey, src.b)
      redis.call('HSET', P .. ':kb', src.b, src.okey)
    end
    redis.call('DEL', P .. ':k:' .. src.n)
    add_postings(P, src.b, src.n, src.t0, src.nt)
    publish(P, src.n, src.b, src)
    fresh = fresh + 1
  end
end
redis.call('SET', P .. ':n', fmt(last))
if nb ~= nb0 then redis.call('SET', P .. ':nb', fmt(nb)) end
if new_layout then redis.call('SET', P .. ':v', LAYOUT) end
if empty_tenant then
  redis.call('SET', P .. ':ixm', '1')
  redis.call('SET', P .. ':rb', '0')  -- every row from the first is listed in P:rows (erase_walk)
end
collect(P, c)
return done(fmt(fresh), backlog(P))
""",
)

#: Delete one source of a kind. KEYS: P:ids, token. ARGV: P, token ttl, sid, kind, room, owner key. Only
#: the source's own row goes (``current_row``): an ids entry naming another owner's row deletes nothing.
#: Leaves the revision tombstone ``-<revision>`` in P:rev. Returns {'ok', '1'|'0', backlog} or
#: {'settled', value}.
DELETE = Script(
    "delete",
    _PRELUDE
    + """
local sid, room = ARGV[3], tonumber(ARGV[5])
local n = current_row(P, sid, ARGV[6] or '', '')
local d, old, used = nil, nil, 0
if n then
  old = redis.call('HMGET', P .. ':m:' .. n, 'rev', 'b', 'kind', 'terms')
  if old[3] == ARGV[4] and old[1] and old[2] then
    need(P .. ':rev', 'hash')
    d, used = plan_drop(P, n, old[2], old[3], old[4], room)
  end
end
local c = plan_collect(P, room - used)
local result = '0'
if d then
  drop(P, d)
  redis.call('HDEL', P .. ':ids', sid)
  redis.call('HSET', P .. ':rev', sid, '-' .. old[1])
  result = '1'
end
collect(P, c)
return done(result, backlog(P))
""",
)

#: Begin staging a source too large for one call. KEYS: P:ids, token. ARGV: P, token ttl, lease ms,
#: sid, rev, owner key, term count, (term, tf)*. Returns {'ok', 'same'} when the source already holds
#: this revision, else {'ok', '<bucket> <row>'}: the staged row's member in P:pend.
BEGIN = Script(
    "begin",
    _PRELUDE
    + """
local sid, rev, okey, nt = ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
need(P .. ':ids', 'hash')
if erasing(P, okey) then return erasing_error() end
local cur = current_row(P, sid, okey, '')
if cur and redis.call('HGET', P .. ':m:' .. cur, 'rev') == rev then return done('same') end
need(P .. ':bk', 'hash')
need(P .. ':kb', 'hash')
need(P .. ':pend', 'zset')
-- What COMMIT will write, checked now: found only then, the write failed after this call had taken a
-- row number and written a slice of postings.
for _, key in ipairs({':rev', ':bn'}) do need(P .. key, 'hash') end
need(P .. ':gc', 'list')
need(P .. ':rows', 'zset')
need(P .. ':n', 'string')
need(P .. ':nb', 'string')
need(P .. ':v', 'string')
if old_layout(P) then return layout_error() end
local lastv, nbv = redis.call('GET', P .. ':n'), redis.call('GET', P .. ':nb')
need_int(lastv)
need_int(nbv)
need(P .. ':ixm', 'string')
local empty_tenant = fresh_tenant(P)  -- nothing stored yet: every row of the tenant is in the erasure index
local b = redis.call('HGET', P .. ':bk', okey)
local newb = not b
if newb then b = fmt(tonumber(nbv or '0') + 1) end
bucket_mine(P, b, okey, newb)
local n = fmt(next_row(P, tonumber(lastv or '0')))
need(P .. ':k:' .. n, 'list')
need_postings(P, b, 8, nt)
local expires = now_ms() + tonumber(ARGV[3])
if newb then
  redis.call('SET', P .. ':nb', b)
  redis.call('HSET', P .. ':bk', okey, b)
  redis.call('HSET', P .. ':kb', b, okey)  -- the reverse entry (erase_stagings)
end
redis.call('SET', P .. ':n', n)
if not layout_ok(redis.call('GET', P .. ':v')) then redis.call('SET', P .. ':v', LAYOUT) end  -- mark stays
if empty_tenant then
  redis.call('SET', P .. ':ixm', '1')
  redis.call('SET', P .. ':rb', '0')  -- every row from the first is listed in P:rows (erase_walk)
end
redis.call('ZADD', P .. ':pend', expires, b .. ' ' .. n)
redis.call('DEL', P .. ':k:' .. n)
add_postings(P, b, n, 8, nt)
return done(b .. ' ' .. n)
""",
)

#: Add one slice of a staged source's postings. KEYS: P:ids, token. ARGV: P, token ttl, member,
#: term count, (term, tf)*. Returns {'ok', 'ok'}, or {'ok', 'gone'} when the staging's lease was lost.
STAGE = Script(
    "stage",
    _PRELUDE
    + """
local member, nt = ARGV[3], tonumber(ARGV[4])
need(P .. ':pend', 'zset')
if not redis.call('ZSCORE', P .. ':pend', member) then return done('gone') end
local b, n = string.match(member, '^(%d+) (%d+)$')
need(P .. ':k:' .. n, 'list')
need_postings(P, b, 5, nt)
add_postings(P, b, n, 5, nt)
return done('ok')
""",
)

#: Publish a staged source. KEYS: P:ids, token. ARGV: P, token ttl, room, member, term count staged in
#: all, sid, rev, kind, owner key, title, text, canonical bytes, seq, receipt digest, block digests.
#: Returns {'ok', '1'|'0'|'gone'|'short', backlog}: '0' when the source holds this revision already (the
#: staging is given up), 'gone' when its lease was lost or its bucket is no longer its owner's (an erase
#: dropped it; the staging is given up), 'short' when not every slice has been staged yet (nothing done).
COMMIT = Script(
    "commit",
    _PRELUDE
    + """
local room, member, total = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local src = {sid = ARGV[6], rev = ARGV[7], kind = ARGV[8], okey = ARGV[9], title = ARGV[10], text = ARGV[11],
             canon = ARGV[12], seq = ARGV[13], dg = ARGV[14], td = ARGV[15]}
need(P .. ':pend', 'zset')
if not redis.call('ZSCORE', P .. ':pend', member) then return done('gone', backlog(P)) end
if erasing(P, src.okey) then return erasing_error() end
local b, n = string.match(member, '^(%d+) (%d+)$')
need(P .. ':k:' .. n, 'list')
-- Publish only a whole staging: a slice sent in another round trip may not have run yet.
if redis.call('LLEN', P .. ':k:' .. n) ~= total then return done('short', backlog(P)) end
for _, key in ipairs({':ids', ':rev', ':bn', ':bk'}) do need(P .. key, 'hash') end
need(P .. ':gc', 'list')
-- Only into a bucket its owner still holds: an erase drops a bucket it empties (bk, kb, bn), and a staging
-- begun in a lapse of its fence would publish into a bucket no owner holds (recall never reads it).
if redis.call('HGET', P .. ':bk', src.okey) ~= b then
  redis.call('ZREM', P .. ':pend', member)
  redis.call('RPUSH', P .. ':gc', member)
  return done('gone', backlog(P))
end
local cur = current_row(P, src.sid, src.okey, src.kind == 'g' and src.seq or '')
local d, used = nil, 0
if cur then
  local old = redis.call('HMGET', P .. ':m:' .. cur, 'rev', 'b', 'kind', 'terms')
  if old[1] == src.rev then  -- the same content is current already: give the staged row up
    redis.call('ZREM', P .. ':pend', member)
    redis.call('RPUSH', P .. ':gc', member)
    return done('0', backlog(P))
  elseif old[2] then
    d, used = plan_drop(P, cur, old[2], old[3], old[4], room)
  end
end
need_publish(P, n, b, src)
local c = plan_collect(P, room - used)
if d then drop(P, d) end
redis.call('ZREM', P .. ':pend', member)
publish(P, n, b, src)
collect(P, c)
return done('1', backlog(P))
""",
)

#: Store vectors of published rows. KEYS: P:ids, token. ARGV: P, token ttl, model key
#: ("<model>/<dimension>"), count, then (sid, rev, vector bytes)*. A vector is stored only if its source's
#: current row is at that revision (a stale one is skipped) and replaces the row's previous vector. The
#: tenant holds vectors of one model (P:vm, with their count in P:vc): vectors of another model while any
#: are stored are refused before the first write. Returns {'ok', stored} or {'settled', value}.
VECTORS = Script(
    "vectors",
    CHECK
    + TOKEN
    + """
local model, count = ARGV[3], tonumber(ARGV[4])
need(P .. ':ids', 'hash')
need(P .. ':vm', 'string')
need(P .. ':vc', 'string')
if old_layout(P) then return layout_error() end
local vcv = redis.call('GET', P .. ':vc')
need_int(vcv)
local have, vc = model_key(P), tonumber(vcv or '0')
if have and have ~= model and vc > 0 then
  return redis.error_reply('AGENTIUM_MODEL ' .. have .. ' | ' .. model)
end
local plan = {}
for s = 0, count - 1 do
  local sid, rev = ARGV[5 + 3 * s], ARGV[6 + 3 * s]
  local n = redis.call('HGET', P .. ':ids', sid)
  if n then
    local key = P .. ':m:' .. n
    local row = redis.call('HMGET', key, 'rev', 'b')
    if row[1] == rev and row[2] then
      need(key, 'hash')
      need(P .. ':vs:' .. row[2], 'zset')
      plan[#plan + 1] = {key = key, n = n, b = row[2], blob = ARGV[7 + 3 * s],
                         fresh = redis.call('HEXISTS', key, 'vec') == 0}
    end
  end
end
for _, v in ipairs(plan) do
  redis.call('HSET', v.key, 'vec', v.blob)
  redis.call('ZADD', P .. ':vs:' .. v.b, v.n, v.n)
  if v.fresh then vc = vc + 1 end
end
if #plan > 0 then
  if have ~= model then redis.call('SET', P .. ':vm', model) end
  redis.call('SET', P .. ':vc', fmt(vc))
end
return done(fmt(#plan))
""",
)

#: Give up a staged source (idempotent; no token). KEYS: P:pend. ARGV: P, member. Its postings are
#: queued as garbage. Returns the garbage backlog.
ABORT = Script(
    "abort",
    CHECK
    + """
local P, member = ARGV[1], ARGV[2]
local gc = type_of(P .. ':gc')
local ours = type_of(KEYS[1]) == 'zset' and (gc == 'list' or gc == 'none')
if ours and redis.call('ZSCORE', KEYS[1], member) then
  redis.call('ZREM', KEYS[1], member)
  redis.call('RPUSH', P .. ':gc', member)
end
return backlog(P)
""",
)

#: Collect garbage only (safe to repeat; no token). KEYS: P:gc. ARGV: P, room. Returns the backlog.
COLLECT = Script(
    "collect",
    CHECK
    + ROWS
    + """
local P = ARGV[1]
collect(P, plan_collect(P, tonumber(ARGV[2])))
return backlog(P)
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

#: Every writing script.
WRITE_SCRIPTS: Final = (INDEX, DELETE, BEGIN, STAGE, COMMIT, VECTORS, ABORT, COLLECT, SETTLE)
