"""``apply_retention``: an erasure whose join could not read the pending erasures wrote nothing.

An erasure's progress turned ``unknown`` right before its join, a
read-modify-compare-and-set of the tenant's pending erasures: a read that
failed there (typed, before any write) left it ``unknown``, so the call
said "unknown ... the sessions trimmed before stay trimmed" with none
trimmed. It turns ``unknown`` now as the join writes, once the read and the
checks are done.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    CommitState,
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
from agentium_harness._engine.erasure_ledger import pending_key
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))


class _JoinReadFails(InMemorySessionStore):
    """Armed: the erasure's look for a pending erasure reads; its join's read (the next) fails."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: int | None = None

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if self.reads is not None and key == pending_key("acme"):
            self.reads += 1
            if self.reads == 3:
                raise SessionStoreError("records backend down")
        return await super().load(key, ctx)


async def test_a_join_whose_read_failed_leaves_the_call_not_committed() -> None:
    store, archive = _JoinReadFails(), InMemoryArchive()
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
        for i in range(3):
            await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
        store.reads = 0
        with anyio.fail_after(30), pytest.raises(SessionStoreError, match="records backend down") as caught:
            await rt.apply_retention(OPERATOR)
        said = str(caught.value)
        assert store.reads == 3
        assert caught.value.commit_state is CommitState.NOT_COMMITTED, said
        assert "unknown" not in said and "trimmed before" not in said
        key = SessionKey("acme", "ana", "s1")
        assert [g.seq for g in await archive.read_groups(key, 0, 100, OpContext())] == [0, 1]
        assert (await rt.erasure_status(OPERATOR)).records == ()
    finally:
        await rt.aclose()
