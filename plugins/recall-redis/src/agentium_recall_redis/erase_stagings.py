"""Giving up a target's stagings without reading the tenant's whole bucket map.

An erase gives up the stagings of its target's owners (a large source begun and not yet published:
``P:pend`` members ``"<bucket> <row>"``) before it lists anything and again after its sweep
(:mod:`agentium_recall_redis.erase`). A staging names its bucket, not its owner, and the owner is what
the target covers. ``PEND_ABORT`` read the tenant's whole bucket map (``HGETALL P:bk``, one field per
owner the tenant ever had) to find the buckets of the target's owners: every erase call of a tenant
with a staging pending read all of its owners, twice, in calls that held the server while they ran.

Now each write that makes a bucket also keeps the reverse entry, in the same script: ``P:kb``, bucket
-> owner key (``INDEX``, ``BEGIN``); ``ERASE`` drops it with the bucket. ``PEND_ABORT`` reads only
the stagings (``P:pend``, in pages: below) and, per staging, ``HGET P:kb <bucket>`` and ``HGET P:bk
<owner>`` to check that the pair still agrees both ways (a reverse entry left stale by an older store,
which drops buckets without it, or edited, is never trusted alone): its cost follows the stagings, not
the owners. A pair that agrees is taken for the bucket's only owner, which the whole map could belie (a
second owner filed under the bucket by damage); so the writes refuse to file an owner under a bucket the
reverse map gives another, or to make a bucket whose number is in use (``bucket_mine`` in
:mod:`.write_scripts`; a ``P:bk`` entry edited, ``P:nb`` lowered): no staging of a second owner lands there.

**The stagings, in pages.** ``PEND_ABORT`` read the stagings with ``ZRANGE P:pend 0 -1``: every pending
staging of the tenant in one reply, in each of the erase's two walks, in a script that held the server
while it ran, so an erase's cost grew with the tenant's stagings without bound. Now one call reads at most
:data:`PEND_PAGE` (512) stagings by rank and says the place the next goes on from: ``"<score> <member>"``
of the last one read (its first 64 bytes), found again as a row-set walk's place is (``set_rank`` of
:mod:`.erase_walk`: the member's rank when it is still there at that score, else the first member after
it, by a binary search over the members at its score). A staging's score is its lease's end, written
once by ``BEGIN`` and never moved, so a staging present for the whole walk sorts after the place
whatever is added or removed meanwhile (its own walk's give-ups, other owners' ``BEGIN``, ``COMMIT``,
``ABORT`` and reaped leases) and is read (``tests/test_erase_stagings_paged.py``). A staging added
during the walk may be read or not: none of the target's owners can be added then, their writes being
fenced. A page says whether a member follows it (one more ``ZRANGE`` of one rank), so a walk of exactly
:data:`_MAX_PEND_PAGES` full pages ends (before, its last full page took one more read, past the cap, and
the erase failed). A walk of more than :data:`_MAX_PEND_PAGES` pages (about 10^7 stagings) fails the
erase call (``RedisRecallError``) rather than go on with the target's stagings not all given up, and so does a
page that would go on from where it began (more than a page of members sharing a score and their first
64 bytes: only an edit makes those).

**Buckets made before the reverse map.** A bucket written by an earlier version has no ``P:kb`` entry.
Each page returns its stagings whose bucket has no entry that agrees (the client keeps them, by bucket;
a member over 100 bytes, which only an edit makes, is left alone as one naming no bucket), and once the
stagings are read the erase walks the bucket map for them, in bounded pages (``PEND_SCAN``: one
``HSCAN`` page of ``P:bk`` per script call, ``COUNT`` 1,000, reading no staging), writing each page's
reverse entries and returning the page's entries of the target's owners; the stagings kept for one of
those buckets are given up (``PEND_DROP``, at most a page of them per call, once the map still files the
owner under the bucket): the migration, done once by the first erase that needs it (a bucket made
meanwhile writes its own). So the walk costs what ``HGETALL`` did, spread over calls, once; later
erases read the stagings only. A ``P:kb`` of another type (damage) is left alone: every staging then
takes the walk, which needs only ``P:bk``. A staging whose bucket no owner holds (no reverse entry that
``P:bk`` confirms, once the walk has written every entry's) is given up too (``PEND_ORPHAN``): it can
never publish, ``COMMIT`` refusing a bucket its owner no longer holds. Before, it stayed, and each erase
meeting it walked the map again; it is left by an edit, or by an ``ERASE`` that dropped the bucket it
emptied while the staging, begun in a lapse of the erase's fence, still wrote into it (its ``COMMIT``
then published the erased owner's words into a bucket no owner holds, which recall never reads:
``tests/test_erase_fence_lapse.py``). Only in the server process that answered the walk: another (a
crash that reloaded a snapshot taken before the walk's reverse entries) may lack them, and gave a
healthy staging of another owner up (``tests/test_commit_bucket_held.py``). The walk is one erase
call's, and an ``HSCAN``
cursor holds only within one server process (its hash function is seeded at random when it starts):
resumed in another (a restart, a failover), it steps past entries there throughout. Each page says the
``run_id`` of the process that answered it, and a page resumed in another process than the one before
starts the walk over from cursor 0 (before, its stagings stayed, their postings in Redis, while the
erase said complete; ``tests/test_erase_stagings.py`` restarts an AOF server twice in one walk). A walk
that does not end within :data:`_MAX_PAGES` pages (a map of about 10^7 owners, or restarts without end)
fails the erase call (``RedisRecallError``) rather than go on with the target's stagings not all given
up. A server whose ``INFO`` names no ``run_id`` cannot be told apart after a restart. A small-encoded
map comes back whole in one page, as ``HGETALL`` did (the server's ``hash-max-listpack-entries``, 128 or
512 by default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import EraseTarget, OpContext, SourceOwner, encode_segment

from .erase_walk import SET_PAGE
from .errors import RedisRecallError
from .keys import owner_key
from .link import as_text
from .lua import CHECK, Script

if TYPE_CHECKING:
    from .erase import EraseOps
    from .link import Reply
    from .server import Arg

__all__ = [
    "PEND_ABORT",
    "PEND_DROP",
    "PEND_ORPHAN",
    "PEND_PAGE",
    "PEND_SCAN",
    "STAGING_SCRIPTS",
    "abort_stagings",
    "owner_prefix",
]

#: Stagings one ``PEND_ABORT`` page reads at most (``ZRANGE`` by rank, from a place).
PEND_PAGE: Final = 512
#: ``PEND_ABORT`` pages one walk of the stagings reads at most (about 10^7 stagings; past it the call fails).
_MAX_PEND_PAGES: Final = 20_000
#: The longest staging member a page returns for the bucket-map walk (a store's are ``"<b> <n>"``, 32
#: bytes at most): a longer one, which only an edit makes, is left alone as one naming no bucket.
_MEMBER_CAP: Final = 100
#: Fields one ``PEND_SCAN`` page asks ``HSCAN`` for (a hint).
_SCAN_COUNT: Final = 1000
#: ``PEND_SCAN`` pages one call walks at most (a map of about 10^7 owners; past it the erase call fails).
_MAX_PAGES: Final = 10_000

_GIVE_UP: Final = """
local function give_up(member)
  if redis.call('ZREM', KEYS[1], member) == 1 then
    redis.call('RPUSH', P .. ':gc', member)
    return 1
  end
  return 0
end
local function starts(s, p) return string.sub(s, 1, #p) == p end
"""

#: Give up the stagings of the target's owners on one page of ``P:pend`` (their postings queued as
#: garbage). KEYS: P:pend. ARGV: P, owner-key prefix ("" for every owner of the tenant; owner-key segments
#: never hold "/", so "<user>/" or "<user>/<session>/" names exactly that user's or session's owners), the
#: place to go on from ("" for the first page; else "<score> <member>", :mod:`.erase_walk`), page size.
#: Safe to repeat. Returns {how many were given up, the place the next page goes on from ("" once the
#: stagings are read to their end: no member follows the page), then the members of the page whose
#: bucket has no reverse entry that agrees with P:bk (then walk the map: ``PEND_SCAN``)}. Reads at most a
#: page of stagings (and one rank past it) and two fields per staging, never another tenant's key nor the
#: whole bucket map.
PEND_ABORT = Script(
    "erase_stagings",
    CHECK
    + SET_PAGE
    + """
local P, okp, from, count = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if type_of(KEYS[1]) ~= 'zset' then return {0, ''} end
local gc = type_of(P .. ':gc')
if gc ~= 'list' and gc ~= 'none' then return {0, ''} end
"""
    + _GIVE_UP
    + f"""
local rank = 0
if from ~= '' then rank = set_rank(KEYS[1], from) end
local listed = redis.call('ZRANGE', KEYS[1], rank, rank + count - 1, 'WITHSCORES')
-- Whether a member follows the page, asked before its give-ups shift the ranks: a full page that ends
-- the set ends the walk (before, it took one more read, and a walk of exactly its cap of pages failed).
local more = #listed == 2 * count and #redis.call('ZRANGE', KEYS[1], rank + count, rank + count) > 0
local kb = type_of(P .. ':kb') == 'hash' and type_of(P .. ':bk') == 'hash'
local n, unknown = 0, {{}}
for j = 1, #listed, 2 do
  local member = listed[j]
  local ours = okp == ''
  if not ours then
    local b = string.match(member, '^(%d+) ')
    local o = b and kb and redis.call('HGET', P .. ':kb', b)
    if o and redis.call('HGET', P .. ':bk', o) == b then
      ours = starts(o, okp)
    elseif b and #member <= {_MEMBER_CAP} then
      unknown[#unknown + 1] = member
    end
  end
  if ours then n = n + give_up(member) end
end
local place = ''
if more then
  -- Where the next page goes on: after the last member read, wherever members come or go meanwhile.
  place = listed[#listed] .. ' ' .. string.sub(listed[#listed - 1], 1, 64)
  if place == from then
    error('the stagings hold more members sharing a score and their first 64 bytes than a page reads')
  end
end
local reply = {{n, place}}
for _, member in ipairs(unknown) do reply[#reply + 1] = member end
return reply
""",
)

#: One page of the bucket map, for stagings whose bucket has no reverse entry. KEYS: P:bk. ARGV: P,
#: owner-key prefix (not ""), ``HSCAN`` cursor, ``COUNT``. Writes the page's reverse entries (``P:kb``,
#: left alone when of another type). Returns {next cursor ("0": the map is walked), the server process's
#: ``run_id`` ("" when ``INFO`` does not say), then (owner key, bucket) of each entry of the page whose
#: owner key starts with the prefix}. Reads no staging.
PEND_SCAN = Script(
    "erase_stagings_scan",
    CHECK
    + """
local P, okp = ARGV[1], ARGV[2]
-- The server process's run id: an HSCAN cursor means something only to the process that made it.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
if type_of(P .. ':bk') ~= 'hash' then return {'0', run} end
local kb = type_of(P .. ':kb')
local page = redis.call('HSCAN', P .. ':bk', ARGV[3], 'COUNT', tonumber(ARGV[4]))
local fields, reply = page[2], {page[1], run}
for i = 1, #fields, 2 do
  local o, b = fields[i], fields[i + 1]
  if kb == 'hash' or kb == 'none' then redis.call('HSET', P .. ':kb', b, o) end
  if string.sub(o, 1, #okp) == okp then
    reply[#reply + 1] = o
    reply[#reply + 1] = b
  end
end
return reply
""",
)

#: Give up the given stagings of one bucket when the bucket map still files the owner under it. KEYS:
#: P:pend. ARGV: P, owner-key prefix, owner key, bucket, members.... Returns how many were given up.
PEND_DROP = Script(
    "erase_stagings_drop",
    CHECK
    + """
local P, okp, o, b = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local gc = type_of(P .. ':gc')
if type_of(KEYS[1]) ~= 'zset' or (gc ~= 'list' and gc ~= 'none') then return 0 end
"""
    + _GIVE_UP
    + """
if type_of(P .. ':bk') ~= 'hash' or not starts(o, okp) then return 0 end
if redis.call('HGET', P .. ':bk', o) ~= b then return 0 end
local n = 0
for i = 5, #ARGV do
  if string.match(ARGV[i], '^(%d+) ') == b then n = n + give_up(ARGV[i]) end
end
return n
""",
)

#: Give up the given stagings whose bucket no owner holds (no ``P:kb`` entry that ``P:bk`` confirms), run
#: once the bucket map has been walked (every entry of it then has its reverse entry). KEYS: P:pend. ARGV:
#: P, the ``run_id`` that answered the walk, members.... Returns how many were given up. A reverse or
#: bucket map of another type gives up none, and so does another server process than the walk's: the
#: entries the walk wrote may not be in it (a crash that reloaded a snapshot, a failover to a replica
#: they had not reached), and a healthy staging of another owner would be given up for want of them.
PEND_ORPHAN = Script(
    "erase_stagings_orphan",
    CHECK
    + """
local P = ARGV[1]
if (string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or '') ~= ARGV[2] then return 0 end
local gc, kb, bk = type_of(P .. ':gc'), type_of(P .. ':kb'), type_of(P .. ':bk')
if type_of(KEYS[1]) ~= 'zset' or (gc ~= 'list' and gc ~= 'none') then return 0 end
if (kb ~= 'hash' and kb ~= 'none') or (bk ~= 'hash' and bk ~= 'none') then return 0 end
"""
    + _GIVE_UP
    + """
local n = 0
for i = 3, #ARGV do
  local b = string.match(ARGV[i], '^(%d+) ')
  local o = b and kb == 'hash' and redis.call('HGET', P .. ':kb', b)
  if b and not (o and bk == 'hash' and redis.call('HGET', P .. ':bk', o) == b) then
    n = n + give_up(ARGV[i])
  end
end
return n
""",
)

#: The stagings' scripts, for the erase's list of scripts.
STAGING_SCRIPTS: Final = (PEND_ABORT, PEND_SCAN, PEND_DROP, PEND_ORPHAN)


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

    The stagings are read in ``PEND_ABORT`` pages; when some had a bucket with no reverse entry, the
    bucket map is walked in ``PEND_SCAN`` pages (see the module), each page keeping the call's fence up
    first.
    """
    okp = owner_prefix(target)
    given, unknown = await _walk_stagings(store, prefix, okp, ctx)
    if unknown:
        walked, run = await _walk_bucket_map(store, prefix, okp, unknown, ctx)
        given += walked + await _give_up_orphans(store, prefix, unknown, run, ctx)
    return given


async def _give_up_orphans(
    store: EraseOps, prefix: str, unknown: dict[bytes, list[bytes]], run: str, ctx: OpContext
) -> int:
    """Give up the stagings left in ``unknown`` whose bucket no owner holds, the map walked; how many.

    Such a staging can never publish (``COMMIT`` refuses a bucket its owner no longer holds): an erase
    that emptied the bucket dropped it while the staging, begun in a lapse of the erase's fence, still
    wrote into it. Given up, its postings (the owner's words) are collected with the erase's garbage.
    Only in the server process ``run`` that answered the walk: the reverse entries the walk wrote are
    what tells a healthy staging of another owner from one no owner holds, and another process may
    lack them (a crash that reloaded a snapshot taken before them); there none is given up, and the
    next walk, in that process, writes them again.
    """
    given = 0
    members = [m for stagings in unknown.values() for m in stagings]
    for i in range(0, len(members), PEND_PAGE):
        await store.renew(ctx)
        args: list[Arg] = [prefix, run, *members[i : i + PEND_PAGE]]
        n = await store.script(PEND_ORPHAN, [f"{prefix}:pend"], args, ctx, "recall erase")
        given += n if isinstance(n, int) else 0
    return given


async def _walk_stagings(
    store: EraseOps, prefix: str, okp: str, ctx: OpContext
) -> tuple[int, dict[bytes, list[bytes]]]:
    """Read ``P:pend`` page by page; (how many were given up, bucket -> members with no agreeing entry)."""
    given, unknown = 0, dict[bytes, list[bytes]]()
    # A place, as the script sent it: bytes (a member edited to hold bytes that are not UTF-8 stays them).
    place: bytes = b""
    for _ in range(_MAX_PEND_PAGES):
        await store.renew(ctx)
        args: list[Arg] = [prefix, okp, place, PEND_PAGE]
        reply = await store.script(PEND_ABORT, [f"{prefix}:pend"], args, ctx, "recall erase")
        parts: list[Reply] = list(reply) if isinstance(reply, list) else [0, b""]
        given += int(parts[0])
        for raw in parts[2:]:
            member = raw if isinstance(raw, bytes) else str(raw).encode()
            unknown.setdefault(member.split(b" ", 1)[0], []).append(member)
        nxt = parts[1]
        place = nxt if isinstance(nxt, bytes) else str(nxt or "").encode()
        if not place:
            return given, unknown
    raise RedisRecallError(
        f"recall erase: the walk of the tenant's stagings did not end within {_MAX_PEND_PAGES} pages of "
        f"{PEND_PAGE} (<tenant>:pend); the target's stagings were not all given up and the erase did not "
        "complete"
    )


async def _walk_bucket_map(
    store: EraseOps, prefix: str, okp: str, unknown: dict[bytes, list[bytes]], ctx: OpContext
) -> tuple[int, str]:
    """Walk ``P:bk`` for the buckets of ``unknown`` (bucket -> stagings).

    Returns how many were given up, and the ``run_id`` of the server process that answered the whole walk.
    """
    given, cursor, run = 0, "0", ""
    for _ in range(_MAX_PAGES):
        await store.renew(ctx)
        args: list[Arg] = [prefix, okp, cursor, _SCAN_COUNT]
        page = list(await store.script(PEND_SCAN, [f"{prefix}:bk"], args, ctx, "recall erase") or ())
        fields = page[2:]
        for owner, bucket in zip(fields[::2], fields[1::2], strict=True):
            b = bucket if isinstance(bucket, bytes) else str(bucket).encode()
            members = unknown.pop(b, [])
            for i in range(0, len(members), PEND_PAGE):
                drop: list[Arg] = [prefix, okp, owner, b, *members[i : i + PEND_PAGE]]
                dropped = await store.script(PEND_DROP, [f"{prefix}:pend"], drop, ctx, "recall erase")
                given += dropped if isinstance(dropped, int) else 0
        page_run = as_text(page[1])
        if cursor != "0" and page_run != run:
            # Another server process (a restart, a failover) answered a page resumed from a cursor of the
            # walk's first: it may have stepped past entries there throughout. The walk starts over (what
            # it gave up and wrote stays given up and written; the next walk reads the rest).
            cursor, run = "0", ""
            continue
        cursor, run = as_text(page[0]), page_run
        if cursor == "0":
            return given, run
    # Cut at the bound: some of the target's stagings may be left, so the erase fails rather than go on
    # and say complete (the stagings it gave up stay given up; the next erase walks again).
    raise RedisRecallError(
        f"recall erase: the walk of the tenant's bucket map for its stagings did not end within {_MAX_PAGES} "
        "pages (HSCAN of <tenant>:bk); the target's stagings were not all given up and the erase did not "
        "complete"
    )
