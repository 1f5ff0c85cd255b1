"""The row writes of the SQLite recall store: sources, archived groups with their context, migration, erasure.

Kept apart from the schema and the discovery statement
(:mod:`._sqlite_recall_sql`). Every function here runs in a worker thread,
inside the caller's connection and transaction; values are always bound as
SQL parameters. An archived group's ``context`` column holds the edge lines
of its neighbours in the same session (each cut to
:data:`~._sqlite_recall_sql.CONTEXT_LINE_BYTES`); writing or erasing a group
refreshes its neighbours' context.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from .._ports.erasure import EraseTarget
from .._ports.recall import SourceOwner
from ._sqlite_bounds import (
    DIGEST_CHARS,
    ID_CHARS,
    INT_CHARS,
    JSON_BYTES,
    bounded,
    bounded_select,
    exceeds,
    oversize,
    vouched_digest,
)
from ._sqlite_recall_sql import CONTEXT_LINE_BYTES, OWNER_COLUMNS, checked_rows

__all__ = [
    "SourceRow",
    "erase_sources",
    "group_context",
    "insert_groups",
    "insert_source",
    "migrate_v1",
]


@attrs.frozen(slots=True)
class SourceRow:
    """One ``recall_sources`` row to write (groups fill the last four fields)."""

    source_id: str
    kind: str
    owner: SourceOwner
    revision: str
    title: str
    text: str
    seq: int | None = None
    data: bytes | None = None
    receipt_digest: str | None = None
    context: str = ""


def insert_source(conn: sqlite3.Connection, row: SourceRow) -> bool:
    """Write ``row`` inside the caller's transaction unless an equal revision is stored; True if written.

    A stored row at another revision is deleted and the new one inserted with
    a new (larger) rowid, so a changed source counts as the newest for
    discovery's newest-first cap. A row at the same revision keeps its place
    and only its context is brought up to date.
    """
    # Bounded: a revision longer than any digest comes back NULL, unread, and the row is replaced.
    found = conn.execute(
        f"SELECT id, {bounded('revision', DIGEST_CHARS)} FROM recall_sources WHERE source_id = ?",  # noqa: S608
        (row.source_id,),
    )
    existing = found.fetchone()
    if existing is not None:
        if existing[1] == row.revision:
            _set_context(conn, existing[0], row.context)
            return False
        conn.execute("DELETE FROM recall_sources WHERE id = ?", (existing[0],))
    owner = row.owner
    cursor = conn.execute(
        # OWNER_COLUMNS is a constant; every value is a parameter.
        f"INSERT INTO recall_sources (source_id, kind, {OWNER_COLUMNS}, revision, title, size_bytes, "  # noqa: S608
        "seq, receipt_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.source_id,
            row.kind,
            owner.tenant,
            owner.user,
            owner.session,
            owner.project,
            owner.repository,
            row.revision,
            row.title,
            len(row.text.encode("utf-8")),
            row.seq,
            row.receipt_digest,
        ),
    )
    conn.execute(
        "INSERT INTO recall_texts (id, title, text, data, context) VALUES (?, ?, ?, ?, ?)",
        (cursor.lastrowid, row.title, row.text, row.data, row.context),
    )
    return True


def _set_context(conn: sqlite3.Connection, rowid: int, context: str) -> None:
    # Only a changed context is written: an equal one would re-index the row for nothing.
    conn.execute(
        "UPDATE recall_texts SET context = ? WHERE id = ? AND context != ?", (context, rowid, context)
    )


def _cut(line: str) -> str:
    data = line.encode("utf-8")
    if len(data) <= CONTEXT_LINE_BYTES:
        return line
    return data[:CONTEXT_LINE_BYTES].decode("utf-8", "ignore")


def _edge_line(text: str | None, last: bool) -> str:
    """The first (or last) non-blank line of a group's text, cut to :data:`CONTEXT_LINE_BYTES`.

    A line is ``role: content``; a line with nothing after the role (an empty
    reply) is blank here, so the neighbour's last words are used instead.
    """
    if not text:
        return ""
    lines = text.split("\n")
    for line in reversed(lines) if last else lines:
        if line.partition(": ")[2].strip():
            return _cut(line)
    return ""


def group_context(before: str | None, after: str | None) -> str:
    """A group's indexed context: the previous group's last line and the next group's first."""
    return "\n".join(p for p in (_edge_line(before, True), _edge_line(after, False)) if p)


#: A stored group's rowid and text (bounded: one longer than any the store writes is not read).
_GROUP_AT: Final = (
    f"SELECT s.id, {bounded_select((('t.text', JSON_BYTES),))} "  # noqa: S608
    "FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
    "WHERE s.kind = 'group' AND s.tenant_id = ? AND s.user_id = ? AND s.session_id = ? AND s.seq = ?"
)


def _group_at(conn: sqlite3.Connection, key: tuple[object, ...], seq: int) -> tuple[int, str] | None:
    """Rowid and text of the stored group ``seq`` of session ``key``, if any (``seq`` below 0: none).

    A text over its bound raises ``sqlite3.DataError`` (the store's error): it was not read.
    """
    found = conn.execute(_GROUP_AT, (*key, seq)).fetchone() if seq >= 0 else None
    if found is None:
        return None
    if found[1] is None:  # NOT NULL: longer than any text the store writes
        what = f"sqlite recall store: indexed group {seq} of a session"
        raise sqlite3.DataError(oversize(what, found[2]))
    return int(found[0]), str(found[1])


def insert_groups(conn: sqlite3.Connection, rows: Sequence[SourceRow], check: Callable[[], None]) -> int:
    """Write the group rows of one session with their contexts; the number written.

    A row's context comes from its neighbours (seq - 1 and seq + 1), in the
    batch or already stored; the stored neighbours' contexts are refreshed,
    since they may now name a group of this batch. Runs inside the caller's
    transaction; ``check`` runs every 256 rows (it raises to stop).
    """
    if not rows:
        return 0
    owner = rows[0].owner
    key = (owner.tenant, owner.user, owner.session)
    batch = {row.seq: row for row in rows if row.seq is not None}
    stored: dict[int, tuple[int, str] | None] = {}

    def stored_at(seq: int) -> tuple[int, str] | None:
        if seq not in stored:
            stored[seq] = _group_at(conn, key, seq)
        return stored[seq]

    def text_at(seq: int) -> str | None:
        if seq in batch:
            return batch[seq].text
        found = stored_at(seq)
        return found[1] if found is not None else None

    written = 0
    for i, row in enumerate(rows):
        if i % 256 == 0:
            check()
        assert row.seq is not None
        context = group_context(text_at(row.seq - 1), text_at(row.seq + 1))
        written += insert_source(conn, attrs.evolve(row, context=context))
    for seq in sorted({s + d for s in batch for d in (-1, 1)} - batch.keys()):
        neighbour = stored_at(seq)
        if neighbour is not None:
            _set_context(conn, neighbour[0], group_context(text_at(seq - 1), text_at(seq + 1)))
    return written


# Pages of one session's groups read at a time while migrating.
_MIGRATION_PAGE: Final = 1000


def migrate_v1(conn: sqlite3.Connection) -> None:
    """Bring version-1 recall tables to version 2 inside the caller's transaction.

    Drops the old index and its triggers, adds the ``context`` column and
    fills every group's context, session by session in pages (memory stays
    bounded). The caller then creates the new index and triggers and
    rebuilds the index from ``recall_texts`` (FTS5's ``rebuild``). Sources,
    revisions and canonical bytes are untouched.
    """
    for trigger in ("recall_texts_ai", "recall_texts_ad", "recall_texts_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS recall_fts")
    conn.execute("ALTER TABLE recall_texts ADD COLUMN context TEXT NOT NULL DEFAULT ''")
    # Bounded as every read (an id, a seq over its bound is not read): a text seq passes the
    # column's CHECK (text sorts above every number), so it is bounded like any value.
    ids = (("tenant_id", ID_CHARS), ("user_id", ID_CHARS), ("session_id", ID_CHARS))
    sessions = conn.execute(
        f"SELECT DISTINCT {bounded_select(ids)} FROM recall_sources WHERE kind = 'group'"  # noqa: S608
    ).fetchall()
    for key in checked_rows(sessions, "an indexed group's session"):
        previous: tuple[int, int, str] | None = None  # (id, seq, text) of the last group seen
        before: str | None = None  # the text of the group before ``previous``, if adjacent
        start = 0
        while True:
            page = conn.execute(
                f"SELECT s.id, {bounded_select((('s.seq', INT_CHARS), ('t.text', JSON_BYTES)))} "  # noqa: S608
                "FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
                "WHERE s.kind = 'group' AND s.tenant_id = ? AND s.user_id = ? AND s.session_id = ? "
                "AND s.seq >= ? ORDER BY s.seq LIMIT ?",
                (*key, start, _MIGRATION_PAGE),
            ).fetchall()
            page = checked_rows(page, "an indexed group's row")  # a seq or text over its bound: not read
            for rowid, seq, text in page:
                if type(seq) is not int:
                    # A short text (or real, or blob) seq passes the column's CHECK and its bound (text
                    # sorts above every number): damage, refused as the store's error (a DataError
                    # becomes SQLiteRecallError); the transaction leaves the file at version 1.
                    raise sqlite3.DataError(
                        f"sqlite recall store: an indexed group's row is damaged: its seq {seq!r} is not "
                        "an integer; it was not migrated, and nothing was changed"
                    )
                if previous is not None:
                    after = text if seq == previous[1] + 1 else None
                    _set_context(conn, previous[0], group_context(before, after))
                    before = previous[2] if seq == previous[1] + 1 else None
                previous = (int(rowid), int(seq), str(text))
            if len(page) < _MIGRATION_PAGE:
                break
            start = int(page[-1][1]) + 1
        if previous is not None:
            _set_context(conn, previous[0], group_context(before, None))


def _owner_filter(target: EraseTarget) -> tuple[str, list[object]]:
    """SQL on ``recall_sources`` for what ``target`` covers: groups of covered sessions, owned documents.

    A tenant target covers every source of the tenant, a user target those
    whose owner names the user, a session target those naming the session;
    a groups target only its session's groups in its seq ranges.
    """
    clauses = ["tenant_id = ?"]
    params: list[object] = [target.tenant_id]
    for column, value in (("user_id", target.user_id), ("session_id", target.session_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if target.groups:
        clauses.append("kind = 'group'")
        clauses.append("(" + " OR ".join("(seq >= ? AND seq < ?)" for _ in target.groups) + ")")
        for span in target.groups:
            params.extend((span.start, span.stop))
    return " AND ".join(clauses), params


_OWNER_IDS: Final = ("tenant_id", "user_id", "session_id")
#: What an erasure reports of a source, bounded, then the over column. A revision not of a digest's
#: exact form (1 GB of text, "garbage") comes back "", unread, but stops nothing: the source is
#: erased all the same (a group's is reported with digest "", nothing vouching for it, where the
#: engine refuses any other form; a document's revision is never reported), so damage in what an
#: operator asked to remove never stops an erasure.
#: Likewise an owner id or a seq over its bound (the column after the revision says so): the source is erased
#: unread, a group counted as ``damaged`` (no key or seq names it), a document as a document.
_ERASED_COLUMNS: Final = bounded_select(
    (
        ("id", None),
        ("kind", len("document")),
        *((bounded(column, ID_CHARS), None) for column in _OWNER_IDS),
        (bounded("seq", INT_CHARS), None),
        (vouched_digest("revision"), None),
        (
            "("
            + " OR ".join(
                [f"coalesce({exceeds(column, ID_CHARS)}, 0)" for column in _OWNER_IDS]
                + [f"coalesce({exceeds('seq', INT_CHARS)}, 0)"]
            )
            + ")",
            None,
        ),
    )
)


def erase_sources(
    conn: sqlite3.Connection, target: EraseTarget, bound: int, *, dry_run: bool, check: Callable[[], None]
) -> tuple[list[tuple[Any, ...]], bool]:
    """Select (unless ``dry_run``: and delete) at most ``bound`` sources ``target`` covers, in a transaction.

    Rows are ``(kind, tenant, user, session, seq, revision, damaged)`` in id order
    (``damaged``: an owner id or the seq is over its bound, so was not read);
    the second value says whether more are left. Deleting a source deletes
    its text and its index entry (the triggers). For a groups target the
    remaining neighbours of every erased group get their indexed context
    rebuilt, so no line of an erased group stays in the index. The caller
    runs FTS5's ``optimize`` afterwards, which rewrites the index without
    the deleted postings.
    """
    where, params = _owner_filter(target)
    rows = conn.execute(
        f"SELECT {_ERASED_COLUMNS} FROM recall_sources "  # noqa: S608
        f"WHERE {where} ORDER BY id LIMIT ?",
        (*params, bound + 1),
    ).fetchall()
    # Bounded: a value longer than any the store writes is not read (nor put into a report).
    rows = checked_rows(rows, "a source row an erasure covers")
    taken = rows[:bound]
    if not dry_run and taken:
        check()
        conn.executemany("DELETE FROM recall_sources WHERE id = ?", [(row[0],) for row in taken])
        if target.groups:
            key = (target.tenant_id, target.user_id, target.session_id)
            _refresh_neighbours(conn, key, {int(row[5]) for row in taken})
    return [tuple(row[1:]) for row in taken], len(rows) > bound


def _refresh_neighbours(conn: sqlite3.Connection, key: tuple[object, ...], erased: set[int]) -> None:
    """Rebuild the context of each group next to an erased one (it held a line of the erased group)."""

    def text_at(seq: int) -> str | None:
        found = _group_at(conn, key, seq)
        return None if found is None else found[1]

    for seq in sorted({s + d for s in erased for d in (-1, 1)} - erased):
        found = _group_at(conn, key, seq)
        if found is not None:
            _set_context(conn, int(found[0]), group_context(text_at(seq - 1), text_at(seq + 1)))
