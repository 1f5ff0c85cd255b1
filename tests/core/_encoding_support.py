"""The plain reference encodings the write path's fast paths are held to (property tests)."""

from __future__ import annotations

from typing import Any

from agentium_harness._codec import canonical_json, unstructure
from agentium_harness._ports.snapshot import SessionSnapshot


def plain_snapshot_bytes(snapshot: SessionSnapshot) -> bytes:
    """The plain canonical encoding: the converter's data, absent summary and empty receipts left out."""
    data: dict[str, Any] = unstructure(snapshot)
    if data["summary"] is None:
        del data["summary"]
    if not data["receipts"]:
        del data["receipts"]
    return canonical_json(data)
