"""An erasure over more sessions than its record lists counts each session left out once.

The record lists up to ``MAX_RECORD_SESSIONS`` sessions group by group and
counts the others in ``omitted_sessions``, without their ids. Every store
reports the same sessions (the archive their groups, the session store their
snapshots), in the inventory and again as it erases them, and a resume's
progress is merged with the inventory of the call that started the erasure:
each of these once added every session past the cap again. Here the cap is
lowered to 2 and the user has 5 sessions, so exactly 3 are omitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, OneItemSteps, hooked_runtimes

from agentium_harness import EraseTarget, ResidentLimits, RuntimeLimits
from agentium_harness._engine import erasure_resume

pytestmark = pytest.mark.anyio

USER = EraseTarget.user("acme", "ana")
SESSIONS = 5
CAP = 2


async def _sessions(runtime: Any) -> None:
    for s in range(SESSIONS):
        for i in range(2):
            await runtime.run(ANA, f"s{s}", f"turn {i}")


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erasure_resume, "MAX_RECORD_SESSIONS", CAP)


@pytest.mark.usefixtures("capped")
@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_one_erasure_counts_each_omitted_session_once(stores: str, tmp_path: Path) -> None:
    """Two stores report every session, in the inventory and in each erase call: still 3 omitted."""
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1))
    _, _, (runtime,) = hooked_runtimes(stores, tmp_path, OneItemSteps(), 1, limits)
    try:
        await _sessions(runtime)
        planned = await runtime.erase(USER, reason="dsr", attestation=OPERATOR, dry_run=True)
        assert len(planned.record.sessions) == CAP
        assert planned.record.omitted_sessions == SESSIONS - CAP
        done = await runtime.erase(USER, reason="dsr", attestation=OPERATOR)
        assert done.tombstone is not None and len(done.tombstone.sessions) == CAP
        assert done.tombstone.omitted_sessions == SESSIONS - CAP
    finally:
        await runtime.aclose()


@pytest.mark.usefixtures("capped")
@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_an_inventory_merged_with_a_resumes_progress_counts_each_omitted_session_once(
    stores: str, tmp_path: Path
) -> None:
    """The first call's inventory, saved after a resume's progress, omits what the resume omits."""
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1))
    archive, _, (first, other) = hooked_runtimes(stores, tmp_path, OneItemSteps(), 2, limits)
    try:
        await _sessions(first)
        results: dict[str, Any] = {}
        first_done = anyio.Event()

        async def erase_first() -> None:
            results["first"] = await first.erase(USER, reason="dsr", attestation=OPERATOR)
            first_done.set()

        async def resume_other() -> None:
            (results["other"],) = await other.resume_erasures(OPERATOR)

        archive.hook.hold_inventory = True
        archive.hook.hold = 2  # the resume's second call waits: its first call's progress is saved
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase_first)
                await archive.hook.in_inventory.wait()
                tg.start_soon(resume_other)
                await archive.hook.held.wait()
                archive.hook.inventory_release.set()  # the inventory is merged in, then the rest erased
                await first_done.wait()
                archive.hook.release.set()
        tombstone = results["first"].tombstone
        assert tombstone is not None and results["other"].record == tombstone
        listed = {s.session.session for s in tombstone.sessions}
        assert len(listed) == CAP and listed < {f"s{s}" for s in range(SESSIONS)}
        assert tombstone.omitted_sessions == SESSIONS - CAP, tombstone.omitted_sessions
    finally:
        for runtime in (first, other):
            await runtime.aclose()
