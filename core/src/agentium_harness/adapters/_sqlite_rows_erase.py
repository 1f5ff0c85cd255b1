"""The erasure reads of the SQLite archive and session store: which rows a target covers.

Kept apart from :mod:`._sqlite_rows` (the row layout, reads and writes),
which these read by. Every function runs inside the caller's transaction, in
a worker thread; identifiers are always bound as SQL parameters, and every
value read is bounded (:mod:`._sqlite_bounds`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._errors import AgentiumError, ArchiveCorruptError, SnapshotCorruptError
from .._ports.erasure import EraseTarget
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
from ._sqlite_sql import session_filter

__all__ = ["archived_rows_covered", "drop_snapshot", "sessions_covered"]


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
    snapshot (``None`` in the row), which the erasure removes unread.
    """
    rows = conn.execute(sql, params).fetchall()
    found: list[tuple[SessionKey | None, SessionRow]] = []
    for row in rows:
        if row[10] is not None:
            raise damaged(oversize(f"a session row of tenant {target.tenant_id!r}", row[10]))
        key = None if row[11] else SessionKey(*row[:3])
        found.append((key, checked_session(key, SessionRow(*row[3:10]), damaged)))
    return found


def _erasure_watermark(session: SessionRow) -> int:
    """Where the archive's rows end for an erasure: ``adopted``, or a split snapshot's boundary above it.

    The session store keeps no row below its snapshot's boundary (a save deletes it or has the
    archive adopt it), so a store row there is an archived group even when ``adopted`` was moved
    back below it: damage that a load refuses (``joined_snapshot``), and that an erasure, which
    must not stop on damage in what it removes, settles by the layout. The archive's erasure
    takes such a row, the store's leaves it. A boundary that is not a seq of this session (past
    :data:`SEQ_LIMIT` or its next seq) is damage too: the watermark stays, so no row id computed
    from it can reach another session's rows.
    """
    split = split_range(session)
    if split is None or not session.adopted < split.start <= split.stop <= SEQ_LIMIT:
        return int(session.adopted)
    return split.start


def archived_rows_covered(
    conn: sqlite3.Connection, target: EraseTarget, bound: int, copies: list[int] | None = None
) -> tuple[list[tuple[SessionKey | None, int, str, int, int]], bool]:
    """The archived groups ``target`` covers (at most ``bound``), and whether more are left.

    Each is ``(key, seq, digest, row id, sid)``, in session order (tenant,
    user, session ids), seqs ascending, as the rows would be erased batch
    after batch. ``key`` is ``None`` for a session whose id is over its
    bound (damage: its rows are erased unread, counted as ``damaged``).
    ``copies`` receives the id of the store's row of each archive row found
    below :func:`_erasure_watermark`: no resident row, a stale copy of the
    group (damage) that no other erasure would take; the caller deletes it.
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
    for key, session in sessions:
        sid = session.sid
        watermark = _erasure_watermark(session)
        archived, extra = archived_where(SessionRow(sid, watermark, *session[2:]))
        below = row_id(sid, watermark, False)
        for start, stop in sorted(spans):
            if start >= stop:
                continue
            rows = conn.execute(
                f"SELECT id, {vouched_digest('digest')} FROM groups "  # noqa: S608
                f"WHERE id >= ? AND id < ? AND {archived} ORDER BY id LIMIT ?",
                (row_id(sid, start, False), row_id(sid, stop, False), *extra, bound + 1 - len(found)),
            ).fetchall()
            # A digest not of the exact form (1 GB of text, "garbage", a BLOB) is not read nor put
            # into a report, which the engine would refuse: it comes back "" (nothing vouches for
            # it, as a group the S3 archive finds with no stored digest) and the group is erased all
            # the same, so damage in a row the operator asked to remove never stops the erasure.
            found.extend((key, seq_of(i), d if isinstance(d, str) else "", i, sid) for i, d in rows)
            if copies is not None:
                copies.extend(i - 1 for i, _ in rows if i & 1 and i - 1 < below)
            if len(found) > bound:
                return found[:bound], True
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
    conn.execute(
        "DELETE FROM groups WHERE id >= ? AND id < ? AND (id & 1) = 0 AND (id >= ? "
        "OR EXISTS (SELECT 1 FROM groups AS own WHERE own.id = groups.id + 1))",
        (row_id(sid, session.adopted, False), row_id(sid + 1, 0, False), above),
    )
    conn.execute(
        "UPDATE sessions SET adopted = CASE WHEN EXISTS (SELECT 1 FROM groups "
        "WHERE id >= ? AND id < ? AND (id & 1) = 0) THEN ? ELSE adopted END, "
        "revision = NULL, boundary = NULL, next_seq = NULL, inline = NULL, snapshot = NULL WHERE sid = ?",
        (row_id(sid, session.adopted, False), above, watermark, sid),
    )
    drop_if_empty(conn, sid)
