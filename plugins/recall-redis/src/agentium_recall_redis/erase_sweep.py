"""Erasure's second pass: a sweep of the tenant's rows by number, for rows no index leads to any more.

An erase finds its target's rows through indexes (:mod:`agentium_recall_redis.erase`):
``P:rev`` and ``P:ids`` for tenant, user and session targets, the session's
group set ``P:g:<b>`` for a groups target. Writes keep those indexes and the
rows together (each write is one Lua script), but an index damaged behind the
store's back — a ``P:ids`` entry edited to name another owner's row, a
group-set member removed — hides a row from them, and the erase would leave
its row hash, text, canonical bytes, postings (words in key names) and
vector in Redis while reporting complete.

So every erase that found all its indexed sources ends with a sweep (of
the target's own rows only, through the erasure index, in an indexed
tenant: :mod:`agentium_recall_redis.erase_index`). Rows
are numbered by one counter, ``P:n``, that only grows, so ``P:m:1`` to
``P:m:<P:n>`` are every row the tenant ever had — unless the counter
itself was lowered or deleted behind the store's back. So each row is also
listed, in the script that writes it, in the tenant's row set ``P:rows``
(member and score its number; it leaves with the row), and after the
counter's numbers the sweep reads the rows that set lists past them: a
damaged counter and a damaged index together no longer hide a row (both
the counter and the row set would have to be damaged too). The sweep reads
pages of :data:`SWEEP_PAGE` row numbers (one bounded script call each, its
reply at most :data:`SWEEP_REPLY_CAP` bytes, resumed where a full one
stopped), by number — no key pattern, no ``SCAN``, no other tenant's
key — and judges each row by its
own fields: its owner key ``o`` decides when it is one the store writes
and the bucket map ``P:bk`` files it under the row's bucket (it chose the
bucket: an id edited to name the target never takes another owner's row,
nor does an owner key edited alone), its id ``sid`` when the owner key is
unreadable or filed elsewhere; for a group the seq (the row's ``seq``
field, else its id's) must be in the target's ranges.
The script sends back only rows whose owner key or id starts as the
target's would, each field only when no longer than any the store writes,
so a field grown behind the store's back is never transferred. What the
sweep finds is erased by the same ``ERASE`` script, by row number, and the
report says the index was damaged (a WARNING and a span event too).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs

from agentium_harness.plugin_api import (
    EraseLevel,
    EraseReport,
    EraseTarget,
    OpContext,
    SessionKey,
    SourceOwner,
    current_span_event,
    encode_segment,
    group_source_id,
)

from .erase_ixscores import SCORE_CHECK
from .erase_walk import NUMBER_END, SET_PAGE, checked_number_walk
from .errors import RedisRecallError
from .keys import owner_from_key, owner_of_source_id, stored_seq
from .link import as_text
from .lua import IX, Script
from .scripts import FIELD_CAP
from .server import Arg

if TYPE_CHECKING:
    from .erase import EraseOps

__all__ = [
    "MINE",
    "ROW_END",
    "SWEEP",
    "SWEEP_END",
    "SWEEP_PAGE",
    "SWEEP_REPLY_CAP",
    "VOUCHED",
    "Backfill",
    "Swept",
    "WalkBounds",
    "judge",
    "noted",
    "own_ids",
    "sweep_rows",
    "walk_bounds",
]

logger = logging.getLogger("agentium.plugins.recall_redis")


@attrs.define(slots=True)
class Backfill:
    """A walk filling the erasure index (:mod:`.erase_index`): whether every entry it met went in.

    A page that met an index key of another type (damage) left its entries out: ``complete`` goes
    ``False`` and the walk must not mark the tenant indexed, or once that key was repaired (deleted) the
    owner's erasure would trust an index lacking them and miss their sources.
    """

    complete: bool = True

    def read(self, head: str) -> str:
        """``head`` (a page's first reply element) without the ``*`` a page that left an entry out puts first.

        First, not last: a sweep's head may be a place ending in a row-set member (:mod:`.erase_walk`).
        """
        if head.startswith("*"):
            self.complete = False
            return head[1:]
        return head


#: Row numbers one ``SWEEP`` call reads.
SWEEP_PAGE: Final = 1024

#: The most bytes one ``SWEEP`` reply takes (each element counted with 16 bytes of framing, more than
#: RESP uses). A row's fields take at most about 66 KB (two of :data:`~agentium_recall_redis.scripts.
#: FIELD_CAP`), so a reply always has room for at least one row; a call whose rows would pass it stops
#: early and the next call goes on from there. 1,024 rows of the longest fields were about 64 MiB.
SWEEP_REPLY_CAP: Final = 1024 * 1024

# The digest of row hash ``key`` a report may carry: its ``dg`` field (``rev`` in a row without one) when
# it is ``sha256:`` and 64 lowercase hex digits, else ''. Each report line goes into the erasure's
# tombstone, and the engine refuses any other digest (the erasure could then never complete); its length
# is read first, so a field grown behind the store's back is never copied, returned or kept in the token.
VOUCHED: Final = """
local function vouched(key)
  local field = 'dg'
  if redis.call('HEXISTS', key, 'dg') == 0 then field = 'rev' end
  if redis.call('HSTRLEN', key, field) ~= 71 then return '' end
  local d = redis.call('HGET', key, field)
  if string.match(d, '^sha256:[0-9a-f]+$') then return d end
  return ''
end
"""

# Whether row hash `key` is the row of `sid`, owned by `okey` ("*": any row, for a row the sweep judged
# by its own fields): its owner field or its id says so. Either vouches, so one field edited behind the
# store's back neither leaves the row's content after an erasure nor lets an edited P:ids entry erase
# another owner's row (that needs both of the other row's fields edited to match).
MINE: Final = """
local function mine(key, sid, okey)
  local f = redis.call('HMGET', key, 'o', 'sid')
  return okey == '*' or f[1] == okey or f[2] == sid
end
"""

#: Lua: ``row_end(P)``, the highest row number the tenant has now: its counter ``P:n`` (when readable, at
#: most 15 digits), or the highest member of its row set ``P:rows`` under 1e15 if that is higher. A row
#: numbered past it is written later (each write takes the next number), so a walk of the rows need go no
#: further: such a row is listed by its own write, or (an erase) is not the fenced target's.
ROW_END: Final = """
local function row_end(P)
  local e = 0
  local t = redis.call('TYPE', P .. ':n')
  if (t['ok'] or t) == 'string' then
    local v = redis.call('GET', P .. ':n')
    if #v <= 15 and string.match(v, '^%d+$') then e = tonumber(v) end
  end
  t = redis.call('TYPE', P .. ':rows')
  if (t['ok'] or t) == 'zset' then
    local hi = redis.call('ZREVRANGEBYSCORE', P .. ':rows', '(1e15', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #hi > 0 then e = math.max(e, math.floor(tonumber(hi[2]))) end
  end
  return string.format('%d', e)
end
"""

#: The sweep's end (``row_end``), read once before its first page, and how many row numbers its walk by
#: number reads (up to the counter, ``number_end``: :mod:`.erase_walk`). KEYS: P:n. ARGV: P. Returns both
#: as text.
SWEEP_END = Script(
    "erase_sweep_end",
    ROW_END
    + NUMBER_END
    + """
local P = ARGV[1]
local e, last = row_end(P), 0
local t = redis.call('TYPE', P .. ':n')
if (t['ok'] or t) == 'string' then
  local v = redis.call('GET', P .. ':n')
  if #v <= 15 and string.match(v, '^%d+$') then last = tonumber(v) end
end
return {e, string.format('%d', math.max(0, number_end(P, math.min(last, tonumber(e)))))}
""",
)

#: One page of the sweep. KEYS: P:n. ARGV: P, its place (a row number ``first``, or a row-set place of
#: :mod:`.erase_walk`), page size, longest field, reply cap, owner-key prefix, source, mode, end, the last row
#: number to read by number (``WalkBounds.numbers``; "" for none), then id prefixes. With source "", the
#: page's row numbers are ``first`` to ``first + page - 1`` up to the counter P:n while ``first`` is within
#: it, else the next ``page`` members of the tenant's row set ``P:rows`` after the place (rows past a counter
#: damaged to a lower value, or deleted); neither past ``end`` (``SWEEP_END`` before the first page; "" for
#: none), so writes of other owners landing as fast as the sweep reads cannot keep it going. With source
#: ``ir:<prefix>`` (an indexed tenant, :mod:`agentium_recall_redis.erase_index`), the next ``page`` members of
#: that row set of the erasure index only. Mode "b" (backfill) adds each row of the page to the erasure
#: index's row sets of its owner key and id (one of another type is left alone, and the reply's first element
#: then starts with ``*``); mode "p" (prune) takes a member without a row out of the source set; "" writes
#: nothing. Returns {the place to go on from ("0": no row left), then per row of the page with a row hash
#: whose owner key starts with the owner-key prefix or whose id starts with an id prefix: n, owner key, id,
#: seq, digest (as ``vouched``), filed ("1" when the tenant's bucket map ``P:bk`` files the owner key under
#: the row's bucket, else "0")}. A field longer than the longest field (the seq: 20 bytes) comes back as "",
#: unread. The page stops early, before a row that would take the reply past the reply cap (each element
#: counted with 16 bytes of framing, more than RESP takes), so no reply is larger; the first row always goes,
#: and at most a row's worth of fields fits any cap of 1 MiB.
SWEEP = Script(
    "erase_sweep",
    IX
    + SCORE_CHECK
    + VOUCHED
    + SET_PAGE
    + """
local P, first, count, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not place_ok(first) then error('a sweep place the store never makes') end
local rcap, okp = tonumber(ARGV[5]), ARGV[6]
local function kind_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
local source, mode, stop_at = ARGV[7], ARGV[8], ARGV[9]
local listing = P .. ':rows'
if source ~= '' then
  listing = P .. ':' .. source
  -- The index is what leads to the target's rows: one of another type fails the erase, never skips them.
  local t = kind_of(listing)
  if t ~= 'zset' and t ~= 'none' then error('WRONGTYPE the erasure index holds another type of value') end
  -- A score changed since IX_MARKED (which repairs them) would hide its row from the range read below.
  if not ir_scores_ok(listing) then error('the erasure index holds a damaged score') end
end
local last = 0
if source == '' and kind_of(KEYS[1]) == 'string' then
  -- A counter of more than 15 digits (past what a Lua number holds exactly) was damaged: read as absent,
  -- the row set still leads to the rows.
  local v = redis.call('GET', KEYS[1])
  if #v <= 15 and string.match(v, '^%d+$') then last = tonumber(v) end
end
local upto = '+inf'
if source == '' and #stop_at <= 15 and string.match(stop_at, '^%d+$') then
  upto = stop_at
  last = math.min(last, tonumber(stop_at))
end
-- Rows the row set does not list are numbered below the lowest it listed when the erase began (ARGV[10],
-- erase_walk): no further by number. Read then, not now: the erase's first pass may have emptied the set.
if source == '' and #ARGV[10] <= 15 and string.match(ARGV[10], '^%d+$') then
  last = math.min(last, tonumber(ARGV[10]))
end
-- The page: row numbers (strings) in order, each with the place a next call would go on from at it.
local page, at, rest = {}, {}, '0'
local n0 = not string.find(first, ' ', 1, true) and tonumber(first)
if n0 and n0 <= last then
  local stop = math.min(last, n0 + count - 1)
  for i = n0, stop do
    page[#page + 1] = string.format('%d', i)
    at[#at + 1] = page[#page]
  end
  rest = string.format('%d', stop + 1)
elseif kind_of(listing) == 'zset' then
  -- From a (score, member) place (erase_walk): any number of members sharing a score is read past.
  local items, after = set_page(listing, first, count, upto)
  if after then rest = after end
  for _, item in ipairs(items) do
    if #item[1] <= 15 and string.match(item[1], '^%d+$') then
      page[#page + 1] = item[1]
      at[#at + 1] = item[3]
    end
  end
end
local out = {rest}
local size = 16 + #rest
local left = false  -- a backfill that left a row out (an index key of another type): '*' before the head
local function reply()
  if left then out[1] = '*' .. out[1] end
  return out
end
local function field(key, name, limit)
  if redis.call('HSTRLEN', key, name) > limit then return '' end
  return redis.call('HGET', key, name) or ''
end
local function starts(s, p) return string.sub(s, 1, #p) == p end
local bk = kind_of(P .. ':bk') == 'hash'
for i, n in ipairs(page) do
  local key = P .. ':m:' .. n
  local row = kind_of(key) == 'hash' and redis.call('HEXISTS', key, 'b') == 1
  if mode == 'p' and not row then redis.call('ZREM', listing, n) end  -- a listed row since removed
  if row then
    local o, sid = field(key, 'o', cap), field(key, 'sid', cap)
    if mode == 'b' then  -- backfill: the row into the erasure index's row sets of its owner key and id
      for _, set in ipairs(ix_keys(P, 'ir', o, sid)) do
        local t = kind_of(set)
        if t == 'zset' or t == 'none' then redis.call('ZADD', set, n, n) else left = true end
      end
    end
    local ours = starts(o, okp)
    for j = 11, #ARGV do ours = ours or starts(sid, ARGV[j]) end
    if ours then
      local filed = bk and o ~= '' and redis.call('HGET', P .. ':bk', o) == redis.call('HGET', key, 'b')
      local row = {n, o, sid, field(key, 'seq', 20), vouched(key), filed and '1' or '0'}
      local bytes = 0
      for _, v in ipairs(row) do bytes = bytes + 16 + #v end
      if #out > 1 and size + bytes > rcap then
        out[1] = at[i]  -- full: the next call goes on from this row
        return reply()
      end
      size = size + bytes
      for _, v in ipairs(row) do out[#out + 1] = v end
    end
  end
end
return reply()
""",
)


@attrs.frozen(slots=True)
class Swept:
    """A row of the target the sweep found: its number, what ``ERASE`` checks, and what the report says."""

    #: The row's number (``P:m:<n>``).
    n: str
    #: The row's id as read: its ``ids`` and ``rev`` entries go with it if ``ids`` names this row.
    sid: str
    #: What ``ERASE``'s ownership check compares: ``*``. The sweep judged the row by its own fields just
    #: before, and row numbers are never reused, so only its removal in between changes the verdict.
    okey: str
    #: The source id the report names: the row's id when it agrees with its owner key, else one built
    #: from the owner key and seq (a group), else ``""`` (a document whose id is damaged: counted).
    report_sid: str
    #: The row's digest as ``ERASE`` reports it (``""`` unless of the digest form).
    digest: str


def _prefixes(target: EraseTarget) -> tuple[str, list[str]]:
    """The owner-key prefix and id prefixes every row of ``target`` has (a superset: judged after)."""
    parts = [p for p in (target.user_id, target.session_id) if p is not None]
    okp = "".join(f"{encode_segment(p)}/" for p in parts)
    if target.level is EraseLevel.TENANT:
        return okp, []
    tail = "/".join(encode_segment(p) for p in (target.tenant_id, *parts))
    return okp, [f"doc/{tail}/", f"group/{tail}/"]


def _owner_of_key(tenant: str, okey: str) -> SourceOwner | None:
    try:
        return owner_from_key(tenant, okey)
    except (ValueError, TypeError):  # bad escapes, or not four segments: damage, vouches for nothing
        return None


def _group_sid(owner: SourceOwner, seq: int | None) -> str | None:
    """The id of group ``seq`` of ``owner``'s session, if ``owner`` is a session's and ``seq`` one."""
    if seq is None or owner.user is None or owner.session is None or owner.project or owner.repository:
        return None
    return group_source_id(SessionKey(owner.tenant, owner.user, owner.session), seq)


def _covered(target: EraseTarget, sid: str) -> bool:
    """Whether ``target`` takes source ``sid`` (a canonical id of its tenant)."""
    owner = owner_of_source_id(sid)
    if owner is None or owner.tenant != target.tenant_id:
        return False
    if sid.startswith("group/"):
        assert owner.user is not None and owner.session is not None
        key = SessionKey(owner.tenant, owner.user, owner.session)
        return target.covers_group(key, int(sid.rsplit("/", 1)[1]))
    return target.covers_owner(owner)


def own_ids(target: EraseTarget, swept: Sequence[Swept]) -> frozenset[str]:
    """The ids of ``swept`` rows that are ``target``'s own sources: the row's id, agreeing with its owner.

    Only these may lose a deletion tombstone with their row (:mod:`.erase_rows`): a row's id edited to
    name another owner's source never drops that source's tombstone.
    """
    return frozenset(
        row.sid for row in swept if row.sid and row.report_sid == row.sid and _covered(target, row.sid)
    )


def judge(
    target: EraseTarget, n: str, okey: str, sid: str, seq: str, digest: str, filed: str
) -> Swept | None:
    """The sweep's verdict on one row: :class:`Swept` when the row says it is the target's.

    Its owner key decides when it is one the store writes and the tenant's
    bucket map still files it under the row's bucket (``filed``: it chose
    the bucket, so the scope that sees the row): an id edited to name the
    target never takes another owner's row, and neither does an owner key
    edited alone (the bucket, the id and the group set still say whose the
    row is). Its id decides when the owner key is not readable or not filed
    under the row's bucket. A group's seq is its ``seq`` field, else the seq
    its id gives when the id names the same session. A tenant target takes
    every row.
    """
    owner = _owner_of_key(target.tenant_id, okey)
    id_owner = owner_of_source_id(sid)
    if owner is not None and filed != "1" and id_owner is not None:
        owner = None  # the owner key and the row's bucket disagree: one was edited, the id decides
    same = id_owner is not None and (owner is None or id_owner == owner)
    number = stored_seq(seq) if seq else None
    if number is None and same and sid.startswith("group/"):
        number = int(sid.rsplit("/", 1)[1])
    built = _group_sid(owner, number) if owner is not None else None
    named = sid if same and (built is None or built == sid) else (built or "")
    if target.level is EraseLevel.TENANT:
        return Swept(n, sid, "*", named, digest)
    if owner is not None:
        covered = _covered(target, built) if built is not None else target.covers_owner(owner)
    else:
        covered = _covered(target, sid)
    return Swept(n, sid, "*", named, digest) if covered else None


@attrs.frozen(slots=True)
class WalkBounds:
    """Where a walk of the tenant's rows ends, read once before an erase's first pass (``SWEEP_END``)."""

    #: The highest row number there is then (``row_end``): in a real erase the target's owners are
    #: fenced, so a row numbered past it is another owner's (a dry run plans what is).
    end: str
    #: The last row number read by number (``number_end``, :mod:`.erase_walk`): below the lowest row the
    #: row set listed then, which the first pass may erase.
    numbers: int


async def walk_bounds(store: EraseOps, prefix: str, ctx: OpContext) -> WalkBounds:
    """The bounds of a walk of the tenant's rows; ``RedisRecallDamagedError`` for a damaged counter."""
    reply = await store.script(SWEEP_END, [f"{prefix}:n"], [prefix], ctx, "recall erase")
    bounds = WalkBounds(as_text(reply[0]), int(as_text(reply[1])))
    checked_number_walk(bounds.numbers)  # a damaged counter fails closed (typed, WARNING), never walked
    return bounds


async def sweep_rows(
    store: EraseOps,
    prefix: str,
    target: EraseTarget,
    want: int,
    skip: Sequence[str],
    ctx: OpContext,
    *,
    source: str = "",
    mode: str = "",
    fill: Backfill | None = None,
    bounds: WalkBounds | None = None,
) -> tuple[list[Swept], bool]:
    """Rows of ``target`` left in the tenant (at most ``want``), and whether more were seen past it.

    ``skip`` holds row numbers the first pass already takes (a dry run,
    which removes nothing). Reads ``P:m:1`` to ``P:m:<P:n>``, then the rows
    the tenant's row set ``P:rows`` lists past the counter, one script call
    of :data:`SWEEP_PAGE` rows at a time, each reply at most
    :data:`SWEEP_REPLY_CAP` bytes (a full one is resumed where it stopped). With ``source``
    (``ir:<prefix>``) it reads that row set of the erasure index instead, and ``mode`` backfills or
    prunes the index as it goes (``SWEEP``; :mod:`.erase_index`); a backfill records in ``fill`` whether
    it left a row out. A walk of the tenant's rows goes by ``bounds`` (:func:`walk_bounds`, read before
    the erase's first pass; read now when not given).
    """
    okp, sid_prefixes = _prefixes(target)
    skipped = set(skip)
    found: list[Swept] = []
    # A place (erase_walk), as the script sent it: bytes, since it may end in a row-set member that is not
    # UTF-8, and text would send back another place (each such byte replaced: refused, or misplaced).
    first = b"1"  # row numbers from 1
    if not source and bounds is None:
        bounds = await walk_bounds(store, prefix, ctx)
    end, numbers = ("", "") if source or bounds is None else (bounds.end, str(bounds.numbers))
    while True:
        args: list[Arg] = [
            prefix,
            first,
            SWEEP_PAGE,
            FIELD_CAP,
            SWEEP_REPLY_CAP,
            okp,
            source,
            mode,
            end,
            numbers,
        ]
        args.extend(sid_prefixes)
        await store.renew(ctx)  # keeps a long erase call's fence up (a dry run's: nothing)
        reply = await store.script(SWEEP, [f"{prefix}:n"], args, ctx, "recall erase")
        head = reply[0] if isinstance(reply[0], bytes) else as_text(reply[0]).encode()
        if fill is not None and head.startswith(b"*"):  # a backfill page that left an entry out
            fill.complete = False
            head = head[1:]
        resume, rows = head, [as_text(v) for v in reply[1:]]
        for i in range(0, len(rows) - 5, 6):
            n = rows[i]
            if n in skipped:
                continue
            row = judge(target, n, *rows[i + 1 : i + 6])
            if row is None:
                continue
            if len(found) >= want:
                return found, True
            found.append(row)
        if resume == b"0":
            return found, False
        # Always forward: the script fails a page that would go on from where it began (erase_walk), and
        # a reply cut short by its cap goes on at a row after its first.
        if resume == first:
            raise RedisRecallError(
                "recall erase: a sweep page of the tenant's rows did not move on (damage); the rows it "
                "found were not erased"
            )
        first = resume


def noted(report: EraseReport, swept: Sequence[Swept], *, dry_run: bool) -> EraseReport:
    """``report`` saying, when the sweep found rows, that the index was damaged (logged and a span event)."""
    if not swept:
        return report
    verb = "would be erased" if dry_run else "were erased"
    detail = (
        f"the index was damaged: {len(swept)} row(s) of the target were reachable by no index entry "
        f"(an ids entry or a group-set member edited or removed outside the store) and {verb} after a "
        "sweep of the tenant's rows"
    )
    logger.warning("recall erase: %s", detail, extra={"agentium_operation": "recall erase"})
    current_span_event("agentium.recall.erase_index_damaged", {"agentium.rows": len(swept)})
    joined = f"{report.detail}; {detail}" if report.detail else detail
    return EraseReport(report.counts, report.sessions, report.status, report.physical, joined)
