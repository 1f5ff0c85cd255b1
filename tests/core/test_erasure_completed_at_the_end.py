"""Another call completes the erasure after this one's stores are done, right before its tombstone.

This call's stores all erased and verified; then, while it cleans up the
stores' files, another runtime resumes the same erasure from its record and
completes it (its fence goes), and a run writes to the session. This call's
tombstone save then finds the other's tombstone, and keeps it. What the
session holds now was written before this call returns, so this call must
erase it under a new erasure, as it does when it finds the erasure completed
before a store call: returning the other's tombstone said the target was
erased while it held the new turn.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_run
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
TARGET = EraseTarget.session("acme", "ana", "s1")


async def test_a_tombstone_found_saved_by_another_call_is_not_returned_while_the_target_holds_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive, sessions = InMemoryArchive(), InMemorySessionStore()
    first, other, writer = (
        create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True), archive=archive, session_store=sessions
        )
        for _ in range(3)
    )
    real = erasure_run.scrub_files
    entered, release = anyio.Event(), anyio.Event()

    async def meanwhile(ticket: Any, cleaned: Any, record: Any) -> Any:
        if not entered.is_set():  # the first call's clean-up, its stores all done: it waits here
            entered.set()
            with anyio.fail_after(30):
                await release.wait()
        return await real(ticket, cleaned, record)

    results: list[Any] = []

    async def erase_first() -> None:
        results.append(await first.erase(TARGET, reason="dsr", attestation=OPERATOR))

    try:
        await first.run(ANA, "s1", "before the erasure")
        monkeypatch.setattr(erasure_run, "scrub_files", meanwhile)
        async with anyio.create_task_group() as tg:
            tg.start_soon(erase_first)
            with anyio.fail_after(30):
                await entered.wait()
            # Another runtime resumes the same erasure and completes it; its fence down, a run writes.
            (done,) = await other.resume_erasures(OPERATOR)
            assert done.tombstone is not None
            await writer.run(ANA, "s1", "written once the other call had completed the erasure")
            release.set()
        monkeypatch.undo()
        [result] = results
        # The new turn is erased, under a new erasure whose tombstone is the result.
        assert not (await first.inspect_session(ANA, "s1")).exists
        assert result.tombstone is not None
        assert result.record.erasure_id != done.record.erasure_id
        statuses = await first.erasure_status(OPERATOR)
        assert [s.state for s in statuses] == [ErasureState.COMPLETE, ErasureState.COMPLETE]
    finally:
        for runtime in (first, other, writer):
            await runtime.aclose()
