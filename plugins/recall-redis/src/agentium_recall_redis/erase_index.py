"""The erasure index: a user's or a session's sources and rows, so their erasure reads only those.

Without it, a user or session erasure reads the tenant's whole revision
hash (``HSCAN`` of ``P:rev``) and sweeps every row number the tenant ever
had (:mod:`agentium_recall_redis.erase_sweep`): erasing one user of a
tenant holding millions of documents cost the whole tenant. So each write
also lists its source (the same Lua script, atomically with the row) under
the owner-key prefixes of its user and its session (``<user>/`` and
``<user>/<session>/``, encoded segments):

- ``P:is:<prefix>`` (sorted set, every score 0): the source ids, current or
  deleted (a deletion leaves its tombstone in ``P:rev``, which an erasure
  removes too). ``ERASE`` takes an id out when it removes its revision.
- ``P:ir:<prefix>`` (sorted set, member and score the row number): the rows,
  under the prefixes of both the row's owner key and its id (so a row whose
  ``P:ids`` entry was redirected, or whose group-set member was removed, is
  still swept). A removed row leaves them.

An indexed erase reads ``P:is`` in pages by lexicographic range (``IX_SCAN``:
a cursor that no removal can shift, so no id present throughout is skipped)
instead of the ``HSCAN``, and sweeps ``P:ir`` instead of the tenant's row
numbers: both follow the target's own sources.

**Data written before the index.** A tenant is *indexed* once ``P:ixm``
holds ``1``. A write finding nothing of its tenant stored (no ``P:n``,
``P:ids``, ``P:rev`` or ``P:rows``) marks it at once. An older tenant is not
marked: a real user or session erase call first walks the whole tenant,
listing the ids and rows it reads in the index, in a walk that resumes
where a call cut short left it (:mod:`.erase_build`), and its last page
marks the tenant: every id and row present throughout the walk was listed
by it, and every one written meanwhile by its write.
Until then nothing trusts the index, so an erasure never misses a source
written before it existed. A key of the index holding another type (damage)
fails the target's erasure before it lists anything (nothing erased) and
refuses its owner's writes (nothing written): never read as empty. A walk
whose backfill met one left its entries out, so it does not mark the tenant
(:class:`~agentium_recall_redis.erase_sweep.Backfill`). A score of the
target's sets changed behind the store's back (both are read by range) is
found and repaired before they are read (:mod:`.erase_ixscores`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import EraseLevel, EraseTarget, OpContext, encode_segment

from .erase_ixscores import IX_REPAIR, SCORE_CHECK, SCORES_DAMAGED, repair_scores, scores_damaged
from .erase_scripts import SCAN_REPLY_CAP, checked_page
from .errors import RedisRecallError
from .keys import owner_of_source_id
from .link import as_text
from .lua import IX, Script
from .scripts import FIELD_CAP

if TYPE_CHECKING:
    from .erase import EraseOps
    from .server import Arg

__all__ = [
    "INDEX_SCRIPTS",
    "IX_MARK",
    "IX_MARKED",
    "IX_SCAN",
    "MAX_TOMBS",
    "index_prefix",
    "indexed",
    "indexed_sids",
    "listed",
    "mark_indexed",
]

#: Ids one ``IX_SCAN`` call reads at most.
_IX_PAGE: Final = 1000
#: Deletion tombstones one erase call removes at most (more make the call ``partial``), indexed or not.
MAX_TOMBS: Final = 10_000


def listed(sid: str, tomb: bool, rows: list[str], tombs: list[str], want: int) -> bool:
    """Put a target's source in ``tombs`` or ``rows`` while each has room; True if it was left out.

    What both listings of an erase (the index's and the unindexed walk's) do with each id they find:
    at most :data:`MAX_TOMBS` tombstones and ``want`` current sources a call.
    """
    kept, bound = (tombs, MAX_TOMBS) if tomb else (rows, want)
    if len(kept) < bound:
        kept.append(sid)
        return False
    return True


#: Whether the tenant is indexed. KEYS: P:ixm, then the target's index keys (P:is:<prefix>, P:ir:<prefix>).
#: Returns 1 when P:ixm holds the string "1", else 0; 2 when it does but a score of the target's sets is out
#: of its range (:mod:`.erase_ixscores`). An indexed tenant's index key of another type than a sorted set
#: is an error, before the erase lists or removes anything: it fails closed, never read as empty.
IX_MARKED = Script(
    "erase_ix_marked",
    SCORE_CHECK
    + """
local function kind_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
if kind_of(KEYS[1]) ~= 'string' or redis.call('GET', KEYS[1]) ~= '1' then return 0 end
for i = 2, #KEYS do
  local t = kind_of(KEYS[i])
  if t ~= 'zset' and t ~= 'none' then error('WRONGTYPE the erasure index holds another type of value') end
end
if not is_scores_ok(KEYS[2]) or not ir_scores_ok(KEYS[3]) then return 2 end
return 1
""",
)

#: Mark the tenant indexed. KEYS: P:ixm. Leaves a key of another type alone (the tenant stays unindexed).
IX_MARK = Script(
    "erase_ix_mark",
    """
local t = redis.call('TYPE', KEYS[1])
t = t['ok'] or t
if t == 'string' or t == 'none' then redis.call('SET', KEYS[1], '1') end
return 1
""",
)

#: One page of a user's or session's ids. KEYS: P:is:<prefix>. ARGV: P, the range's start (``-``, or
#: ``(<id>`` after the last id read), how many members after it to step over (over-long ones), page size,
#: longest id, reply cap (bytes), prune ("1": an id without a revision, left by damage, leaves the id sets).
#: Returns {next start ("" once the set is read to its end), next step-over, then id, mark pairs}: mark "-"
#: for a deletion tombstone, "+" for a current source. An id longer than any the store writes is stepped
#: over, never sent; the reply stops before the id that would take it past the reply cap (each element
#: counted with 16 bytes of framing, the start's room kept), the next call going on from there.
IX_SCAN = Script(
    "erase_ix_scan",
    IX
    + SCORE_CHECK
    + """
local P, at, skipped, count = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local cap, rcap, prune = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local function kind_of(key)
  local t = redis.call('TYPE', key)
  return t['ok'] or t
end
if kind_of(KEYS[1]) == 'none' then return {'', '0'} end
-- A score changed since IX_MARKED (which repairs them) would make the lexicographic range skip ids.
if not is_scores_ok(KEYS[1]) then error('the erasure index holds a damaged score') end
local rev = kind_of(P .. ':rev') == 'hash'
local members = redis.call('ZRANGEBYLEX', KEYS[1], at, '+', 'LIMIT', skipped, count)
local out = {'', '0'}
local size = 64 + cap
for _, m in ipairs(members) do
  if #m > cap then
    skipped = skipped + 1
  else
    local r = rev and redis.call('HGET', P .. ':rev', m)
    if r then
      if #out > 2 and size + 33 + #m > rcap then
        out[1], out[2] = at, string.format('%d', skipped)
        return out
      end
      size = size + 33 + #m
      out[#out + 1] = m
      out[#out + 1] = string.sub(r, 1, 1) == '-' and '-' or '+'
    elseif prune then
      for _, key in ipairs(ix_keys(P, 'is', '', m)) do
        if kind_of(key) == 'zset' then redis.call('ZREM', key, m) end
      end
    end
    at, skipped = '(' .. m, 0
  end
end
if #members == count then out[1], out[2] = at, string.format('%d', skipped) end
return out
""",
)


def index_prefix(target: EraseTarget) -> str:
    """The owner-key prefix whose index sets hold ``target``'s sources: ``<user>/`` or ``<user>/<session>/``.

    ``""`` for a tenant target, which walks its whole tenant anyway. A groups target reads its session's.
    """
    if target.level is EraseLevel.TENANT:
        return ""
    key = target.session_key
    parts = (
        (key.user, key.session) if target.groups and key is not None else (target.user_id, target.session_id)
    )
    return "".join(f"{encode_segment(p)}/" for p in parts if p is not None)


async def indexed(store: EraseOps, prefix: str, okp: str, ctx: OpContext, *, repair: bool) -> bool:
    """Whether the tenant is indexed (``P:ixm``), so the erasure of owner-key prefix ``okp`` reads the index.

    Raises ``RedisRecallError`` when it is but one of ``okp``'s index keys holds another type (damage).
    When one of their scores is damaged (:mod:`.erase_ixscores`), it is logged and, with ``repair`` (a real
    erase), repaired before this returns True; without (a dry run), False: the dry run walks the tenant.
    """
    keys = [f"{prefix}:ixm", f"{prefix}:is:{okp}", f"{prefix}:ir:{okp}"]
    reply = await store.script(IX_MARKED, keys, [], ctx, "recall erase")
    if isinstance(reply, int) and reply == SCORES_DAMAGED:
        scores_damaged(okp, repair=repair)
        if not repair:
            return False
        await repair_scores(store, prefix, okp, ctx)
        return True
    return isinstance(reply, int) and reply == 1


async def mark_indexed(store: EraseOps, prefix: str, ctx: OpContext) -> None:
    """Mark the tenant indexed, once a walk of the whole tenant has backfilled the index (see the module)."""
    await store.script(IX_MARK, [f"{prefix}:ixm"], [], ctx, "recall erase")


async def indexed_sids(
    store: EraseOps, prefix: str, target: EraseTarget, want: int, ctx: OpContext, *, prune: bool
) -> tuple[list[str], list[str], bool]:
    """The target's current sources (at most ``want``) and deletion tombstones, from its index id set.

    What the ``HSCAN`` walk of :func:`~agentium_recall_redis.erase._scan_sids` gives, reading only the
    target's own ids. Returns (current ids, tombstone ids, whether more were seen past the bounds).
    """
    key = f"{prefix}:is:{index_prefix(target)}"
    rows: list[str] = []
    tombs: list[str] = []
    at, skip = "-", "0"
    while True:
        await store.renew(ctx)
        args: list[Arg] = [prefix, at, skip, _IX_PAGE, FIELD_CAP, SCAN_REPLY_CAP, "1" if prune else ""]
        reply = checked_page(await store.script(IX_SCAN, [key], args, ctx, "recall erase"))
        if len(reply) < 2 or len(reply) % 2:
            raise RedisRecallError("recall erase: a page of the erasure index is damaged; nothing was erased")
        at, skip = as_text(reply[0]), as_text(reply[1])
        more = False
        for raw_sid, raw_mark in zip(reply[2::2], reply[3::2], strict=True):
            sid = as_text(raw_sid)
            owner = owner_of_source_id(sid)
            if owner is None or owner.tenant != target.tenant_id or not target.covers_owner(owner):
                continue  # listed under the target's prefix by damage only: never the target's
            more = listed(sid, raw_mark == b"-", rows, tombs, want) or more
        if at == "" or more:
            return rows, tombs, more
        if not skip.isdigit():
            raise RedisRecallError("recall erase: a page of the erasure index is damaged; nothing was erased")


#: The erasure index's scripts, for the erase's list of scripts.
INDEX_SCRIPTS: Final = (IX_SCAN, IX_MARKED, IX_MARK, IX_REPAIR)
