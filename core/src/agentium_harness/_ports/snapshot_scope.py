"""Whose a session snapshot is: a save refuses one that names another session than its key.

The engine's load of a key refuses a snapshot whose memory scope, or one of
whose resident groups' retained scope, names other tenant, user or session
ids than the key (:class:`~agentium_harness._errors.ScopeMismatchError`,
:class:`~agentium_harness._errors.SnapshotCorruptError`). Stored, such a
snapshot would be written and only refused at the next load, the session then
unusable; every session store therefore refuses it at save, before anything
is written, with :func:`check_snapshot_scope`.
"""

from __future__ import annotations

from .._errors import ScopeMismatchError, SessionStoreError
from .._scope import SessionKey
from .snapshot_record import SessionSnapshot

__all__ = ["SnapshotScopeMismatchError", "check_snapshot_scope", "snapshot_scope_issue"]


class SnapshotScopeMismatchError(SessionStoreError, ScopeMismatchError):
    """A save's snapshot belongs to another session than its key: refused, nothing was written.

    Its memory scope, or a resident group's retained scope, names another
    tenant, user or session than the key it would be saved under; the
    engine's load of that key would refuse it. Both a ``SessionStoreError``
    and a ``ScopeMismatchError``, so a host catching either catches it.
    """


def snapshot_scope_issue(key: SessionKey, snapshot: SessionSnapshot) -> str | None:
    """Why ``snapshot`` is another session's than ``key`` (a message part), or ``None`` when it is ``key``'s.

    Its memory scope, and each resident group's retained scope, must name
    ``key``'s tenant, user and session (what the engine's load requires; a
    scope's project and repository are not part of the key). A legacy
    snapshot, without a memory scope, has none to compare: the engine's load
    asks the host to attest it. The reason names no id, only a group's seq.
    """
    want = (key.tenant, key.user, key.session)
    scope = snapshot.memory_scope
    # Field by field, as the engine's load compares: a SessionKey per scope would validate ids again.
    if scope is not None and (scope.tenant, scope.user, scope.session) != want:
        return "its memory scope is another session's"
    for group in snapshot.resident:
        held = group.retained.scope if group.retained is not None else None
        if held is not None and (held.tenant, held.user, held.session) != want:
            return f"its resident group {group.seq} was retained under another session's scope"
    return None


def check_snapshot_scope(
    key: SessionKey,
    snapshot: SessionSnapshot,
    where: str,
    *,
    error: type[SnapshotScopeMismatchError] | None = None,
) -> None:
    """Raise ``error`` unless ``snapshot`` is ``key``'s own (see :func:`snapshot_scope_issue`).

    What every session store's ``save`` (and ``commit_with_archive``) calls
    before it writes anything. ``where`` names the store in the message
    (``"sqlite session store"``); ``error`` may be the store's own subclass of
    :class:`SnapshotScopeMismatchError` (``None``: that class). The message
    names no id: the caller holds the key.
    """
    issue = snapshot_scope_issue(key, snapshot)
    if issue is not None:
        raise (error or SnapshotScopeMismatchError)(
            f"{where}: the snapshot saved under a session's key is not that session's ({issue}); "
            "nothing was written"
        )
