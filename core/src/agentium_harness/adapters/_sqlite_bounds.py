"""Read bounds of the SQLite stores (sessions, archive, recall, memory): no oversized value is transferred.

SQLite holds up to 1 GB a value, and a file can be changed behind a store's
back (tampering, a bug in another version). A read that fetched such a value
would pull it whole into Python before any check could refuse it. So each
read selects a variable-size column as ``CASE WHEN <within its bound> THEN col
END`` (a longer value comes back NULL, unread), and one more column that names
the first value over its bound and its size (``None`` for a row within every
bound): the caller refuses such a row as damage, with its store's typed error,
before it decodes anything.

A bound counts bytes or characters. ``length()`` of a TEXT counts only the
characters before its first NUL, so a value changed to ``'x' || char(0) ||
<1 GB>`` (as TEXT, even in a BLOB-declared column: SQLite is dynamically
typed) has ``length()`` 1; every bound therefore checks the value's bytes,
``length(CAST(col AS BLOB))`` (of a BLOB its size, read from the record
header). A byte bound (:class:`ByteBound`: stored JSON, a vector) checks only
those; a character bound checks ``length()`` and at most four bytes a
character (UTF-8's most). A character bound may depend on the row
(:class:`RowBound`: an SQL expression over the row's own columns, such as a
memory fact's provenance, whose bound depends on its status).

Every bound is the longest value the stores write: ids are at most
:data:`~agentium_harness._validators.MAX_ID_LENGTH` characters, digests
``sha256:`` and 64 hex digits, integers at most 20 characters, and stored
JSON (a snapshot, a group's bytes) at most
:data:`~agentium_harness._json.MAX_JSON_BYTES`, what the strict decoder reads
back (the engine refuses to save a larger snapshot; no group it evicts is
larger than the snapshot that held it, and the archive's ``append`` refuses
a larger one from a host).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._json import MAX_JSON_BYTES
from .._ports.embedder import MAX_DIMENSION
from .._validators import MAX_ID_LENGTH

__all__ = [
    "DIGEST_CHARS",
    "Bound",
    "ByteBound",
    "ID_CHARS",
    "INT_CHARS",
    "JSON_BYTES",
    "RowBound",
    "SOURCE_ID_CHARS",
    "VECTOR_BYTES",
    "bounded",
    "bounded_select",
    "exceeds",
    "over_check",
    "oversize",
    "vouched_digest",
]


class ByteBound(int):
    """A bound in bytes (any other bound counts characters): :func:`bounded` checks the value's bytes only."""

    __slots__ = ()


class RowBound(str):
    """A bound in characters that depends on the row: an SQL expression of constants and the row's columns.

    Only a caller's constant text (column names, numbers) goes into it, never data.
    """

    __slots__ = ()


#: A read bound: characters (an ``int`` or a :class:`RowBound`) or bytes (a :class:`ByteBound`).
Bound = int | RowBound


#: A stored id (tenant, user, session, source): ``validate_id``'s limit, in characters.
ID_CHARS: Final = MAX_ID_LENGTH
#: A digest: ``sha256:`` and 64 hex digits.
DIGEST_CHARS: Final = len("sha256:") + 64
#: An integer column (a revision, a seq, a watermark): a 64-bit integer's digits and its sign.
INT_CHARS: Final = 20
#: Stored JSON (a snapshot or a group's canonical bytes): what the strict decoder reads back.
JSON_BYTES: Final = ByteBound(MAX_JSON_BYTES)
#: A recall source id: a kind and at most six segments, each an id whose every UTF-8 byte (at most
#: four a character) may be ``%XX``-encoded (``document_source_id``, ``group_source_id``).
SOURCE_ID_CHARS: Final = len("group") + 6 * (1 + 12 * MAX_ID_LENGTH)
#: A stored vector: little-endian float32, at most ``MAX_DIMENSION`` of them.
VECTOR_BYTES: Final = ByteBound(4 * MAX_DIMENSION)
#: Most bytes one character takes in UTF-8: a value within a character bound takes at most this many each.
UTF8_MAX: Final = 4


def _octets(column: str) -> str:
    # A TEXT's bytes, NULs and all (a BLOB's size from the record header): length() of a TEXT stops
    # at its first NUL, so it alone passed a huge value behind one.
    return f"length(CAST({column} AS BLOB))"


def _limits(column: str, bound: Bound) -> list[tuple[str, str, str]]:
    # (size expression, unit, bound as SQL) checked in turn: the first exceeded names the value.
    if isinstance(bound, ByteBound):
        return [(_octets(column), "bytes", str(int(bound)))]
    if isinstance(bound, RowBound):
        # Parenthesised: the limit is also concatenated into the message, and || binds tighter than *.
        return [
            (f"length({column})", "characters", f"({bound})"),
            (_octets(column), "bytes", f"({UTF8_MAX} * ({bound}))"),
        ]
    return [
        (f"length({column})", "characters", str(bound)),
        (_octets(column), "bytes", str(UTF8_MAX * bound)),
    ]


def bounded(column: str, bound: Bound) -> str:
    """``column`` as a read selects it: NULL, unread, when over ``bound`` (a :class:`ByteBound`: in bytes)."""
    within = " AND ".join(f"{size} <= {limit}" for size, _, limit in _limits(column, bound))
    return f"CASE WHEN {within} THEN {column} END"


def exceeds(column: str, bound: Bound) -> str:
    """A SQL condition: ``column`` is over ``bound`` (NULL for a NULL value), as :func:`bounded` has it."""
    return "(" + " OR ".join(f"{size} > {limit}" for size, _, limit in _limits(column, bound)) + ")"


def _over(column: str, bound: Bound) -> str:
    # The label is the column's own name (a constant of the caller's, never data), unqualified.
    label = column.rpartition(".")[2]
    return " ".join(
        f"WHEN {size} > {limit} THEN '{label} of length ' || {size} || ' {unit} (at most ' || {limit} || ')'"
        for size, unit, limit in _limits(column, bound)
    )


def over_check(column: str, bound: Bound) -> str:
    """A SQL expression naming ``column`` and its size if it is over ``bound``, else NULL."""
    return f"CASE {_over(column, bound)} END"


def bounded_select(
    columns: Sequence[tuple[str, Bound | None]], also_checked: Sequence[tuple[str, Bound]] = ()
) -> str:
    """The select list reading ``columns`` (name, bound; ``None``: a fixed-size column), then one more.

    The last column names the first value over its bound and its size, or
    is NULL when every value is within its bound; ``also_checked`` (name,
    bound) are checked after ``columns`` but not read. Only constant names
    and numbers go into the text.
    """
    values = ", ".join(column if bound is None else bounded(column, bound) for column, bound in columns)
    checked = [*((column, bound) for column, bound in columns if bound is not None), *also_checked]
    checks = " ".join(_over(column, bound) for column, bound in checked)
    return f"{values}, CASE {checks} END"


#: What a digest's text must match, as a GLOB (case-sensitive): ``sha256:`` and 64 lowercase hex digits.
_DIGEST_GLOB: Final = "sha256:" + "[0-9a-f]" * 64


def vouched_digest(column: str) -> str:
    """``column`` (a stored group digest) if it is ``sha256:`` and 64 lowercase hex digits, else ``''``.

    What an erasure reports of a group: the engine keeps a report's digests
    in the erasure's tombstone and refuses any other form
    (``ContractViolationError``), which stopped that erasure for good on a
    digest edited to ``garbage``; ``""`` is the port's form for a digest the
    store cannot vouch for, and the group is erased all the same. Checked in
    the statement, so a digest of another form (1 GB of text) is never read.
    ``CASE`` keeps its order: the type and byte size come first, so the
    pattern never runs over a long value, and a TEXT with a NUL (whose
    ``GLOB`` stops at it) or a BLOB is never taken for a digest.
    """
    return (
        f"CASE WHEN typeof({column}) <> 'text' THEN '' "
        f"WHEN {_octets(column)} <> {DIGEST_CHARS} THEN '' "
        f"WHEN {column} GLOB '{_DIGEST_GLOB}' THEN {column} ELSE '' END"
    )


def oversize(what: str, over: object) -> str:
    """The message refusing ``what`` (a row), which holds ``over`` (``'<column> of length <n> <unit>'``)."""
    return (
        f"{what} is damaged: it holds a {over}, longer than any the store writes; it was not read, "
        "and nothing was changed"
    )
