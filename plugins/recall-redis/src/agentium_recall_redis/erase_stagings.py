"""Giving up a target's stagings without reading the tenant's whole bucket map.

An erase gives up the stagings of its target's owners (a large source begun and not yet published:
``P:pend`` members ``"<bucket> <row>"``) before it lists anything and again after its sweep
(:mod:`agentium_recall_redis.erase`). A staging names its bucket, not its owner, and the owner is what
the target covers. ``PEND_ABORT`` read the tenant's whole bucket map (``HGETALL P:bk``, one field per
owner the tenant ever had) to find the buckets of the target's owners: every erase call of a tenant
with a staging pending read all of its owners, twice, in calls that held the server while they ran.

Now each write that makes a bucket also keeps the reverse entry, in the same script: ``P:kb``, bucket
-> owner key (``INDEX``, ``BEGIN``); ``ERASE`` drops it with the bucket. ``PEND_ABORT`` reads only
the stagings (``ZRANGE P:pend``, as before) and, per staging, ``HGET P:kb <bucket>`` and ``HGET P:bk
<owner>`` to check that the pair still agrees both ways (a reverse entry left stale by an older store,
which drops buckets without it, or edited, is never trusted alone): its cost follows the stagings, not
the owners. A pair that agrees is taken for the bucket's only owner, which the whole map could belie (a
second owner filed under the bucket by damage); so the writes refuse to file an owner under a bucket the
reverse map gives another, or to make a bucket whose number is in use (``bucket_mine`` in
:mod:`.write_scripts`; a ``P:bk`` entry edited, ``P:nb`` lowered): no staging of a second owner lands there.

**Buckets made before the reverse map.** A bucket written by an earlier version has no ``P:kb`` entry.
When a staging's bucket has no entry that agrees, ``PEND_ABORT`` says how many such stagings it met and
the erase walks the bucket map instead, in bounded pages (``PEND_SCAN``: one ``HSCAN`` page of ``P:bk``
per script call, ``COUNT`` 1,000), giving up the stagings of the target's owners' buckets found on each
page and writing each page's reverse entries: the migration, done once by the first erase that needs it
(a bucket made meanwhile writes its own). So the walk costs what ``HGETALL`` did, spread over calls,
once; later erases read the stagings only. A ``P:kb`` of another type (damage) is left alone: every
staging then takes the walk, which needs only ``P:bk``. A staging whose bucket no owner holds stays, as
before (no owner of the target is in it), and each erase meeting it walks the map again (damage: such a
staging is only left by an edit, and its lease's end gives it up). The walk is one erase call's, and an
``HSCAN`` cursor holds only within one server process (its hash function is seeded at random when it
starts): resumed in another (a restart, a failover), it steps past entries there throughout. Each page
says the ``run_id`` of the process that answered it, and a page resumed in another process than the one
before starts the walk over from cursor 0 (before, its stagings stayed, their postings in Redis, while
the erase said complete; ``tests/test_erase_stagings.py`` restarts an AOF server in both walks of one
erase). A walk that does not end within :data:`_MAX_PAGES` pages (a map of about 10^7 owners, or restarts
without end) fails the erase call (``RedisRecallError``) rather than go on with the target's stagings
not all given up. A server whose ``INFO`` names no ``run_id`` cannot be told apart after a restart. A
small-encoded map comes back whole in one page, as ``HGETALL`` did (the server's
``hash-max-listpack-entries``, 128 or 512 by default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import EraseTarget, OpContext, SourceOwner, encode_segment

from .errors import RedisRecallError
from .keys import owner_key
from .link import as_text
from .lua import CHECK, Script

if TYPE_CHECKING:
    from .erase import EraseOps

__all__ = ["PEND_ABORT", "PEND_SCAN", "STAGING_SCRIPTS", "abort_stagings", "owner_prefix"]

#: Fields one ``PEND_SCAN`` page asks ``HSCAN`` for (a hint).
_SCAN_COUNT: Final = 1000
#: ``PEND_SCAN`` pages one call walks at most (a map of about 10^7 owners; past it the erase call fails).
_MAX_PAGES: Final = 10_000

_GIVE_UP: Final = """
local function give_up(member)
  redis.call('ZREM', KEYS[1], member)
  redis.call('RPUSH', P .. ':gc', member)
end
local function starts(s, p) return string.sub(s, 1, #p) == p end
"""

#: Give up the stagings of the target's owners (their postings queued as garbage). KEYS: P:pend.
#: ARGV: P, owner-key prefix ("" for every owner of the tenant; owner-key segments never hold "/", so
#: "<user>/" or "<user>/<session>/" names exactly that user's or session's owners). Safe to repeat.
#: Returns {how many were given up, how many stagings' buckets have no reverse entry that agrees with
#: P:bk (then walk the map: ``PEND_SCAN``)}. Reads the stagings and two fields per staging, never
#: another tenant's key nor the whole bucket map.
PEND_ABORT = Script(
    "erase_stagings",
    CHECK
    + """
local P, okp = ARGV[1], ARGV[2]
if type_of(KEYS[1]) ~= 'zset' or redis.call('ZCARD', KEYS[1]) == 0 then return {0, 0} end
local gc = type_of(P .. ':gc')
if gc ~= 'list' and gc ~= 'none' then return {0, 0} end
"""
    + _GIVE_UP
    + """
local kb = type_of(P .. ':kb') == 'hash' and type_of(P .. ':bk') == 'hash'
local n, unknown = 0, 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local ours = okp == ''
  if not ours then
    local b = string.match(member, '^(%d+) ')
    local o = b and kb and redis.call('HGET', P .. ':kb', b)
    if o and redis.call('HGET', P .. ':bk', o) == b then
      ours = starts(o, okp)
    elseif b then
      unknown = unknown + 1
    end
  end
  if ours then
    give_up(member)
    n = n + 1
  end
end
return {n, unknown}
""",
)

#: One page of the bucket map for stagings whose bucket has no reverse entry. KEYS: P:pend. ARGV: P,
#: owner-key prefix (not ""), ``HSCAN`` cursor, ``COUNT``. Gives up each staging in a bucket of the page
#: whose owner key starts with the prefix, and writes the page's reverse entries (``P:kb``, left alone
#: when of another type). Returns {next cursor ("0": the map is walked), how many were given up, the
#: server process's ``run_id`` ("" when ``INFO`` does not say)}.
PEND_SCAN = Script(
    "erase_stagings_scan",
    CHECK
    + """
local P, okp = ARGV[1], ARGV[2]
-- The server process's run id: an HSCAN cursor means something only to the process that made it.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
if type_of(P .. ':bk') ~= 'hash' then return {'0', 0, run} end
local gc = type_of(P .. ':gc')
if type_of(KEYS[1]) ~= 'zset' or (gc ~= 'list' and gc ~= 'none') then return {'0', 0, run} end
"""
    + _GIVE_UP
    + """
local staged = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local b = string.match(member, '^(%d+) ')
  if b then
    staged[b] = staged[b] or {}
    table.insert(staged[b], member)
  end
end
local kb = type_of(P .. ':kb')
local page = redis.call('HSCAN', P .. ':bk', ARGV[3], 'COUNT', tonumber(ARGV[4]))
local fields, n = page[2], 0
for i = 1, #fields, 2 do
  local o, b = fields[i], fields[i + 1]
  if kb == 'hash' or kb == 'none' then redis.call('HSET', P .. ':kb', b, o) end
  if starts(o, okp) and staged[b] then
    for _, member in ipairs(staged[b]) do
      give_up(member)
      n = n + 1
    end
    staged[b] = nil
  end
end
return {page[1], n, run}
""",
)

#: The stagings' scripts, for the erase's list of scripts.
STAGING_SCRIPTS: Final = (PEND_ABORT, PEND_SCAN)


def owner_prefix(target: EraseTarget) -> str:
    """The start every owner key of the target's owners has: ``""`` (tenant), ``u/`` or ``u/s/``.

    For a groups target, the session's own owner key (``u/s/~/~``), which only that key starts with
    (an owner key has four segments): a staging records its bucket, not its seq, so every staging of
    the session's bucket is given up (a document of the session staged then too; its writer is told
    and indexes again), never another owner's.
    """
    if target.groups:
        key = target.session_key
        assert key is not None
        return owner_key(SourceOwner.of_session(key))
    parts = [p for p in (target.user_id, target.session_id) if p is not None]
    return "".join(f"{encode_segment(p)}/" for p in parts)


async def abort_stagings(store: EraseOps, prefix: str, target: EraseTarget, ctx: OpContext) -> int:
    """Give up every staging of the target's owners (safe to repeat); how many were given up.

    ``PEND_ABORT`` first; when it met stagings whose bucket has no reverse entry, the bucket map is
    walked in ``PEND_SCAN`` pages (see the module), each page keeping the call's fence up first.
    """
    okp = owner_prefix(target)
    reply = await store.script(PEND_ABORT, [f"{prefix}:pend"], [prefix, okp], ctx, "recall erase")
    parts = list(reply) if isinstance(reply, list) else [0, 0]
    given, unknown = int(parts[0]), int(parts[1])
    if unknown <= 0:
        return given
    cursor, run = "0", ""
    for _ in range(_MAX_PAGES):
        await store.renew(ctx)
        args: list[str | int] = [prefix, okp, cursor, _SCAN_COUNT]
        page = await store.script(PEND_SCAN, [f"{prefix}:pend"], args, ctx, "recall erase")
        given, page_run = given + int(page[1]), as_text(page[2])
        if cursor != "0" and page_run != run:
            # Another server process (a restart, a failover) answered a page resumed from a cursor of the
            # walk's first: it may have stepped past entries there throughout. The walk starts over (what
            # it gave up and wrote stays given up and written; the next walk reads the rest).
            cursor, run = "0", ""
            continue
        cursor, run = as_text(page[0]), page_run
        if cursor == "0":
            return given
    # Cut at the bound: some of the target's stagings may be left, so the erase fails rather than go on
    # and say complete (the stagings it gave up stay given up; the next erase walks again).
    raise RedisRecallError(
        f"recall erase: the walk of the tenant's bucket map for its stagings did not end within {_MAX_PAGES} "
        "pages (HSCAN of <tenant>:bk); the target's stagings were not all given up and the erase did not "
        "complete"
    )
