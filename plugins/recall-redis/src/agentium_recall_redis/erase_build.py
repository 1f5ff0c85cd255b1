"""Indexing a tenant written before the erasure index, in a walk that resumes where it was cut short.

A tenant is *indexed* once ``P:ixm`` holds ``1`` (:mod:`agentium_recall_redis.erase_index`). Before, a
tenant written by an earlier version was indexed only by a user or session erase call whose own walk
of the whole tenant (``HSCAN`` of ``P:rev``, then its rows by number) reached its end: a walk cut short
(its deadline passed, or ``max_items`` reached) kept nothing of where it was, and the next erase call
walked the tenant from its start again. A tenant too large for one call's deadline was never indexed,
and each of its erasures cost the whole tenant.

Now the first real user, session or groups erase call of such a tenant first *builds* the index, and keeps
where it is in ``P:ixw`` (a hash: ``c``, the ``HSCAN`` cursor of ``P:rev`` while its ids are walked, with
``id``, the server process it belongs to, then ``r``, the next row number (or row-set place,
:mod:`.erase_walk`) while its rows are, and ``e``, the highest row number when they began: the walk's end;
``x`` once a page left an entry out). Each page is one script call that reads the stored place, lists the
page's ids (``BUILD_IDS``: in ``P:is:<prefix>``, score 0) or rows (``BUILD_ROWS``: in ``P:ir:<prefix>``,
score the number) and stores the next place, atomically: a call cut short anywhere loses nothing of what
its pages did, and the next erase call of any user or session of the tenant goes on from there. Two calls
building at once go on from the same stored place, each page once more at most. The last page marks the
tenant (unless an entry was left out, see below) and drops ``P:ixw``; the erase then reads the target's
own entries of the index, as in any indexed tenant. Dry runs write nothing: they walk the tenant as
before.

Why this is sound: ``HSCAN`` returns every field present from the first call of a full iteration to its
last, whatever the time between the calls and whoever makes them (its cursor holds no state on the
server), so every id present throughout the walk is listed by one of its pages. That holds within one
server process only: a cursor is a place in a hash table whose hash function is seeded at random when
the process starts, so the cursor is stored with the process's ``run_id`` (``id``) and the ids are
walked again from the start by another process (a restart, a failover, the tenant's slot moved); rows
are walked by number up to the counter, then through the row set past it, as the sweep does
(:mod:`agentium_recall_redis.erase_sweep`), each to ``e``. Every id and row written meanwhile is listed
by its own write (each write lists its source, indexed tenant or not), so the walk need not chase rows
numbered past ``e``: before, it read the counter again on each page, and another owner writing as fast
as the walk read rows kept it going until its deadline. The key is the tenant's own (the tenant's id is
encoded injectively in the prefix, like every key of the store) and holds no other id.

Damage: a stored place that is not one the store writes (not a place, too long, both or neither of
``c`` and ``r``) starts the walk over, and so does a place edited into one it could have written (``r``
moved past rows not walked, ``e`` lowered, ``c`` moved, ``x`` dropped: the walk would skip rows or ids
and mark the tenant): each page seals the place it stores (``s``, a SHA-1 of the prefix and every field,
length-prefixed), and one whose seal does not match is never resumed (``BUILD_ROWS``: ``lost``, the call
walks the tenant itself; the next ``BUILD_IDS`` starts over). The seal catches damage, not a forger who
recomputes it, who could as well have set ``P:ixm``, which the store trusts the same way: without a
secret kept off the server nothing the store computes can tell a forger's value from its own (the
README's "Threat model of erasure's own keys"). ``P:ixw`` of
another type is left alone and the call walks the tenant itself as before. An index key of another
type met by a page is left alone too and the walk records it (``x``): it ends without marking the
tenant, and the call walks the tenant itself as before
(:class:`~agentium_recall_redis.erase_sweep.Backfill`); the next build starts over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import OpContext

from . import erase_sweep
from .erase_index import indexed
from .erase_scripts import WHOLE_PAGE
from .erase_walk import NUMBER_END, SET_PAGE
from .errors import RedisRecallError
from .link import as_text
from .lua import IX, Script
from .scripts import FIELD_CAP

if TYPE_CHECKING:
    from .erase import EraseOps

__all__ = ["BUILD_IDS", "BUILD_ROWS", "BUILD_SCRIPTS", "ID_PAGE", "build_index", "index_source"]

#: Fields one ``BUILD_IDS`` page asks ``HSCAN`` for (``COUNT``, a hint: fewer when a page comes back past
#: four times it; a module global, so tests can make pages small).
ID_PAGE: Final = 1000

_KIND: Final = """
local function kind_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
local function marked(key)
  return kind_of(key) == 'string' and redis.call('GET', key) == '1'
end
-- The place's seal ('s'): a digest of the tenant's prefix and each field of the place, length-prefixed
-- (absent: '-'), so no two places share one. nil when a field is longer than any the store writes.
local function place_seal(P, key)
  local parts = {P}
  for _, name in ipairs({'c', 'id', 'r', 'e', 'x'}) do
    if redis.call('HSTRLEN', key, name) > 100 then return nil end
    local v = redis.call('HGET', key, name)
    parts[#parts + 1] = v and string.format('%d:%s', #v, v) or '-'
  end
  return redis.sha1hex(table.concat(parts, '|'))
end
local function sealed(P, key)
  local want = place_seal(P, key)
  return want ~= nil and redis.call('HSTRLEN', key, 's') == 40 and redis.call('HGET', key, 's') == want
end
local function seal(P, key)
  redis.call('HSET', key, 's', place_seal(P, key))
end
"""

#: One page of the build's ids. KEYS: P:rev, P:ixw, P:ixm. ARGV: P, COUNT, longest id, most fields.
#: Returns {'marked'} (the tenant is indexed), {'off'} (P:ixw holds another type: not used), {'rows'}
#: (the ids are walked: rows next), {'ids'} (more ids), or {'!', fields} when HSCAN brought back more
#: than "most fields" (nothing written; ask again with a smaller COUNT). An id longer than any source id
#: (changed outside the store: it names no owner) is not listed.
BUILD_IDS = Script(
    "erase_build_ids",
    IX
    + erase_sweep.ROW_END
    + SET_PAGE
    + _KIND
    + """
local P, count, cap, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if marked(KEYS[3]) then return {'marked'} end
local w = kind_of(KEYS[2])
if w ~= 'hash' and w ~= 'none' then return {'off'} end
-- This server process's run id: an HSCAN cursor means something only to the process that made it (its
-- hash seed is random at start), so a place stored by another (a restart, a failover, a slot moved) is
-- walked again from the start. No run id to read: never resumed.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
local c
-- A place whose seal does not match was edited behind the store's back (a row number moved past rows
-- not walked, an end lowered, a cursor moved, the record of an entry left out dropped): never trusted.
if w == 'hash' and sealed(P, KEYS[2]) then
  local f = redis.call('HMGET', KEYS[2], 'c', 'r', 'id')
  local c_ok = f[1] and #f[1] <= 20 and string.match(f[1], '^%d+$') and run ~= '' and f[3] == run
  local r_ok = f[2] and place_ok(f[2])  -- a row number, or a row-set place (erase_walk)
  if r_ok and not f[1] then return {'rows'} end
  if c_ok and not f[2] then c = f[1] end
end
if not c then
  -- No walk, or a place the store never writes: a new walk, from the start.
  redis.call('DEL', KEYS[2])
  c = '0'
end
local page = redis.call('HSCAN', KEYS[1], c, 'COUNT', count)
local fields = page[2]
if #fields > 2 * most then return {'!', string.format('%d', #fields / 2)} end
local left = false
for i = 1, #fields, 2 do
  if #fields[i] <= cap then
    for _, key in ipairs(ix_keys(P, 'is', '', fields[i])) do
      local t = kind_of(key)
      if t == 'zset' or t == 'none' then redis.call('ZADD', key, 0, fields[i]) else left = true end
    end
  end
end
if left then redis.call('HSET', KEYS[2], 'x', '1') end
if page[1] == '0' then
  -- The rows next, up to the highest row number there is now (the counter, or the row set past it): a
  -- row numbered above it is written from now on, and lists itself.
  redis.call('HDEL', KEYS[2], 'c', 'id')
  redis.call('HSET', KEYS[2], 'r', '1', 'e', row_end(P))
  seal(P, KEYS[2])
  return {'rows'}
end
redis.call('HSET', KEYS[2], 'c', page[1], 'id', run)
seal(P, KEYS[2])
return {'ids'}
""",
)

#: One page of the build's rows. KEYS: P:n, P:ixw, P:ixm. ARGV: P, page size, longest field. The page is
#: what a sweep page is (``SWEEP``, source ""): numbers from the stored one up to the counter, else the
#: next members of the row set ``P:rows`` from it; neither past the walk's end ``e`` when it is readable.
#: Each row hash of the page goes into the row sets of its owner key and id. Returns {'marked'}, {'lost'}
#: (no stored rows place: another call ended the walk, or damage), {'rows'} (more rows), or {'done', '1'
#: when the tenant was marked, '0' when an entry was left out}; the walk's place goes once done.
BUILD_ROWS = Script(
    "erase_build_rows",
    IX
    + SET_PAGE
    + NUMBER_END
    + _KIND
    + """
local P, count, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if marked(KEYS[3]) then return {'marked'} end
if kind_of(KEYS[2]) ~= 'hash' or not sealed(P, KEYS[2]) then return {'lost'} end
local f = redis.call('HMGET', KEYS[2], 'c', 'r')
if f[1] or not f[2] or not place_ok(f[2]) then return {'lost'} end
local first = not string.find(f[2], ' ', 1, true) and tonumber(f[2])
local last = 0
if kind_of(KEYS[1]) == 'string' then
  local v = redis.call('GET', KEYS[1])
  if #v <= 15 and string.match(v, '^%d+$') then last = tonumber(v) end
end
-- The walk's end (``e``, stored as its rows began): rows numbered past it were written since, and list
-- themselves, so another owner writing as fast as the walk reads cannot keep it going. Unreadable
-- (damage): no end but the counter's and the row set's, as before.
local e = redis.call('HGET', KEYS[2], 'e')
local upto = '+inf'
if e and #e <= 15 and string.match(e, '^%d+$') then
  upto = e
  last = math.min(last, tonumber(e))
end
-- Rows the row set does not list are numbered below the lowest it lists (erase_walk): no further by number.
last = number_end(P, last)
local page, rest = {}, '0'
if first and first <= last then
  local stop = math.min(last, first + count - 1)
  for i = first, stop do page[#page + 1] = string.format('%d', i) end
  rest = string.format('%d', stop + 1)
elseif kind_of(P .. ':rows') == 'zset' then
  -- From a (score, member) place (erase_walk): any number of members sharing a score is read past.
  local items, after = set_page(P .. ':rows', f[2], count, upto)
  if after then rest = after end
  for _, item in ipairs(items) do
    if #item[1] <= 15 and string.match(item[1], '^%d+$') then page[#page + 1] = item[1] end
  end
end
local function field(key, name)
  if redis.call('HSTRLEN', key, name) > cap then return '' end
  return redis.call('HGET', key, name) or ''
end
local left = false
for _, n in ipairs(page) do
  local key = P .. ':m:' .. n
  if kind_of(key) == 'hash' and redis.call('HEXISTS', key, 'b') == 1 then
    for _, set in ipairs(ix_keys(P, 'ir', field(key, 'o'), field(key, 'sid'))) do
      local t = kind_of(set)
      if t == 'zset' or t == 'none' then redis.call('ZADD', set, n, n) else left = true end
    end
  end
end
if left then redis.call('HSET', KEYS[2], 'x', '1') end
if rest ~= '0' then
  redis.call('HSET', KEYS[2], 'r', rest)
  seal(P, KEYS[2])
  return {'rows'}
end
local whole = redis.call('HGET', KEYS[2], 'x') ~= '1'
redis.call('DEL', KEYS[2])
local t = kind_of(KEYS[3])
if whole and (t == 'string' or t == 'none') then
  redis.call('SET', KEYS[3], '1')
  return {'done', '1'}
end
return {'done', '0'}
""",
)


#: The build's scripts, for the erase's list of scripts.
BUILD_SCRIPTS: Final = (BUILD_IDS, BUILD_ROWS)


async def build_index(store: EraseOps, prefix: str, ctx: OpContext) -> bool:
    """Go on with (or begin) the tenant's index build until it ends; True once the tenant is marked.

    False when the build ended without marking it (an entry left out), its place was lost to another
    call or damage, or ``P:ixw`` holds another type: the caller then walks the tenant itself. Each page
    keeps the call's fence up first, and the deadline or a cancellation ends the call between pages
    (``OperationCancelledError``), its pages kept. Raises ``RedisRecallError`` when one ``HSCAN`` page
    holds more fields than :data:`ID_PAGE` times four even at ``COUNT`` 1 (a small-encoded hash, which
    comes back whole: :data:`~.erase_scripts.WHOLE_PAGE`): nothing of that page is written.
    """
    ids = [f"{prefix}:rev", f"{prefix}:ixw", f"{prefix}:ixm"]
    rows = [f"{prefix}:n", f"{prefix}:ixw", f"{prefix}:ixm"]
    # A walk by number past any bound the tenant's rows give (a damaged counter) fails closed first.
    await erase_sweep.walk_bounds(store, prefix, ctx)
    count, phase = ID_PAGE, "ids"
    while True:
        await store.renew(ctx)
        if phase == "ids":
            args: list[str | int] = [prefix, count, FIELD_CAP, 4 * ID_PAGE]
            reply = await store.script(BUILD_IDS, ids, args, ctx, "recall erase")
        else:
            args = [prefix, erase_sweep.SWEEP_PAGE, FIELD_CAP]
            reply = await store.script(BUILD_ROWS, rows, args, ctx, "recall erase")
        parts = [as_text(part) for part in reply] if isinstance(reply, list) else []
        head = parts[0] if parts else ""
        if head == "!":
            if count == 1:
                fields = parts[1] if len(parts) > 1 else "?"
                raise RedisRecallError(
                    f"recall erase: one HSCAN page of the tenant's revision hash holds {fields} fields, "
                    f"more than {4 * ID_PAGE}, even at COUNT 1, and was not read; nothing was erased. "
                    + WHOLE_PAGE
                )
            count = max(1, count // 8)
            continue
        count = ID_PAGE
        if head in ("ids", "rows"):
            phase = head
            continue
        if head == "marked":
            return True
        return head == "done" and parts[1:] == ["1"]


async def index_source(store: EraseOps, prefix: str, okp: str, ctx: OpContext, *, dry_run: bool) -> str:
    """The row set of the erasure index a user, session or groups erase of ``okp`` sweeps, or ``""``.

    ``ir:<okp>`` when the tenant is indexed (:func:`~.erase_index.indexed`), or, for a real erase, once
    :func:`build_index` has indexed it; ``""`` (walk the tenant) for a tenant target (``okp`` ``""``), a
    dry run of a tenant not indexed, or a build that ended without marking the tenant.
    """
    if not okp:
        return ""
    if await indexed(store, prefix, okp, ctx, repair=not dry_run):
        return f"ir:{okp}"
    if dry_run or not await build_index(store, prefix, ctx):
        return ""
    return f"ir:{okp}" if await indexed(store, prefix, okp, ctx, repair=True) else ""
