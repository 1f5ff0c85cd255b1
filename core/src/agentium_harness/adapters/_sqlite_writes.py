"""The SQLite session store's writes: their arguments checked first; the commit fence inside a transaction.

``checked_write`` refuses bad arguments with typed errors before anything is
done. ``fence_unmoved`` is the commit fence's test
(``_engine.commit_fence.refuse_if_erased_since_load``: the tenant's erasure
ledger at the revision the load saw) read inside the joint commit's own
write transaction: while the transaction holds the file's write lock, no
erasure can begin or end, so a ledger still at that revision refuses nothing
the look before the commit would refuse, and one that moved rolls the commit
back (nothing written) for the engine to look as before (docs/erasure.md).
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Final

from .._ports import OpContext
from .._ports.recall_args import checked_argument, checked_count, checked_ctx, checked_key
from .._ports.sessions import SessionSnapshot
from .._scope import SessionKey

__all__ = ["FenceMoved", "checked_write", "fence_unmoved", "session_prefix"]

#: The revision of one session row (the erasure ledger is the row of the tenant's ``pending_key``).
_REVISION: Final = "SELECT revision FROM sessions WHERE tenant_id = ? AND user_id = ? AND session_id = ?"


class FenceMoved(Exception):  # a signal inside the adapter, never raised to a caller
    """The fence row moved since the load: the joint commit's transaction is rolled back, nothing written."""


def fence_unmoved(conn: sqlite3.Connection, fence: tuple[SessionKey, int | None]) -> bool:
    """Whether ``fence[0]``'s row is at revision ``fence[1]`` (``None``: none) in ``conn``'s transaction.

    Any other value (another revision, a damaged column) is a move: the engine's own look then
    reads the ledger as before and says what it is.
    """
    key, seen = fence
    row = conn.execute(_REVISION, (key.tenant, key.user, key.session)).fetchone()
    revision = None if row is None else row[0]
    if revision is None or seen is None:
        return revision is seen
    return type(revision) is int and revision == seen


@functools.lru_cache(maxsize=1024)
def session_prefix(location: str, key: SessionKey) -> str:
    """Where the archive's receipts of session ``key`` point; kept, as a session commits turn after turn."""
    return f"{location}#{key.key()}"


def checked_write(
    key: object, snapshot: object, expected_revision: object, ctx: object, operation: str
) -> SessionKey:
    """The arguments of a snapshot write, checked before anything is done: typed errors, not crashes."""
    if (
        type(key) is SessionKey
        and type(ctx) is OpContext
        and type(snapshot) is SessionSnapshot
        and (expected_revision is None or type(expected_revision) is int)
    ):
        return key  # what the checks below pass, known from the exact types alone (a turn's every write)
    checked_ctx(ctx, operation)
    checked = checked_key(key, operation)
    checked_argument(snapshot, SessionSnapshot, "snapshot", operation)
    if expected_revision is not None:
        checked_count(expected_revision, "expected_revision", operation)
    return checked
