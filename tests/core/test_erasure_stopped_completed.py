"""A step that fails once another call completed the erasure goes on from that tombstone, as carry_out does.

Two runtimes (two processes) share one SQLite file. When a step of an
erasure that is not a store call of ``carry_out`` fails — the inventory
(and its save), the tombstone's save, a new erasure's inventory — the call
reads the record back (``_stopped``). Found completed by another call and
out of ``pending`` (its fence down), the erasure is neither pending nor of
unknown state: the call returns that tombstone, or erases what the target
holds since under a new erasure, as ``carry_out`` does when a store call
fails after such a completion. Before, the error said whether the erasure
left ``pending`` was not known (``erasure_status`` shows it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, TARGET, five_turns, history_texts, sqlite_pairs

from agentium_harness import (
    ErasureOvertakenError,
    ErasureState,
    SessionKey,
)
from agentium_harness._engine import erasure_tombstone
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, EraseTarget

pytestmark = pytest.mark.anyio


class _Inventories:
    """Each inventory (a dry run of more than one item) takes the next hold queued: waits, may raise."""

    def __init__(self) -> None:
        self.holds: list[tuple[anyio.Event, anyio.Event, bool]] = []
        self.fail_checks = False  # a check (a dry run of one item) fails

    def hold(self, *, fail: bool) -> tuple[anyio.Event, anyio.Event]:
        entered, release = anyio.Event(), anyio.Event()
        self.holds.append((entered, release, fail))
        return entered, release

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if self.fail_checks and kwargs.get("dry_run", False) and kwargs.get("max_items", 0) == 1:
            raise OSError("archive unreachable")
        if not kwargs.get("dry_run", False) or kwargs.get("max_items", 0) <= 1 or not self.holds:
            return
        entered, release, fail = self.holds.pop(0)
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        if fail:
            raise OSError("archive unreachable")


@asynccontextmanager
async def _two(tmp_path: Path) -> AsyncIterator[tuple[_Inventories, list[tuple[Any, Any]]]]:
    """The hook and two (runtime, session store) pairs over one SQLite file; both runtimes closed after."""
    hook = _Inventories()
    async with sqlite_pairs(tmp_path, hook) as pairs:
        yield hook, pairs


async def _tombstones(runtime: Any) -> dict[str, Any]:
    statuses = await runtime.erasure_status(OPERATOR)
    assert all(s.state is ErasureState.COMPLETE for s in statuses), statuses
    return {s.erasure_id: s for s in statuses}


async def test_an_inventory_failing_once_another_call_completed_the_erasure_returns_its_tombstone(
    tmp_path: Path,
) -> None:
    async with _two(tmp_path) as (hook, [(first, _), (other, _)]):
        await five_turns(first)
        entered, release = hook.hold(fail=True)  # the starting call's inventory, failing once released
        results: list[Any] = []

        async def erase_first() -> None:
            results.append(await first.erase(TARGET, reason="dsr", attestation=OPERATOR))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase_first)
                await entered.wait()
                (resumed,) = await other.resume_erasures(OPERATOR)  # completes it: the fence is down
                release.set()
        (result,) = results
        assert resumed.tombstone is not None
        # Not "whether it left pending is not known": the other call's tombstone, nothing left to erase.
        assert result.tombstone == resumed.tombstone == result.record
        assert list(await _tombstones(first)) == [resumed.record.erasure_id]


@pytest.mark.parametrize("failing", ["save", "index"])
async def test_a_tombstone_step_failing_once_another_call_completed_it_returns_that_tombstone(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tombstone's save fails; or it finds the other call's tombstone, and indexing that one fails."""
    async with _two(tmp_path) as (_, [(first, sessions), (other, _)]):
        await five_turns(first)
        real = sessions.save
        resumed: list[Any] = []

        async def save(key: SessionKey, snapshot: Any, *args: Any, **kwargs: Any) -> Any:
            ledger = snapshot.ledger
            tombstone = (
                key.tenant == ERASURE_RECORDS_TENANT
                and key.session.startswith("e-")
                and ledger.records[0].state is ErasureState.COMPLETE
            )
            if tombstone and not resumed:
                # Every store is done: the other call completes the erasure, and this save then fails
                # (or is refused: its retry finds that tombstone, and the index's save fails).
                (done,) = await other.resume_erasures(OPERATOR)
                resumed.append(done)
                if failing == "save":
                    raise OSError("session store unreachable")
                monkeypatch.setattr(erasure_tombstone, "add_finished", unreachable)
            return await real(key, snapshot, *args, **kwargs)

        async def unreachable(*args: Any) -> None:
            raise OSError("session store unreachable")

        monkeypatch.setattr(sessions, "save", save)
        with anyio.fail_after(30):
            result = await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        (done,) = resumed
        assert done.tombstone is not None and result.tombstone == done.tombstone == result.record
        assert list(await _tombstones(first)) == [done.record.erasure_id]


async def test_a_new_erasures_inventory_failing_once_another_call_completed_it_returns_that_tombstone(
    tmp_path: Path,
) -> None:
    async with _two(tmp_path) as (hook, [(first, _), (other, _)]):
        await five_turns(first)
        entered, release = hook.hold(fail=False)  # the starting call's inventory
        again_entered, again_release = hook.hold(fail=True)  # its new erasure's, failing once released
        results: list[Any] = []

        async def erase_first() -> None:
            results.append(await first.erase(TARGET, reason="dsr", attestation=OPERATOR))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase_first)
                await entered.wait()
                (done,) = await other.resume_erasures(OPERATOR)  # completes it: the fence is down
                await other.run(ANA, "s1", "written since")  # so the first call starts a new erasure
                release.set()
                await again_entered.wait()
                (fresh,) = await other.resume_erasures(OPERATOR)  # completes the new one too
                again_release.set()
        (result,) = results
        assert done.tombstone is not None and fresh.tombstone is not None
        assert fresh.record.erasure_id != done.record.erasure_id
        # The new erasure's tombstone (the other call's), not "whether it left pending is not known".
        assert result.tombstone == fresh.tombstone == result.record
        assert set(await _tombstones(first)) == {done.record.erasure_id, fresh.record.erasure_id}
        assert await history_texts(first) == []


async def test_checking_the_target_failing_once_another_call_completed_it_says_so_with_its_tombstone(
    tmp_path: Path,
) -> None:
    """As the first test, but what the target holds since cannot be checked: the truth, not "not known"."""
    async with _two(tmp_path) as (hook, [(first, _), (other, _)]):
        await five_turns(first)
        entered, release = hook.hold(fail=True)
        errors: list[ErasureOvertakenError] = []

        async def erase_first() -> None:
            with pytest.raises(ErasureOvertakenError) as caught:
                await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
            errors.append(caught.value)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase_first)
                await entered.wait()
                (resumed,) = await other.resume_erasures(OPERATOR)
                hook.fail_checks = True  # the first call's look at what the target holds since fails
                release.set()
        (error,) = errors
        assert error.record == resumed.tombstone and error.still_held == ()
        assert "was completed by another call" in str(error), str(error)
        assert "whether the target holds data written since is not known" in str(error), str(error)
        assert isinstance(error.__cause__, OSError)
