"""An erasure whose join landed though the store answered a conflict finds its own header, not a rival.

The join writes the erasure's header into the tenant's pending erasures by
compare-and-set and tries again on ``SessionConflictError``. A store that
sent the write, lost the answer and then read another writer's next
revision on top of it (S3's read-back after no answer) reports a conflict
though the header landed. The retry read that ledger, took the erasure's
own header for an overlapping erasure "started meanwhile" and raised
``ErasureInProgressError`` naming itself: the erasure stayed pending, its
scope fenced, while the error said nothing was erased, and
``apply_retention`` (its erasure settled ``not_committed`` on that error)
then said ``not_committed`` — "it failed before erasing anything".
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    CommitState,
    EraseTarget,
    ErasureState,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionStoreError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_ledger import pending_key
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))


class _LostAnswerStore(InMemorySessionStore):
    """The first join's write lands, another writer saves on top, and the store answers a conflict.

    Armed, the next join's (a header added to the pending ledger) does so; with ``fail``, once
    it did, the look of s2's erasure for a pending one fails typed (a records backend down):
    before that erasure wrote anything.
    """

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.fail = False
        self.down = False
        self.landed = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if self.fail and self.landed and key.tenant == "acme" and key.session == "s2":
            self.down = True  # s2's erasure comes next: its look for a pending erasure fails
        elif self.down and key == pending_key("acme"):
            raise SessionStoreError("records backend down")
        return await super().load(key, ctx)

    async def save(self, key: SessionKey, snapshot: Any, expected: int | None, ctx: Any) -> int:
        if not self.armed or key != pending_key("acme") or not snapshot.ledger.records:
            return await super().save(key, snapshot, expected, ctx)
        self.armed = False
        revision = await super().save(key, snapshot, expected, ctx)
        self.landed += 1
        await super().save(key, snapshot, revision, ctx)  # another writer's next revision
        raise SessionConflictError("another writer committed first; nothing was written")


def _runtime(store: InMemorySessionStore, archive: InMemoryArchive) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        recall=InMemoryRecallStore(),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=1),
    )


async def _fill(rt: Any, *sessions: str) -> None:
    for sid in sessions:
        for i in range(3):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])


async def test_an_erasure_whose_join_landed_behind_a_conflict_completes() -> None:
    store, archive = _LostAnswerStore(), InMemoryArchive()
    rt = _runtime(store, archive)
    try:
        await _fill(rt, "s1")
        store.armed = True
        with anyio.fail_after(30):
            result = await rt.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="asked", attestation=OPERATOR
            )
        assert store.landed == 1
        assert result.record.state is ErasureState.COMPLETE
        page = await rt.erasure_status(OPERATOR)
        assert [r.state for r in page.records] == [ErasureState.COMPLETE]
    finally:
        await rt.aclose()


async def test_retention_whose_erasure_joined_behind_a_conflict_says_unknown() -> None:
    store, archive = _LostAnswerStore(), InMemoryArchive()
    rt = _runtime(store, archive)
    try:
        await _fill(rt, "s1", "s2")
        store.armed, store.fail = True, True
        with anyio.fail_after(30), pytest.raises(SessionStoreError, match="records backend down") as caught:
            await rt.apply_retention(OPERATOR)
        said = str(caught.value)
        assert store.landed == 1
        # s1's erasure joined (and completed): the call erased, whatever ended it.
        assert caught.value.commit_state is CommitState.UNKNOWN, said
        assert "trimmed before stay trimmed" in said
        key = SessionKey("acme", "ana", "s1")
        assert [g.seq for g in await archive.read_groups(key, 0, 100, OpContext())] == [1]
    finally:
        await rt.aclose()
