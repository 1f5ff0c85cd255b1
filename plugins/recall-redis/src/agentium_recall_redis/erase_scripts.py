"""The Redis recall store's erasure scripts besides ``ERASE`` itself (:mod:`agentium_recall_redis.erase`).

Finding a target's sources (``REV_SCAN``, ``ROW_INFO``, ``GROUP_SIDS``),
giving up its stagings (:mod:`.erase_stagings`), fencing its owners' writes while
it runs (``FENCE``) and dropping an emptied tenant's keys (``TENANT_DROP``).
Each touches one tenant's keys only (its hash-tag slot). :func:`scan_page`
reads one bounded page of ``REV_SCAN``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import OpContext

from .erase_sweep import MINE, VOUCHED, Backfill
from .errors import RedisRecallError
from .link import as_text
from .lua import CHECK, IX, Script
from .scripts import FIELD_CAP

if TYPE_CHECKING:
    from .erase import EraseOps
    from .link import Reply
    from .server import Arg

__all__ = [
    "FENCE",
    "FENCE_HOLDERS_CAPPED",
    "FENCE_REFUSED",
    "GROUP_SIDS",
    "REV_SCAN",
    "ROW_INFO",
    "SCAN_REPLY_CAP",
    "TENANT_DROP",
    "WHOLE_PAGE",
    "checked_page",
    "scan_page",
]

#: Fields one ``HSCAN`` page asks for (``COUNT``; fewer when a page comes back past its bounds).
_SCAN_PAGE: Final = 1000
#: The most fields one ``HSCAN`` page may bring back to be used (``COUNT`` is a hint, see ``_scan_page``).
_SCAN_MOST: Final = 4 * _SCAN_PAGE
#: The most bytes one ``REV_SCAN`` reply takes (each element counted with 16 bytes of framing), as the
#: sweep's: a page of 1,000 ids of up to 32 KiB each was about 32 MiB in one reply before.
SCAN_REPLY_CAP: Final = 1024 * 1024

#: Why an ``HSCAN`` page of the revision hash stays too large at ``COUNT`` 1, and the remedy, for the
#: refusals' messages. A hash stays small-encoded (listpack; ziplist before Redis 7) while it holds at most
#: the server's ``hash-max-listpack-entries`` fields, each value at most ``hash-max-listpack-value`` bytes
#: (128 and 64 by default: a revision's 71 bytes exceed the second, so the store's own hashes are hash tables
#: there), and such a hash comes back whole in one page at any ``COUNT``. Before, the refusal called the
#: hash damaged, which a server configured past the store's bound is not. Lowering the setting converts
#: the hash at its next write (``HSET`` converts a listpack longer than the limit), not before.
WHOLE_PAGE: Final = (
    "A hash stays small-encoded, and comes back whole in one HSCAN page at any COUNT, while its fields "
    "are at most the server's hash-max-listpack-entries (hash-max-ziplist-entries before Redis 7) and its "
    "values at most hash-max-listpack-value bytes: a server set above the store's bound keeps this hash so "
    "(lower them, e.g. CONFIG SET hash-max-listpack-entries 128; the tenant's next write converts it, "
    "then erase again), or the hash was written outside the store"
)

#: One page of ``HSCAN`` over ``P:rev``. KEYS: P:rev. ARGV: cursor, page size (``COUNT``), longest id,
#: reply cap (bytes), most fields, then the tenant prefix to backfill the erasure index from the page's
#: ids (:mod:`agentium_recall_redis.erase_index`), or "" (a dry run, an indexed tenant). Returns {next
#: cursor, sid, mark, sid, mark...}: mark is "-" for a deletion tombstone, "+" for a current source.
#: Neither revisions nor ids longer than any source id (both changed outside the store: such an id names
#: no owner) are copied into the reply, whatever their size.
#: ``COUNT`` is a hint: a small-encoded hash (listpack) comes back whole in one page, and a hash table
#: gives a few more than asked. So what came back is checked first: more than "most fields" fields, or a
#: reply past the reply cap (each element counted with 16 bytes of framing, more than RESP takes), is not
#: sent; the script returns {"!", fields, bytes} instead, and the client asks again with a smaller
#: ``COUNT`` from the same cursor, and fails closed once ``COUNT`` is 1 (see ``_scan_page``).
REV_SCAN = Script(
    "erase_scan",
    IX
    + """
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local cap, rcap, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {page[1]}
local fields = page[2]
if #fields > 2 * most then return {'!', string.format('%d', #fields / 2), '0'} end
local size = 16 + #page[1]
for i = 1, #fields, 2 do
  if #fields[i] <= cap then
    size = size + 16 + #fields[i] + 17
    if size > rcap then return {'!', string.format('%d', #fields / 2), string.format('%d', size)} end
    out[#out + 1] = fields[i]
    out[#out + 1] = string.sub(fields[i + 1], 1, 1) == '-' and '-' or '+'
  end
end
-- Backfill (ARGV[6]: the tenant prefix P, "" for none): every id of the page, current or deleted, goes
-- into the erasure index's id sets of its user and session, in this same call. A key of another type is
-- left alone, and the cursor then starts with '*': that walk must not mark the tenant indexed (erase_index).
if ARGV[6] ~= '' then
  for i = 1, #fields, 2 do
    if #fields[i] <= cap then
      for _, key in ipairs(ix_keys(ARGV[6], 'is', '', fields[i])) do
        local t = redis.call('TYPE', key)
        t = t['ok'] or t
        if t == 'zset' or t == 'none' then
          redis.call('ZADD', key, 0, fields[i])
        else
          out[1] = '*' .. page[1]
        end
      end
    end
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
redis.call('DEL', P .. ':ids', P .. ':rev', P .. ':bk', P .. ':kb', P .. ':bn', P .. ':n', P .. ':nb',
           P .. ':pend', P .. ':gc', P .. ':v', P .. ':vm', P .. ':vc', P .. ':rows', P .. ':ixm',
           P .. ':ixw', P .. ':rb')
return 1
""",
)


#: Raise or lower one erase call's erasure fence of an owner-key prefix. KEYS: P:ef, P:efh. ARGV: owner-key
#: prefix ("" for the tenant, "u/", "u/s/", or a session's own key for a groups target), how long it holds
#: in ms ("0" to lower it), the call's id (32 hex digits, fresh per erase call), then the holders' cap.
#: While a fence holds, the writing scripts refuse a write of an owner it covers (``erasing`` in
#: :data:`~agentium_recall_redis.lua.CHECK`) before their first write: a write in flight when an erasure
#: began can then not land after the erasure read what to erase. ``P:ef`` keeps, per prefix, when its
#: latest holder ends (server time, ms; the one field the writers read); ``P:efh`` keeps each holder
#: ("<call id> <prefix>", a fixed-length id, so injective) with its own end. Lowering drops only this
#: call's holder: the prefix's fence then holds until its latest other running holder ends, and is removed
#: once none is left. Before, two erase calls of one target shared the field, and the first to end
#: lowered it while the other still ran. A holder left behind (its call crashed) ends by itself and is
#: dropped by the next raise or lower. Safe to repeat. Returns 1.
#: ``P:efh`` is read whole (``HGETALL``) only while it holds at most ARGV[4] holders (the cap,
#: :data:`~agentium_recall_redis.erase_fence.HOLDERS_CAP`), so one call's work is bounded: a raise
#: never needs it (``P:ef``'s field is already at least every running holder's end: each raise sets it
#: so, each lower keeps the others' latest), only the purge of ended holders and a lower do. A call that
#: finds the hash at the cap (a new holder) or past it first drops ended holders in ``HSCAN`` pages,
#: reading at most about twice the cap of them (``COUNT`` is a hint: a small-encoded hash comes back
#: whole in one page, each of its holders counted as read, none left unread in a page; a page of more
#: than four times the cap, which only a small-encoded hash written outside the store makes, is not
#: handled at all): a cap reached by crashed calls' holders frees itself; before, it refused every erase
#: of the tenant until an operator removed them. Still at the cap, a new holder is refused before any
#: other write ({0, holders, ended holders dropped, 1 when every holder was read, 0 when the call stopped
#: reading, 2 when a page was too large to handle}: the erase fails, nothing else changed); a call's own
#: holder is still raised again; a lower drops its own holder and leaves the field to end by itself ({2,
#: holders left once its own went, dropped, read all}: the fence stays up until its latest raise's end,
#: never shorter).
FENCE = Script(
    "erase_fence",
    CHECK
    + """
local okp, hold, call, cap = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
for _, key in ipairs(KEYS) do
  local t = type_of(key)
  if t ~= 'none' and t ~= 'hash' then refuse('a key') end
end
local now, mine, latest = now_ms(), call .. ' ' .. okp, 0
local holders = redis.call('HLEN', KEYS[2])
local function refused()
  return hold > 0 and holders >= cap and redis.call('HEXISTS', KEYS[2], mine) == 0
end
local dropped, whole = 0, 1
-- A raise marks a layout-4 tenant as erased by this version (lua.py's ERASED_LAYOUT): older writers, whose
-- checks this erase relies on, then refuse it before their first write. One GET once marked (pcall: a key
-- of another type answers an error, not LAYOUT, and is left alone).
local function mark()
  local P = string.sub(KEYS[1], 1, -4)
  if redis.pcall('GET', P .. ':v') == LAYOUT then redis.call('SET', P .. ':v', ERASED_LAYOUT) end
end
if holders > cap or refused() then
  -- Drop ended holders, counting every holder a page brings back (however many past COUNT) as read. A
  -- page of more than 4 x cap holders (a small-encoded hash, whole in one page, past any the store
  -- writes) is left as it is (whole = 2): each HDEL walks such a hash, so dropping its holders one by one
  -- held the server for seconds (tens of thousands of holders), in one script.
  local cursor, read = '0', 0
  repeat
    local page = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', 100)
    local held = page[2]
    if #held > 8 * cap then  -- erase_fence's _PAGE_MOST
      whole = 2
      break
    end
    cursor = page[1]
    for i = 1, #held, 2 do
      local ends = tonumber(held[i + 1])
      if not ends or ends <= now then dropped = dropped + redis.call('HDEL', KEYS[2], held[i]) end
    end
    read = read + #held / 2
  until cursor == '0' or read >= 2 * cap
  if whole == 1 and cursor ~= '0' then whole = 0 end
  holders = redis.call('HLEN', KEYS[2])
end
if refused() then
  return {0, holders, dropped, whole}
end
if holders > cap then
  if hold > 0 then
    local ends = now + hold
    redis.call('HSET', KEYS[2], mine, fmt(ends))
    local cur = tonumber(redis.call('HGET', KEYS[1], okp) or '')
    redis.call('HSET', KEYS[1], okp, fmt(math.max(ends, cur or 0)))
    mark()
    return 1
  end
  holders = holders - redis.call('HDEL', KEYS[2], mine)  -- what is left, as the reply says
  return {2, holders, dropped, whole}
end
local held = redis.call('HGETALL', KEYS[2])
for i = 1, #held, 2 do
  local ends = tonumber(held[i + 1])
  if not ends or ends <= now then
    redis.call('HDEL', KEYS[2], held[i])
  elseif held[i] ~= mine and string.sub(held[i], #call + 2) == okp and ends > latest then
    latest = ends
  end
end
if hold > 0 then
  local ends = now + hold
  redis.call('HSET', KEYS[2], mine, fmt(ends))
  -- Never shortened: another holder's (or an older store's) later end stays.
  local cur = tonumber(redis.call('HGET', KEYS[1], okp) or '')
  latest = math.max(latest, ends, cur or 0)
  redis.call('HSET', KEYS[1], okp, fmt(latest))
  mark()
else
  redis.call('HDEL', KEYS[2], mine)
  if latest > now then
    redis.call('HSET', KEYS[1], okp, fmt(latest))
  else
    redis.call('HDEL', KEYS[1], okp)
  end
end
return 1
""",
)


#: ``FENCE``'s first element when it refused a new holder past the cap (nothing written).
FENCE_REFUSED: Final = 0
#: ``FENCE``'s first element when a lower past the cap dropped its own holder only (the fence ends by itself).
FENCE_HOLDERS_CAPPED: Final = 2


def checked_page(reply: Reply) -> list[bytes]:
    """A ``REV_SCAN`` reply as sent, checked against the bounds the script keeps, or the store's error.

    The script never sends more than :data:`_SCAN_MOST` fields nor a reply past :data:`SCAN_REPLY_CAP`;
    a reply that does (a server or script changed behind the store's back) is not used.
    """
    if not isinstance(reply, list) or not reply or len(reply) > 1 + 2 * _SCAN_MOST:
        raise RedisRecallError(
            "recall erase: a page of the tenant's revision hash came back in a form or size the store never "
            "asks for (the server or its scripts were changed); nothing was erased"
        )
    size = 0
    for item in reply:
        if not isinstance(item, bytes):
            raise RedisRecallError(
                "recall erase: a page of the tenant's revision hash is damaged; nothing was erased"
            )
        size += 16 + len(item)
    if size > SCAN_REPLY_CAP:
        raise RedisRecallError(
            f"recall erase: a page of the tenant's revision hash came back larger ({size} bytes) than the "
            f"store's bound ({SCAN_REPLY_CAP}); nothing was erased"
        )
    return reply


async def scan_page(
    store: EraseOps, prefix: str, cursor: str, ctx: OpContext, *, backfill: Backfill | None = None
) -> tuple[str, list[bytes]]:
    """One page of ``P:rev`` from ``cursor``: (the next cursor, sid and mark pairs), each reply bounded.

    ``COUNT`` is only a hint to ``HSCAN``: a page the script finds past its bounds (:data:`_SCAN_MOST`
    fields, :data:`SCAN_REPLY_CAP` bytes) is asked again from the same cursor with a smaller ``COUNT``;
    one still too large at ``COUNT`` 1 (a small-encoded hash, which comes back whole: see
    :data:`WHOLE_PAGE`) fails the erase closed: ``RedisRecallError``, nothing erased. With ``backfill`` the
    page's ids go into the erasure index's id sets in the same call (:mod:`.erase_index`), and it records
    whether the page left one out (an index key of another type).
    """
    count = _SCAN_PAGE
    while True:
        args: list[Arg] = [
            cursor,
            count,
            FIELD_CAP,
            SCAN_REPLY_CAP,
            _SCAN_MOST,
            "" if backfill is None else prefix,
        ]
        reply = checked_page(await store.script(REV_SCAN, [f"{prefix}:rev"], args, ctx, "recall erase"))
        head = as_text(reply[0])
        head = head if backfill is None else backfill.read(head)
        if head != "!":
            if not head.isdigit() or len(reply) % 2 != 1:
                raise RedisRecallError(
                    "recall erase: a page of the tenant's revision hash is damaged; nothing was erased"
                )
            return head, reply[1:]
        if count == 1:
            fields = as_text(reply[1]) if len(reply) > 1 else "?"
            raise RedisRecallError(
                f"recall erase: one HSCAN page of the tenant's revision hash holds {fields} fields or more "
                f"than {SCAN_REPLY_CAP} bytes even at COUNT 1, and was not read; nothing was erased. "
                + WHOLE_PAGE
            )
        count = max(1, count // 8)
