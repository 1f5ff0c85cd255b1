"""Dropped-item counts of a work owner never keep that owner (a runtime, an ``Agent``) alive.

A memory manager's :class:`WorkTracker` keeps at most ``MAX_ENDED_ITEMS``
ended items between drains and only counts the ones it drops, by owner, so
a runtime's own drain takes its own counts. Those counts were keyed by the
owner object itself: a strong reference held by the shared manager, so a
runtime or ``Agent`` the host dropped without closing stayed alive as long
as the manager did (and a dropped runtime still "open" kept every other
runtime's close from draining the manager's unowned work). Now an owner is
held weakly there too; a gone owner's counts join the unowned ones, which
the manager's (or the last runtime's) drain reports: nothing is lost.
"""

from __future__ import annotations

import gc
import weakref

import anyio
import anyio.lowlevel
import pytest

from agentium_harness._engine.memory import work
from agentium_harness._engine.memory.work import DrainStatus, WorkTracker

pytestmark = pytest.mark.anyio

DEADLINE_S = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Owner:
    """Stands for a runtime or an Agent: any object work can be started as."""


async def fine() -> None:
    await anyio.lowlevel.checkpoint()


async def ended(tracker: WorkTracker) -> None:
    while tracker.running():
        await anyio.wait_all_tasks_blocked()


async def test_an_owner_whose_items_were_dropped_is_not_kept_alive_and_its_counts_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(work, "MAX_ENDED_ITEMS", 1)
    tracker = WorkTracker()
    owners = [Owner() for _ in range(4)]
    refs = [weakref.ref(o) for o in owners]
    kept = Owner()
    with anyio.fail_after(DEADLINE_S):
        for i, owner in enumerate(owners):
            tracker.start(f"extraction {i}", "extraction", fine, owner)
            await ended(tracker)
        tracker.start("extraction kept", "extraction", fine, kept)
        await ended(tracker)
        tracker.start("extraction last", "extraction", fine)  # drops kept's item too
        await ended(tracker)
        del owners, owner
        gc.collect()
        # Every owner the host let go of is gone: the tracker held none of them.
        assert [r() for r in refs] == [None] * 4
        # A live owner's own drain still takes its own dropped count, and only it.
        own = await tracker.drain(1.0, 0.5, kept)
        assert own.items == () and own.dropped_completed == 1
        # The gone owners' counts were not lost: the drain of all the work reports them.
        rest = await tracker.drain(1.0, 0.5)
        assert rest.completed == ("extraction last",)
        assert rest.count(DrainStatus.COMPLETED) == 5 and rest.dropped_completed == 4
        assert (await tracker.drain(1.0, 0.5)).count(DrainStatus.COMPLETED) == 0
