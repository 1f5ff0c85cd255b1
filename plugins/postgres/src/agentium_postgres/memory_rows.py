"""The PostgreSQL memory store's rows: the values written, the digests kept, the strict decoding.

Each ``memory_facts`` row keeps two digests:

- ``content_digest``: what makes two facts duplicates (scope, text and
  validity; empty for a forgotten revision), looked up by ``remember``;
- ``row_digest`` (schema version 4): every stored field that means
  something (fact id, revision, the owner key segments, status, text,
  validity, provenance, ``recorded_at`` and ``content_digest``), like the
  SQLite store's. Not ``ord`` (an identity that only orders rows) and not
  ``text_lower`` (derived from ``text``; it only ranks lookups).

Every path that reads a row checks both before acting on it, so a field
changed by a plain ``UPDATE`` outside the store (a provenance naming another
session, a forgotten fact flipped back to current, a revision or
``recorded_at`` rewritten) raises :class:`~agentium_postgres.errors.PostgresMemoryError`
instead of being returned, matched or written over. The digest is not
keyed: whoever can rewrite a row and recompute its digest can still forge
it; what it stops is a row changed without going through the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, LiteralString

from agentium_harness.plugin_api import (
    MAX_FACT_BYTES,
    FactStatus,
    GroupRef,
    InvalidJSONError,
    MemoryFact,
    MemoryScope,
    StoredFact,
    canonical_json,
    decode_json,
    decode_segment,
    digest_of,
    encode_segment,
)

from .errors import PostgresMemoryError, PostgresRowTooLargeError

__all__ = [
    "COLUMNS",
    "INSERT",
    "content_digest",
    "read_bounds",
    "decode",
    "provenance_refs",
    "rewritten_row_digest",
    "row_digest",
    "row_values",
    "verified_row",
]

#: Bytes of a stored fact id: at most 256 characters (``_fact_id``), at most four bytes each.
ID_BYTES: Final = 4 * 256
#: Bytes of a stored key segment: an id of at most 256 characters, each UTF-8 byte (at most four a
#: character) possibly ``%XX`` (``encode_segment``).
KEY_BYTES: Final = 3 * 4 * 256
#: Bytes of a stored digest: ``sha256:`` and 64 hex digits (a forgotten revision's content digest is empty).
DIGEST_BYTES: Final = len("sha256:") + 64


def _within(column: LiteralString, cap: LiteralString) -> LiteralString:
    # Over its bound, a value comes back NULL: the server never sends it.
    return "CASE WHEN octet_length(" + column + ") <= " + cap + " THEN " + column + " END"


def _over(column: LiteralString, cap: LiteralString) -> LiteralString:
    # The label is the column's name (a constant here, never data).
    size: LiteralString = "octet_length(" + column + ")"
    return "".join(
        (
            "WHEN ",
            size,
            " > ",
            cap,
            " THEN '",
            column,
            " of ' || ",
            size,
            " || ' bytes (at most ' || ",
            cap,
            " || ')'",
        )
    )


#: Each variable column and its bound: {fact_cap}, {row_cap}, {id_cap}, {key_cap} and {digest_cap} are
#: the bounds as literals (:func:`read_bounds`). ``status`` is not here: a CHECK holds it to three words.
_BOUNDED: Final[tuple[tuple[LiteralString, LiteralString], ...]] = (
    ("fact_id", "{id_cap}"),
    ("tenant_key", "{key_cap}"),
    ("user_key", "{key_cap}"),
    ("project_key", "{key_cap}"),
    ("repository_key", "{key_cap}"),
    ("text", "{fact_cap}"),
    ("provenance", "{row_cap}"),
    ("content_digest", "{digest_cap}"),
    ("row_digest", "{digest_cap}"),
)

#: Columns read back, in :func:`decode` order. Every variable column is capped on the server: a value
#: over its bound (no row this store wrote has one) comes back NULL, and the last column names the
#: first such value and its size (NULL for a row within every bound), so a row grown behind the
#: store's back is refused before it is transferred, whichever column grew. Columns 12 and 13 are
#: the text's and the provenance's sizes.
COLUMNS: Final[LiteralString] = ", ".join(
    (
        _within("fact_id", "{id_cap}"),
        "revision",
        _within("tenant_key", "{key_cap}"),
        _within("user_key", "{key_cap}"),
        _within("project_key", "{key_cap}"),
        _within("repository_key", "{key_cap}"),
        "status",
        _within("text", "{fact_cap}"),
        "valid_from",
        "valid_until",
        _within("provenance", "{row_cap}"),
        "recorded_at",
        "octet_length(text)",
        "octet_length(provenance)",
        _within("content_digest", "{digest_cap}"),
        _within("row_digest", "{digest_cap}"),
        "CASE " + " ".join(_over(column, cap) for column, cap in _BOUNDED) + " END",
    )
)


def read_bounds(row_cap: int) -> dict[str, Any]:
    """The format arguments of :data:`COLUMNS`' bounds, as SQL literals (``row_cap``: max_row_bytes)."""
    from psycopg import sql  # not at module level: listing the plugin must not load the client

    caps = {"fact_cap": MAX_FACT_BYTES, "row_cap": int(row_cap), "id_cap": ID_BYTES}
    caps |= {"key_cap": KEY_BYTES, "digest_cap": DIGEST_BYTES}
    return {name: sql.Literal(value) for name, value in caps.items()}


INSERT: Final[LiteralString] = (
    "INSERT INTO {s}.memory_facts (tenant_key, fact_id, revision, user_key, project_key, repository_key, "
    "status, text, text_lower, valid_from, valid_until, provenance, recorded_at, content_digest, row_digest) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

#: Names what the row digest covers, so a digest of another layout never matches by accident.
_ROW_DIGEST_TAG: Final = "agentium-postgres memory_facts row 1"


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat(timespec="microseconds")


def _segment(value: str | None) -> str | None:
    return None if value is None else encode_segment(value)


def content_digest(fact: MemoryFact) -> str:
    """What makes two facts duplicates: scope, text and validity (not provenance)."""
    s = fact.scope
    return digest_of(
        [s.tenant, s.user, s.project, s.repository, fact.text, _iso(fact.valid_from), _iso(fact.valid_until)]
    )


def row_digest(
    fact_id: str,
    revision: int,
    keys: Sequence[str | None],
    status: str,
    text: str,
    valid: tuple[datetime | None, datetime | None],
    provenance: str,
    recorded_at: datetime,
    content: str,
) -> str:
    """The digest of one row's stored values (``keys``: tenant, user, project and repository segments).

    Timestamps enter as UTC ISO text with microseconds (what ``timestamptz``
    keeps), so a value written and the same value read back digest alike.
    """
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise TypeError(f"revision {revision!r} is not an integer")
    return digest_of(
        [
            _ROW_DIGEST_TAG,
            fact_id,
            revision,
            *keys,
            status,
            text,
            _iso(valid[0]),
            _iso(valid[1]),
            provenance,
            _iso(recorded_at),
            content,
        ]
    )


def _stored_digest(row: Sequence[Any]) -> str:
    """The row digest a row read with :data:`COLUMNS` should carry, from its own values."""
    keys = (row[2], row[3], row[4], row[5])
    return row_digest(row[0], row[1], keys, row[6], row[7], (row[8], row[9]), row[10], row[11], row[14])


def rewritten_row_digest(row: Sequence[Any], status: FactStatus) -> str:
    """The row digest of ``row`` (read with :data:`COLUMNS`, verified) once its status is ``status``.

    From the row's own stored values, not re-encoded from the decoded fact:
    a row blessed by the migration keeps its provenance text as it was. A
    forgotten row keeps no content (``forget`` clears it in the same ``UPDATE``).
    """
    keys = (row[2], row[3], row[4], row[5])
    if status is FactStatus.FORGOTTEN:
        return row_digest(row[0], row[1], keys, status.value, "", (None, None), "[]", row[11], "")
    return row_digest(row[0], row[1], keys, status.value, row[7], (row[8], row[9]), row[10], row[11], row[14])


def row_values(
    fact_id: str,
    revision: int,
    status: FactStatus,
    fact: MemoryFact,
    recorded_at: datetime,
    sessions: Sequence[str] = (),
) -> tuple[Any, ...]:
    """The parameters of :data:`INSERT` for one revision, its row digest last."""
    s = fact.scope
    forgotten = status is FactStatus.FORGOTTEN
    text = "" if forgotten else fact.text
    # A tombstone keeps only the session ids its provenance named (``[[session], ...]``): erasing
    # one of those sessions still removes it.
    provenance = canonical_json(
        [[session] for session in sorted(set(sessions))]
        if forgotten
        else [[r.session, r.seq, r.digest] for r in fact.provenance]
    ).decode("utf-8")
    keys = (encode_segment(s.tenant), encode_segment(s.user), _segment(s.project), _segment(s.repository))
    valid = (None, None) if forgotten else (fact.valid_from, fact.valid_until)
    content = "" if forgotten else content_digest(fact)
    digest = row_digest(fact_id, revision, keys, status.value, text, valid, provenance, recorded_at, content)
    return (
        keys[0],
        fact_id,
        revision,
        keys[1],
        keys[2],
        keys[3],
        status.value,
        text,
        text.lower(),
        valid[0],
        valid[1],
        provenance,
        recorded_at,
        content,
        digest,
    )


def _too_large(row: Sequence[Any]) -> None:
    if len(row) != 17:
        raise PostgresMemoryError(f"postgres memory store: a fact row read with {len(row)} columns, not 17")
    if row[16] is not None or row[7] is None or row[10] is None:
        over = row[16] if row[16] is not None else f"text of {row[12]} bytes or provenance of {row[13]} bytes"
        raise PostgresRowTooLargeError(
            f"postgres memory store: a stored fact row holds a {over} (over its bound); no fact "
            "this store wrote does: the row is damaged and was not transferred"
        )


def _check_row_digest(row: Sequence[Any]) -> None:
    if len(row) != 17:
        raise ValueError("wrong number of columns")
    if not isinstance(row[15], str) or row[15] != _stored_digest(row):
        raise ValueError(
            "the row does not match its stored row digest (a column was changed outside the store)"
        )


def verified_row(row: Sequence[Any]) -> Sequence[Any]:
    """``row`` (:data:`COLUMNS`) if it matches its row digest; :class:`PostgresMemoryError` if not.

    For reads that act on a column without decoding the whole row (an
    erasure matching provenance): a changed value must not be acted on.
    """
    _too_large(row)
    try:
        _check_row_digest(row)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PostgresMemoryError(
            f"postgres memory store: a stored fact row is damaged ({exc}); nothing was changed"
        ) from exc
    return row


def provenance_refs(raw: object) -> list[list[Any]]:
    """A stored provenance as its list of references; :class:`PostgresMemoryError` if damaged."""
    try:
        if not isinstance(raw, str):  # NULL: larger than max_row_bytes (see COLUMNS)
            raise ValueError("provenance is missing or larger than max_row_bytes")
        refs = decode_json(raw.encode("utf-8"))
        if not isinstance(refs, list) or not all(
            isinstance(r, list) and r and isinstance(r[0], str) for r in refs
        ):
            raise ValueError("provenance is not a list of references")
    except (ValueError, InvalidJSONError) as exc:
        raise PostgresMemoryError(
            f"postgres memory store: a stored fact's provenance is damaged ({type(exc).__name__}); "
            "nothing was changed"
        ) from exc
    return refs


def _ref(raw: object) -> tuple[Any, Any, Any]:
    """One stored provenance reference, exactly ``[session, seq, digest]`` (GroupRef checks each)."""
    if not isinstance(raw, list) or len(raw) != 3:
        raise ValueError("a provenance reference is not [session, seq, digest]")
    return raw[0], raw[1], raw[2]


def decode(row: Sequence[Any]) -> StoredFact:
    """A row as a :class:`StoredFact`, strictly; :class:`PostgresMemoryError` if it is damaged."""
    _too_large(row)
    try:
        scope = MemoryScope(
            decode_segment(row[2]),
            decode_segment(row[3]),
            None if row[4] is None else decode_segment(row[4]),
            None if row[5] is None else decode_segment(row[5]),
        )
        refs = decode_json(str(row[10]).encode("utf-8"))
        if not isinstance(refs, list):
            raise ValueError("provenance is not a list")
        status = FactStatus(row[6])
        forgotten = status is FactStatus.FORGOTTEN
        # A tombstone's provenance holds only session ids (for erasure), never returned as provenance.
        provenance = () if forgotten else tuple(GroupRef(*_ref(r)) for r in refs)
        fact = MemoryFact(scope, str(row[7]), row[8], row[9], provenance)
        # The stored content digest is checked, not only used to find duplicates: a text, scope or
        # validity changed behind the store's back is refused rather than returned as the fact.
        # A forgotten revision keeps no content (and an empty digest).
        if row[14] != ("" if forgotten else content_digest(fact)) or (forgotten and fact.text):
            raise ValueError("the fact does not match its stored content digest")
        # The row digest covers what the content digest leaves out (status, revision, provenance,
        # recorded_at, fact id): checked before anything of the row is handed out or acted on.
        _check_row_digest(row)
        return StoredFact(str(row[0]), int(row[1]), status, fact, row[11])
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, InvalidJSONError) as exc:
        raise PostgresMemoryError(
            f"postgres memory store: a stored fact row is damaged ({exc}); not returned"
        ) from exc
