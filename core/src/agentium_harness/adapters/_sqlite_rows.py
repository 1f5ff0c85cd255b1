"""The row layout of the SQLite archive and session store (schema versions 2 to 4): each group once.

Every group either adapter stores is one row of ``groups``, never rewritten
while its content stays the same (docs/adapters.md):

- ``sessions``: one row per session, numbered ``sid`` (never reused), with
  the archive's watermark ``adopted`` and the session store's snapshot:
  ``revision``, ``boundary``, ``next_seq`` and ``snapshot``, the snapshot's
  canonical bytes with ``"resident":[]`` in place of its groups — or, with
  ``inline`` set, the whole snapshot (a snapshot this layout cannot split,
  and every snapshot written before it).
- ``groups``: ``id = sid << 33 | seq << 1 | archived``, the group's
  ``digest`` and canonical ``data``, deflated when that is smaller
  (:mod:`._sqlite_pack`). ``archived = 1`` rows are the
  archive's own (``HistoryArchive.append``); ``archived = 0`` rows are the
  session store's resident groups.

When both adapters share the file, the joint commit of a turn archives the
groups it evicts by *adopting* the store's rows: ``adopted`` moves to the new
boundary and the store's rows below it belong to the archive from then on,
unchanged. So an evicting turn writes the new group's row and the session's row.

What each adapter sees:

- the archive holds, for a session, its own rows and the store's rows below
  ``adopted`` (never both for one seq: adoption drops the store's row when
  the archive already has the group);
- the session store's resident groups are its rows from ``boundary`` to
  ``next_seq``; it never keeps rows below ``adopted`` (a snapshot that would
  need one is stored ``inline``), and rows it no longer needs are deleted
  unless adopted.

Every function runs inside the caller's transaction, in a worker thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from operator import itemgetter
from typing import Final, NamedTuple

from .._errors import (
    AgentiumError,
    ArchiveConflictError,
    ArchiveCorruptError,
    SessionConflictError,
    SnapshotCorruptError,
)
from .._json import digest_bytes
from .._ports.archive import ArchiveReceipt
from .._ports.sessions import SessionSnapshot
from .._ports.snapshot import GroupRow, group_rows, snapshot_parts
from .._scope import SessionKey
from ._sqlite_bounds import (
    DIGEST_CHARS,
    ID_CHARS,
    INT_CHARS,
    JSON_BYTES,
    bounded,
    bounded_select,
    exceeds,
    over_check,
    oversize,
)
from ._sqlite_pack import PackedRowError, pack, unpack
from ._sqlite_sql import revision_floor

__all__ = [
    "SEQ_LIMIT",
    "GroupRow",
    "SessionRow",
    "SnapshotRows",
    "KEYED_COLUMNS",
    "RESIDENT_MARKER",
    "append_groups",
    "archived_where",
    "checked_session",
    "drop_if_empty",
    "find_session",
    "group_rows",
    "read_archived",
    "save_snapshot",
    "split_range",
    "split_snapshot",
    "store_rows",
]

#: Seqs a row id can hold (``seq << 1`` below ``1 << 33``): four billion groups per session.
SEQ_LIMIT: Final = 1 << 32
#: Sessions a file can number: ``(sid + 1) << 33``, the end of a session's row ids, stays 63-bit.
SID_LIMIT: Final = (1 << 30) - 1
#: The highest revision a SQLite INTEGER holds.
_REVISION_LIMIT: Final = 2**63 - 1

#: Where a snapshot's resident groups start in its canonical bytes (a header holds it empty).
RESIDENT_MARKER: Final = b'"resident":['
_SEQ: Final = itemgetter(0)
#: The last column of a group read: what is over its bound, if anything.
_OVER: Final = itemgetter(3)


def _base(sid: int) -> int:
    return sid << 33


def row_id(sid: int, seq: int, archived: bool) -> int:
    """The id of group ``seq`` of session ``sid``: the archive's row (``archived``) or the store's.

    Added, not or-ed: ``seq = SEQ_LIMIT`` gives the next session's first id, an exclusive bound.
    """
    return (sid << 33) + (seq << 1) + int(archived)


def seq_of(group_id: int) -> int:
    """The seq a row id stands for."""
    return (group_id >> 1) & (SEQ_LIMIT - 1)


#: :func:`seq_of` of the ``id`` column, computed by SQLite (a query then reads seqs, not ids).
SEQ_OF_ID_SQL: Final = f"((id >> 1) & {SEQ_LIMIT - 1})"


def _check_seq(seq: int) -> None:
    if not 0 <= seq < SEQ_LIMIT:
        # Raised as a backend error: the adapter reports it with its own error class.
        raise sqlite3.DataError(
            f"group seq {seq} is beyond what the SQLite adapters store (at most 2**32 - 1)"
        )


class SessionRow(NamedTuple):
    """A session's row: its number, the archive's watermark and the store's snapshot columns."""

    sid: int
    adopted: int
    revision: object
    boundary: object
    next_seq: object
    inline: object
    snapshot: object


#: The columns of :class:`SessionRow`, each with its read bound (see :mod:`._sqlite_bounds`).
_SESSION_BOUNDS: Final = (
    ("sid", None),  # the rowid: always an integer
    ("adopted", INT_CHARS),
    ("revision", INT_CHARS),
    ("boundary", INT_CHARS),
    ("next_seq", INT_CHARS),
    ("inline", INT_CHARS),
    ("snapshot", JSON_BYTES),
)
#: A session's row, bounded, then the column naming a value over its bound (``None`` if none is).
_COLUMNS: Final = bounded_select(_SESSION_BOUNDS)
_IDS: Final = ("tenant_id", "user_id", "session_id")
#: The same, after the session's ids (an erasure's reads, which name the sessions they cover), and
#: one more column: whether an id is over its bound. Only the watermark (``adopted``, which decides
#: whose rows are whose) over its bound stops an erasure; any other value over its bound comes back
#: NULL, unread, and the erasure goes on, so a user or tenant erasure can always remove what it
#: covers: a snapshot is deleted unread and reported with no groups (as any damaged snapshot), a
#: revision that is not an integer is left out of the revision floor (as before), and a session no
#: key can name (an id over its bound, matched by the target's other ids) has its rows deleted
#: unread and counted as ``damaged``.
KEYED_COLUMNS: Final = (
    bounded_select(
        (
            *((bounded(column, ID_CHARS), None) for column in _IDS),
            *_SESSION_BOUNDS[:2],
            *((bounded(column, bound), None) for column, bound in _SESSION_BOUNDS[2:] if bound is not None),
        )
    )
    + ", "
    + " OR ".join(exceeds(column, ID_CHARS) for column in _IDS)
)
#: A group's digest and data, bounded, then the column naming one over its bound.
_GROUP_COLUMNS: Final = bounded_select((("digest", DIGEST_CHARS), ("data", JSON_BYTES)))
# The statements every save runs, as constants: building their text per call (the bounds' SQL, an
# f-string) cost a save six Python calls, and a new str hashed afresh for sqlite3's statement cache.
#: A session's row by its ids (:func:`find_session`).
_FIND_SESSION: Final = (
    f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = ? AND user_id = ? AND session_id = ?"  # noqa: S608
)
#: The session store's own rows in an id range: seq and digest, bounded (:func:`store_rows`).
_STORE_ROWS: Final = (
    f"SELECT {SEQ_OF_ID_SQL}, {bounded('digest', DIGEST_CHARS)} FROM groups "  # noqa: S608
    "WHERE id >= ? AND id < ? AND (id & 1) = 0"
)


def split_range(session: SessionRow) -> range | None:
    """The seqs of a split snapshot's resident rows (``boundary..next_seq``), ``None`` if not split."""
    boundary, next_seq = session.boundary, session.next_seq
    if session.revision is None or session.inline != 0:
        return None
    if type(boundary) is not int or type(next_seq) is not int:
        return None
    return range(boundary, next_seq)


def checked_session(
    key: SessionKey | None, session: SessionRow, damaged: type[AgentiumError] = SnapshotCorruptError
) -> SessionRow:
    """``session`` if its archive watermark is one the adapters could have written, else ``damaged``.

    No digest covers ``adopted``, and it decides which rows belong to which
    adapter: every write keeps it an integer from 0 to :data:`SEQ_LIMIT`, and
    at or below the boundary of a split snapshot (a snapshot that would need
    a resident row below it is stored whole). Its session number (``sid``) is
    below :data:`SID_LIMIT`, so every row id range of it is a SQLite integer.
    A row past that is damage: it is refused here, before anything is read
    by it or deleted by it.
    """
    adopted, split, sid = session.adopted, split_range(session), session.sid
    if (
        type(adopted) is not int
        or not 0 <= adopted <= SEQ_LIMIT
        or (split is not None and adopted > split.start)
        or not (type(sid) is int and 0 <= sid < SID_LIMIT)  # else its rows' range is past 63 bits
    ):
        named = "with an id over its bound" if key is None else key.key()
        raise damaged(
            f"the row of session {named} is damaged: its session number is {sid!r}, its archive "
            f"watermark (adopted) {adopted!r}, its snapshot's boundary {session.boundary!r}; nothing "
            "was changed"
        )
    return session


def find_session(
    conn: sqlite3.Connection, key: SessionKey, damaged: type[AgentiumError] = SnapshotCorruptError
) -> SessionRow | None:
    """The session's row, or ``None`` when neither adapter stored anything for it.

    A row whose watermark is damaged raises ``damaged`` (see :func:`checked_session`).
    """
    row = conn.execute(_FIND_SESSION, (key.tenant, key.user, key.session)).fetchone()
    if row is None:
        return None
    if row[7] is not None:
        raise damaged(oversize(f"the row of session {key.key()}", row[7]))
    return checked_session(key, SessionRow(*row[:7]), damaged)


def _session_for_write(
    conn: sqlite3.Connection, key: SessionKey, damaged: type[AgentiumError] = SnapshotCorruptError
) -> SessionRow:
    found = find_session(conn, key, damaged)
    if found is not None:
        return found
    cursor = conn.execute(
        "INSERT INTO sessions (tenant_id, user_id, session_id) VALUES (?, ?, ?)",
        (key.tenant, key.user, key.session),
    )
    sid = cursor.lastrowid
    if sid is None or sid >= SID_LIMIT:
        raise sqlite3.DataError(f"the file numbers more sessions than the SQLite adapters can ({SID_LIMIT})")
    return SessionRow(sid, 0, None, None, None, None, None)


def drop_if_empty(conn: sqlite3.Connection, sid: int) -> None:
    """Delete a session's row once it has no snapshot and no group row left (its ids go with it)."""
    conn.execute(
        "DELETE FROM sessions WHERE sid = ? AND revision IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM groups WHERE id >= ? AND id < ?)",
        (sid, _base(sid), _base(sid + 1)),
    )


# -- the archive ------------------------------------------------------------------------------------


#: A group's digest and data, bounded, then what is over its bound (or NULL).
_HELD: Final = f"SELECT {_GROUP_COLUMNS} FROM groups WHERE id = ?"  # noqa: S608


def _archived_digest(conn: sqlite3.Connection, key: SessionKey, session: SessionRow, seq: int) -> str | None:
    """The digest the archive holds for ``seq``: its own row's, or that of the store's row it adopted.

    The caller acknowledges an equal group on it (a receipt; a joint commit then drops the
    snapshot's copy), so the row's bytes must be the digest's: a damaged row raises
    ``ArchiveCorruptError``. Only a group already archived is read and hashed (a retry): a new
    one finds no row, and costs no more than the digest's lookup did.
    """
    row = conn.execute(_HELD, (row_id(session.sid, seq, True),)).fetchone()
    if row is None and seq < session.adopted:
        row = conn.execute(_HELD, (row_id(session.sid, seq, False),)).fetchone()
    if row is None:
        return None
    digest, data, over = row
    if over is not None:  # NOT NULL columns: a value over its bound, not read
        raise ArchiveCorruptError(oversize(f"archived group {seq} of session {key.key()}", over))
    try:
        intact = isinstance(data, bytes) and digest_bytes(unpack(data, JSON_BYTES)) == digest
    except PackedRowError:
        intact = False
    if not intact:
        raise ArchiveCorruptError(
            f"archived group {seq} of session {key.key()} is damaged: its stored bytes do not match its "
            "stored digest, so no receipt can stand on it; nothing was written"
        )
    return str(digest)


def _conflict(key: SessionKey, seq: int, held: str, digest: str) -> ArchiveConflictError:
    return ArchiveConflictError(
        f"group {seq} of session {key.key()} is archived with digest {held}; "
        f"refusing different content {digest}. Archived groups are never overwritten."
    )


def append_groups(
    conn: sqlite3.Connection, key: SessionKey, rows: Sequence[GroupRow], prefix: str
) -> list[ArchiveReceipt]:
    """Append rows to the archive; identical groups are no-ops, different ones conflict (nothing written).

    Raising inside the caller's transaction rolls back every earlier group of
    the batch as well (and, in a joint commit, the snapshot).
    """
    if not rows:
        return []
    session = _session_for_write(conn, key, ArchiveCorruptError)
    receipts: list[ArchiveReceipt] = []
    for seq, data, digest in rows:
        _check_seq(seq)
        held = _archived_digest(conn, key, session, seq)
        if held is None:
            conn.execute(
                "INSERT INTO groups (id, digest, data) VALUES (?, ?, ?)",
                (row_id(session.sid, seq, True), digest, pack(data)),
            )
        elif held != digest:
            raise _conflict(key, seq, held, digest)
        receipts.append(ArchiveReceipt(seq=seq, digest=digest, location=f"{prefix}/{seq}"))
    return receipts


def archived_where(session: SessionRow) -> tuple[str, tuple[int, ...]]:
    """Rows the archive holds: its own, and the store's below ``adopted`` that it has no row for."""
    return (
        "((id & 1) = 1 OR (id < ? AND NOT EXISTS "
        "(SELECT 1 FROM groups AS own WHERE own.id = groups.id + 1)))",
        (row_id(session.sid, session.adopted, False),),
    )


def read_archived(
    conn: sqlite3.Connection, key: SessionKey, start_seq: int, limit: int
) -> list[tuple[int, object, object]]:
    """Up to ``limit`` archived ``(seq, digest, data)`` rows with ``seq >= start_seq``, ascending."""
    session = find_session(conn, key, ArchiveCorruptError)
    if session is None or limit <= 0 or start_seq >= SEQ_LIMIT:
        return []
    archived, params = archived_where(session)
    rows = conn.execute(
        f"SELECT id, {_GROUP_COLUMNS} FROM groups "  # noqa: S608
        f"WHERE id >= ? AND id < ? AND {archived} ORDER BY id LIMIT ?",
        (row_id(session.sid, max(0, start_seq), False), _base(session.sid + 1), *params, limit),
    ).fetchall()
    if any(map(_OVER, rows)):  # at C speed: a read of thousands of groups takes no Python loop for it
        i, over = next((r[0], r[3]) for r in rows if r[3] is not None)
        raise ArchiveCorruptError(oversize(f"archived group {seq_of(i)} of session {key.key()}", over))
    return [(seq_of(i), digest, data) for i, digest, data, _ in rows]


# -- the session store ------------------------------------------------------------------------------


class SnapshotRows(NamedTuple):
    """A snapshot as this layout stores it, prepared on the event loop (encodings are cached there).

    ``header`` is ``data`` with ``"resident":[]`` in place of the groups, or
    ``None`` when the snapshot cannot be split (its resident seqs are not
    exactly ``boundary..next_seq``): then it is stored whole.
    """

    data: bytes
    header: bytes | None
    boundary: int
    next_seq: int
    rows: tuple[GroupRow, ...]


def split_snapshot(snapshot: SessionSnapshot, data: bytes) -> SnapshotRows:
    """``data`` (the snapshot's canonical bytes) with its resident groups taken out as rows."""
    whole, known, rows = snapshot_parts(snapshot)
    boundary, next_seq = snapshot.boundary, snapshot.next_seq
    header: bytes | None = None
    if next_seq <= SEQ_LIMIT and list(map(_SEQ, rows)) == list(range(boundary, next_seq)):
        if known is not None and data is whole:
            # The seal wrote the header on the way to these bytes: they are the header with the
            # groups (the rows' data, comma-joined) in place.
            header = known
        else:
            joined = b",".join([row[1] for row in rows])
            # The top-level key is the one "resident":[ in the text (a quote inside a string is escaped).
            at = data.find(RESIDENT_MARKER) + len(RESIDENT_MARKER)
            end = at + len(joined)
            if at >= len(RESIDENT_MARKER) and data[at:end] == joined and data[end : end + 1] == b"]":
                header = data[:at] + data[end:]
    return SnapshotRows(data, header, boundary, next_seq, rows)


def store_rows(conn: sqlite3.Connection, key: SessionKey, session: SessionRow) -> dict[int, object]:
    """The session store's own rows (at or above ``adopted``): seq to digest, as the column holds it.

    The seq is computed by SQLite (:data:`SEQ_OF_ID_SQL`) and the pairs go
    into the dict at C speed. A digest of another type than text (damage)
    compares unequal to every digest, as its ``str`` would. One longer than
    any digest is not read: it raises ``SnapshotCorruptError`` (nothing changed).
    """
    rows = conn.execute(
        _STORE_ROWS, (row_id(session.sid, session.adopted, False), _base(session.sid + 1))
    ).fetchall()
    held = dict(rows)
    if None in held.values():  # the column is NOT NULL: a digest over its bound (at C speed)
        seq = next(s for s, d in held.items() if d is None)
        (over,) = conn.execute(
            f"SELECT {over_check('digest', DIGEST_CHARS)} FROM groups WHERE id = ?",  # noqa: S608
            (row_id(session.sid, seq, False),),
        ).fetchone()
        raise SnapshotCorruptError(oversize(f"group {seq} of the snapshot of session {key.key()}", over))
    return held


def save_snapshot(
    conn: sqlite3.Connection,
    key: SessionKey,
    snapshot: SnapshotRows,
    expected_revision: int | None,
    evicted: Sequence[GroupRow] = (),
    prefix: str = "",
) -> tuple[int, list[ArchiveReceipt]]:
    """Compare-and-set the snapshot; with ``evicted``, archive those groups in the same transaction.

    Returns the new revision and one receipt per evicted group. A revision
    mismatch raises ``SessionConflictError``, an evicted group the archive
    holds with other content ``ArchiveConflictError``: in the caller's
    transaction, so nothing is written either way.

    An evicted group whose resident row holds the same digest is archived
    by adoption (its row stays as it is, ``adopted`` moves past it); any
    other is appended as an archive row. Then the snapshot's resident rows
    are written — only those that are new or changed — rows it no longer
    holds are deleted (unless adopted), and the session's row is updated.
    """
    session = find_session(conn, key)
    current = None if session is None else session.revision
    if current != expected_revision:
        raise SessionConflictError(
            f"session {key.key()} is at revision {current}, expected {expected_revision}; "
            "another writer committed first. Reload and retry."
        )
    if session is None:
        session = _session_for_write(conn, key)
    sid = session.sid
    held = store_rows(conn, key, session)
    adopt: set[int] = set()
    receipts: list[ArchiveReceipt] = []
    for seq, data, digest in evicted:
        _check_seq(seq)
        found = _archived_digest(conn, key, session, seq)
        if found is not None and found != digest:
            raise _conflict(key, seq, found, digest)
        if found is None:
            if held.get(seq) == digest:
                adopt.add(seq)
            else:
                conn.execute(
                    "INSERT INTO groups (id, digest, data) VALUES (?, ?, ?)",
                    (row_id(sid, seq, True), digest, pack(data)),
                )
        receipts.append(ArchiveReceipt(seq=seq, digest=digest, location=f"{prefix}/{seq}"))
    adopted = max([session.adopted, *(seq + 1 for seq in adopt)])
    # The rows the stored snapshot holds: the only ones this save may rewrite or delete.
    owned = split_range(session) or range(0)
    keep: set[int] = set()
    header = snapshot.header
    if header is not None and snapshot.boundary >= adopted:
        for seq, data, digest in snapshot.rows:
            if seq not in held:
                conn.execute(
                    "INSERT INTO groups (id, digest, data) VALUES (?, ?, ?)",
                    (row_id(sid, seq, False), digest, pack(data)),
                )
            elif held[seq] != digest:
                if seq not in owned:
                    raise _unowned(key, seq, session)
                conn.execute(
                    "UPDATE groups SET digest = ?, data = ? WHERE id = ?",
                    (digest, pack(data), row_id(sid, seq, False)),
                )
            keep.add(seq)
    else:
        header = None  # stored whole: this layout keeps no resident row below the watermark
    stale = [seq for seq in held if seq not in keep and seq not in adopt]
    for seq in stale:
        if seq not in owned:
            raise _unowned(key, seq, session)
    if stale:
        conn.executemany("DELETE FROM groups WHERE id = ?", [(row_id(sid, seq, False),) for seq in stale])
    # A new session starts above every revision an erased one had: never one a writer may still hold.
    revision = revision_floor(conn) + 1 if expected_revision is None else expected_revision + 1
    if revision > _REVISION_LIMIT:  # SQLite would refuse it with a bare OverflowError
        raise SnapshotCorruptError(
            f"session {key.key()} would be at revision {revision}, past the highest a SQLite integer "
            "holds (the stored revision or the revision floor was changed outside the store); "
            "nothing was changed"
        )
    if header is None:
        values: tuple[object, ...] = (adopted, revision, None, None, 1, snapshot.data, sid)
    else:
        values = (adopted, revision, snapshot.boundary, snapshot.next_seq, 0, header, sid)
    conn.execute(
        "UPDATE sessions SET adopted = ?, revision = ?, boundary = ?, next_seq = ?, inline = ?, snapshot = ? "
        "WHERE sid = ?",
        values,
    )
    return revision, receipts


def _unowned(key: SessionKey, seq: int, session: SessionRow) -> SnapshotCorruptError:
    """A save would rewrite or delete a row the stored snapshot does not hold: the row is damaged."""
    return SnapshotCorruptError(
        f"the row of session {key.key()} is damaged: group {seq}'s row is above the archive's "
        f"watermark (adopted {session.adopted!r}) but outside the stored snapshot "
        f"(boundary {session.boundary!r}, next seq {session.next_seq!r}); it may be an archived "
        "group, so it is neither rewritten nor deleted, and nothing was changed"
    )
