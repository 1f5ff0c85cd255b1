"""A summary update's save that raises is read back, and never fails the turn it follows.

With ``SummaryLimits(background=False)`` the update runs inside ``run()`` (or
``append``), after the turn committed. Its save raising (a lost reply, a
store that is briefly down) used to raise out of the call: the committed
turn's answer was lost to the host behind an error, and a save that had
landed was not read back, so the result named a revision the session had
already left (a retried conditional write seeing its own first attempt was
even reported as another writer's conflict). The stores here are the public
in-memory store, wrapped so that the save of a summary fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentium_harness import (
    CommitState,
    HarnessRuntime,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionStoreError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext, SessionSnapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


class SummarySaveFails(InMemorySessionStore):
    """The public in-memory store: a save that changes the task summary raises ``error``.

    ``land`` writes the snapshot first (the reply to a write that landed was lost).
    """

    def __init__(self, error: Exception, *, land: bool) -> None:
        super().__init__()
        self.error, self.land, self.failed = error, land, 0

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        stored = await self.load(key, ctx)
        if (
            stored is not None
            and snapshot.summary is not None
            and snapshot.summary != stored.snapshot.summary
        ):
            self.failed += 1
            if self.land:
                await super().save(key, snapshot, expected, ctx)
            raise self.error
        return await super().save(key, snapshot, expected, ctx)


def _runtime(store: InMemorySessionStore) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        # Each turn archives the one before: the summary has something to fold.
        limits=RuntimeLimits(
            op_timeout_s=30, settle_timeout_s=30, close_timeout_s=30, resident=ResidentLimits(max_groups=1)
        ),
    )


@pytest.mark.parametrize("kind", ["run", "append"])
async def test_a_summary_save_that_failed_is_a_diagnostic_of_the_committed_turn(kind: str) -> None:
    store = SummarySaveFails(SessionStoreError("503 Slow Down"), land=False)
    rt = _runtime(store)
    await rt.run(ANA, "s1", "first")
    if kind == "run":
        result: Any = await rt.run(ANA, "s1", "second")
        assert result.output == "ok" and result.committed
    else:
        pair = [Message(Role.USER, "u"), Message(Role.ASSISTANT, "a")]
        result = await rt.append(ANA, "s1", pair)
        assert result.commit_state is CommitState.COMMITTED
    assert store.failed == 1
    stored = await store.load(KEY, OpContext())
    assert stored is not None and stored.snapshot.next_seq == 2 and stored.snapshot.summary is None
    assert result.snapshot_revision == stored.revision  # the turn's own revision: no summary landed
    failed = [d for d in result.diagnostics if d.code == "summary_failed"]
    assert failed and "503 Slow Down" in failed[0].message and "not saved" in failed[0].message
    await rt.aclose()


@pytest.mark.parametrize(
    "error",
    [SessionStoreError("connection reset"), SessionConflictError("revision moved (our own first attempt)")],
    ids=["lost-reply", "own-retry-conflict"],
)
async def test_a_summary_save_that_landed_and_then_raised_is_read_back_as_saved(error: Exception) -> None:
    store = SummarySaveFails(error, land=True)
    rt = _runtime(store)
    await rt.run(ANA, "s1", "first")
    result = await rt.run(ANA, "s1", "second")
    stored = await store.load(KEY, OpContext())
    assert store.failed == 1 and stored is not None and stored.snapshot.summary is not None
    # The result names the revision the session is at, and the summary it holds.
    assert result.committed and result.output == "ok"
    assert result.snapshot_revision == stored.revision
    assert result.summary == stored.snapshot.summary
    assert result.has("save_settled") and not result.has("summary_conflict")
    # A host passing that revision on appends without a conflict.
    done = await rt.append(
        ANA, "s1", [Message(Role.USER, "u"), Message(Role.ASSISTANT, "a")], expected_revision=stored.revision
    )
    assert done.commit_state is CommitState.COMMITTED
    await rt.aclose()


class LoadFailsAfterSave(InMemorySessionStore):
    """The public in-memory store: once ``armed``, the first load of the session after a save raises (a blip).

    Of the session: the erasure ledger's read before the summarizer call (docs/erasure.md) goes through.
    """

    def __init__(self) -> None:
        super().__init__()
        self.armed = self.failing = False

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        revision = await super().save(key, snapshot, expected, ctx)
        if self.armed:
            self.armed, self.failing = False, True
        return revision

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.failing and key == KEY:
            self.failing = False
            raise SessionStoreError("503 Slow Down")
        return await super().load(key, ctx)


async def test_a_failed_read_before_the_summary_save_is_a_diagnostic_of_the_committed_turn() -> None:
    store = LoadFailsAfterSave()
    rt = _runtime(store)
    await rt.run(ANA, "s1", "first")
    store.armed = True
    result = await rt.run(ANA, "s1", "second")  # the summary's read before its save fails
    assert result.committed and result.output == "ok"
    stored = await store.load(KEY, OpContext())
    assert stored is not None and stored.snapshot.next_seq == 2 and stored.snapshot.summary is None
    assert result.snapshot_revision == stored.revision
    failed = [d.message for d in result.diagnostics if d.code == "summary_failed"]
    assert failed and "503 Slow Down" in failed[0] and "not saved" in failed[0]
    await rt.aclose()
