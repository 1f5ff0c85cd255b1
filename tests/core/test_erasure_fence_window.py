"""A store call that ran just as another call completed the erasure: what it removed gets a tombstone.

A call resuming a pending erasure looks at ``pending`` (still pending),
then calls a store to erase. Between the two another call (a concurrent
``agentium erase --resume``) may complete the erasure and lift its fence;
a turn committed after that completion may then be removed by the first
call's store call, which no fence guarded. No lock across processes can
close that window, so the call finds out right after (its progress save
meets the tombstone) and, as what was written since is its to erase anyway,
counts what that store call removed under the new erasure it starts (its
own fence, record and tombstone, with a note saying so). Before, what it
removed was in no tombstone: committed data gone with no record of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, TARGET, hooked_runtimes

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureOvertakenError,
    ErasureState,
    ResidentLimits,
    RuntimeLimits,
)
from agentium_harness.plugin_api import EraseLevel

pytestmark = pytest.mark.anyio


class _Window:
    """The first real erase call after ``armed`` waits (after its caller's look at pending); one may fail."""

    def __init__(self) -> None:
        self.fail_next = self.armed = self.fail_held = False
        self.entered, self.release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if kwargs.get("dry_run", False):
            return
        if target.level is EraseLevel.USER:
            raise OSError("archive unreachable")  # an erasure of the user stops here, pending
        if self.fail_next:
            self.fail_next = False
            raise OSError("archive unreachable")
        if self.armed:
            self.armed = False
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()
            if self.fail_held:
                raise OSError("archive unreachable")


def _runtimes(stores: str, tmp_path: Path, count: int) -> tuple[Any, list[Any]]:
    archive, _, made = hooked_runtimes(
        stores, tmp_path, _Window(), count, RuntimeLimits(resident=ResidentLimits(max_groups=1))
    )
    return archive, made


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_what_a_store_call_removed_after_the_erasure_completed_elsewhere_is_in_a_tombstone(
    stores: str, tmp_path: Path
) -> None:
    archive, (first, other) = _runtimes(stores, tmp_path, 2)
    try:
        for i in range(3):
            await first.run(ANA, "s1", f"before {i}")
        archive.hook.fail_next = True  # pending, nothing removed yet
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        results: list[Any] = []

        async def resume_first() -> None:
            results.extend(await first.resume_erasures(OPERATOR))

        archive.hook.armed = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_first)
                await archive.hook.entered.wait()  # it saw the erasure pending; its archive call waits
                (completed,) = await other.resume_erasures(OPERATOR)
                assert completed.tombstone is not None
                # Committed after the completion (the fence is down): the first turn is archived.
                await other.run(ANA, "s1", "after 0")
                await other.run(ANA, "s1", "after 1")
                page = await other.read_history(ANA, "s1", max_groups=100, view=False)
                written = [g.seq for g in page.groups]
                assert len(written) == 2
                archive.hook.release.set()
        (result,) = results
        # The first call's result is a new erasure's tombstone counting what its archive call removed.
        assert result.record.erasure_id != completed.record.erasure_id
        assert result.state is ErasureState.COMPLETE
        archived = result.record.store("archive")
        assert archived is not None and sum(c.count for c in archived.counts if c.kind == "group") >= 1, (
            result.record
        )
        assert any("fence was down" in note for note in result.record.notes), result.record.notes
        (erased,) = result.record.sessions
        assert all(any(r.start <= seq < r.stop for r in erased.ranges) for seq in written), (erased, written)
        assert not (await first.inspect_session(ANA, "s1")).exists
    finally:
        await first.aclose()
        await other.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_what_no_tombstone_counts_is_said_when_no_new_erasure_can_start(
    stores: str, tmp_path: Path
) -> None:
    """As above, but a pending erasure of the user refuses a new one: the error says what was removed."""
    archive, (first, other, third) = _runtimes(stores, tmp_path, 3)
    try:
        for i in range(3):
            await first.run(ANA, "s1", f"before {i}")
        archive.hook.fail_next = True
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        errors: list[BaseException] = []

        async def resume_first() -> None:
            with pytest.raises(ErasureOvertakenError) as caught:
                await first.resume_erasures(OPERATOR)
            errors.append(caught.value)

        archive.hook.armed = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_first)
                await archive.hook.entered.wait()
                (completed,) = await other.resume_erasures(OPERATOR)
                await other.run(ANA, "s1", "after 0")
                await other.run(ANA, "s1", "after 1")
                with pytest.raises(ErasureIncompleteError) as user_erasure:
                    await third.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)
                pending_id = user_erasure.value.record.erasure_id
                archive.hook.release.set()
        (error,) = errors
        assert isinstance(error, ErasureOvertakenError)
        assert error.record == completed.record and error.pending_id == pending_id
        assert "archive store's last call removed" in str(error) and "no tombstone counts" in str(error)
    finally:
        for runtime in (first, other, third):
            await runtime.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_store_call_failing_after_another_call_completed_the_erasure_is_not_reported_pending(
    stores: str, tmp_path: Path
) -> None:
    """The held store call fails once the erasure was completed elsewhere: no "it stays pending" error.

    The erasure is complete (the other call's tombstone); what was written
    since is erased under a new erasure, whose tombstone is the result.
    """
    archive, (first, other) = _runtimes(stores, tmp_path, 2)
    try:
        for i in range(3):
            await first.run(ANA, "s1", f"before {i}")
        archive.hook.fail_next = True
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        results: list[Any] = []

        async def resume_first() -> None:
            results.extend(await first.resume_erasures(OPERATOR))

        archive.hook.armed = archive.hook.fail_held = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_first)
                await archive.hook.entered.wait()
                (completed,) = await other.resume_erasures(OPERATOR)
                await other.run(ANA, "s1", "after 0")
                archive.hook.release.set()
        (result,) = results
        assert result.state is ErasureState.COMPLETE
        assert result.record.erasure_id != completed.record.erasure_id
        assert not (await first.inspect_session(ANA, "s1")).exists
        assert not [r for r in await first.erasure_status(OPERATOR) if r.state is not ErasureState.COMPLETE]
    finally:
        await first.aclose()
        await other.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
@pytest.mark.parametrize("failing_saves", [1, 2])
async def test_what_a_store_call_removed_is_in_a_tombstone_when_its_save_fails_after_the_completion(
    stores: str, failing_saves: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the first test, but the progress save after the held call fails: the tombstone is found after it.

    One failing save: the save that records the failure finds the other
    call's tombstone. Two: that save fails too, and the record read back is
    the tombstone. Either way the call goes on from that tombstone, and what
    its archive call removed is counted under the new erasure, as when its
    first save had found the tombstone.
    """
    archive, sessions, (first, other) = hooked_runtimes(
        stores, tmp_path, _Window(), 2, RuntimeLimits(resident=ResidentLimits(max_groups=1))
    )
    fails = [0]
    real_load = sessions.load

    async def load(key: Any, *args: Any, **kwargs: Any) -> Any:
        # A save of the record reads it first (compare-and-set): failing here, it writes nothing.
        if fails[0] and key.session.startswith("e-"):
            fails[0] -= 1
            raise OSError("session store unreachable")
        return await real_load(key, *args, **kwargs)

    monkeypatch.setattr(sessions, "load", load)
    try:
        for i in range(3):
            await first.run(ANA, "s1", f"before {i}")
        archive.hook.fail_next = True  # pending, nothing removed yet
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        results: list[Any] = []

        async def resume_first() -> None:
            results.extend(await first.resume_erasures(OPERATOR))

        archive.hook.armed = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_first)
                await archive.hook.entered.wait()  # it saw the erasure pending; its archive call waits
                (completed,) = await other.resume_erasures(OPERATOR)
                assert completed.tombstone is not None
                await other.run(ANA, "s1", "after 0")
                await other.run(ANA, "s1", "after 1")
                page = await other.read_history(ANA, "s1", max_groups=100, view=False)
                written = [g.seq for g in page.groups]
                assert len(written) == 2
                fails[0] = failing_saves  # the held call's progress save (and the next) fail
                archive.hook.release.set()
        assert fails[0] == 0
        (result,) = results
        assert result.record.erasure_id != completed.record.erasure_id
        assert result.state is ErasureState.COMPLETE
        archived = result.record.store("archive")
        assert archived is not None and sum(c.count for c in archived.counts if c.kind == "group") >= 1, (
            result.record
        )
        assert any("fence was down" in note for note in result.record.notes), result.record.notes
        (erased,) = result.record.sessions
        assert all(any(r.start <= seq < r.stop for r in erased.ranges) for seq in written), (erased, written)
    finally:
        await first.aclose()
        await other.aclose()
