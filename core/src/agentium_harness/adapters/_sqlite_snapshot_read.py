"""How the SQLite session store reads a snapshot back: its header row joined with its resident rows.

Kept apart from :mod:`._sqlite_rows` (the row layout, and how rows are
written), which it reads by. Each resident row may be deflated
(:mod:`._sqlite_pack`): the joined snapshot is bounded as a whole by the
strict decoder's bound, and a caller that reads many snapshots in one call
(the store's erasure, for its report) is told how many bytes each read
actually took, damaged or not (``spent``). Every function runs inside the
caller's transaction, in a worker thread.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from .._errors import SnapshotCorruptError
from .._scope import SessionKey
from ._sqlite_bounds import JSON_BYTES, oversize
from ._sqlite_pack import PackedRowError, PackedRowOverBound, unpack
from ._sqlite_rows import RESIDENT_MARKER, SEQ_LIMIT, SessionRow, find_session, row_id, seq_of

__all__ = ["joined_snapshot", "read_snapshot"]

#: A split snapshot's header: its resident groups taken out.
_EMPTY: Final = RESIDENT_MARKER + b"]"


def read_snapshot(conn: sqlite3.Connection, key: SessionKey) -> tuple[object, object, SessionRow] | None:
    """``(revision, bytes, row)`` of the stored snapshot, joined from its rows; ``None`` if there is none.

    The bytes (checked by the caller) are ``None`` when the row does not describe a whole
    snapshot (a resident row missing, a column of the wrong type): damage the caller reports.
    """
    session = find_session(conn, key)
    if session is None or session.revision is None:
        return None
    return joined_snapshot(conn, key, session)


def joined_snapshot(
    conn: sqlite3.Connection,
    key: SessionKey,
    session: SessionRow,
    *,
    erasing: bool = False,
    spent: list[int] | None = None,
) -> tuple[object, object, SessionRow]:
    """:func:`read_snapshot` of ``session``'s row (which holds a snapshot), already read.

    ``erasing``: a resident row over its bound or damaged, or a row below the boundary above the
    watermark, gives bytes ``None`` (unread) instead of raising, so an erasure deletes the
    damaged snapshot rather than stopping on it.
    ``spent``: ``spent[0]`` grows by the bytes this read took (the stored snapshot or header, and
    every row as inflated), whether or not the snapshot then turns out whole: a damaged one may
    show its damage only after up to the whole bound was inflated.
    """
    if spent is None:
        spent = [0]
    if session.inline:
        spent[0] += len(session.snapshot) if isinstance(session.snapshot, bytes | str) else 0
        return session.revision, session.snapshot, session
    boundary, next_seq, header = session.boundary, session.next_seq, session.snapshot
    if not (
        isinstance(boundary, int)
        and isinstance(next_seq, int)
        and isinstance(header, bytes)
        and 0 <= boundary <= next_seq <= SEQ_LIMIT
    ):
        return session.revision, None, session
    if (
        session.adopted < boundary
        and conn.execute(
            "SELECT 1 FROM groups WHERE id >= ? AND id < ? AND (id & 1) = 0 LIMIT 1",
            (row_id(session.sid, session.adopted, False), row_id(session.sid, boundary, False)),
        ).fetchone()
    ):
        # Every save deletes the store's rows below its boundary or has the archive adopt them:
        # one here means the watermark was moved back (damage), and the next save would take the
        # row for the store's own stale row and delete an archived group. An erasure deletes the
        # snapshot unread and leaves those rows to the archive (_sqlite_rows_erase.drop_snapshot).
        if erasing:
            return session.revision, None, session
        raise SnapshotCorruptError(
            f"the row of session {key.key()} is damaged: a group row below the snapshot's boundary "
            f"{boundary} is above the archive's watermark (adopted {session.adopted}); nothing was changed"
        )
    # Row by row: the joined snapshot's size is known as the rows come, and a value longer than
    # anything the store writes comes back NULL, unread. Each row is at most what is left of the
    # strict decoder's bound (JSON_BYTES) after the header; once the joined size passes that bound
    # no further row is fetched. Sizes are bytes: length() of a text would stop at its first NUL.
    room = JSON_BYTES - len(header)
    size = len(header)
    spent[0] += size
    seqs: list[int] = []
    parts: list[bytes] = []
    for i, data, length in conn.execute(
        "SELECT id, CASE WHEN length(CAST(data AS BLOB)) <= ?1 THEN data END, length(CAST(data AS BLOB)) "
        "FROM groups "
        "WHERE id >= ?2 AND id < ?3 AND (id & 1) = 0 ORDER BY id",
        (room, row_id(session.sid, boundary, False), row_id(session.sid, next_seq, False)),
    ):
        if type(data) is bytes:  # a row stored as it is comes back unchanged, of its stored length
            try:  # within what is left of the bound (a row is never stored larger deflated)
                data = unpack(data, JSON_BYTES - size)
                length = len(data)
                spent[0] += length
            except PackedRowOverBound:
                spent[0] += max(0, JSON_BYTES - size) + 1  # inflated to one byte past what was left
                data, length = None, f"over {max(0, JSON_BYTES - size)} inflated"  # refused below
            except PackedRowError as exc:
                # How much inflated before the damage showed is not known: at most that much too.
                spent[0] += max(0, JSON_BYTES - size) + 1
                if erasing:
                    return session.revision, None, session
                where = f"the snapshot of session {key.key()} is damaged: group {seq_of(i)}'s row"
                raise SnapshotCorruptError(f"{where}: {exc}; nothing was changed") from None
        size += (length if type(length) is int else 0) + 1
        if data is None or size > JSON_BYTES + 1:  # data is NOT NULL: None is a value over the bound
            if erasing:
                return session.revision, None, session
            raise SnapshotCorruptError(
                oversize(
                    f"the snapshot of session {key.key()}",
                    f"group {seq_of(i)} of length {length} bytes (the whole at most {JSON_BYTES})",
                )
            )
        if type(data) is not bytes:
            return session.revision, None, session
        seqs.append(seq_of(i))
        parts.append(data)
    if seqs != list(range(boundary, next_seq)):
        return session.revision, None, session
    joined = b",".join(parts)
    return session.revision, header.replace(_EMPTY, RESIDENT_MARKER + joined + b"]", 1), session
