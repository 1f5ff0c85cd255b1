"""The session store's refusal of another session's snapshot; part of :class:`SessionStoreContract`.

Kept apart from :mod:`.session_store_contract` by size only: it runs with
that suite, on the same ``session_store`` fixture.
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import pytest

from .._errors import ScopeMismatchError
from .._ports import OpContext
from .._ports.sessions import SessionSnapshot, SessionStore, seal_snapshot
from .._scope import Scope, SessionKey
from .helpers import legacy_snapshot, rich_group, scoped_snapshot

__all__ = ["SessionStoreScopeTests"]

_KEY = SessionKey("tenant-1", "user-1", "session-1")


def _foreign_snapshots(key: SessionKey) -> dict[str, SessionSnapshot]:
    """Snapshots that are not ``key``'s, by what names the other session."""
    sibling = SessionKey(key.tenant, key.user, key.session + "-other")
    own_scope = Scope(key.tenant, key.user, key.session, "project-1", None)
    other_user = SessionKey(key.tenant, key.user + "-other", key.session)
    other_tenant = SessionKey(key.tenant + "-other", key.user, key.session)
    stray = rich_group(5, sibling)  # retained under the sibling's scope
    return {
        "another session's": scoped_snapshot(sibling, groups=1),
        "another user's": scoped_snapshot(other_user, groups=0),
        "another tenant's": scoped_snapshot(other_tenant, groups=0),
        "own scope, a group retained under another session's": seal_snapshot(
            SessionSnapshot(memory_scope=own_scope, boundary=5, next_seq=6, resident=(stray,))
        ),
        "legacy, a group retained under another session's": attrs.evolve(
            legacy_snapshot(), boundary=5, next_seq=6, resident=(stray,)
        ),
    }


class SessionStoreScopeTests:
    """A save refuses a snapshot that is another session's; part of :class:`SessionStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    async def test_save_refuses_another_sessions_snapshot(self, session_store: SessionStore) -> None:
        """A save whose snapshot is another session's raises ``ScopeMismatchError`` and writes nothing.

        The snapshot's memory scope, or a resident group's retained scope
        (also in a legacy snapshot, which has no memory scope), names another
        tenant, user or session than the key it is saved under; a create and a
        replacement are both refused, and the key keeps what it held. A
        failure means the store keeps a snapshot that every later load of the
        key refuses: call ``plugin_api.check_snapshot_scope`` in ``save`` (and
        ``commit_with_archive``) before writing anything.
        """
        for what, snapshot in _foreign_snapshots(_KEY).items():
            with pytest.raises(ScopeMismatchError):
                await session_store.save(_KEY, snapshot, None, OpContext())
                pytest.fail(f"a create with a snapshot ({what}) was stored")
        # One load for all: a refused create that wrote anything leaves a snapshot (or a conflict).
        assert await session_store.load(_KEY, OpContext()) is None, "a refused create wrote a snapshot"
        own = scoped_snapshot(_KEY, " own", groups=1)
        revision = await session_store.save(_KEY, own, None, OpContext())
        for what, snapshot in _foreign_snapshots(_KEY).items():
            with pytest.raises(ScopeMismatchError):
                await session_store.save(_KEY, snapshot, revision, OpContext())
                pytest.fail(f"a replacement with a snapshot ({what}) was stored")
        loaded = await session_store.load(_KEY, OpContext())
        assert loaded is not None and (loaded.revision, loaded.snapshot) == (revision, own), (
            "a refused replacement changed the stored snapshot"
        )
