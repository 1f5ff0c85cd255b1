"""A maintenance save that landed and was built upon before its read-back is not called "not committed".

A flush (``close_session``) or a migration saves no group of its own: the
read-back cannot tell its revision by a group. When the save's reply was
lost and another writer committed on top of it before the read-back, the
session is at another revision; that was settled ``not_committed`` ("the
session was not changed") although the save had landed. What a later write
keeps of it (the boundary a flush moved, the scope a migration stamped)
can still prove it did not land; otherwise it is ``unknown``.
"""

from __future__ import annotations

from typing import Any

import pytest
from _archive_support import ArchiveDownOnce

from agentium_harness import (
    CommitState,
    HarnessRuntime,
    Message,
    MessageGroup,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionSnapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
CTX = OpContext()
ROOMY = RuntimeLimits(op_timeout_s=30, settle_timeout_s=30, close_timeout_s=30)


class OtherWritesOnTop(InMemorySessionStore):
    """Delegates to ``shared``; once ``armed``, a save lands, another runtime appends on it, then it raises.

    ``land=False``: the other runtime appends first, and the save's compare-and-set is refused.
    """

    def __init__(self, shared: InMemorySessionStore, *, land: bool) -> None:
        super().__init__()
        self.shared, self.land = shared, land
        self.armed = False
        self.other: HarnessRuntime | None = None

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        if not self.armed:
            return await self.shared.save(key, snapshot, expected, ctx)
        self.armed = False
        assert self.other is not None
        if self.land:
            await self.shared.save(key, snapshot, expected, ctx)
        pair = [Message(Role.USER, "other"), Message(Role.ASSISTANT, "other a")]
        await self.other.append(ANA, "s1", pair)
        if self.land:
            raise SessionStoreError("the reply to the save was lost")
        return await self.shared.save(key, snapshot, expected, ctx)

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        return await self.shared.load(key, ctx)


def _runtime(store: InMemorySessionStore, archive: InMemoryArchive, max_groups: int = 1) -> HarnessRuntime:
    limits = RuntimeLimits(
        op_timeout_s=30,
        settle_timeout_s=30,
        close_timeout_s=30,
        resident=ResidentLimits(max_groups=max_groups),
    )
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        limits=limits,
    )


@pytest.mark.parametrize("land", [True, False], ids=["landed", "lost-the-race"])
async def test_a_flush_whose_save_landed_and_was_built_upon_is_not_reported_unchanged(land: bool) -> None:
    shared, archive = InMemorySessionStore(), ArchiveDownOnce()
    store = OtherWritesOnTop(shared, land=land)
    ours = _runtime(store, archive)
    # The other runtime keeps more resident: its append archives nothing.
    store.other = _runtime(shared, archive, max_groups=8)
    await ours.append(ANA, "s1", [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
    deferred = await ours.append(ANA, "s1", [Message(Role.USER, "u1"), Message(Role.ASSISTANT, "a1")])
    assert deferred.eviction.value == "deferred"
    store.armed = True
    report = await ours.resources.close_session(ANA, "s1")
    stored = await shared.load(KEY, CTX)
    assert stored is not None and stored.snapshot.next_seq == 3  # the other runtime's group is there
    [failed] = [d.message for d in report.diagnostics if d.code == "flush_failed"]
    if land:
        assert stored.snapshot.boundary == 1  # the flush landed: group 0 left the resident history
        assert "not_committed" not in failed and "commit_state unknown" in failed, failed
    else:
        assert stored.snapshot.boundary == 0  # refused: the boundary the flush moved is not there
        assert "commit_state not_committed" in failed, failed
    await ours.aclose()
    await store.other.aclose()


async def test_a_migration_whose_save_landed_and_was_built_upon_is_not_reported_unchanged() -> None:
    # Refused by another writer's revision still without the scope, it is not_committed
    # (test_maintenance_commit_state.py); written on top of, it may have landed.
    shared = InMemorySessionStore()
    group = MessageGroup(0, (Message(Role.USER, "legacy q"), Message(Role.ASSISTANT, "legacy a")))
    legacy = SessionSnapshot(memory_scope=None, boundary=0, next_seq=1, resident=(group,), format_version=1)
    await shared.save(KEY, legacy, None, CTX)
    store = OtherWritesOnTop(shared, land=True)
    ours = _runtime(store, InMemoryArchive())
    store.other = _runtime(shared, InMemoryArchive(), max_groups=8)
    store.armed = True
    with pytest.raises(SessionStoreError) as caught:
        await ours.migrate_legacy_session(ANA, "s1", attest_legacy_memory_scope=True)
    stored = await shared.load(KEY, CTX)
    assert stored is not None and stored.snapshot.memory_scope is not None  # it landed
    assert stored.snapshot.next_seq == 2  # and the other runtime appended on it
    assert caught.value.commit_state is CommitState.UNKNOWN, str(caught.value)
    assert "not changed" not in str(caught.value)
    await ours.aclose()
    await store.other.aclose()
