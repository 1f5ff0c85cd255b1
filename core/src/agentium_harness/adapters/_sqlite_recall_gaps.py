"""The SQLite recall store's catch-up query: which archived seqs of a session have no indexed group.

Kept apart from :mod:`agentium_harness.adapters.sqlite_recall` (the store):
one bounded statement and the gap arithmetic over what it read. Runs in a
worker thread, inside the caller's connection; identifiers are bound as SQL
parameters.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from .._scope import SessionKey

__all__ = ["UNINDEXED_WINDOW", "missing_seqs", "unindexed_seqs"]

#: How many of a session's newest indexed seqs below ``end_seq`` one ``unindexed_groups`` reads.
UNINDEXED_WINDOW: Final = 4096

_NEWEST_SEQS: Final = (
    "SELECT seq FROM recall_sources WHERE kind = 'group' AND tenant_id = ? AND user_id = ? "
    "AND session_id = ? AND seq >= ? AND seq < ? ORDER BY seq DESC LIMIT ?"
)


def missing_seqs(
    newest: Sequence[int], end_seq: int, max_groups: int, *, reaches_start: bool, start_seq: int = 0
) -> list[int]:
    """The lowest ``max_groups`` seqs from ``start_seq`` below ``end_seq`` missing among ``newest``.

    ``newest`` are indexed seqs, any order. Below the lowest of them nothing
    is known unless ``reaches_start`` (the window held every indexed seq from
    ``start_seq``, so the gap runs from there).
    """
    seqs = sorted({s for s in newest if start_seq <= s < end_seq})
    out: list[int] = []
    previous = start_seq - 1 if reaches_start or not seqs else seqs[0]
    for seq in (*(s for s in seqs if s > previous), end_seq):
        gap = range(previous + 1, min(seq, previous + 1 + max_groups - len(out)))
        out.extend(gap)
        if len(out) >= max_groups:
            break
        previous = seq
    return out


def unindexed_seqs(
    conn: sqlite3.Connection, key: SessionKey, end_seq: int, max_groups: int, start_seq: int = 0
) -> list[int]:
    """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``, ascending, bounded.

    Reads at most :data:`UNINDEXED_WINDOW` of the session's newest indexed
    seqs in that span (from the index alone) and returns the lowest gaps
    among them, from ``start_seq`` when the window reaches it.
    """
    rows = conn.execute(
        _NEWEST_SEQS, (key.tenant, key.user, key.session, start_seq, end_seq, UNINDEXED_WINDOW)
    ).fetchall()
    newest = [int(r[0]) for r in rows]
    return missing_seqs(
        newest, end_seq, max_groups, reaches_start=len(newest) < UNINDEXED_WINDOW, start_seq=start_seq
    )
