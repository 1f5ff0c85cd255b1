"""Erasure in the Redis recall store: a target's rows, postings, revisions and empty buckets removed.

:meth:`~agentium_recall_redis.store.RedisRecallStore.erase` (docs/erasure.md)
runs here. Every command touches the target's tenant only (its hash-tag
slot): the store never lists keys (no ``KEYS``, no ``SCAN``), so no other
tenant is ever read.

**Finding the target's sources.** Every source id the tenant ever held is a
field of ``P:rev`` (its current revision, or ``-<revision>`` once deleted).
A tenant, user or session target is found by ``HSCAN`` over that one hash
of the tenant, each id decoded (:func:`~agentium_recall_redis.keys.owner_of_source_id`)
and kept when the target covers its owner (``EraseTarget.covers_owner``:
owner fields equal, never a prefix, so ``session-1`` never takes
``session-10``). A groups target reads its session's group set (``P:g:<b>``)
by seq, and each group's id is built from the session and the seq, never
read from its row (an id edited there must not redirect the erase to
another session's group). A user or session target of an *indexed* tenant
reads its own ids from the erasure index instead, and sweeps its own rows
(:mod:`.erase_index`); a real one of a tenant not yet indexed indexes it
first (:mod:`.erase_build`). A call takes at most ``max_items`` sources.
Once those indexes have given up every source, a sweep of the tenant's
rows by number (:mod:`agentium_recall_redis.erase_sweep`) finds the rows a
damaged index no longer leads to (a ``P:ids`` entry redirected, a group-set
member removed), erases them by number and says so in the report.

**Removing.** The ``ERASE`` script (:mod:`agentium_recall_redis.erase_rows`;
atomic, token-fenced like every write, at most ``max_terms_per_call``
postings per call but at least one source) removes each source's row
hash, text, canonical bytes, term list, group entry and *every* posting at
once (never queued as garbage: a posting's key holds a word of the text),
its ``P:ids`` and ``P:rev`` fields (no tombstone), and a bucket left empty
with its owner key. Deletion tombstones of the target's earlier deleted
documents go too, and so does one a delete wrote meanwhile for a row only
the sweep found. Once nothing
else of the target is left, stagings of its owners (a large source begun
and never published) are given up; then queued garbage of the tenant
(postings of rows removed, replaced or given up) is collected until none
is left, and a tenant target, once nothing of it remains, loses its
counters and hashes: no key of the tenant is
left but settlement tokens (``P:w:<token>``, which hold no content and
expire within 10 minutes).

**Writes racing it.** Each call first raises an erasure fence over the
target's owners (``P:ef``, :data:`~agentium_recall_redis.erase_scripts.FENCE`):
while it holds, the writing scripts refuse their sources before their first
write. Then it gives up the target's stagings, before listing anything and
again after its sweep, and lowers the fence when it ends. Each call holds
the fence under its own id and keeps it up between its round trips
(:class:`~agentium_recall_redis.erase_fence.FenceHold`): another call of
the same owners ending never lowers it.

**Writes cut off earlier.** A write whose reply was lost is settled in the
background (:mod:`agentium_recall_redis.writes`); an erase first waits for
the settlements of its tenant's writes of the owners its fence covers (or of
owners unknown), at most ``settle_timeout_s``, so each such write has
applied — and is erased — or been fenced and never applies; not for other
tenants' or owners', nor for cleanup (a staging given up, garbage
collected: it writes no words, and the erase does both itself;
:mod:`agentium_recall_redis.settlements`), nor for another erase's own
cut-off ``ERASE`` call unless one target covers the other
(:mod:`agentium_recall_redis.erase_rows`). If one is still unsettled the
erase raises and removes nothing (the engine keeps the erasure pending;
resume it), saying why: a settlement still running, or one stranded because
its event loop stopped or closed first (it counts until ``settle_timeout_s``
after its write was cut off, as a running one gives up then). Past that
bound a settlement no longer counts: one that gave up without reaching the server
left its write's outcome unknown, and that write, if the network held it
longer, could still land after the erase.

**How physical.** Redis frees the keys at once, but copies written before
the erasure — the append-only file until it is rewritten
(``BGREWRITEAOF``), an RDB snapshot until the next save, replicas and
backups — are beyond the store: a report that removed anything says
``unreferenced`` and why.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

import attrs

from agentium_harness.plugin_api import (
    EraseLevel,
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    PhysicalErasure,
    SessionKey,
    SourceOwner,
    before_cancel,
    checked_argument,
    count_items,
    group_sessions,
    group_source_id,
)

from .erase_build import BUILD_SCRIPTS, index_source
from .erase_fence import FenceHold
from .erase_index import (
    INDEX_SCRIPTS,
    index_prefix,
    indexed_sids,
    listed,
    mark_indexed,
)
from .erase_rows import ERASE, erase_entries, owner_key_of
from .erase_scripts import (
    FENCE,
    GROUP_SIDS,
    REV_SCAN,
    ROW_INFO,
    SCAN_REPLY_CAP,
    TENANT_DROP,
    scan_page,
)
from .erase_stagings import STAGING_SCRIPTS, abort_stagings, owner_prefix
from .erase_sweep import SWEEP, SWEEP_END, Backfill, Swept, noted, own_ids, sweep_rows, walk_bounds
from .errors import RedisRecallError
from .keys import owner_key, owner_of_source_id, stored_seq, tenant_prefix
from .link import Command, Link, as_text
from .lua import Script
from .scripts import COLLECT

if TYPE_CHECKING:
    from .config import RedisRecallConfig
    from .link import Reply
    from .server import Arg, ServerErrors
    from .writes import Writer

__all__ = [
    "ERASE",
    "ERASE_SCRIPTS",
    "GROUP_SIDS",
    "REV_SCAN",
    "ROW_INFO",
    "SCAN_REPLY_CAP",
    "TENANT_DROP",
    "EraseOps",
    "erase_target",
]


class StoreCall(Protocol):
    """The store's round trip of read-only commands (on ``ready``'s link if given)."""

    def __call__(
        self,
        commands: Sequence[Command],
        ctx: OpContext,
        operation: str,
        *,
        ready: Link | None = None,
        checked: bool = False,
    ) -> Awaitable[list[Reply]]:
        """Send ``commands`` in one round trip; errors become the store's typed errors."""
        ...


async def _no_renew(ctx: OpContext) -> None:
    """What a dry run renews: it raises no fence."""


@attrs.frozen(slots=True)
class EraseOps:
    """What erasure uses of its store: its config, bounded calls, error mapping and writer.

    The store hands them over when it erases, so this module never reaches
    into the store's private attributes.
    """

    #: The store's configuration (key prefix, per-call bounds, settle timeout).
    config: RedisRecallConfig
    #: The running loop's link, connecting and checking the server on its first call.
    ready: Callable[[OpContext, str], Awaitable[Link]]
    #: One round trip of read-only commands.
    call: StoreCall
    #: A read-only script, re-sent if the server lost its script cache.
    script: Callable[[Script, Sequence[str], Sequence[Arg], OpContext, str], Awaitable[Reply]]
    #: Turns a server's refusal into the store's typed error.
    errors: ServerErrors
    #: The store's writer: guarded writes and their settlements.
    writer: Writer
    #: Keeps the running erase call's fence up (:meth:`.erase_fence.FenceHold.renew`); run between its
    #: round trips. Nothing for a dry run, which raises none.
    renew: Callable[[OpContext], Awaitable[None]] = _no_renew


#: ``COLLECT`` calls one erase makes at most to empty the tenant's garbage queue.
_MAX_COLLECT: Final = 4096

#: The only digest form a report carries (the engine's); anything else is reported as "".
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")

#: What a report that removed anything says is left, and where.
LEFT_OUTSIDE: Final = (
    "Redis freed the keys at once; copies written before the erasure stay where the store cannot reach: "
    "the append-only file until it is rewritten (BGREWRITEAOF), an RDB snapshot until the next save, "
    "replicas and backups"
)

#: The erase scripts (not loaded at open: the first call of each sends its body once).
ERASE_SCRIPTS: Final = (
    ERASE,
    REV_SCAN,
    ROW_INFO,
    GROUP_SIDS,
    TENANT_DROP,
    FENCE,
    *STAGING_SCRIPTS,
    SWEEP,
    SWEEP_END,
    *INDEX_SCRIPTS,
    *BUILD_SCRIPTS,
)


async def _scan_sids(
    store: EraseOps, prefix: str, target: EraseTarget, want: int, ctx: OpContext, *, backfill: Backfill | None
) -> tuple[list[str], list[str], bool]:
    """The target's current sources (at most ``want``) and deletion tombstones, from ``P:rev``.

    Returns (current ids, tombstone ids, whether more current ones were seen past ``want``).
    """
    rows: list[str] = []
    tombs: list[str] = []
    seen: set[str] = set()
    cursor = "0"
    more = False
    while True:
        await store.renew(ctx)
        cursor, fields = await scan_page(store, prefix, cursor, ctx, backfill=backfill)
        for raw_sid, raw_rev in zip(fields[::2], fields[1::2], strict=True):
            sid = as_text(raw_sid)
            if sid in seen:
                continue
            seen.add(sid)
            owner = owner_of_source_id(sid)
            covered = target.level is EraseLevel.TENANT or (owner is not None and target.covers_owner(owner))
            if not covered:
                continue
            more = listed(sid, as_text(raw_rev).startswith("-"), rows, tombs, want) or more
        if cursor == "0" or more:
            return rows, tombs, more


async def _group_sids(
    store: EraseOps, prefix: str, target: EraseTarget, want: int, ctx: OpContext
) -> tuple[list[str], bool]:
    key = target.session_key
    assert key is not None
    ranges = [str(v) for r in target.groups for v in (r.start, r.stop)]
    args: list[str | int] = [prefix, owner_key(SourceOwner.of_session(key)), want + 1, *ranges]
    reply = list(await store.script(GROUP_SIDS, [f"{prefix}:bk"], args, ctx, "recall erase") or ())
    # Each id is the target session's own, built from the seq: never what the row hash says it is.
    # A score the store never writes (0.5, inf) names no group of it.
    seqs = [seq for seq in (stored_seq(s) for s in reply[:want]) if seq is not None]
    return [group_source_id(key, seq) for seq in seqs], len(reply) > want


def _removed(sid: str, digest: str) -> tuple[SessionKey, int, str] | None:
    """A removed group's (session, seq, digest) for the report; ``None`` for a document.

    Whether it is a group, and its seq, come from the source id the store
    wrote (checked canonical by :func:`owner_of_source_id`), not from the
    row's ``kind`` and ``seq`` fields: a row changed outside the store must
    neither be reported as a document nor stop the report (``int("abc")``).
    The digest is ``""`` unless it has the digest form (the scripts check it
    too): the engine keeps it in the tombstone and refuses any other text.
    """
    if _DIGEST.fullmatch(digest) is None:
        digest = ""
    owner = owner_of_source_id(sid)
    if owner is None or owner.user is None or owner.session is None or not sid.startswith("group/"):
        return None
    return SessionKey(owner.tenant, owner.user, owner.session), int(sid.rsplit("/", 1)[1]), digest


async def _collect_all(store: EraseOps, link: Link, prefix: str, ctx: OpContext) -> int:
    """Collect the tenant's queued garbage until none is left (bounded); the backlog left."""
    backlog = 1
    for _ in range(_MAX_COLLECT):
        await store.renew(ctx)
        reply = await store.script(
            COLLECT, [f"{prefix}:gc"], [prefix, store.config.max_terms_per_call], ctx, "recall erase"
        )
        backlog = int(reply) if isinstance(reply, int) else 0
        if backlog <= 0:
            return 0
    return backlog


async def erase_target(
    store: EraseOps, target: EraseTarget, ctx: OpContext, *, dry_run: bool, max_items: int
) -> EraseReport:
    """Erase (or, ``dry_run``, count) up to ``max_items`` sources of ``target``; see the module."""
    # Exactly a bool, before anything is read or waited for: 0 (a host's "no" from a config flag)
    # was taken for its truth and erased for real, "no" ran a dry run (the core's adapters refuse both).
    checked_argument(dry_run, bool, "dry_run", "recall erase")
    prefix = tenant_prefix(store.config.key_prefix, target.tenant_id)
    link = await store.ready(ctx, "recall erase")
    fence = FenceHold(store.script, prefix, owner_prefix(target))  # its own holder, never another's
    if not dry_run:
        # A write this store cut off earlier is settled in the background: until it is, its copy may
        # still land. Wait for it (applied: erased below; fenced: never applies), until a margin before
        # the deadline: the engine cancels the call there, and a wait ending there too raced it (the
        # host was told a bare timeout instead of the refusal below, as the two timers fell).
        left = ctx.time_left()
        wait = store.config.settle_timeout_s
        if left is not None:
            wait = min(wait, before_cancel(left))
        # Only settlements of the owners this erase fences: waiting for other tenants' or owners', or for
        # cleanup (which writes no words; this erase gives up stagings and collects garbage itself),
        # refused every erase under steady traffic. The refusal says what is pending (running, stranded).
        settlements, under = store.writer.settlements, owner_prefix(target)
        if pending := await settlements.wait(max(0.0, wait), scope=prefix, under=under, cleanup=False):
            raise RedisRecallError(
                f"recall erase: {pending.reason()}; nothing was erased. Erase again "
                + ("once the server answers" if pending.settling else "later")
            )
    if not dry_run:
        # Fence the target's owners, then give up their stagings, before anything is listed: a write
        # landing from now on is refused (INDEX, BEGIN, COMMIT), and a staging begun before cannot
        # publish (its COMMIT finds it gone) after the rows below are read and erased. Without both, a
        # COMMIT or a BEGIN landing during the erasure published the erased owner's words after its
        # sweep, and they stayed searchable (tests/test_erase_races.py).
        await fence.hold(ctx)
        store = attrs.evolve(store, renew=fence.renew)  # kept up while the call runs, page by page
    try:
        return await _erase_fenced(
            store, link, prefix, target, fence, ctx, dry_run=dry_run, max_items=max_items
        )
    except Exception:
        if not dry_run:  # a call that failed lowers its fence if it can (else the fence ends by itself)
            with contextlib.suppress(Exception):
                await fence.lower(ctx)
        raise


async def _erase_fenced(
    store: EraseOps,
    link: Link,
    prefix: str,
    target: EraseTarget,
    fence: FenceHold,
    ctx: OpContext,
    *,
    dry_run: bool,
    max_items: int,
) -> EraseReport:
    """The body of :func:`erase_target`, run once the target's owners are fenced (unless ``dry_run``)."""
    if not dry_run:
        await abort_stagings(store, prefix, target, ctx)
    # A user, session or groups target of an indexed tenant reads only its own entries of the erasure index
    # (erase_index, erase_build); any other walks the tenant, backfilling the index as it goes (a real erase).
    okp = index_prefix(target)
    source = await index_source(store, prefix, okp, ctx, dry_run=dry_run)  # a real erase indexes it first
    # (A tenant target's walk empties the index anyway.) A walk that left an entry out marks nothing.
    fill = Backfill() if not dry_run and okp and not source else None
    mode = "b" if fill is not None else ("p" if source and not dry_run else "")
    # Read before the first pass erases anything (erase_walk): a damaged counter fails closed here.
    bounds = None if source else await walk_bounds(store, prefix, ctx)
    if target.groups:
        rows, more = await _group_sids(store, prefix, target, max_items, ctx)
        tombs: list[str] = []
    elif source:
        rows, tombs, more = await indexed_sids(store, prefix, target, max_items, ctx, prune=not dry_run)
    else:
        rows, tombs, more = await _scan_sids(store, prefix, target, max_items, ctx, backfill=fill)
    walked = not target.groups and not source and not more  # the whole revision hash read (and backfilled)
    found: list[tuple[str, str]] = []  # (sid, digest) of rows removed
    # Each source as (id, owner key, row number: "" to find it through P:ids); the script drops a row
    # only when the row says the same id or owner key.
    entries = [(sid, owner_key_of(sid), "") for sid in rows]
    if dry_run:
        planned: list[str] = []  # row numbers the first pass takes
        if rows:
            pairs = [arg for sid, okey, _ in entries for arg in (sid, okey)]
            info = await store.script(ROW_INFO, [f"{prefix}:ids"], [prefix, *pairs], ctx, "recall erase")
            for sid, entry in zip(rows, info or (), strict=True):
                if entry is not None:  # a row that is not current is nil (false in Lua)
                    found.append((sid, as_text(entry[0])))
                    planned.append(as_text(entry[1]))
        swept: list[Swept] = []
        if not more:
            swept, more = await sweep_rows(
                store, prefix, target, max_items - len(rows), planned, ctx, source=source, bounds=bounds
            )
            found.extend((row.report_sid, row.digest) for row in swept)
        report = _report(found, more, PhysicalErasure.REMOVED if not found else PhysicalErasure.UNREFERENCED)
        return noted(report, swept, dry_run=True)
    # A call cut off is settled in the background as this target's (erase_rows): another owner's erase
    # does not wait for it.
    owners = frozenset({owner_prefix(target)})
    found.extend(await erase_entries(store, link, prefix, entries, ctx, owners=owners, tombs=tombs))
    swept = []
    await fence.hold(ctx)  # raised again before the sweep, whatever the time (renew also does, when due)
    if not more:
        # The second pass: rows of the target no index leads to (see erase_sweep), erased by number.
        swept, more = await sweep_rows(
            store,
            prefix,
            target,
            max_items - len(rows),
            (),
            ctx,
            source=source,
            mode=mode,
            fill=fill,
            bounds=bounds,
        )
        if walked and fill and fill.complete and not more:  # every id and row is listed now (erase_index)
            await mark_indexed(store, prefix, ctx)
        if swept:
            by_number = [(row.sid, row.okey, row.n) for row in swept]
            named = {row.n: row.report_sid for row in swept}
            erased = await erase_entries(
                store, link, prefix, by_number, ctx, owners=owners, swept_ids=own_ids(target, swept)
            )
            found.extend((named[n], digest) for n, digest in erased)
    if not more:
        # Again once the rows are gone: a staging begun during the erasure (after the first abort) and
        # still unpublished would otherwise publish its words after the sweep. One published before
        # now is a row the sweep above found. A crashed writer's staging goes too (its postings hold
        # its words until its lease ends).
        await store.renew(ctx)
        await abort_stagings(store, prefix, target, ctx)
    left = await _collect_all(store, link, prefix, ctx)
    if target.level is EraseLevel.TENANT and not more:
        await store.script(TENANT_DROP, [f"{prefix}:ids"], [prefix], ctx, "recall erase")
    # Lowered after every call, partial ones too: a write landing before the next call is a row that
    # call lists. A call that fails leaves it up until it ends by itself (FENCE_MS).
    await fence.lower(ctx)
    physical = PhysicalErasure.UNREFERENCED if found else PhysicalErasure.REMOVED
    report = noted(_report(found, more, physical), swept, dry_run=False)
    if left:
        detail = f"{left} removed rows' postings are still queued for collection; erase again to collect them"
        return EraseReport(
            report.counts,
            report.sessions,
            report.status,
            PhysicalErasure.UNREFERENCED,
            _join(report.detail, detail),
        )
    return report


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _report(found: Sequence[tuple[str, str]], more: bool, physical: PhysicalErasure) -> EraseReport:
    # One source erased in two rows (its current one and an orphan the sweep found) is one source.
    seen: set[str] = set()
    unique: list[tuple[str, str]] = []
    for sid, digest in found:
        if sid and sid in seen:
            continue
        seen.add(sid)
        unique.append((sid, digest))
    found = unique
    groups = [g for g in (_removed(*row) for row in found) if g is not None]
    return EraseReport(
        count_items(group=len(groups), document=len(found) - len(groups)),
        group_sessions(groups),
        EraseStatus.PARTIAL if more else EraseStatus.COMPLETE,
        physical,
        LEFT_OUTSIDE if physical is PhysicalErasure.UNREFERENCED else "",
    )
