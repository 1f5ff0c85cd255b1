"""How the SQLite archive and session store keep a group's bytes in a row: deflated when that is smaller.

A group row used to hold the group's canonical JSON as it is. A turn's new
row of two 500-character messages was about 1.5 KB, so only two fitted in a
4 KB page and every other turn split a leaf (a new page, its parent and the
file's header page written as well: four pages where two do). Deflated, the
same row is about 750 bytes of ordinary prose, 380 of benchmarks/peers.py's
repeated filler. Schema version 4 stores a group either way:

- **as it is**: canonical JSON, whose first byte is always ``{``;
- **deflated**: a zlib stream (RFC 1950: header, deflate data, Adler-32),
  whose first byte's low four bits are always 8 (the deflate method), so it
  can never start with ``{`` (``0x7B``). It is written only when it is
  smaller than the JSON. A row is read as deflated when it starts with a
  valid zlib header (:func:`is_packed`), else as JSON.

The stored digest is always that of the canonical JSON, so a deflated row is
checked like any other once inflated. Inflating is bounded like every read
of stored data: never more than the caller's bound (what the strict decoder
reads back, less what the read already took) is produced, and a stream that
would give more, ends early, carries bytes past its end or fails its
checksum is damage (:class:`PackedRowError`), reported by the caller with
its store's typed error — except where the bound is what is left of one
call's budget (``SQLiteArchive.read_groups``: at most ``MAX_JSON_BYTES`` of
canonical bytes a page): a row over that (:class:`PackedRowOverBound`, at
most one byte past it inflated) ends the page before it, and is the next
page's first. Rows written by older versions (JSON as it is) are
read as they are and never rewritten for this.
"""

from __future__ import annotations

import zlib
from typing import Final

__all__ = ["MIN_PACKED", "PackedRowError", "PackedRowOverBound", "is_packed", "pack", "unpack"]

#: Rows shorter than this stay as they are: deflate saves little on them and costs a stream's setup.
MIN_PACKED: Final = 256

#: The deflate level: 1 is the fastest, and on chat text of a few KB it is within a few percent of 9.
_LEVEL: Final = 1


class PackedRowError(ValueError):
    """A stored row that cannot be inflated within its bound: damage (the caller names the row)."""


class PackedRowOverBound(PackedRowError):
    """A deflated row that would inflate to more than the caller's bound (not inflated past it)."""


def _window_bits(size: int) -> int:
    # A window as large as the data (2**9..2**15): a small row needs no 32 KB window, and setting
    # one up (with its hash table) costs more than deflating 1.5 KB (measured: ~110 us vs ~12 us).
    return min(15, max(9, size.bit_length()))


def pack(data: bytes) -> bytes:
    """``data`` (a group's canonical JSON) as it is stored: deflated if that is smaller, else unchanged."""
    if len(data) < MIN_PACKED:
        return data
    bits = _window_bits(len(data))
    deflater = zlib.compressobj(_LEVEL, zlib.DEFLATED, bits, max(1, bits - 7))
    packed = deflater.compress(data) + deflater.flush()
    return packed if len(packed) < len(data) else data


def is_packed(stored: bytes) -> bool:
    """Whether ``stored`` starts with a zlib header (deflate, a window of at most 32 KB, a valid check).

    Canonical JSON never does (its first byte is ``{``); anything else that does not is read as
    JSON, which the strict decoder then refuses if it is no group (too deep, not an object, ...).
    """
    return (
        len(stored) >= 2
        and stored[0] & 0x0F == 8
        and stored[0] >> 4 <= 7
        and (stored[0] << 8 | stored[1]) % 31 == 0
    )


def unpack(stored: bytes, limit: int) -> bytes:
    """The canonical bytes of a stored row, at most ``limit`` of them; :class:`PackedRowError` if damaged.

    A row stored as it is comes back unchanged (its size is the caller's to check).
    """
    if not is_packed(stored):
        return stored
    limit = max(0, limit)  # never a max_length of 0, which zlib reads as "no limit"
    inflater = zlib.decompressobj(15)  # any window up to the largest; the header says which
    try:
        data = inflater.decompress(stored, limit + 1)
    except zlib.error as exc:
        raise PackedRowError(f"its deflated bytes are damaged ({exc})") from None
    if len(data) > limit:
        raise PackedRowOverBound(f"it inflates to more than {limit} bytes")
    if not inflater.eof:
        raise PackedRowError("its deflated bytes end before their stream does")
    if inflater.unused_data:
        raise PackedRowError(f"{len(inflater.unused_data)} bytes follow its deflated stream")
    return data
