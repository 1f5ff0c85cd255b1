"""The SQL of the SQLite memory store: schema, row encoding and strict decoding.

Every function runs in a worker thread inside the caller's connection;
identifiers and query terms are always bound as SQL parameters. A row keeps
a digest of its canonical JSON (``row_digest``): a row that was changed
behind the store's back does not decode and is reported, never returned.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from .._codec import canonical_json, digest_bytes, from_json
from .._errors import RecordDecodeError
from .._errors_memory import MemoryStoreError
from .._ports.memory import (
    MAX_FACT_BYTES,
    MAX_FACT_REVISIONS,
    MAX_PROVENANCE,
    FactStatus,
    GroupRef,
    MemoryFact,
    MemoryScope,
    StoredFact,
    iso_utc,
    parse_iso_utc,
)
from .._validators import MAX_ID_LENGTH
from ._sqlite_bounds import DIGEST_CHARS, ID_CHARS, INT_CHARS, Bound, RowBound, bounded_select, oversize

__all__ = [
    "COLUMNS",
    "FACT_ID",
    "MAX_PROVENANCE_CHARS",
    "MAX_TOMBSTONE_CHARS",
    "SCHEMA",
    "SQLiteMemoryError",
    "content_digest",
    "decode_row",
    "encode_row",
    "oversize_error",
    "rewrite_row",
    "tombstone_fits",
    "verified_row",
]


class SQLiteMemoryError(MemoryStoreError):
    """The SQLite memory store could not complete an operation, or found a damaged row.

    Causes include a lock held past the busy timeout, a full disk, a file that
    is not a SQLite database or holds newer memory tables, a row changed
    outside the store, and calls after ``aclose()``. Nothing was written by
    the failed call.
    """


SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS memory_meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS memory_facts (
        fact_id TEXT NOT NULL,
        revision INTEGER NOT NULL CHECK (revision >= 1),
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        project_id TEXT,
        repository_id TEXT,
        status TEXT NOT NULL CHECK (status IN ('current', 'superseded', 'forgotten')),
        text TEXT NOT NULL,
        text_lower TEXT NOT NULL,
        valid_from TEXT,
        valid_until TEXT,
        provenance TEXT NOT NULL,
        recorded_at TEXT NOT NULL,
        content_digest TEXT NOT NULL,
        row_digest TEXT NOT NULL,
        PRIMARY KEY (fact_id, revision)
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS memory_facts_owner
        ON memory_facts (tenant_id, user_id, status)
    """,
)

#: Longest text (in characters, as SQLite's ``length()`` counts them; an integer's digits) a
#: column holds in a row this store wrote, read as every SQLite store reads (:mod:`._sqlite_bounds`:
#: its bytes are bounded too, at most four a character). Ids pass ``validate_id``; times are
#: ``iso_utc``'s fixed width; a text has at most as many characters as bytes.
_WHEN_CHARS: Final = len("0001-01-01T00:00:00.000000Z")
#: A session id as canonical JSON (no ASCII escapes): quoted, every character escaped at worst.
_JSON_ID_CHARS: Final = 2 + 2 * MAX_ID_LENGTH
#: ``[session,seq,"digest"]``: a seq is at most 19 digits (a SQLite INTEGER, never negative).
_REF_CHARS: Final = 4 + _JSON_ID_CHARS + 19 + 2 + DIGEST_CHARS
#: A revision's provenance: at most ``MAX_PROVENANCE`` references, comma-separated, bracketed.
MAX_PROVENANCE_CHARS: Final = 2 + MAX_PROVENANCE * (_REF_CHARS + 1)
#: A tombstone's ``[[session], ...]``: every distinct session of at most ``MAX_FACT_REVISIONS``
#: revisions (``forget`` refuses to write a longer one; see :func:`tombstone_fits`).
MAX_TOMBSTONE_CHARS: Final = 2 + MAX_FACT_REVISIONS * MAX_PROVENANCE * (_JSON_ID_CHARS + 3)
_PROVENANCE_BOUND: Final = RowBound(
    f"CASE WHEN status = 'forgotten' THEN {MAX_TOMBSTONE_CHARS} ELSE {MAX_PROVENANCE_CHARS} END"
)
#: Each column read back, in :func:`decode_row` order, with its bound.
_BOUNDS: Final[tuple[tuple[str, Bound], ...]] = (
    ("fact_id", ID_CHARS),
    ("revision", INT_CHARS),
    ("tenant_id", ID_CHARS),
    ("user_id", ID_CHARS),
    ("project_id", ID_CHARS),
    ("repository_id", ID_CHARS),
    ("status", len("superseded")),
    ("text", MAX_FACT_BYTES),
    ("valid_from", _WHEN_CHARS),
    ("valid_until", _WHEN_CHARS),
    ("provenance", _PROVENANCE_BOUND),
    ("recorded_at", _WHEN_CHARS),
    ("content_digest", DIGEST_CHARS),
    ("row_digest", DIGEST_CHARS),
)

#: Columns read back, in :func:`decode_row` order. A value longer than any row this store writes
#: comes back NULL, so a row changed behind the store's back (SQLite holds up to 1 GB a value) is
#: never transferred; the last column then names it (``None`` for a row within every bound), and
#: :func:`decode_row` refuses the row. ``text_lower`` (never read back) is bounded as well.
COLUMNS: Final = bounded_select(_BOUNDS, also_checked=(("text_lower", 2 * MAX_FACT_BYTES),))
#: A fact id read alone (an erasure's), as in :data:`COLUMNS`, then what is too long (or ``None``).
FACT_ID: Final = bounded_select((("fact_id", ID_CHARS),))


def _when(value: datetime | None) -> str | None:
    return None if value is None else iso_utc(value)


def content_digest(fact: MemoryFact) -> str:
    """What makes two facts duplicates: scope, text and validity (not provenance)."""
    s = fact.scope
    return digest_bytes(
        canonical_json(
            [
                s.tenant,
                s.user,
                s.project,
                s.repository,
                fact.text,
                _when(fact.valid_from),
                _when(fact.valid_until),
            ]
        )
    )


def _provenance_json(fact: MemoryFact) -> str:
    return canonical_json([[r.session, r.seq, r.digest] for r in fact.provenance]).decode("utf-8")


def _sessions_json(sessions: Sequence[str]) -> str:
    return canonical_json([[session] for session in sorted(set(sessions))]).decode("utf-8")


def _row_digest(values: Sequence[Any]) -> str:
    # Everything but the digest itself; text order of COLUMNS.
    return digest_bytes(canonical_json(list(values)))


def encode_row(
    fact_id: str,
    revision: int,
    status: FactStatus,
    fact: MemoryFact,
    recorded_at: datetime,
    sessions: Sequence[str] = (),
) -> tuple[Any, ...]:
    """The values of one row, for ``INSERT INTO memory_facts`` in schema column order.

    A forgotten row keeps no content; a tombstone keeps the ids of the
    ``sessions`` the fact's provenance named (``[[session], ...]``, no seq,
    digest or text), so erasing one of those sessions still removes it.
    """
    s = fact.scope
    forgotten = status is FactStatus.FORGOTTEN
    text = "" if forgotten else fact.text
    core = (
        fact_id,
        revision,
        s.tenant,
        s.user,
        s.project,
        s.repository,
        status.value,
        text,
        None if forgotten else _when(fact.valid_from),
        None if forgotten else _when(fact.valid_until),
        _sessions_json(sessions) if forgotten else _provenance_json(fact),
        iso_utc(recorded_at),
        "" if forgotten else content_digest(fact),
    )
    # text_lower sits after text in the table; it is derived, so not digested.
    return (*core[:8], text.lower(), *core[8:], _row_digest(core))


INSERT: Final = (
    "INSERT INTO memory_facts (fact_id, revision, tenant_id, user_id, project_id, repository_id, status, "
    "text, text_lower, valid_from, valid_until, provenance, recorded_at, content_digest, row_digest) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def rewrite_row(conn: sqlite3.Connection, old: StoredFact, status: FactStatus) -> None:
    """Rewrite one stored revision with a new status (forgotten: content removed), digest renewed."""
    values = encode_row(old.fact_id, old.revision, status, old.fact, old.recorded_at)
    conn.execute("DELETE FROM memory_facts WHERE fact_id = ? AND revision = ?", (old.fact_id, old.revision))
    conn.execute(INSERT, values)


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, not text")
    return value


def _opt_str(value: object, what: str) -> str | None:
    return None if value is None else _str(value, what)


def verified_row(row: Sequence[Any]) -> Sequence[Any]:
    """``row`` (:data:`COLUMNS`) if it matches its digest; :class:`SQLiteMemoryError` if it does not.

    For reads that use a column of a row without decoding the whole of it
    (an erasure matching provenance): a damaged value must not be acted on.
    """
    _check_size(row)
    try:
        _check_digest(row)
    except (ValueError, TypeError) as exc:
        raise SQLiteMemoryError(
            f"sqlite memory store: a stored fact row is damaged ({exc}); nothing was changed"
        ) from exc
    return row


def oversize_error(what: object) -> SQLiteMemoryError:
    """The refusal of a row holding ``what`` (``'<column> of length <n> <unit> (at most <m>)'``)."""
    return SQLiteMemoryError(oversize("sqlite memory store: a stored fact row", what))


def _check_size(row: Sequence[Any]) -> None:
    # The last column of COLUMNS: set when a value was too long to be read (it came back NULL).
    if len(row) == 15 and row[14] is not None:
        raise oversize_error(row[14])


def tombstone_fits(values: Sequence[Any]) -> bool:
    """True if a tombstone row's session list (from :func:`encode_row`) is within what reads accept.

    Only a fact holding more revisions than ``MAX_FACT_REVISIONS`` (written before that cap) can
    name more sessions than that bound allows.
    """
    return len(values[11]) <= MAX_TOMBSTONE_CHARS


def _check_digest(row: Sequence[Any]) -> None:
    if len(row) != 15:
        raise ValueError("wrong number of columns")
    revision = row[1]
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise ValueError(f"revision {revision!r}")
    if _row_digest(list(row[:13])) != row[13]:
        raise ValueError("the row does not match its digest")


def decode_row(row: Sequence[Any]) -> StoredFact:
    """A row as a :class:`StoredFact`, strictly; :class:`SQLiteMemoryError` if it is damaged."""
    _check_size(row)
    try:
        _check_digest(row)
        fact_id = _str(row[0], "fact_id")
        revision: int = row[1]
        scope = MemoryScope(
            _str(row[2], "tenant"),
            _str(row[3], "user"),
            _opt_str(row[4], "project"),
            _opt_str(row[5], "repo"),
        )
        status = FactStatus(_str(row[6], "status"))
        raw_refs = from_json(_str(row[10], "provenance"), list[list[Any]])
        # A tombstone's provenance holds only session ids (for erasure), never returned as provenance.
        refs = (
            ()
            if status is FactStatus.FORGOTTEN
            else tuple(GroupRef(_str(r[0], "session"), r[1], _str(r[2], "digest")) for r in raw_refs)
        )
        valid_from = _opt_str(row[8], "valid_from")
        valid_until = _opt_str(row[9], "valid_until")
        fact = MemoryFact(
            scope,
            _str(row[7], "text"),
            None if valid_from is None else parse_iso_utc(valid_from),
            None if valid_until is None else parse_iso_utc(valid_until),
            refs,
        )
        return StoredFact(fact_id, revision, status, fact, parse_iso_utc(row[11]))
    except (ValueError, TypeError, IndexError, RecordDecodeError) as exc:
        raise SQLiteMemoryError(
            f"sqlite memory store: a stored fact row is damaged ({exc}); it is not returned"
        ) from exc
