"""Erasure's removals: the ``ERASE`` script and the calls that send it, batch by batch.

:mod:`agentium_recall_redis.erase` lists the target's sources (and its sweep
the rows no index leads to); this module removes them. Each ``ERASE`` call is
a write (token-fenced, :mod:`agentium_recall_redis.writes`) of at most
:data:`_ROWS_PER_CALL` sources and ``max_terms_per_call`` postings (but at
least one source).

**A call cut off.** A call whose reply is lost past the erase's deadline is
settled in the background like any write. Its settlement is started with the
erase's target as its owners (``owner_prefix``: ``""``, ``u/``, ``u/s/`` or a
session's owner key), so an erase of another user or session of the tenant
does not wait for it (a late copy only removes rows of this target), while an
erase of the same target, or of one it covers or that covers it, still does
(:class:`~agentium_recall_redis.settlements.Settlements`).

**A swept row deleted meanwhile.** A row found only by the sweep (its
revision entry damaged) is erased by number, and its ``ids`` and ``rev``
entries go only if ``ids`` still names it. A ``DELETE`` of that document
landing between the sweep and its ``ERASE`` (deletes are not fenced: they
only remove) removes the row and writes a deletion tombstone under its id;
so the ids of the target's swept rows are sent with the call that takes
them as tombstones to drop as well (one goes only while it is a tombstone
and ``ids`` names no row for it), and no tombstone with the id is left.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import OpContext

from .erase_sweep import MINE, VOUCHED
from .keys import owner_key, owner_of_source_id
from .lua import CHECK, ROWS, TOKEN, Script

if TYPE_CHECKING:
    from .erase import EraseOps
    from .link import Link
    from .writes import Call

__all__ = ["ERASE", "erase_entries", "owner_key_of"]

#: Sources one ``ERASE`` call is sent at most (its postings bound it further).
_ROWS_PER_CALL: Final = 256

#: Erase sources. KEYS: P:ids, token. ARGV: P, token ttl, postings budget, row count, tombstone count,
#: (row sid, its owner key, row number or "") triples..., tombstone sids.... Removes rows in order while
#: their postings fit the budget (at least one), all postings at once; HDELs covered tombstones. A row is
#: the one ``P:ids`` names for the sid, or the given row number (a row the sweep found,
#: :mod:`~agentium_recall_redis.erase_sweep`; its ``ids``/``rev`` entries go only if ``ids`` names that
#: row). A row is dropped only when it is the sid's own (``MINE``): a ``P:ids`` entry edited to name
#: another owner's row never erases that row (the entry goes, the row stays, and the line says "-"; the
#: sweep then finds the target's own row). Returns
#: {'ok', result, backlog}: result is "<rows taken>" then one line per taken row: its digest if it has
#: the digest form, else "" (see ``VOUCHED``), or "-" for a row already gone. No id, text or field of
#: another form goes into the result (the token keeps it for 10 minutes): a kind, seq or digest edited
#: to hold a line break could otherwise shift the report onto another row.
ERASE = Script(
    "erase",
    CHECK
    + ROWS
    + VOUCHED
    + MINE
    + TOKEN
    + """
local budget, nr, nt = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- A source whose revision goes leaves the erasure index's id sets with it (best effort, as drop's).
local function unlist(sid)
  for _, key in ipairs(ix_keys(P, 'is', '', sid)) do
    if type_of(key) == 'zset' then redis.call('ZREM', key, sid) end
  end
end
for _, key in ipairs({':ids', ':rev', ':bk', ':bn'}) do need(P .. key, 'hash') end
need(P .. ':pend', 'zset')
local plans, lines, used, taken = {}, {}, 0, 0
for i = 1, nr do
  local sid, okey, at = ARGV[3 + 3 * i], ARGV[4 + 3 * i], ARGV[5 + 3 * i]
  local n = at
  if at == '' then n = redis.call('HGET', P .. ':ids', sid) end
  local row = n and redis.call('HMGET', P .. ':m:' .. n, 'b', 'kind', 'terms', 'o')
  if row and row[1] and mine(P .. ':m:' .. n, sid, okey) then
    local d, cnt = plan_drop(P, n, row[1], row[2], row[3], math.huge)
    if taken > 0 and used + cnt > budget then break end
    used = used + cnt
    plans[#plans + 1] = {d = d, sid = sid, o = row[4], at = at}
    lines[#lines + 1] = vouched(P .. ':m:' .. n)
  else
    plans[#plans + 1] = {sid = sid, gone = true, at = at}
    lines[#lines + 1] = '-'
  end
  taken = taken + 1
end
local buckets = {}
for _, p in ipairs(plans) do
  if p.d then
    drop(P, p.d)
    buckets[p.d.b] = p.o
  end
  if p.at == '' or redis.call('HGET', P .. ':ids', p.sid) == p.at then
    redis.call('HDEL', P .. ':ids', p.sid)
    redis.call('HDEL', P .. ':rev', p.sid)
    unlist(p.sid)
  end
end
for i = 1, nt do
  local sid = ARGV[5 + 3 * nr + i]
  local rev = redis.call('HGET', P .. ':rev', sid)
  if rev and string.sub(rev, 1, 1) == '-' and not redis.call('HGET', P .. ':ids', sid) then
    redis.call('HDEL', P .. ':rev', sid)
    unlist(sid)
  end
end
-- A bucket left empty goes with its owner key, P:pend unread (that read had no bound): its stagings are its
-- owner's, given up before a call's first ERASE, and the fence refuses new ones. One begun in a lapse of the
-- fence is given up by a later give-up (no owner holds its bucket), and its COMMIT refuses (erase_stagings).
for b, o in pairs(buckets) do
  if tonumber(redis.call('HGET', P .. ':bn', b) or '0') <= 0 then
    redis.call('HDEL', P .. ':bn', b)
    if o and redis.call('HGET', P .. ':bk', o) == b then redis.call('HDEL', P .. ':bk', o) end
    if type_of(P .. ':kb') == 'hash' then redis.call('HDEL', P .. ':kb', b) end
  end
end
return done(fmt(taken) .. '\\n' .. table.concat(lines, '\\n'), backlog(P))
""",
)


async def erase_entries(
    store: EraseOps,
    link: Link,
    prefix: str,
    entries: Sequence[tuple[str, str, str]],
    ctx: OpContext,
    *,
    owners: frozenset[str],
    tombs: Sequence[str] = (),
    swept_ids: Collection[str] = (),
) -> list[tuple[str, str]]:
    """Run ``ERASE`` over ``entries`` (id, owner key, row number or "") and ``tombs``; (key, digest) erased.

    The key is an entry's id, or its row number when it has one (a row the sweep found). ``tombs``
    go with the first call. ``swept_ids``: ids of entries the sweep found that are the target's own;
    each goes as a tombstone to drop too with every call its entry is sent in (see the module).
    ``owners``: the erase's target as :meth:`~.writes.Writer.write` takes it (see the module).
    """
    room = store.config.max_terms_per_call
    erased: list[tuple[str, str]] = []
    pending = list(entries)
    first = list(tombs)
    while pending or first:
        batch = pending[:_ROWS_PER_CALL]
        args = [arg for entry in batch for arg in entry]
        # Sent with each call that carries the row, taken or not: a delete landing before the call that
        # takes it is then dropped there (one landing after finds the row gone and writes nothing).
        dropped = list(dict.fromkeys([*first, *(sid for sid, _, n in batch if n and sid in swept_ids)]))
        await store.renew(ctx)
        call: Call = (ERASE, [room, len(batch), len(dropped), *args, *dropped])
        written = await store.writer.write(link, prefix, [call], ctx, "recall erase", owners=owners)
        head, *lines = written.results[0].split("\n")
        taken = int(head)
        for (sid, _, n), line in zip(batch[:taken], lines, strict=False):
            if line != "-":  # "-": the row was already gone
                erased.append((n or sid, line))
        pending = pending[taken:] if taken > 0 else pending[1:]
        first = []
        ctx.raise_if_expired("recall erase")
    return erased


def owner_key_of(sid: str) -> str:
    """The owner key a source id names (``""``, which no row holds, for an id no store makes).

    For a tenant target too: an ``ids`` entry edited to name another row must not erase that row under
    this id (its report line would carry the other source's digest). Every row of the tenant still
    goes: the sweep (:mod:`~agentium_recall_redis.erase_sweep`) takes what no id vouched for.
    """
    owner = owner_of_source_id(sid)
    return "" if owner is None else owner_key(owner)
