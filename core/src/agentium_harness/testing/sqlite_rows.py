"""Raw rows of the built-in SQLite archive and session store, for tests that damage stored data.

Tests of strict reading need to change what is on disk behind an adapter's
back: flip bytes in an archived group, file a row under another session,
rewrite a snapshot in another form. These functions do that on the file
directly (their own connection, committed at once), whatever the layout of
the adapters' tables (schema version 4, docs/adapters.md): a test says
*which* stored record to change, not where it lives.

They are for tests only: they bypass every check the adapters make.
"""

from __future__ import annotations

import re
import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from .._json import MAX_JSON_BYTES
from .._scope import SessionKey
from ..adapters._sqlite_pack import unpack
from ..adapters._sqlite_rows import find_session, row_id, seq_of
from ..adapters._sqlite_snapshot_read import read_snapshot
from ._files import read_in_child

__all__ = [
    "archived_seqs",
    "database_bytes",
    "group_row",
    "move_group_row",
    "put_group_row",
    "set_group_row",
    "set_snapshot_row",
    "snapshot_row",
    "with_inflated_rows",
]


@contextmanager
def _connect(path: str | Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def _archived_id(conn: sqlite3.Connection, key: SessionKey, seq: int) -> int:
    session = find_session(conn, key)
    if session is None:
        raise LookupError(f"nothing is stored for session {key.key()}")
    for archived in (True, False):
        candidate = row_id(session.sid, seq, archived)
        if (archived or seq < session.adopted) and conn.execute(
            "SELECT 1 FROM groups WHERE id = ?", (candidate,)
        ).fetchone():
            return candidate
    raise LookupError(f"group {seq} of session {key.key()} is not archived")


def _sid(conn: sqlite3.Connection, key: SessionKey) -> int:
    session = find_session(conn, key)
    if session is not None:
        return session.sid
    cursor = conn.execute(
        "INSERT INTO sessions (tenant_id, user_id, session_id) VALUES (?, ?, ?)",
        (key.tenant, key.user, key.session),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def archived_seqs(path: str | Path, key: SessionKey) -> list[int]:
    """The seqs of every archived group of ``key``, ascending."""
    with _connect(path) as conn:
        session = find_session(conn, key)
        if session is None:
            return []
        rows = conn.execute(
            "SELECT id FROM groups WHERE id >= ? AND id < ? AND ((id & 1) = 1 OR id < ?) ORDER BY id",
            (
                row_id(session.sid, 0, False),
                row_id(session.sid + 1, 0, False),
                row_id(session.sid, session.adopted, False),
            ),
        ).fetchall()
        return sorted({seq_of(r[0]) for r in rows})


def group_row(path: str | Path, key: SessionKey, seq: int) -> tuple[str, bytes]:
    """``(digest, data)`` stored for archived group ``seq`` of ``key``; ``LookupError`` if there is none.

    ``data`` is the group's canonical bytes, inflated if the row holds them deflated (schema
    version 4), so a test can change them as text; :func:`set_group_row` stores what it is given
    as it is, which the adapters read as well.
    """
    with _connect(path) as conn:
        row = conn.execute(
            "SELECT digest, data FROM groups WHERE id = ?", (_archived_id(conn, key, seq),)
        ).fetchone()
        return str(row[0]), unpack(bytes(row[1]), MAX_JSON_BYTES)


def set_group_row(
    path: str | Path, key: SessionKey, seq: int, data: bytes, digest: str | None = None
) -> None:
    """Rewrite archived group ``seq`` of ``key`` in place: its bytes, and its stored digest when given.

    Leaving the digest alone is what a flipped bit on disk would do.
    """
    with _connect(path) as conn:
        found = _archived_id(conn, key, seq)
        if digest is None:
            conn.execute("UPDATE groups SET data = ? WHERE id = ?", (data, found))
        else:
            conn.execute("UPDATE groups SET data = ?, digest = ? WHERE id = ?", (data, digest, found))


def put_group_row(path: str | Path, key: SessionKey, seq: int, data: bytes, digest: str) -> None:
    """File ``data`` with ``digest`` as archived group ``seq`` of ``key`` (a row copied from elsewhere)."""
    with _connect(path) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO groups (id, digest, data) VALUES (?, ?, ?)",
            (row_id(_sid(conn, key), seq, True), digest, data),
        )


def move_group_row(path: str | Path, key: SessionKey, seq: int, to_seq: int) -> None:
    """Refile archived group ``seq`` of ``key`` as group ``to_seq`` (its bytes say ``seq`` still)."""
    with _connect(path) as conn:
        found = _archived_id(conn, key, seq)
        conn.execute("UPDATE groups SET id = ? WHERE id = ?", (row_id(_sid(conn, key), to_seq, True), found))


def snapshot_row(path: str | Path, key: SessionKey) -> tuple[int, bytes] | None:
    """The stored snapshot of ``key``: its revision and whole bytes (as a load reads them), or ``None``."""
    with _connect(path) as conn:
        found = read_snapshot(conn, key)
        if found is None:
            return None
        revision, data, _ = found
        assert isinstance(revision, int) and isinstance(data, bytes | str), found
        return revision, data if isinstance(data, bytes) else data.encode()


def set_snapshot_row(path: str | Path, key: SessionKey, data: bytes, revision: int | None = None) -> None:
    """Store ``data`` as the whole snapshot of ``key``, in place: its revision kept unless one is given.

    The session gets a snapshot row if it had none (then ``revision`` defaults to 1).
    """
    with _connect(path) as conn:
        sid = _sid(conn, key)
        session = find_session(conn, key)
        assert session is not None
        conn.execute(
            "DELETE FROM groups WHERE id >= ? AND id < ? AND (id & 1) = 0",
            (row_id(sid, session.adopted, False), row_id(sid + 1, 0, False)),
        )
        keep = session.revision if session.revision is not None else 1
        conn.execute(
            "UPDATE sessions SET revision = ?, boundary = NULL, next_seq = NULL, inline = 1, snapshot = ? "
            "WHERE sid = ?",
            (keep if revision is None else revision, data, sid),
        )


#: The first byte of a zlib stream (deflate, any window) and any second byte: every place one may start.
_STREAM_START = re.compile(rb"(?=[\x08\x18\x28\x38\x48\x58\x68\x78].)", re.DOTALL)

#: A database file's first bytes, and a write-ahead log's (magic, either byte order, then version 3007000).
_DB_MAGIC: Final = b"SQLite format 3\x00"
_WAL_MAGIC = re.compile(rb"\x37\x7f\x06[\x82\x83]\x00\x2d\xe2\x18")


def with_inflated_rows(data: bytes, *, most: int = 1 << 20) -> bytes:
    """``data`` (a database file's or log's bytes) followed by the text of every deflated row found in it.

    The adapters store a group's bytes deflated when that is smaller (schema
    version 4), so a stored word is not in the file's bytes as such. A test that
    looks for a word in a file (an erasure must leave no copy, live or in a freed
    page or the log) searches this instead: every place a zlib stream may start
    is inflated as far as it goes (at most ``most`` bytes each), damaged or cut
    short by a page boundary or not, and what comes out is appended.

    A row longer than its page goes on in overflow pages, each starting with
    the next one's number, so its stream is not contiguous: the records of every
    table leaf page found (in a database file starting ``data``, and in every
    log frame after a log header in it, several files may be concatenated) are
    also put together with their overflow chains and searched the same way.
    What cannot be put together is found only up to its first page boundary:
    the rest of a deleted row whose overflow pages are still in the file, with
    ``secure_delete`` off (the adapters turn it on).
    """
    found = [data, *_inflated(data, most)]
    for payload in _record_payloads(data):
        found.extend(_inflated(payload, most))
    return b"\n".join(found)


def database_bytes(path: str | Path, *, most: int = 1 << 20) -> bytes:
    """Every byte of a SQLite database as it is on disk, with the text of its deflated rows.

    The file, then its ``-wal`` and ``-journal`` companions (each missing one
    read as empty), passed through :func:`with_inflated_rows` (``most`` as
    there): what a test searches for a word an erasure must leave no copy of,
    live, in a freed page or in the log. It is read by a child process, so it
    may be called while this process holds SQLite connections on the file:
    closing a descriptor of the file here would drop their POSIX locks.

    A test that checks a word is gone should first check, the same way, that
    it was there before the erasure: else the test cannot fail.
    """
    return with_inflated_rows(read_in_child([str(path), f"{path}-wal", f"{path}-journal"]), most=most)


def _inflated(data: bytes, most: int) -> list[bytes]:
    """What every place in ``data`` a zlib stream may start inflates to (8 bytes or more of it)."""
    found: list[bytes] = []
    for match in _STREAM_START.finditer(data):
        at = match.start()
        if (data[at] * 256 + data[at + 1]) % 31 or data[at + 1] & 0x20:  # not a header, or a preset dict
            continue
        inflater = zlib.decompressobj()
        out = bytearray()
        for start in range(at, min(len(data), at + 2 * most), 64):
            try:
                out += inflater.decompress(data[start : start + 64], most - len(out))
            except zlib.error:
                break
            if inflater.eof or inflater.unconsumed_tail or len(out) >= most:
                break
        if len(out) >= 8:
            found.append(bytes(out))
    return found


def _pages(data: bytes) -> tuple[dict[int, list[bytes]], int, int]:
    """Every version of every page in ``data`` (the file's, then each log frame's), page and usable size."""
    pages: dict[int, list[bytes]] = {}
    size = usable = 0
    if data.startswith(_DB_MAGIC) and len(data) >= 100:
        size = int.from_bytes(data[16:18], "big")
        size = 65536 if size == 1 else size
        if size < 512 or size & (size - 1):  # a damaged header: no pages to put together
            return pages, 0, 0
        usable = size - data[20]
        count = int.from_bytes(data[28:32], "big") or len(data) // size
        for n in range(min(count, len(data) // size)):
            pages.setdefault(n + 1, []).append(data[n * size : (n + 1) * size])
    for log in _WAL_MAGIC.finditer(data):
        frame_size = int.from_bytes(data[log.start() + 8 : log.start() + 12], "big")
        if not 512 <= frame_size <= 65536 or (size and frame_size != size):
            continue
        size, usable = frame_size, usable or frame_size
        at = log.start() + 32
        while at + 24 + size <= len(data):
            number = int.from_bytes(data[at : at + 4], "big")
            pages.setdefault(number, []).append(data[at + 24 : at + 24 + size])
            at += 24 + size
    return pages, size, usable


def _varint(page: bytes, at: int) -> tuple[int, int]:
    """SQLite's variable-length integer at ``at``: its value and the offset after it."""
    value = 0
    for i in range(8):
        if at + i >= len(page):
            return value, len(page)
        value = value << 7 | page[at + i] & 0x7F
        if page[at + i] < 0x80:
            return value, at + i + 1
    return (value << 8 | page[at + 8]) if at + 8 < len(page) else value, at + 9


def _record_payloads(data: bytes) -> list[bytes]:
    """The records of every table leaf page in ``data``, each with its overflow chain put back."""
    pages, size, usable = _pages(data)
    if not size or usable < 480:
        return []
    payloads: list[bytes] = []
    for number, versions in pages.items():
        for page in versions:
            head = 100 if number == 1 else 0
            if page[head] != 0x0D:  # not a table leaf page
                continue
            cells = int.from_bytes(page[head + 3 : head + 5], "big")
            for i in range(min(cells, (size - head - 8) // 2)):
                cell = int.from_bytes(page[head + 8 + 2 * i : head + 10 + 2 * i], "big")
                total, at = _varint(page, cell)
                _, at = _varint(page, at)  # the rowid
                payloads.append(_payload(pages, page, at, total, usable))
    return payloads


def _payload(pages: dict[int, list[bytes]], page: bytes, at: int, total: int, usable: int) -> bytes:
    """A record of ``total`` bytes from ``at`` in ``page``, its overflow pages (newest versions) after it."""
    most_local, least_local = usable - 35, (usable - 12) * 32 // 255 - 23
    local = total
    if total > most_local:
        local = least_local + (total - least_local) % (usable - 4)
        local = local if local <= most_local else least_local
    out = bytearray(page[at : at + local])
    if local < total:
        following = int.from_bytes(page[at + local : at + local + 4], "big")
        seen: set[int] = set()
        while following and following not in seen and following in pages and len(out) < total:
            seen.add(following)
            overflow = pages[following][-1]
            out += overflow[4:usable][: total - len(out)]
            following = int.from_bytes(overflow[:4], "big")
    return bytes(out)
