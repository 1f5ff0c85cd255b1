"""Owned work and drain: each item named as completed, failed or cancelled; a hanging task is named."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    DrainStatus,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryManager,
    OwnedWorkSource,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.memory.work import WorkTracker
from agentium_harness._engine.owned_work import OwnedWork
from agentium_harness.plugin_api import SessionKey

pytestmark = pytest.mark.anyio


async def test_drain_names_completed_failed_and_hanging_work(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    manager = MemoryManager(store)
    stopped = anyio.Event()

    async def fine() -> None:
        await anyio.lowlevel.checkpoint()

    async def broken() -> None:
        raise RuntimeError("the final write failed")

    async def hangs() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()

    manager.start_work("final-write fact-1", "final-write", fine)
    manager.start_work("final-write fact-2", "final-write", broken)
    manager.start_work("extraction turn 3", "extraction", hangs)
    assert set(manager.running()) == {"final-write fact-1", "final-write fact-2", "extraction turn 3"}
    # The quick items end before the drain: a stall longer than its 0.2 s (meant for the hanging
    # one) before they ran would otherwise have them cancelled too.
    await anyio.wait_all_tasks_blocked()
    with pytest.raises(MemoryDrainError, match="extraction turn 3") as info:
        await manager.drain(0.2)
    result = info.value.result
    assert result.completed == ("final-write fact-1",)
    assert result.failed == ("final-write fact-2",)
    assert result.cancelled == ("extraction turn 3",)
    by_name = {i.name: i for i in result.items}
    assert "RuntimeError: the final write failed" in by_name["final-write fact-2"].detail
    assert "did not finish within 0.2s" in by_name["extraction turn 3"].detail
    assert by_name["extraction turn 3"].kind == "extraction" and by_name["extraction turn 3"].stopped
    assert stopped.is_set() and manager.running() == ()
    # Reported once: the next drain has nothing left to say.
    again = await manager.drain(0.1)
    assert again.items == () and again.ok
    await store.aclose()


async def test_work_that_ignores_cancellation_is_reported_still_running_and_stays_tracked() -> None:
    tracker = WorkTracker()
    release = anyio.Event()
    ended = anyio.Event()

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):
            await release.wait()
        ended.set()

    tracker.start("stubborn write", "final-write", stubborn)
    first = await tracker.drain(0.05, grace_s=0.05)
    assert first.cancelled == ("stubborn write",) and first.still_running == ("stubborn write",)
    assert tracker.running() == ("stubborn write",)
    release.set()
    with anyio.fail_after(30):
        await ended.wait()
    await anyio.lowlevel.checkpoint()  # let its task record the end
    second = await tracker.drain(30)  # it has ended: nothing to wait for
    # It ended on its own after all: the next drain says so truthfully.
    assert second.completed == ("stubborn write",) and second.still_running == ()


async def test_the_runtimes_owned_work_is_drained_through_a_work_source() -> None:
    work = OwnedWork(op_timeout_s=30.0)
    key = SessionKey("tenant-a", "alice", "s/1")
    quick = SessionKey("tenant-a", "alice", "s2")

    async def hanging_summary(ticket: Ticket) -> tuple[None, list[object]]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def quick_summary(ticket: Ticket) -> tuple[None, list[object]]:
        await anyio.lowlevel.checkpoint()
        return None, []

    work.start(key, hanging_summary)  # type: ignore[arg-type]
    work.start(quick, quick_summary)  # type: ignore[arg-type]
    tracker = WorkTracker()
    source = OwnedWorkSource(work)
    tracker.track(source)
    tracker.track(source)  # idempotent
    assert set(tracker.running()) >= {f"summary update {key.key()}"}
    result = await tracker.drain(0.2)
    names = {i.name: i for i in result.items}
    hung = names[f"summary update {key.key()}"]
    assert hung.status is DrainStatus.CANCELLED and hung.kind == "summary" and hung.stopped
    assert not work.busy(key) and tracker.running() == ()
    assert list(names) == sorted(names) and len(names) <= 2


def test_track_refuses_what_is_not_a_work_source() -> None:
    with pytest.raises(InvalidArgumentError, match="WorkSource"):
        WorkTracker().track(object())  # type: ignore[arg-type]


async def test_drain_timeout_must_be_finite_and_not_negative() -> None:
    tracker = WorkTracker()
    for bad in (-1, float("inf"), float("nan"), "1", True):
        with pytest.raises(InvalidArgumentError):
            await tracker.drain(bad)  # type: ignore[arg-type]


async def test_a_drain_timeout_or_grace_past_the_duration_ceiling_is_refused_and_cancels_nothing() -> None:
    # Every other wait stops at MAX_DURATION_S (3600 s); a drain took 1e300 or 2**200 seconds,
    # a drain that never ends although "a drain always ends" refused only infinity.
    tracker = WorkTracker()
    gate = anyio.Event()
    tracker.start("slow", "extraction", gate.wait)
    for bad in (3600.5, 1e300, 2**200):
        # Refused at once: the bound only keeps a drain that was taken from waiting (nearly) forever.
        with anyio.fail_after(30), pytest.raises(InvalidArgumentError, match="at most 3600 seconds"):
            await tracker.drain(bad)
        with pytest.raises(InvalidArgumentError, match="grace must be a number of seconds from 0 to 3600"):
            await tracker.drain(1, grace_s=bad)
    assert tracker.running() == ("slow",)  # nothing was cancelled or dropped
    gate.set()
    result = await tracker.drain(30)
    assert [item.status for item in result.items] == [DrainStatus.COMPLETED]
    assert (await tracker.drain(3600, grace_s=3600)).items == ()


async def test_ended_work_kept_between_drains_is_bounded_and_the_drain_counts_what_it_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A long-lived agent that never drains must not keep one item per extraction forever.
    from agentium_harness._engine.memory import work

    monkeypatch.setattr(work, "MAX_ENDED_ITEMS", 50)
    tracker = WorkTracker()

    async def fine() -> None:
        await anyio.lowlevel.checkpoint()

    async def broken() -> None:
        raise RuntimeError("extraction failed")

    for i in range(5000):
        tracker.start(f"extraction {i}", "extraction", broken if i % 1000 == 7 else fine)
        if i % 100 == 99:
            await anyio.wait_all_tasks_blocked()
            assert tracker.running() == ()
            assert len(tracker._ended_ok) + len(tracker._ended_bad) <= 50
    result = await tracker.drain(1.0)
    assert len(result.items) == 50
    # The failures are kept (the oldest completed items go first); every count stays truthful.
    assert result.failed == tuple(f"extraction {i}" for i in range(7, 5000, 1000))
    assert result.count(DrainStatus.COMPLETED) == 4995 and result.dropped_completed == 4950
    assert result.count(DrainStatus.FAILED) == 5 and result.count(DrainStatus.CANCELLED) == 0
    assert not result.ok and result.describe().startswith("4995 completed, 5 failed, 0 cancelled")
    # The most recent completed items (of the last batch, whatever order it ended in) are the ones kept.
    kept = [int(i.name.split()[1]) for i in result.items if i.status is DrainStatus.COMPLETED]
    assert len(kept) == 45 and min(kept) >= 4900
    assert (await tracker.drain(0.1)).count(DrainStatus.COMPLETED) == 0


async def test_dropped_failures_still_make_a_drain_not_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentium_harness._engine.memory import work

    monkeypatch.setattr(work, "MAX_ENDED_ITEMS", 3)
    tracker = WorkTracker()

    async def broken() -> None:
        raise RuntimeError("boom")

    for i in range(10):
        tracker.start(f"write {i}", "final-write", broken)
    await anyio.wait_all_tasks_blocked()
    result = await tracker.drain(0.1)
    assert len(result.failed) == 3 and result.dropped_failed == 7
    assert result.count("failed") == 10 and not result.ok
    with pytest.raises(InvalidArgumentError, match="DrainStatus"):
        result.count("lost")


async def test_summary_reports_kept_between_drains_are_bounded_by_sessions_and_dropped_ones_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A multi-tenant host that never drains must not keep a report per session forever.
    from agentium_harness._engine import owned_work

    monkeypatch.setattr(owned_work, "MAX_KEPT_REPORTS", 20, raising=False)
    work = OwnedWork(op_timeout_s=30.0)

    async def broken(ticket: Ticket) -> tuple[None, list[object]]:
        raise RuntimeError("summarizer down")

    async def fine(ticket: Ticket) -> tuple[None, list[object]]:
        return None, []

    async def settled() -> None:
        # The jobs are the loop's own tasks (trio: system tasks), so wait for them through the tracker.
        for key in work.running():
            await work.settle(key, 10.0)

    keys = [SessionKey("tenant-a", f"user-{i}", "s") for i in range(300)]
    for i, key in enumerate(keys):
        work.start(key, broken if i % 3 else fine)  # type: ignore[arg-type]
        # The last session's update runs alone, so it is the last to end (trio orders a batch at random).
        if i % 50 == 49 or i == len(keys) - 2:
            await settled()
            assert len(work._last) <= 20 and len(work._unreported) <= 20
    await settled()
    # The most recent sessions' reports are the ones kept.
    assert work.last_report(keys[-1]) is not None and work.last_report(keys[0]) is None
    tracker = WorkTracker()
    tracker.track(OwnedWorkSource(work))
    result = await tracker.drain(1.0)
    # 200 failed: the 20 most recent kept (one of them handed over above), the other 180 only counted.
    assert len(result.failed) == 19 and result.dropped_failed == 180
    assert result.count(DrainStatus.FAILED) == 199 and not result.ok
    assert "not listed" in result.describe()
    again = await tracker.drain(0.1)
    assert again.items == () and again.dropped_failed == 0 and again.ok
