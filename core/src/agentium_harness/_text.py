"""Bounding free text that the engine keeps or shows: an adapter's reason or error message.

Free text from an adapter (a verifier's reason, a provider's error) ends up
in retained records, snapshots and model requests. It is cut to a byte
bound at a character boundary, with a marker saying how much was left out,
so a 1 MB reason can never become a 1 MB block or a 2 MB snapshot.
"""

from __future__ import annotations

__all__ = ["cut_text"]


def cut_text(text: str, max_bytes: int) -> tuple[str, int]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, marker included; ``(text, bytes left out)``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text, 0
    marker = f" … [{len(data)} bytes, cut]"
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    # ``ignore`` drops a character cut in half at the end, so the result stays valid text.
    kept = data[:room].decode("utf-8", "ignore")
    return kept + marker, len(data) - len(kept.encode("utf-8"))
