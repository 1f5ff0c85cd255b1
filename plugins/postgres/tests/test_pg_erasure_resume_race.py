"""Two processes resuming one erasure on PostgreSQL: the tombstone of the one completed first stands.

Two runtimes on one schema stand for two worker processes of a host. The
first starts erasing a session; while its first store call runs, the second
resumes the same pending erasure and completes it, which lifts the fence,
and a new turn of the session is acknowledged. The first call then carried
on with the old record, fence down: its progress (and, when a store then
failed, its failure note) was saved over the tombstone, so a complete
erasure read ``pending`` for good while out of the pending ledger, and the
call said it "stays pending". Found by a probe of four processes on one
database. Now the call stops at the tombstone and erases what the target
still holds under a new record of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureRecord,
    ErasureState,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_ledger import load_ledger, record_key
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresError,
    PostgresMemoryStore,
    PostgresRecallStore,
    PostgresSessionStore,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
TARGET = EraseTarget.session("acme", "ana", "s1")


class _PausingRecall(PostgresRecallStore):
    """A recall store whose next real ``erase`` first lets another process's work run."""

    before: Callable[[], Awaitable[None]] | None = None

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        if not kwargs.get("dry_run", False):
            hook, self.before = self.before, None
            if hook is not None:
                await hook()
        return await super().erase(target, ctx, **kwargs)


class _FailingArchive(PostgresArchive):
    """An archive whose real ``erase`` fails (a lost connection, say) once armed."""

    armed = False

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        if self.armed and not kwargs.get("dry_run", False):
            raise PostgresError("connection lost")
        return await super().erase(target, ctx, **kwargs)


def _runtime(config: PostgresConfig, recall: PostgresRecallStore, archive: PostgresArchive) -> HarnessRuntime:
    memory = PostgresMemoryStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=PostgresSessionStore(config),
        recall=recall,
        memory=memory,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1), op_timeout_s=30),
        owned=(recall, memory, archive),
    )


async def _stored_record(config: PostgresConfig, erasure_id: str) -> ErasureRecord:
    store = PostgresSessionStore(config)
    try:
        _, ledger = await load_ledger(Ticket(None, "test", 20), store, record_key("acme", erasure_id))
        return ledger.records[0]
    finally:
        await store.aclose()


async def test_a_resume_finding_the_erasure_completed_elsewhere_keeps_its_tombstone(
    app_config: PostgresConfig,
) -> None:
    recall, archive = _PausingRecall(app_config), _FailingArchive(app_config)
    first = _runtime(app_config, recall, archive)
    second = _runtime(app_config, PostgresRecallStore(app_config), PostgresArchive(app_config))
    completed: list[ErasureRecord] = []

    async def resume_and_write_meanwhile() -> None:
        result = await second.erase(TARGET, reason="DSR", attestation=OPERATOR)
        assert result.resumed and result.tombstone is not None
        completed.append(result.tombstone)
        # The erasure is complete: the fence is down and this turn is acknowledged after it.
        await second.append(ANA, "s1", [Message(Role.USER, "after the erasure qlate4471")])
        archive.armed = True  # the first call's next archive erase fails

    async with first, second:
        for i in range(3):
            await first.append(ANA, "s1", [Message(Role.USER, f"before qgone{i}")])
        recall.before = resume_and_write_meanwhile
        with pytest.raises(ErasureIncompleteError) as stopped:
            await first.erase(TARGET, reason="DSR", attestation=OPERATOR)
        (done,) = completed
        assert done.state is ErasureState.COMPLETE
        # The completed erasure stays complete; what stopped is a new erasure of what was left.
        assert (await _stored_record(app_config, done.erasure_id)).state is ErasureState.COMPLETE
        assert stopped.value.record is not None and stopped.value.record.erasure_id != done.erasure_id
        archive.armed = False
        again = await first.erase(TARGET, reason="DSR", attestation=OPERATOR)
        assert again.resumed and again.tombstone is not None
        assert again.tombstone.state is ErasureState.COMPLETE
        # The turn was acknowledged before the call that asked for the erasure returned: it is covered.
        page = await second.read_history(ANA, "s1", max_groups=10, view=False)
        assert page.groups == ()
