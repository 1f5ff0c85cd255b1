"""The erasure reads of the SQLite archive and session store: which rows a target covers.

Kept apart from :mod:`._sqlite_rows` (the row layout, reads and writes),
which these read by. Every function runs inside the caller's transaction, in
a worker thread; identifiers are always bound as SQL parameters, and every
value read is bounded (:mod:`._sqlite_bounds`).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from .._errors import AgentiumError, ArchiveCorruptError, InvalidIdError, SnapshotCorruptError
from .._ports.erasure import MAX_ERASE_RANGES, ErasedSession, EraseTarget
from .._ports.snapshot import snapshot_erasure
from .._scope import SessionKey
from ._sqlite_bounds import oversize, vouched_digest
from ._sqlite_rows import (
    KEYED_COLUMNS,
    SEQ_LIMIT,
    SessionRow,
    archived_where,
    checked_session,
    drop_if_empty,
    row_id,
    seq_of,
    split_range,
)
from ._sqlite_snapshot_read import joined_snapshot
from ._sqlite_sql import session_filter

__all__ = ["archived_rows_covered", "covered_reports", "drop_snapshot", "sessions_covered", "snapshot_report"]


def _keyed_sessions(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[object],
    target: EraseTarget,
    damaged: type[AgentiumError],
) -> list[tuple[SessionKey | None, SessionRow]]:
    """The rows of ``sql`` (selecting :data:`KEYED_COLUMNS`): each session's key and row, checked.

    A row holding a value over its bound raises ``damaged`` (that value was
    not read), except an id (the key is then ``None``: no key can name the
    session, which the target covers by the ids its filter matched) and the
    snapshot (``None`` in the row), which the erasure removes unread. An id
    within its bound that no key holds (a NUL, empty) gives ``None`` too.
    """
    rows = conn.execute(sql, params).fetchall()
    found: list[tuple[SessionKey | None, SessionRow]] = []
    for row in rows:
        if row[10] is not None:
            raise damaged(oversize(f"a session row of tenant {target.tenant_id!r}", row[10]))
        key = None if row[11] else _key_or_none(row[:3])
        found.append((key, checked_session(key, SessionRow(*row[3:10]), damaged)))
    return found


def _key_or_none(ids: tuple[Any, ...]) -> SessionKey | None:
    """The key of a session row's ids, or ``None`` for ids no key holds (damage).

    Raising there (InvalidIdError) stopped every erasure of the user and the tenant for good, and
    the listing fails closed on such an id, naming the erasure as its remedy.
    """
    try:
        return SessionKey(*ids)
    except InvalidIdError:
        return None


def _erasure_watermark(session: SessionRow, snapshotless: bool = False) -> int:
    """Where the archive's rows end for an erasure: ``adopted``, or a split snapshot's boundary above it.

    The session store keeps no row below its snapshot's boundary (a save deletes it or has the
    archive adopt it), so a store row there is an archived group even when ``adopted`` was moved
    back below it: damage that a load refuses (``joined_snapshot``), and that an erasure, which
    must not stop on damage in what it removes, settles by the layout. The archive's erasure
    takes such a row, the store's leaves it. A session with no snapshot (``snapshotless``: its
    revision is NULL, not merely over its bound) has no store rows at all: every row is the
    archive's (the watermark is :data:`SEQ_LIMIT`). A boundary that is
    not a seq of this session (past :data:`SEQ_LIMIT` or its next seq) is damage too: the
    watermark stays, so no row id computed from it can reach another session's rows.
    """
    if snapshotless:
        # No snapshot: the store holds no row of the session, so each of its rows is the archive's
        # (damage: a store erasure never leaves one, and a save writes its snapshot with its rows).
        # Left to neither adapter, such a row outlived every erasure of its session, unread.
        return SEQ_LIMIT
    split = split_range(session)
    if split is None or not session.adopted < split.start <= split.stop <= SEQ_LIMIT:
        return int(session.adopted)
    return split.start


def archived_rows_covered(
    conn: sqlite3.Connection, target: EraseTarget, bound: int, copies: list[int] | None = None
) -> tuple[list[tuple[SessionKey | None, int, str, int, int]], bool]:
    """The archived groups ``target`` covers, and whether more are left: at most ``bound`` items.

    Each is ``(key, seq, digest, row id, sid)``, in session order (tenant,
    user, session ids), seqs ascending, as the rows would be erased batch
    after batch. ``key`` is ``None`` for a session whose id is over its
    bound (damage: its rows are erased unread, counted as ``damaged``).
    ``copies`` receives the id of the store's row of each archive row found
    below :func:`_erasure_watermark` (one that exists): no resident row, a
    stale copy of the group (damage) that no other erasure would take; the
    caller deletes it and counts it as ``damaged``: an item, so groups and
    copies together stay within ``bound`` (with ``bound`` 1, a group's copy
    goes alone, the group in the next call).
    """
    where, params = session_filter(target)
    sessions = _keyed_sessions(
        conn,
        f"SELECT {KEYED_COLUMNS} FROM sessions WHERE {where} "  # noqa: S608
        "ORDER BY tenant_id, user_id, session_id",
        params,
        target,
        ArchiveCorruptError,
    )
    spans = [(r.start, min(r.stop, SEQ_LIMIT)) for r in target.groups] or [(0, SEQ_LIMIT)]
    found: list[tuple[SessionKey | None, int, str, int, int]] = []
    used = 0  # items this call takes: the groups found and the stale copies
    for key, session in sessions:
        sid = session.sid
        # A revision over its bound is read as None too: only NULL in the row means no snapshot.
        (snapshotless,) = conn.execute(
            "SELECT revision IS NULL FROM sessions WHERE sid = ?", (sid,)
        ).fetchone()
        watermark = _erasure_watermark(session, bool(snapshotless))
        archived, extra = archived_where(SessionRow(sid, watermark, *session[2:]))
        below = row_id(sid, watermark, False)
        for start, stop in sorted(spans):
            if start >= stop:
                continue
            rows = conn.execute(
                f"SELECT id, {vouched_digest('digest')}, (id & 1) = 1 AND EXISTS "  # noqa: S608
                "(SELECT 1 FROM groups AS copy WHERE copy.id = groups.id - 1) FROM groups "
                f"WHERE id >= ? AND id < ? AND {archived} ORDER BY id LIMIT ?",
                (row_id(sid, start, False), row_id(sid, stop, False), *extra, bound + 1 - used),
            ).fetchall()
            # A digest not of the exact form (1 GB of text, "garbage", a BLOB) is not read nor put
            # into a report, which the engine would refuse: it comes back "" (nothing vouches for
            # it, as a group the S3 archive finds with no stored digest) and the group is erased all
            # the same, so damage in a row the operator asked to remove never stops the erasure.
            for i, d, copy in rows:
                # A stale copy deleted is an item of its own (counted damaged): the call's items,
                # groups and copies alike, stay within ``bound``, as the engine holds every report.
                stale = int(bool(copies is not None and copy and i - 1 < below))
                if used + 1 + stale > bound:
                    if used == 0 and copies is not None:  # bound 1: the copy alone, the group next call
                        copies.append(i - 1)
                    return found, True
                found.append((key, seq_of(i), d if isinstance(d, str) else "", i, sid))
                if stale and copies is not None:
                    copies.append(i - 1)
                used += 1 + stale
    return found, False


def sessions_covered(
    conn: sqlite3.Connection, target: EraseTarget, bound: int
) -> tuple[list[tuple[SessionKey | None, SessionRow]], bool]:
    """Sessions with a snapshot that ``target`` names (at most ``bound``, by ids), and if more are left.

    The key is ``None`` for a session whose id is over its bound (see :func:`_keyed_sessions`).
    """
    if target.groups:
        return [], False  # a groups target names archived groups, never a snapshot
    where, params = session_filter(target)
    found = _keyed_sessions(
        conn,
        f"SELECT {KEYED_COLUMNS} FROM sessions "  # noqa: S608
        f"WHERE {where} AND revision IS NOT NULL ORDER BY tenant_id, user_id, session_id LIMIT ?",
        (*params, bound + 1),
        target,
        SnapshotCorruptError,
    )
    return found[:bound], len(found) > bound


#: The group rows :func:`drop_snapshot` deletes (parameters: :func:`_dropped_range`).
_DROPPED: Final = (
    "FROM groups WHERE id >= ? AND id < ? AND (id & 1) = 0 AND (id >= ? "
    "OR EXISTS (SELECT 1 FROM groups AS own WHERE own.id = groups.id + 1))"
)


def _dropped_range(session: SessionRow) -> tuple[int, int, int]:
    sid = session.sid
    return (
        row_id(sid, session.adopted, False),
        row_id(sid + 1, 0, False),
        row_id(sid, _erasure_watermark(session), False),
    )


def snapshot_report(
    conn: sqlite3.Connection, key: SessionKey, session: SessionRow, data: bytes, bound: int
) -> tuple[ErasedSession, list[int]]:
    """What erasing ``session``'s snapshot (``data``) removes: its groups, and rows counted ``damaged``.

    The resident groups of the snapshot (:func:`snapshot_erasure`; none when it is damaged), and
    every other group row :func:`drop_snapshot` deletes, by seq and digest (``""`` when the digest
    is not of the exact form): rows no valid boundary shows to be the snapshot's own, such as those
    above a watermark moved back below a damaged boundary (archived groups, maybe) or a stale copy
    beside the archive's row of a group, are named, so the report says what was erased. Should
    those rows be so scattered that the report would list more runs of consecutive seqs than the
    engine takes for ``bound`` items (see ``EraseReport``), their ids are the second value (else
    it is empty): the caller deletes some of them, each an item counted ``damaged``, and leaves
    the snapshot to a later call (their count may be far past ``bound``: :func:`covered_reports`).
    """
    erased = snapshot_erasure(key, data)
    listed = {seq for seq, _ in erased.groups}
    own = split_range(session) or range(0)
    if not session.adopted <= own.start <= own.stop <= SEQ_LIMIT:
        own = range(0)
    # The snapshot's own resident rows (boundary..next_seq) are reported by it, with no groups
    # if it is damaged: not read here.
    rows = conn.execute(
        f"SELECT id, {vouched_digest('digest')} {_DROPPED} AND NOT (id >= ? AND id < ?) ORDER BY id",
        (
            *_dropped_range(session),
            row_id(session.sid, own.start, False),
            row_id(session.sid, own.stop, False),
        ),
    ).fetchall()
    rows = [(i, d) for i, d in rows if seq_of(i) not in listed]
    if not rows:
        return erased, []
    groups = sorted([*erased.groups, *((seq_of(i), d if isinstance(d, str) else "") for i, d in rows)])
    runs = 1 + sum(1 for (a, _), (b, _) in itertools.pairwise(groups) if b != a + 1)
    if len(groups) > max(bound, MAX_ERASE_RANGES) and runs > max(bound, MAX_ERASE_RANGES):
        return erased, [i for i, _ in rows]
    return ErasedSession(key, groups), []


def drop_snapshot(conn: sqlite3.Connection, session: SessionRow) -> None:
    """Delete a session's snapshot: its resident rows and its columns (adopted rows stay the archive's).

    Store rows below the snapshot's boundary are the archive's (:func:`_erasure_watermark`): left,
    and ``adopted`` raised over them, so the archive (whose erasure may come later) still holds them;
    one the archive also holds a row of its own for is a stale copy, deleted.
    """
    sid, watermark = session.sid, _erasure_watermark(session)
    above = row_id(sid, watermark, False)
    # Below the boundary, a row the archive holds a row of its own for is no adopted group but a
    # stale copy (damage): neither the archive's erasure nor a read counts it, so it goes here.
    conn.execute(f"DELETE {_DROPPED}", _dropped_range(session))
    conn.execute(
        "UPDATE sessions SET adopted = CASE WHEN EXISTS (SELECT 1 FROM groups "
        "WHERE id >= ? AND id < ? AND (id & 1) = 0) THEN ? ELSE adopted END, "
        "revision = NULL, boundary = NULL, next_seq = NULL, inline = NULL, snapshot = NULL WHERE sid = ?",
        (row_id(sid, session.adopted, False), above, watermark, sid),
    )
    drop_if_empty(conn, sid)


def covered_reports(
    conn: sqlite3.Connection, target: EraseTarget, bound: int, budget: int
) -> tuple[list[tuple[SessionKey | None, SessionRow]], list[ErasedSession], int, bool, list[int]]:
    """The sessions one erase call takes, their reports, the damaged count, if more are left, strays.

    At most ``bound`` sessions; fewer once the snapshots read for the reports reach ``budget``
    joined (inflated) bytes, since a small file's deflated rows may inflate far past their size:
    the rest wait for the next call (partial). The check runs between snapshots, so a call reads
    less than ``budget`` plus one snapshot's bound. A session whose rows outside its snapshot are
    too scattered to list (:func:`snapshot_report`) ends the call before it: the last value holds
    as many of those rows as the call has items left (each counted ``damaged``, deleted by the
    caller), the snapshot waits for a later call, so every report stays within ``bound`` items.
    """
    taken, more = sessions_covered(conn, target, bound)
    found: list[ErasedSession] = []
    damaged = 0
    # Bytes read (inflated) for the reports, a damaged snapshot's too: damage may show only at a
    # snapshot's last row, after the rest was inflated.
    spent = [0]
    for n, (key, session) in enumerate(taken):
        if spent[0] >= budget:
            taken, more = taken[:n], True
            break
        if key is None:
            damaged += 1  # an id over its bound: no key names it
            continue
        # The whole snapshot, for the report; one over its bound is erased unread (its groups are
        # then those of the rows deleted with it: snapshot_report).
        data = joined_snapshot(conn, key, session, erasing=True, spent=spent)[1]
        data = data if isinstance(data, bytes) else str(data or "").encode()
        erased, strays = snapshot_report(conn, key, session, data, bound)
        if strays:
            # Each session before this one is one item (its snapshot, or damaged): n < bound.
            strays = strays[: bound - n]
            return taken[:n], found, damaged + len(strays), True, strays
        found.append(erased)
    return taken, found, damaged, more, []
