"""A progress save that landed though it raised, with another call's save on top: its items are counted once.

Two runtimes (two processes) share one SQLite file. The first call's
progress save after its archive call commits, and its reply is lost (the
call raises); before this call reads the record again, the other call
resumes the erasure and saves on top of that write — its tombstone, or its
own progress when it stops too. The record stored then is no longer the
first call's write, which equality could recognise: the first call counted
its archive items again — in a new erasure (as a ``Stray``, when it found
the tombstone), or in its failure save and its error's record (merged in a
second time). Each progress save now leaves a note naming its call and its
number (one per call, kept by every merge), which tells exactly whether
the stored record holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, TARGET, archive_groups, sqlite_pairs, stored_record

from agentium_harness import (
    ErasureIncompleteError,
    ErasureState,
    SessionKey,
)
from agentium_harness.plugin_api import EraseTarget

pytestmark = pytest.mark.anyio


async def _archived(runtime: Any) -> int:
    for i in range(5):
        await runtime.run(ANA, "s1", f"turn {i}")
    planned = await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR, dry_run=True)
    archived = archive_groups(planned.record)
    assert archived >= 2
    return archived


def _lose_reply(sessions: Any, monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> list[bool]:
    """The progress save after the archive call commits; ``meanwhile()`` runs; then the save raises."""
    real = sessions.save
    fired: list[bool] = []

    async def save(key: SessionKey, snapshot: Any, *args: Any, **kwargs: Any) -> Any:
        saved = await real(key, snapshot, *args, **kwargs)
        ledger = snapshot.ledger
        record = ledger.records[0] if key.session.startswith("e-") and ledger and ledger.records else None
        if not fired and record is not None and record.store("archive") is not None:
            fired.append(True)
            with anyio.fail_after(30):
                await meanwhile()
            raise OSError("reply lost")
        return saved

    monkeypatch.setattr(sessions, "save", save)
    return fired


async def test_a_landed_save_under_another_calls_tombstone_is_not_counted_again_in_a_new_erasure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sqlite_pairs(tmp_path) as [(first, sessions), (other, _)]:
        archived = await _archived(first)
        completed: list[Any] = []

        async def other_completes() -> None:
            (done,) = await other.resume_erasures(OPERATOR)
            completed.append(done)

        fired = _lose_reply(sessions, monkeypatch, other_completes)
        with anyio.fail_after(30):
            result = await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        (done,) = completed
        assert fired and done.tombstone is not None
        assert archive_groups(done.tombstone) == archived, (archive_groups(done.tombstone), archived)
        # The first call's archive items are in that tombstone (its save landed): no new erasure
        # counts them again.
        assert result.record.erasure_id == done.record.erasure_id, (archive_groups(result.record), archived)
        assert result.tombstone == done.tombstone
        statuses = await first.erasure_status(OPERATOR)
        assert [s.erasure_id for s in statuses] == [done.record.erasure_id]
        assert all(s.state is ErasureState.COMPLETE for s in statuses)


async def test_a_landed_save_under_another_calls_progress_is_counted_once_in_the_error_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sqlite_pairs(tmp_path) as [(first, sessions), (other, other_sessions)]:
        archived = await _archived(first)
        real_erase = other_sessions.erase

        async def fails(target: Any, ctx: Any, **kwargs: Any) -> Any:
            if not kwargs.get("dry_run", False):
                raise OSError("session store unreachable")
            return await real_erase(target, ctx, **kwargs)

        monkeypatch.setattr(other_sessions, "erase", fails)
        stopped: list[ErasureIncompleteError] = []

        async def other_stops_on_top() -> None:
            try:
                await other.resume_erasures(OPERATOR)
            except ErasureIncompleteError as exc:
                stopped.append(exc)

        fired = _lose_reply(sessions, monkeypatch, other_stops_on_top)
        with anyio.fail_after(30), pytest.raises(ErasureIncompleteError) as caught:
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        monkeypatch.undo()
        (theirs,) = stopped
        assert fired and theirs.record is not None and archive_groups(theirs.record) == archived
        error = caught.value
        assert error.record is not None and error.record.state is ErasureState.PENDING
        stored = await stored_record(sessions, error.record.erasure_id)
        # Once in the error's record and in the record the failure save wrote, not twice.
        assert archive_groups(error.record) == archived, (archive_groups(error.record), archived)
        assert archive_groups(stored) == archived, (archive_groups(stored), archived)
        (done,) = await first.resume_erasures(OPERATOR)
        assert done.tombstone is not None and archive_groups(done.tombstone) == archived


class _HeldCall:
    """The first real erase call once ``armed`` waits for ``release``; with ``fail_next``, the next fails."""

    def __init__(self) -> None:
        self.armed = self.fail_next = False
        self.entered, self.release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if kwargs.get("dry_run", False):
            return
        if self.fail_next:
            self.fail_next = False
            raise OSError("archive unreachable")
        if self.armed:
            self.armed = False
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()


async def test_a_landed_counting_save_under_another_calls_tombstone_is_not_counted_a_third_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new erasure's save counting a stray store call lands, raises, and another call completes it.

    As in test_erasure_fence_window: the first call's held archive call runs
    once the other completed the erasure, so it counts what it removed under
    a new erasure. That counting save commits and its reply is lost; the
    other call completes the new erasure on top of it. The first call goes
    on from that tombstone (it counts the removal): no third erasure counts
    it again, and the error is not "whether it left pending is not known".
    """
    hook = _HeldCall()
    async with sqlite_pairs(tmp_path, hook) as [(first, sessions), (other, _)]:
        for i in range(3):
            await first.run(ANA, "s1", f"before {i}")
        hook.fail_next = True  # pending, nothing removed yet
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        real = sessions.save
        fresh: list[Any] = []

        async def save(key: SessionKey, snapshot: Any, *args: Any, **kwargs: Any) -> Any:
            saved = await real(key, snapshot, *args, **kwargs)
            ledger = snapshot.ledger
            record = ledger.records[0] if key.session.startswith("e-") and ledger and ledger.records else None
            if not fresh and record is not None and any("is counted here" in n for n in record.notes):
                (done,) = await other.resume_erasures(OPERATOR)  # completes the new erasure on top
                fresh.append(done)
                raise OSError("reply lost")
            return saved

        results: list[Any] = []

        async def resume_first() -> None:
            results.extend(await first.resume_erasures(OPERATOR))

        hook.armed = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_first)
                await hook.entered.wait()  # it saw the erasure pending; its archive call waits
                (completed,) = await other.resume_erasures(OPERATOR)
                await other.run(ANA, "s1", "after 0")
                await other.run(ANA, "s1", "after 1")
                monkeypatch.setattr(sessions, "save", save)
                hook.release.set()
        (result,) = results
        (done,) = fresh
        assert done.tombstone is not None and done.record.erasure_id != completed.record.erasure_id
        # The counting save's removal is in the new erasure's tombstone, once, and nowhere else.
        assert result.record == done.tombstone, result.record
        assert sum("is counted here" in n for n in done.tombstone.notes) == 1
        statuses = await first.erasure_status(OPERATOR)
        assert {s.erasure_id for s in statuses} == {completed.record.erasure_id, done.record.erasure_id}
        assert all(s.state is ErasureState.COMPLETE for s in statuses)
        assert not (await first.inspect_session(ANA, "s1")).exists
