"""Reading history back: pages of a session's groups, and pages of a user's sessions.

A page is read backwards from ``before_seq``: the snapshot first (loaded and
digest-checked like a run's), then the resident groups it holds and the
archived ones below its boundary, read in contiguous runs from the archive
and checked group by group (seq, owner, and the receipt digest the snapshot
keeps for it, when it keeps one). Damage fails the whole read with a typed
error; a group is never skipped. With ``view=True`` only groups with a
message in the session's view are returned, and retracted groups are
stepped over without being read (:class:`.history_view.ViewIndex`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Final, TypeVar

from .._errors import (
    ArchiveCorruptError,
    CapabilityError,
    ContractViolationError,
    InvalidArgumentError,
    OperationTimeoutError,
)
from .._history import MessageGroup
from .._observe import spans as observe
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.archive import HistoryArchive, check_archived_group
from .._ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot
from .._scope import SessionKey
from .._validators import valid_ids
from .adapter_lists import adapter_method, bounded_list, read_on
from .history_checks import MAX_APPEND_BYTES, check_before_seq
from .history_records import HistoryGroup, HistoryPage, ReadFence, SessionPage
from .history_view import ViewIndex
from .lifecycle import Ticket
from .load import load_in_call, load_in_call_fenced

__all__ = ["fetch_groups", "list_page", "read_page", "read_settled", "same_snapshot"]

#: Reads of one page (or one lookup), each from a fresh snapshot, while archived groups it names vanish
#: under a concurrent erasure; past them a missing group is reported as damage (see read_settled).
_READ_ATTEMPTS: Final = 3

T = TypeVar("T")


async def read_page(
    ticket: Ticket,
    *,
    archive: HistoryArchive,
    store: SessionStore,
    key: SessionKey,
    before_seq: int | None,
    max_groups: int,
    max_bytes: int | None,
    view: bool,
    copy: bool = True,
) -> HistoryPage:
    """The newest groups of ``key`` below ``before_seq`` within the bounds, ascending (see the module).

    The load and the archive reads it decides run as one bounded call under
    the operation's deadline (one task and timer for all of them, not one
    per adapter call); each keeps its span.
    """
    # The fence point of the first load: what the page holds was read after it (a load again, after
    # archived groups vanished, comes later still), so an erasure since the read moves the ledger past it.
    fence: list[tuple[int | None]] = []

    async def read(
        ctx: OpContext,
    ) -> tuple[StoredSnapshot | None, SessionSnapshot, ViewIndex, list[int], bool, dict[int, MessageGroup]]:
        async def page(
            _: StoredSnapshot | None, snap: SessionSnapshot
        ) -> tuple[ViewIndex, list[int], bool, dict[int, MessageGroup]]:
            before = check_before_seq(before_seq, snap.next_seq)
            index = ViewIndex(snap.view)
            candidates = (
                index.visible_desc(before) if view else ((seq, None) for seq in range(before - 1, -1, -1))
            )
            if snap.erased:
                # Groups an erasure removed (retention, a forgotten fact's sources) are not history any more.
                erased = snap.erased
                candidates = (c for c in candidates if not any(c[0] in span for span in erased))
            chosen = [seq for seq, _ in itertools.islice(candidates, max_groups)]
            more = next(candidates, None) is not None
            reader = partial(_read_in_call, ctx, archive, key)
            if max_bytes is None:
                return index, chosen, more, await _fetch(archive, key, snap, chosen, reader)
            groups = await _fetch_within(archive, key, snap, chosen, max_bytes, reader)
            if len(groups) < len(chosen):
                chosen, more = chosen[: len(groups)], True
            return index, chosen, more, groups

        stored, snap, point = await load_in_call_fenced(ctx, store, key)
        fence[:] = [point]
        stored, snap, (index, chosen, more, groups) = await read_settled(
            stored, snap, lambda: load_in_call(ctx, store, key), page
        )
        return stored, snap, index, chosen, more, groups

    stored, snap, index, chosen, more, groups = await ticket.call("history read", read, traced=False)
    entries: list[HistoryGroup] = []
    size = 0
    for seq in chosen:  # newest first: the bytes bound keeps the newest groups
        group = groups[seq]
        shown = index.shown_indexes(group)
        if view and not shown:
            continue
        if max_bytes is not None:
            size += group.size_bytes
            if size > max_bytes:
                if not entries:
                    raise InvalidArgumentError(
                        f"group {seq} alone is {group.size_bytes} bytes, over max_bytes={max_bytes}; "
                        "read it with a larger max_bytes"
                    )
                more = True
                break
        # The host's own copies are made when it reads them (HistoryGroup), unless it asked for none.
        entries.append(HistoryGroup(group, shown) if copy else HistoryGroup.shared(group, shown))
    entries.reverse()
    view_state = index.view
    return HistoryPage(
        groups=entries,
        next_before_seq=entries[0].seq if more and entries else None,
        view_start=view_state.start,
        view_retracted=view_state.retracted,
        next_seq=snap.next_seq,
        snapshot_revision=stored.revision if stored is not None else 0,
        boundary=snap.boundary,
        read_fence=ReadFence(key.tenant, key.user, key.session, fence[0]),
    )


async def read_settled(
    stored: StoredSnapshot | None,
    snap: SessionSnapshot,
    reload: Callable[[], Awaitable[tuple[StoredSnapshot | None, SessionSnapshot]]],
    read: Callable[[StoredSnapshot | None, SessionSnapshot], Awaitable[T]],
) -> tuple[StoredSnapshot | None, SessionSnapshot, T]:
    """``read(stored, snap)``, again from a fresh snapshot when archived groups it names vanished meanwhile.

    Reads are not exclusive: an erasure (of the session, or retention's of its
    oldest groups, or a forgotten fact's sources; here or in another process)
    may remove archived rows the loaded snapshot still names, and the read
    raises :class:`ArchiveCorruptError`. The session is then loaded again with
    ``reload`` (which refuses with ``ErasureInProgressError`` while an erasure
    runs, as a read started now would): only a snapshot that stayed the same
    makes the gap damage (re-raised); one that moved on is read afresh, up to
    :data:`_READ_ATTEMPTS` reads. Returns the snapshot read and the result.
    """
    for attempt in itertools.count(1):
        try:
            return stored, snap, await read(stored, snap)
        except ArchiveCorruptError:
            again, fresh = await reload()
            if attempt >= _READ_ATTEMPTS or same_snapshot(stored, again):
                raise
            stored, snap = again, fresh
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count never ends


def same_snapshot(first: StoredSnapshot | None, then: StoredSnapshot | None) -> bool:
    """Whether two loads of a session found the very same snapshot (none, or one revision and digest)."""
    if first is None or then is None:
        return first is then
    return first.revision == then.revision and first.snapshot.digest == then.snapshot.digest


async def fetch_groups(
    ticket: Ticket,
    archive: HistoryArchive,
    key: SessionKey,
    snap: SessionSnapshot,
    seqs: Sequence[int],
    *,
    deadline: float | None = None,
    on_page: Callable[[Sequence[object]], None] | None = None,
) -> dict[int, MessageGroup]:
    """Groups ``seqs`` of the session: resident ones from ``snap``, archived ones from ``archive``, checked.

    Archived groups are read in contiguous runs; each must come back whole,
    at its seq, owned by this session and, where the snapshot keeps the
    archive's receipt digest for it, with that digest. Anything else raises
    :class:`ArchiveCorruptError` (or :class:`ContractViolationError` for an
    archive that returns more than it was asked for): nothing is skipped.
    ``deadline`` (``time.monotonic()``): a bound of the caller's, tighter than
    each read's operation deadline (recall's latency budget); past it a read
    is not started, or is cut, with :class:`OperationTimeoutError`.
    ``on_page`` is given what each read returned (bounded: one item past
    what was asked at most) before it is checked, so a caller counting what
    was read counts a group the checks then refuse.
    """

    async def read_run(first: int, count: int) -> Sequence[MessageGroup]:
        work = partial(archive.read_groups, key, first, count)
        if deadline is None:
            return await ticket.call("archive read", work)
        left = deadline - time.monotonic()
        if left <= 0:
            raise OperationTimeoutError(
                "archive read not started: its deadline had passed", "archive read", 0.0
            )
        return await ticket.call("archive read", work, timeout_s=min(left, ticket.op_timeout_s))

    return await _fetch(archive, key, snap, seqs, read_run, on_page)


async def _read_in_call(
    ctx: OpContext, archive: HistoryArchive, key: SessionKey, first: int, count: int
) -> Sequence[MessageGroup]:
    """One archive read inside a bounded call the caller runs, with its own span."""
    with observe.adapter_call("archive read"):
        return await archive.read_groups(key, first, count, ctx)


async def _fetch(
    archive: HistoryArchive,
    key: SessionKey,
    snap: SessionSnapshot,
    seqs: Sequence[int],
    read_run: Callable[[int, int], Awaitable[Sequence[MessageGroup]]],
    on_page: Callable[[Sequence[object]], None] | None = None,
) -> dict[int, MessageGroup]:
    """:func:`fetch_groups`, reading each contiguous run of archived seqs with ``read_run(first, count)``."""
    asked = set(seqs)
    out = {g.seq: g for g in snap.resident if g.seq in asked}
    wanted = sorted(s for s in asked if s < snap.boundary)
    if not wanted:
        return out
    if not getattr(capabilities_of(archive), "bounded_reads", False):
        raise CapabilityError(
            f"archive {type(archive).__name__} does not declare bounded_reads; reading archived history "
            "needs it"
        )
    receipts = {r.seq: r.digest for r in snap.receipts}
    for _, run in itertools.groupby(enumerate(wanted), key=lambda pair: pair[1] - pair[0]):
        seqs_in_run = [seq for _, seq in run]
        first, count = seqs_in_run[0], len(seqs_in_run)
        who = adapter_method("archive", archive, "read_groups")
        # A shorter page is read on from its last seq + 1 (an archive may bound a call's bytes).
        page = await read_on(read_run, first, count, who, on_page)
        for offset, seq in enumerate(seqs_in_run):
            group = page[offset] if offset < len(page) else None
            # ``type(...) is int``: a seq set past the group's validator is not compared by its ``__ne__``.
            if not isinstance(group, MessageGroup) or type(group.seq) is not int or group.seq != seq:
                raise ArchiveCorruptError(
                    f"archived group {seq} of session {key.key()} is missing or out of place in the archive "
                    "(it is below the session's boundary, so it was archived); nothing was skipped"
                )
            check_archived_group(key, group, expected_seq=seq, expected_digest=receipts.get(seq))
            out[seq] = group
    return out


async def _fetch_within(
    archive: HistoryArchive,
    key: SessionKey,
    snap: SessionSnapshot,
    chosen: Sequence[int],
    max_bytes: int,
    read_run: Callable[[int, int], Awaitable[Sequence[MessageGroup]]],
) -> dict[int, MessageGroup]:
    """The newest of ``chosen`` (newest first) read until their bytes pass ``max_bytes``.

    The page's bytes bound applies to what is read from the archive, not
    only to what is returned: ``max_groups`` groups of up to
    :data:`MAX_APPEND_BYTES` each could otherwise be read for a page of a
    few bytes. So groups are read in batches no bigger than the budget left
    could hold at that size (one at least): at most ``max_bytes`` plus one
    group is read. The page itself is cut as before, by the groups' sizes.
    """
    out: dict[int, MessageGroup] = {}
    size = done = 0
    while done < len(chosen) and size < max_bytes:
        batch = chosen[done : done + max(1, (max_bytes - size) // MAX_APPEND_BYTES)]
        got = await _fetch(archive, key, snap, batch, read_run)
        for seq in batch:
            out[seq] = got[seq]
            size += got[seq].size_bytes
        done += len(batch)
    return out


async def list_page(
    ticket: Ticket, store: SessionStore, tenant: str, user: str, after: str | None, limit: int
) -> SessionPage:
    """Up to ``limit`` session ids of one user after ``after``; checked, with the cursor of the next page."""
    caps = capabilities_of(store)
    if not getattr(caps, "listing", False):
        raise CapabilityError(
            f"session store {type(store).__name__} does not declare listing; list_sessions needs it"
        )
    raw = await ticket.call(
        "session listing", lambda ctx: store.list_sessions(tenant, user, limit + 1, ctx, after=after)
    )
    # Read to one past the limit asked (``limit + 1``) at most, never trusting the answer's own length.
    found = bounded_list(raw, limit + 1, adapter_method("session store", store, "list_sessions"), "ids", str)
    # Each id read as the str it holds: a subclass's own comparisons could pass any order check.
    ids = [str.__str__(i) for i in found]
    if ids != sorted(set(ids)) or (after is not None and ids and ids[0] <= after):
        raise ContractViolationError(
            "session store returned a listing that is not sorted, unique strings after the cursor"
        )
    if not valid_ids(ids):
        # Handed out, it was the host's bad id on its next read (or next page): the store's fault.
        raise ContractViolationError("session store listed a session id no session key holds")
    more = len(ids) > limit
    page = tuple(ids[:limit])
    return SessionPage(page, page[-1] if more and page else None)
