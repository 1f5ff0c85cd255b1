"""``apply_retention``: an erasure refused as it joins the pending erasures wrote nothing.

An erasure that finds no overlapping erasure pending writes its header into
the tenant's pending erasures by compare-and-set; one of an overlapping
target started meanwhile (another process) refuses it there, with
``ErasureInProgressError``, before anything is written. The erasure's own
progress was already ``unknown`` (marked right before that write), so the
call, once a later session's erasure failed before writing too, said
``unknown`` ("the sessions trimmed before stay trimmed") with none trimmed.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    CommitState,
    EraseTarget,
    ErasureKind,
    ErasureState,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionKey,
    SessionStoreError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure import new_record
from agentium_harness._engine.erasure_ledger import header, pending_key
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness._ports.sessions import SessionSnapshot, seal_snapshot
from agentium_harness._scope import Scope
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))


class _RacedStore(InMemorySessionStore):
    """s1's erasure: an overlapping one joins right after its look for one; s2's: refused typed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.checking: str | None = None

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == "acme":
            self.checking = key.session
            return await super().load(key, ctx)
        if not self.armed or key != pending_key("acme") or self.checking is None:
            return await super().load(key, ctx)
        checking, self.checking = self.checking, None
        if checking == "s2":
            raise SessionStoreError("records backend down")
        # What the erasure's look reads (nothing pending); then another process's erasure of the
        # whole session joins, and the erasure's own join reads it (compare-and-set: nothing written).
        answer = await super().load(key, ctx)
        other = new_record(
            EraseTarget.session("acme", "ana", "s1"),
            "elsewhere",
            OPERATOR,
            ErasureKind.ERASURE,
            ErasureState.PENDING,
        )
        scope = Scope(key.tenant, key.user, key.session)
        ledger = seal_snapshot(SessionSnapshot(memory_scope=scope, ledger=ErasureLedger((header(other),))))
        await super().save(key, ledger, None if answer is None else answer.revision, ctx)
        return answer


async def test_an_erasure_refused_as_it_joins_leaves_the_call_not_committed() -> None:
    store, archive = _RacedStore(), InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        recall=InMemoryRecallStore(),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=1),
    )
    try:
        for sid in ("s1", "s2"):
            for i in range(3):
                await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
        store.armed, store.checking = True, None
        with anyio.fail_after(30), pytest.raises(SessionStoreError, match="records backend down") as caught:
            await rt.apply_retention(OPERATOR)
        said = str(caught.value)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED, said
        assert "unknown" not in said and "trimmed before" not in said
        for sid in ("s1", "s2"):
            key = SessionKey("acme", "ana", sid)
            assert [g.seq for g in await archive.read_groups(key, 0, 100, OpContext())] == [0, 1]
    finally:
        await rt.aclose()
