"""The SQL of the embedded SQLite adapters: schema, transactions and the two writes.

Kept apart from :mod:`agentium_harness.adapters.sqlite` (connections, threads,
decoding) so that the archive append, the snapshot compare-and-set and the
joint commit that runs both in one transaction share one copy of each
statement. Every function here runs in a worker thread, inside the caller's
connection; identifiers are always bound as SQL parameters.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from .._errors import ArchiveConflictError, SessionConflictError
from .._history import MessageGroup
from .._ports.archive import ArchiveReceipt
from .._ports.erasure import EraseTarget, PhysicalErasure
from .._scope import SessionKey

__all__ = [
    "SCHEMA",
    "archive_rows",
    "compare_and_set",
    "immediate_transaction",
    "erase_rows",
    "insert_archive_rows",
    "scrub_log",
    "target_filter",
]

#: The tables both adapters create (each creates all of them, idempotently).
SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS archive_groups (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL CHECK (seq >= 0),
        digest TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id, seq)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS session_snapshots (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        revision INTEGER NOT NULL CHECK (revision >= 1),
        data BLOB NOT NULL,
        PRIMARY KEY (tenant_id, user_id, session_id)
    ) WITHOUT ROWID
    """,
)


@contextmanager
def immediate_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block in a ``BEGIN IMMEDIATE`` transaction; roll back on any exception.

    ``IMMEDIATE`` takes the write lock up front, so a read-then-write
    (compare-and-set, conflict check) cannot be overtaken by another writer
    between its read and its write.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        # An interrupted statement may already have rolled the transaction back.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    # Stop honouring cancellation before COMMIT: once the work is done it is
    # committed whole, never left to an interrupt halfway through.
    conn.set_progress_handler(None, 0)
    try:
        conn.execute("COMMIT")
    except BaseException:
        # A failed COMMIT (disk full, I/O error) can leave the transaction open;
        # close it so the connection is usable for the next call.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def archive_rows(groups: Sequence[MessageGroup]) -> list[tuple[int, bytes, str]]:
    """``(seq, canonical bytes, digest)`` per group, from the groups' cached encodings."""
    return [(g.seq, g.canonical_bytes(), g.digest) for g in groups]


def insert_archive_rows(
    conn: sqlite3.Connection, key: SessionKey, rows: Sequence[tuple[int, bytes, str]], prefix: str
) -> list[ArchiveReceipt]:
    """Append rows inside the caller's transaction; identical rows are no-ops, different ones conflict."""
    receipts: list[ArchiveReceipt] = []
    for seq, data, digest in rows:
        found = conn.execute(
            "SELECT digest FROM archive_groups "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? AND seq = ?",
            (key.tenant, key.user, key.session, seq),
        ).fetchone()
        if found is None:
            conn.execute(
                "INSERT INTO archive_groups (tenant_id, user_id, session_id, seq, digest, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key.tenant, key.user, key.session, seq, digest, data),
            )
        elif found[0] != digest:
            # Raising inside the transaction rolls back every earlier group of
            # this batch as well (and, in a joint commit, the snapshot).
            raise ArchiveConflictError(
                f"group {seq} of session {key.key()} is archived with digest {found[0]}; "
                f"refusing different content {digest}. Archived groups are never overwritten."
            )
        receipts.append(ArchiveReceipt(seq=seq, digest=digest, location=f"{prefix}/{seq}"))
    return receipts


def compare_and_set(
    conn: sqlite3.Connection, key: SessionKey, data: bytes, expected_revision: int | None
) -> int:
    """Write a snapshot inside the caller's transaction if its revision is ``expected_revision``."""
    row = conn.execute(
        "SELECT revision FROM session_snapshots WHERE tenant_id = ? AND user_id = ? AND session_id = ?",
        (key.tenant, key.user, key.session),
    ).fetchone()
    current = None if row is None else row[0]
    if current != expected_revision:
        raise SessionConflictError(
            f"session {key.key()} is at revision {current}, expected {expected_revision}; "
            "another writer committed first. Reload and retry."
        )
    if current is None:
        conn.execute(
            "INSERT INTO session_snapshots (tenant_id, user_id, session_id, revision, data) "
            "VALUES (?, ?, ?, 1, ?)",
            (key.tenant, key.user, key.session, data),
        )
        return 1
    new_revision = int(current) + 1
    conn.execute(
        "UPDATE session_snapshots SET revision = ?, data = ? "
        "WHERE tenant_id = ? AND user_id = ? AND session_id = ? AND revision = ?",
        (new_revision, data, key.tenant, key.user, key.session, current),
    )
    return new_revision


def target_filter(target: EraseTarget, seq_column: str | None = "seq") -> tuple[str, list[object]]:
    """The SQL condition selecting ``target`` (on tenant, user and session ids and ``seq_column``).

    Every value is a parameter; only constant column names and ``?`` go into
    the text. A groups target with ``seq_column=None`` selects nothing.
    """
    clauses = ["tenant_id = ?"]
    params: list[object] = [target.tenant_id]
    for column, value in (("user_id", target.user_id), ("session_id", target.session_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if target.groups:
        if seq_column is None:
            return "0", []
        spans = " OR ".join(f"({seq_column} >= ? AND {seq_column} < ?)" for _ in target.groups)
        clauses.append(f"({spans})")
        for span in target.groups:
            params.extend((span.start, span.stop))
    return " AND ".join(clauses), params


def scrub_log(conn: sqlite3.Connection, retries: int = 50) -> tuple[PhysicalErasure, str]:
    """Checkpoint the WAL into the database and truncate it, so erased rows leave no copy in the log.

    Runs after the erasing transaction committed (outside any transaction).
    The connections of the built-in adapters run with ``secure_delete`` on,
    so the pages the checkpoint writes carry zeros where the rows were. A
    reader holding an old snapshot of the file can keep the checkpoint from
    finishing; it is retried briefly (the busy timeout waits too), and the
    answer says truthfully whether the log was emptied.
    """
    for attempt in range(retries):
        busy, log, moved = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy == 0 and log in (0, -1) and moved in (0, -1):
            return PhysicalErasure.REMOVED, ""
        if attempt + 1 < retries:
            time.sleep(0.01)  # a worker thread, never the event loop
    return (
        PhysicalErasure.UNREFERENCED,
        "the write-ahead log could not be checkpointed and truncated (another connection kept reading); "
        "erased rows may remain in it until the next checkpoint",
    )


def erase_rows(
    conn: sqlite3.Connection,
    table: str,
    columns: str,
    keys: Sequence[str],
    target: EraseTarget,
    bound: int,
    *,
    dry_run: bool,
    check: Callable[[], None],
    seq_column: str | None = "seq",
) -> tuple[list[Any], bool]:
    """Select (and unless ``dry_run`` delete) at most ``bound`` rows of ``table`` that ``target`` covers.

    Runs inside the caller's transaction. ``columns`` are read (the first
    ``len(keys)`` must be ``keys``, the row's primary key); ``check`` runs
    before deleting (it raises to stop). Returns the rows taken, in key
    order, and whether more rows are left. ``table``, ``columns`` and
    ``keys`` are the caller's constants; every value is a parameter.
    """
    where, params = target_filter(target, seq_column)
    order = ", ".join(keys)
    rows = conn.execute(
        f"SELECT {columns} FROM {table} WHERE {where} ORDER BY {order} LIMIT ?",  # noqa: S608
        (*params, bound + 1),
    ).fetchall()
    taken = rows[:bound]
    if not dry_run and taken:
        check()
        match = " AND ".join(f"{k} = ?" for k in keys)
        conn.executemany(f"DELETE FROM {table} WHERE {match}", [row[: len(keys)] for row in taken])  # noqa: S608
    return taken, len(rows) > bound
