"""Read bounds of the SQLite session store, archive and recall store: no oversized value is transferred.

SQLite holds up to 1 GB a value, and a file can be changed behind a store's
back (tampering, a bug in another version). A read that fetched such a value
would pull it whole into Python before any check could refuse it. So each
read selects a variable-size column as ``CASE WHEN length(col) <= bound THEN
col END`` (a longer value comes back NULL, unread), and one more column that
names the first value over its bound and its length (``None`` for a row within
every bound): the caller refuses such a row as damage, with its store's typed
error, before it decodes anything. ``length()`` of a BLOB is its size, read
from the record header; of a TEXT its characters, counted inside SQLite.

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
    "ID_CHARS",
    "INT_CHARS",
    "JSON_BYTES",
    "SOURCE_ID_CHARS",
    "VECTOR_BYTES",
    "bounded",
    "bounded_select",
    "oversize",
]

#: A stored id (tenant, user, session, source): ``validate_id``'s limit, in characters.
ID_CHARS: Final = MAX_ID_LENGTH
#: A digest: ``sha256:`` and 64 hex digits.
DIGEST_CHARS: Final = len("sha256:") + 64
#: An integer column (a revision, a seq, a watermark): a 64-bit integer's digits and its sign.
INT_CHARS: Final = 20
#: Stored JSON (a snapshot or a group's canonical bytes): what the strict decoder reads back.
JSON_BYTES: Final = MAX_JSON_BYTES
#: A recall source id: a kind and at most six segments, each an id whose every UTF-8 byte (at most
#: four a character) may be ``%XX``-encoded (``document_source_id``, ``group_source_id``).
SOURCE_ID_CHARS: Final = len("group") + 6 * (1 + 12 * MAX_ID_LENGTH)
#: A stored vector: little-endian float32, at most ``MAX_DIMENSION`` of them.
VECTOR_BYTES: Final = 4 * MAX_DIMENSION


def bounded(column: str, bound: int) -> str:
    """``column`` as a read selects it: NULL, unread, when it is longer than ``bound``."""
    return f"CASE WHEN length({column}) <= {bound} THEN {column} END"


def _over(column: str, bound: int) -> str:
    # The label is the column's own name (a constant of the caller's, never data), unqualified.
    label = column.rpartition(".")[2]
    length = f"length({column})"
    return f"WHEN {length} > {bound} THEN '{label} of length ' || {length} || ' (at most {bound})'"


def bounded_select(columns: Sequence[tuple[str, int | None]]) -> str:
    """The select list reading ``columns`` (name, bound; ``None``: a fixed-size column), then one more.

    The last column names the first value over its bound and its length, or
    is NULL when every value is within its bound. Only constant names and
    numbers go into the text.
    """
    values = ", ".join(column if bound is None else bounded(column, bound) for column, bound in columns)
    checks = " ".join(_over(column, bound) for column, bound in columns if bound is not None)
    return f"{values}, CASE {checks} END"


def oversize(what: str, over: object) -> str:
    """The message refusing ``what`` (a row), which holds ``over`` (``'<column> of length <n> ...'``)."""
    return (
        f"{what} is damaged: it holds a {over}, longer than any the store writes; it was not read, "
        "and nothing was changed"
    )
