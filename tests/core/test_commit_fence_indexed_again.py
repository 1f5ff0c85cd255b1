"""An erasure indexed again after a later one must not hide that later one from the commit fence.

The commit fence reads the join record of the last whole-session erasure
of each index chain only: such erasures ran one after another, so each
chain lists them in join order — by their *first* listing. A resume that
read an erasure as pending and completes it again once another process
had completed it (and a later erasure of the session had run) indexes it
a second time, after that later one, whenever its first listing moved
from the chain's head to a page meanwhile. Read by position, that stale
listing ended every chain: the later erasure, which joined after the
turn's load, was never read, and the turn's first commit was written into
the session erased meanwhile.

Three runtimes over the same in-memory stores stand for three processes:
``slow`` runs the turn, ``other`` erases and resumes, ``stale`` resumes late.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, HeldOnce

from agentium_harness import (
    CommitState,
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    SessionConflictError,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_api, erasure_index, erasure_tombstone
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

S1 = EraseTarget.session("acme", "ana", "s1")


async def test_a_stale_resume_indexing_an_erasure_again_does_not_hide_a_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One header a head: every second listing moves the first to a page (as 64 would, sooner).
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 1)
    archive, store = InMemoryArchive(), InMemorySessionStore()
    provider = HeldOnce()
    slow, other, stale = (
        create_harness_runtime(provider=p, archive=archive, session_store=store)
        for p in (provider, ScriptedProvider(replies=["ok"], cycle=True), ScriptedProvider(replies=["ok"]))
    )
    try:
        await slow.run(ANA, "s1", "before the erasures")
        # Erasure A stops once its tombstone is saved, before it is indexed: pending, its record complete.
        real_add = erasure_tombstone.add_finished

        async def fails(*args: Any) -> None:
            raise OSError("index unreachable")

        monkeypatch.setattr(erasure_tombstone, "add_finished", fails)
        with pytest.raises(ErasureIncompleteError) as caught:
            await other.erase(S1, reason="dsr", attestation=OPERATOR)
        monkeypatch.setattr(erasure_tombstone, "add_finished", real_add)
        first = caught.value.record.erasure_id
        # ``stale`` reads A as pending, then waits before loading its record.
        real_load = erasure_api.load_record
        paused, go = anyio.Event(), anyio.Event()

        async def load_late(*args: Any) -> Any:
            if not paused.is_set():
                paused.set()
                await go.wait()
            return await real_load(*args)

        monkeypatch.setattr(erasure_api, "load_record", load_late)
        later: list[Any] = []
        caught_turn: list[BaseException] = []

        async def turn() -> None:
            try:
                await slow.run(ANA, "s1", "a new session's first turn")
            except Exception as exc:
                caught_turn.append(exc)

        stale_done = anyio.Event()

        async def resume_late() -> None:
            try:
                await stale.resume_erasures(OPERATOR)
            finally:
                stale_done.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_late)
                await paused.wait()
                (resumed,) = await other.resume_erasures(OPERATOR)  # A completes: indexed, fence down
                assert resumed.record.erasure_id == first and resumed.state is ErasureState.COMPLETE
                provider.armed = True
                tg.start_soon(turn)  # loads s1 (absent) after A, before B
                await provider.started.wait()
                later.append(await other.erase(S1, reason="dsr", attestation=OPERATOR))  # B, during the turn
                go.set()  # the stale resume completes A again, indexing it after B
                await stale_done.wait()
                provider.release.set()
        (error,) = caught_turn
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert later[0].record.erasure_id in str(error)  # B, which joined after the turn's load
        page = await slow.read_history(ANA, "s1", max_groups=100, view=False)
        assert page.groups == ()
    finally:
        for runtime in (slow, other, stale):
            await runtime.aclose()
