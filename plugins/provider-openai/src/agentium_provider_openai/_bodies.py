"""Reading an answer's body within a byte cap, its content coding decoded here, piece by bounded piece.

The HTTP library under the ``openai`` client decodes ``Content-Encoding``
itself, and how much one decode call may expand depends on its release:
``httpx`` (under openai 1.x and 2.x) inflates each chunk read from the
socket whole, so a 64 KiB chunk of a gzip body of zeros is 64 MiB in memory
before any cap is checked, and a body that is gzip twice over (982 bytes on
the wire) is 512 MiB in one call. So the provider reads the raw bytes and
inflates them here, at most :data:`PIECE` bytes a call, counting each piece
against the cap: whatever the library, no more than the cap and one piece
is ever held.

Only the codings it asks for (:data:`ACCEPT_ENCODING`: gzip and deflate,
one of them, or none) are decoded; any other (``br``, ``zstd``, a chain
such as ``gzip, gzip``) is :class:`UnsupportedCoding`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Final

from ._failures import is_transport_error

__all__ = ["ACCEPT_ENCODING", "ASKED_CODINGS", "PIECE", "BodyBroken", "UnsupportedCoding", "read_body"]

#: The codings asked for: the only ones :func:`read_body` decodes.
ACCEPT_ENCODING: Final = "gzip, deflate"

#: The request header asking for them (sent with every request, a lent client's too).
ASKED_CODINGS: Final = {"Accept-Encoding": ACCEPT_ENCODING}

#: The most one inflate call produces (what is held past the cap at worst).
PIECE: Final = 64 * 1024

_ZLIB_WBITS: Final = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


class UnsupportedCoding(Exception):
    """The answer's ``Content-Encoding`` is not one the provider asked for (``coding``, cut short)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding[:40]
        super().__init__(f"Content-Encoding {self.coding!r}")


class BodyBroken(Exception):
    """The body broke off, or its coding is corrupt: what happened, in the library's words (unscrubbed)."""

    def __init__(self, detail: str, received: int) -> None:
        self.detail = detail
        self.received = received
        super().__init__(detail)


def _coding(headers: Any) -> str:
    """The one content coding of an answer (``identity`` for none); :class:`UnsupportedCoding` otherwise."""
    # httpx joins repeated header lines with ", ": one list of codings either way.
    declared = str(headers.get("content-encoding", "") or "")
    codings = [c.strip().lower() for c in declared.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return "identity"
    if len(codings) > 1 or codings[0] not in _ZLIB_WBITS:
        raise UnsupportedCoding(declared)
    return codings[0]


class _Inflater:
    """One zlib stream, inflated at most :data:`PIECE` bytes a call (deflate with or without its header)."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._stream = zlib.decompressobj(_ZLIB_WBITS[coding])
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        first = not self._started
        self._started = True
        try:
            out = self._stream.decompress(data, PIECE)
        except zlib.error:
            if not (first and self._coding == "deflate"):
                raise
            # Many servers send "deflate" as a raw stream without the zlib header (as httpx allows).
            self._stream = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._stream.decompress(data, PIECE)
        # Drained in pieces: input left over waits in unconsumed_tail, never inflated at once.
        while out:
            yield out
            out = self._stream.decompress(self._stream.unconsumed_tail, PIECE)

    def finish(self) -> bytes:
        # Everything was drained above: what is left is at most the stream's last bytes.
        return self._stream.flush()


async def read_body(response: Any, limit: int) -> tuple[bytes, bool]:
    """``(body, over)``: the decoded body of ``response`` (an httpx response), or its first ``limit`` bytes.

    ``over`` is true when the decoded body is longer than ``limit``; it was not
    read or inflated further. Raises :class:`UnsupportedCoding` (nothing read),
    or :class:`BodyBroken` when the body breaks off or its coding is corrupt.
    """
    coding = _coding(response.headers)
    inflater = None if coding == "identity" else _Inflater(coding)
    received: list[bytes] = []
    size = 0
    try:
        async for raw in response.aiter_raw():
            for piece in (raw,) if inflater is None else inflater.feed(raw):
                if size + len(piece) > limit:
                    received.append(piece[: limit - size])
                    return b"".join(received), True
                size += len(piece)
                received.append(piece)
        tail = inflater.finish() if inflater is not None else b""
    except zlib.error as exc:
        raise BodyBroken(f"its {coding} coding is corrupt ({exc})", size) from None
    except Exception as exc:
        if not is_transport_error(exc):
            raise
        raise BodyBroken(f"{type(exc).__name__}: {exc}", size) from None
    if size + len(tail) > limit:
        return b"".join(received) + tail[: limit - size], True
    return b"".join(received) + tail, False
