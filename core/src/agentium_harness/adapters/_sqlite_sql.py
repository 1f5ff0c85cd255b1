"""The SQL of the embedded SQLite adapters: schema, its migration, transactions, erasure helpers.

Kept apart from :mod:`agentium_harness.adapters.sqlite` (connections, threads,
decoding). The row layout itself — a session registry and one row per stored
group, shared by the archive and the session store — is
:mod:`agentium_harness.adapters._sqlite_rows`. Every function here runs in a
worker thread, inside the caller's connection; identifiers are always bound as
SQL parameters.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from .._errors import SessionStoreError, SnapshotCorruptError
from .._ports.erasure import EraseTarget, PhysicalErasure
from ._sqlite_bounds import ID_CHARS, INT_CHARS, bounded, bounded_select

__all__ = [
    "FLOOR_GUARDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SQLiteRevisionFloorError",
    "SQLiteStorageError",
    "SchemaError",
    "ensure_schema",
    "immediate_transaction",
    "raise_revision_floor",
    "read_transaction",
    "revision_floor",
    "schema_current",
    "scrub_log",
    "session_filter",
    "stored_version",
]

#: Version of the tables :data:`SCHEMA` creates, kept in the ``meta`` table. Version 1 kept
#: archived groups (``archive_groups``) and whole snapshots (``session_snapshots``) in two
#: tables; version 2 keeps one row per session and one row per group (:mod:`._sqlite_rows`);
#: version 3 adds the session store's revision floor (``revision_floor``, its one row made
#: with the table). The floor is a version of its own because code that predates it erases
#: without raising it: a file that has it must be refused by such code, not quietly used.
#: Version 4 may store a group's bytes deflated (:mod:`._sqlite_pack`), which version 3 code
#: would read as damage (and an erasure of its would delete such a snapshot unread).
SCHEMA_VERSION: Final = 4

#: The tables both adapters create (each creates all of them, idempotently).
SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    )
    """,
    # One row per session either adapter stored something for: its number (never reused:
    # group rows are keyed by it), the archive's watermark (``adopted``: the session store's
    # group rows below it belong to the archive), and the session store's snapshot, if any.
    """
    CREATE TABLE IF NOT EXISTS sessions (
        sid INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        adopted INTEGER NOT NULL DEFAULT 0,
        revision INTEGER,
        boundary INTEGER,
        next_seq INTEGER,
        inline INTEGER,
        snapshot BLOB,
        UNIQUE (tenant_id, user_id, session_id)
    )
    """,
    # One row per stored group, keyed sid << 33 | seq << 1 | archived (see _sqlite_rows).
    """
    CREATE TABLE IF NOT EXISTS groups (
        id INTEGER PRIMARY KEY,
        digest TEXT NOT NULL,
        data BLOB NOT NULL
    )
    """,
    # The session store's revision floor (schema version 3): one row, one number (no identifier),
    # the highest revision of any snapshot an erasure removed. A session created afterwards starts
    # above it, so no revision a key had is handed out again (see revision_floor). Its row is
    # made with the table (ensure_schema); a missing row is damage, never read as 0.
    """
    CREATE TABLE IF NOT EXISTS revision_floor (
        id INTEGER PRIMARY KEY CHECK (id = 0),
        floor INTEGER NOT NULL
    )
    """,
)


#: Made once with the table, when a file is set up or brought to version 3: never again (a row
#: gone later is damage, and 0 could be below a revision an erased session had).
_FLOOR_ROW: Final = "INSERT OR IGNORE INTO revision_floor (id, floor) VALUES (0, 0)"

#: The database keeps the floor from going down or away, whoever writes (the PostgreSQL store's
#: ``floor_only_rises`` trigger): an UPDATE or INSERT OR REPLACE that would lower it, or store a
#: value that is not a non-negative integer, and any DELETE of its row are aborted. Not a schema
#: version: code of version 3 only ever raises the floor, so a file that has them is used by it as
#: before; an open by this code adds them to a version 3 file that lacks them (same transaction as
#: the rest of the setup). Made after the floor's row, whose ``INSERT OR IGNORE`` of 0 over a row
#: version 2 code left would be refused. A ``DROP TABLE`` drops them too (the row is then missing:
#: damage, refused as before). The INSERT one covers ``INSERT OR REPLACE``, whose removal of the
#: old row fires no DELETE trigger (SQLite's ``recursive_triggers`` is off).
#: Each refuses a new value that is not a non-negative integer, and one below the value there when
#: that is an integer (a damaged one can still be repaired).
FLOOR_GUARDS: Final = (
    """
    CREATE TRIGGER IF NOT EXISTS revision_floor_update_only_rises BEFORE UPDATE ON revision_floor
    WHEN typeof(NEW.floor) != 'integer' OR NEW.floor < 0
        OR (typeof(OLD.floor) = 'integer' AND NEW.floor < OLD.floor)
    BEGIN SELECT RAISE(ABORT, 'the session revision floor only rises; UPDATE refused'); END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS revision_floor_insert_only_rises BEFORE INSERT ON revision_floor
    WHEN typeof(NEW.floor) != 'integer' OR NEW.floor < 0 OR NEW.floor < (
        SELECT floor FROM revision_floor WHERE id = NEW.id AND typeof(floor) = 'integer'
    )
    BEGIN SELECT RAISE(ABORT, 'the session revision floor only rises; INSERT refused'); END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS revision_floor_kept BEFORE DELETE ON revision_floor
    BEGIN SELECT RAISE(ABORT, 'the session revision floor only rises; DELETE refused'); END
    """,
)


class SchemaError(sqlite3.DatabaseError):
    """The file's tables are of a version this code cannot use, or cannot be migrated; says why."""


class SQLiteStorageError(SessionStoreError):
    """The SQLite database could not complete an operation.

    Causes include a lock held past the busy timeout, a full disk, a file that
    is not a SQLite database, a database written by a newer version of this
    adapter, or use of an adapter after ``aclose()``. The session store raises
    this; the archive raises :class:`~agentium_harness._errors.ArchiveError`
    for the same causes. Nothing was committed by the failed call.
    """


class SQLiteRevisionFloorError(SQLiteStorageError, SnapshotCorruptError):
    """The session store's revision floor is damaged or missing: no session is created, nothing erased.

    Fail closed, as the PostgreSQL and S3 session stores do: without the floor
    no revision could be known never to repeat across an erasure. Nothing was
    changed. An operator repairs it (``revision_floor``'s row ``id = 0``, at a
    revision no lower than any session's ever was). Also a
    ``SnapshotCorruptError``, which a create raised for a damaged floor before.
    """


# The name each schema statement creates ("CREATE ... IF NOT EXISTS <name>").
_CREATED: Final = re.compile(r"IF NOT EXISTS\s+(\w+)")


def schema_current(
    conn: sqlite3.Connection, meta_table: str, version: int, statements: Sequence[str]
) -> bool:
    """True if the file holds ``version`` in ``meta_table`` and every object ``statements`` create.

    A plain read, which needs no lock in WAL mode: a file already set up is
    opened without waiting for another process's write lock (readers proceed
    while a writer commits). ``meta_table`` is a constant of the caller's.
    Anything else (a new, older, newer or incomplete file) answers ``False``
    and the caller creates, migrates or refuses in a write transaction.
    """
    names = {m.group(1) for m in map(_CREATED.search, statements) if m is not None}
    with read_transaction(conn):
        try:
            # A value longer than any version (changed behind the store's back) comes back NULL,
            # unread: the caller's write transaction then reports it. Its bytes too: length() counts
            # only the characters before a NUL.
            row = conn.execute(
                f"SELECT CASE WHEN length(value) <= 20 AND length(CAST(value AS BLOB)) <= 20 THEN value END "  # noqa: S608 - a constant
                f"FROM {meta_table} "
                "WHERE key = 'schema_version'"
            ).fetchone()
        except sqlite3.OperationalError:  # no meta table yet: a new file
            return False
        if row is None or str(row[0]) != str(version):
            return False
        # Only "?" marks go into the text; the names are parameters.
        listed = f"SELECT name FROM sqlite_master WHERE name IN ({','.join('?' * len(names))})"  # noqa: S608
        found = {r[0] for r in conn.execute(listed, sorted(names))}
    return found == names


def stored_version(conn: sqlite3.Connection, meta_table: str) -> str | None:
    """The schema version ``meta_table`` (a constant of the caller's) holds, as text; ``None`` if none.

    Bounded as every read of stored data: a value changed behind the store's
    back may be as long as SQLite allows (1 GB); it is not read, nor put into
    the message of the :class:`SchemaError` that refuses it.
    """
    # The bytes as well: length() of a text stops at its first NUL (a version's digits are ASCII).
    row = conn.execute(
        "SELECT CASE WHEN length(value) <= 20 AND length(CAST(value AS BLOB)) <= 20 THEN value END, "  # noqa: S608
        f"length(value), length(CAST(value AS BLOB)) FROM {meta_table} WHERE key = 'schema_version'"
    ).fetchone()
    if row is None:
        return None
    if row[0] is None:
        raise SchemaError(
            f"it has a schema version of {row[1]} characters ({row[2]} bytes), not one any version of "
            "agentium-harness writes: the file is damaged; nothing was changed"
        )
    return str(row[0])


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the tables of a new file, migrate one of version 1 to 3, refuse a newer one (one transaction).

    Two connections opening one file at once are ordered by the write lock: the
    second finds the tables made (or migrated) by the first. A file already at
    this version with every table is only read (:func:`schema_current`).
    """
    if schema_current(conn, "meta", SCHEMA_VERSION, SCHEMA + FLOOR_GUARDS):
        return
    with immediate_transaction(conn):
        conn.execute(SCHEMA[0])
        found = stored_version(conn, "meta")
        if found == "1":
            # In this transaction: a crash or an error leaves version 1 whole.
            _migrate_v1(conn)
        elif found not in (None, "2", "3", str(SCHEMA_VERSION)):
            raise SchemaError(
                f"it has schema version {found}, this version of agentium-harness understands "
                f"{SCHEMA_VERSION}; upgrade agentium-harness or use another file"
            )
        for statement in SCHEMA[1:]:
            conn.execute(statement)
        if found != str(SCHEMA_VERSION):
            if found != "3":
                # A new file, or version 1 or 2: the floor's row, if the file has none yet. A version
                # 2 file may already hold one (code of version 2 that knew the floor); it is kept as
                # it is, damaged or not. A version 3 file's row was made with its table: one missing
                # now is damage, never made again at 0 (below a revision an erased session had).
                conn.execute(_FLOOR_ROW)
            # Version 4 only adds deflated group rows (_sqlite_pack), which code of version 3 would
            # take for damage: the version keeps that code off the file.
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
        for statement in FLOOR_GUARDS:  # after the row (see FLOOR_GUARDS); kept if there
            conn.execute(statement)


def _migrate_v1(conn: sqlite3.Connection) -> None:
    """Move version 1's ``archive_groups`` and ``session_snapshots`` rows into version 2's tables.

    Archived groups become archive-owned group rows with their bytes and
    digests as they are; a snapshot is kept whole (``inline``) until its next
    save splits it. Nothing is decoded or changed: a damaged row stays damaged
    and is reported when read, as before. Only a row whose key cannot be a
    version 2 row id stops the migration (it is refused, and the file is
    left at version 1).
    """
    for statement in SCHEMA[1:]:
        conn.execute(statement)
    # Bounded as every read: a text seq passes version 1's CHECK (text sorts above every number),
    # and neither it nor an id of that row may be fetched whole or put whole into the message.
    bad = conn.execute(
        f"SELECT {bounded('tenant_id', ID_CHARS)}, {bounded('user_id', ID_CHARS)}, "  # noqa: S608 - constants
        f"{bounded('session_id', ID_CHARS)}, {bounded('seq', INT_CHARS)}, length(seq), "
        "length(CAST(seq AS BLOB)) FROM archive_groups "
        "WHERE typeof(seq) != 'integer' OR seq < 0 OR seq >= ?1 LIMIT 1",
        (1 << 32,),
    ).fetchone()
    if bad is not None:
        seq = f"{bad[3]!r}" if bad[3] is not None else f"with a seq of {bad[4]} characters ({bad[5]} bytes)"
        raise SchemaError(
            f"it cannot be migrated to schema version {SCHEMA_VERSION}: archived group {seq} of session "
            f"{bad[:3]!r} has a seq this version cannot store (at most 2**32 - 1); nothing was changed"
        )
    conn.execute(
        "INSERT INTO sessions (tenant_id, user_id, session_id) "
        "SELECT tenant_id, user_id, session_id FROM archive_groups "
        "UNION SELECT tenant_id, user_id, session_id FROM session_snapshots ORDER BY 1, 2, 3"
    )
    conn.execute(
        "INSERT INTO groups (id, digest, data) "
        "SELECT (s.sid << 33) | (a.seq << 1) | 1, a.digest, a.data FROM archive_groups AS a "
        "JOIN sessions AS s ON s.tenant_id = a.tenant_id AND s.user_id = a.user_id "
        "AND s.session_id = a.session_id"
    )
    same = (
        "ss.tenant_id = sessions.tenant_id AND ss.user_id = sessions.user_id "
        "AND ss.session_id = sessions.session_id"
    )
    conn.execute(
        f"UPDATE sessions SET inline = 1, "  # noqa: S608 - constant text
        f"revision = (SELECT ss.revision FROM session_snapshots AS ss WHERE {same}), "
        f"snapshot = (SELECT ss.data FROM session_snapshots AS ss WHERE {same}) "
        f"WHERE EXISTS (SELECT 1 FROM session_snapshots AS ss WHERE {same})"
    )
    conn.execute("DROP TABLE archive_groups")
    conn.execute("DROP TABLE session_snapshots")


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block's reads in one read transaction: one consistent view of the file.

    A snapshot is a session row and its group rows; read in separate
    statements, another writer's commit could land between them.
    """
    conn.execute("BEGIN")
    try:
        yield
    finally:
        # Ends the read (nothing was written), whether the block returned or raised.
        if conn.in_transaction:
            conn.execute("COMMIT")


@contextmanager
def immediate_transaction(
    conn: sqlite3.Connection, begin: Callable[[sqlite3.Connection], None] | None = None
) -> Iterator[None]:
    """Run the block in a ``BEGIN IMMEDIATE`` transaction; roll back on any exception.

    ``IMMEDIATE`` takes the write lock up front, so a read-then-write
    (compare-and-set, conflict check) cannot be overtaken by another writer
    between its read and its write. ``begin``: what runs the ``BEGIN
    IMMEDIATE`` instead (``SQLiteAdapterBase.begin_immediate``).
    """
    if begin is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin(conn)
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


def revision_floor(conn: sqlite3.Connection, refused: str = "no session can be created") -> int:
    """The highest revision an erasure removed from this file (0 if none yet): a new session starts above it.

    Runs in the caller's write transaction. A damaged value (not a
    non-negative integer), a missing row or a missing table raises
    :class:`SQLiteRevisionFloorError` (``refused`` says what it stops): no
    revision chosen without it could be known never to repeat.
    """
    try:
        # Bounded: a floor changed to a huge value behind the store's back comes back NULL, unread.
        row = conn.execute(
            f"SELECT {bounded_select((('floor', INT_CHARS),))} FROM revision_floor WHERE id = 0"  # noqa: S608
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        row = None  # dropped while this connection was open (an open sets the table up again)
    if row is None:
        raise SQLiteRevisionFloorError(
            f"sqlite session store: the revision floor is missing (table revision_floor, row id 0), so an "
            f"erased session's revisions could repeat; {refused} until an operator restores it at a "
            "revision no lower than any session's ever was; nothing was changed"
        )
    floor, over = row
    if type(floor) is not int or floor < 0:
        # NOT NULL: None is a value over its bound (not read); its size is named instead.
        what = str(over) if floor is None else type(floor).__name__
        raise SQLiteRevisionFloorError(
            f"sqlite session store: the revision floor is damaged ({what}), so an erased "
            f"session's revisions could repeat; {refused} until an operator repairs it (revision_floor, "
            "row id 0) at a revision no lower than any session's ever was; nothing was changed"
        )
    return floor


def raise_revision_floor(conn: sqlite3.Connection, revisions: Sequence[object]) -> None:
    """Raise the floor to the highest of ``revisions`` (in the erasing transaction, before its deletions).

    A damaged or missing floor raises :class:`SQLiteRevisionFloorError` and
    the caller's transaction (nothing deleted yet) rolls back: an erasure
    that could not raise the floor would let the erased revisions repeat.
    A revision that is not a positive integer is a damaged row no load
    could return, so no writer can hold it: it is left out.
    """
    floor = revision_floor(conn, "no session can be erased")
    highest = max((r for r in revisions if type(r) is int and r > 0), default=0)
    if highest > floor:
        conn.execute("UPDATE revision_floor SET floor = ? WHERE id = 0", (highest,))


def session_filter(target: EraseTarget) -> tuple[str, list[object]]:
    """The SQL condition on ``sessions`` selecting the sessions ``target`` names (its groups aside).

    Every value is a parameter; only constant column names and ``?`` go into the text.
    """
    clauses = ["tenant_id = ?"]
    params: list[object] = [target.tenant_id]
    for column, value in (("user_id", target.user_id), ("session_id", target.session_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    return " AND ".join(clauses), params


#: How long the rebuild of the file (``VACUUM``) may take when the call has no deadline.
VACUUM_BUDGET_S: Final = 30.0
#: Largest file an erasure or a forget rebuilds as it goes (64 MiB: well under a second to copy).
#: A rebuild rewrites the whole file and holds the write lock meanwhile, stalling every other
#: writer of every tenant; a larger file is left for a rebuild in a maintenance window, and the
#: report says so (``unreferenced``). Read at each call.
MAX_REBUILD_BYTES = 64 * 1024 * 1024


def scrub_log(
    conn: sqlite3.Connection,
    budget_s: float = 2.0,
    attempt_wait_ms: int = 50,
    *,
    time_left: float | None = None,
) -> tuple[PhysicalErasure, str]:
    """Rebuild the file, then checkpoint the WAL into it and truncate it: erased rows leave no copy.

    Runs after the erasing transaction committed (outside any transaction).
    ``secure_delete`` (on for every connection of the built-in adapters)
    zeroes a deleted row where it lies, but not the copies B-tree rebalancing
    left behind in the unused space of other pages when the row moved (a
    snapshot or fact rewritten at another size, a page split): an erased
    text could still be read from the file. So the file is rebuilt first
    (``VACUUM``, in the log like any write), in at most half of the time
    the call has left (``time_left``, else :data:`VACUUM_BUDGET_S`). A reader holding an old
    snapshot of the file can keep the checkpoint from finishing; it is
    retried for at most ``budget_s`` seconds, each attempt waiting at most
    ``attempt_wait_ms`` for locks (not the connection's busy timeout: one
    attempt per busy timeout outlasted every deadline). ``time_left``
    shortens both: the erasure has committed, and the call still ends by
    its deadline (one short attempt is made even at the deadline). The
    answer says truthfully whether the rebuild finished and the log was
    emptied.
    """
    (busy_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    try:
        started = time.monotonic()
        # Half of what the call has left at most: the checkpoint after it needs time too.
        not_rebuilt = _rebuild_file(conn, started + (VACUUM_BUDGET_S if time_left is None else time_left / 2))
        if time_left is not None:
            # What the rebuild left of the call's time.
            time_left -= time.monotonic() - started
            budget_s = min(budget_s, max(0.0, time_left))
            attempt_wait_ms = min(attempt_wait_ms, max(1, int(time_left * 1000)))
        conn.execute(f"PRAGMA busy_timeout = {min(int(busy_ms), int(attempt_wait_ms))}")
        stop = time.monotonic() + budget_s
        while True:
            busy, log, moved = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0 and log in (0, -1) and moved in (0, -1):
                if not_rebuilt:
                    return PhysicalErasure.UNREFERENCED, not_rebuilt
                return PhysicalErasure.REMOVED, ""
            if time.monotonic() + 0.01 > stop:
                break
            time.sleep(0.01)  # a worker thread, never the event loop
    finally:
        # The adapter keeps track of the value it set (it sets it again only when it changes).
        conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
    log_kept = (
        "the write-ahead log could not be checkpointed and truncated (another connection kept reading); "
        "erased rows may remain in it until the next checkpoint"
    )
    return PhysicalErasure.UNREFERENCED, f"{log_kept}; {not_rebuilt}" if not_rebuilt else log_kept


def _rebuild_file(conn: sqlite3.Connection, stop: float) -> str:
    """``VACUUM`` the file by ``stop`` (monotonic); ``""`` when done, else why not.

    Waits for another writer's lock in short attempts, never past ``stop``,
    and a progress handler interrupts a rebuild still running then (it rolls
    back whole: the file is as it was). The caller restores the busy timeout.
    """
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    size, limit = int(pages) * int(page_size), MAX_REBUILD_BYTES
    if size > limit:
        return (
            f"the file ({size} bytes) is over the {limit} bytes an erasure rebuilds as it goes "
            "(MAX_REBUILD_BYTES); copies of erased rows that SQLite moved may remain in unused page "
            "space until the file is rebuilt (VACUUM, in a maintenance window)"
        )
    conn.execute("PRAGMA busy_timeout = 50")
    conn.set_progress_handler(lambda: int(time.monotonic() > stop), 1000)
    try:
        while True:
            try:
                conn.execute("VACUUM")
                return ""
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() + 0.01 > stop:
                    # SQLite's own message names no row or value.
                    return (
                        f"the file could not be rebuilt in time (VACUUM: {exc}); copies of erased rows "
                        "that SQLite moved may remain in unused page space until the next VACUUM"
                    )
            time.sleep(0.01)  # a worker thread, never the event loop
    finally:
        conn.set_progress_handler(None, 0)
