"""An erasure another process resumed and completed while its first call took inventory.

The first call joins ``pending``, keeps its join record and its record, then
asks every store what it holds (the inventory: a dry run each, which may
take a while). An operator's ``agentium erase --resume`` (here: another
runtime's ``erase`` of the same target) meanwhile resumes the erasure from
that record, carries it out and completes it: its tombstone is saved, it
leaves ``pending``, and writes of the scope are acknowledged again. The
first call, back from its inventory, must neither save its record over the
tombstone nor erase anything under an erasure that is no longer pending
(its fence is down: a run is not refused meanwhile). What the target holds
now was written before the first call returns, so it erases it under a new
erasure (its own fence, record and tombstone), as when it finds the erasure
completed elsewhere later on.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, PENDING, TARGET, history_texts

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    SessionKey,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_api, erasure_run
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, OpContext

pytestmark = pytest.mark.anyio


class _GatedArchive(InMemoryArchive):
    """The shared archive: the first inventory after ``arm`` waits for ``release``; erase calls noted.

    Every real (not dry-run) erase call notes which erasures were pending
    when it ran, read from the shared session store.
    """

    def __init__(self, sessions: InMemorySessionStore) -> None:
        super().__init__()
        self.sessions = sessions
        self.armed = False
        self.entered, self.release = anyio.Event(), anyio.Event()
        self.pending_at_erase: list[tuple[str, ...]] = []

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        dry_run = kwargs.get("dry_run", False)
        if dry_run and self.armed and kwargs.get("max_items", 0) > 1:  # an inventory, not a check
            self.armed = False
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()
        if not dry_run:
            stored = await self.sessions.load(PENDING, OpContext())
            ledger = None if stored is None else stored.snapshot.ledger
            self.pending_at_erase.append(tuple(r.erasure_id for r in ledger.records) if ledger else ())
        return await super().erase(target, ctx, **kwargs)


def _runtimes(archive: Any, sessions: InMemorySessionStore, count: int) -> list[Any]:
    """``count`` runtimes (processes) over ``archive`` and ``sessions``, sharing one model."""
    provider = ScriptedProvider(replies=["noted"], cycle=True)
    return [
        create_harness_runtime(provider=provider, archive=archive, session_store=sessions)
        for _ in range(count)
    ]


async def test_a_call_whose_erasure_was_completed_during_its_inventory_keeps_the_tombstone() -> None:
    sessions = InMemorySessionStore()
    archive = _GatedArchive(sessions)
    first, other = _runtimes(archive, sessions, 2)
    results: list[Any] = []
    try:
        await first.run(ANA, "s1", "before the erasure")

        async def erase_first() -> None:
            results.append(await first.erase(TARGET, reason="dsr", attestation=OPERATOR))

        archive.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(erase_first)
            with anyio.fail_after(30):
                await archive.entered.wait()
            resumed = await other.erase(TARGET, reason="dsr", attestation=OPERATOR)
            assert resumed.resumed and resumed.tombstone is not None
            erasure_id = resumed.record.erasure_id
            record_key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"e-{erasure_id}")
            tombstone = await sessions.load(record_key, OpContext())
            assert tombstone is not None
            # Acknowledged after the erasure completed: the first call, still running, covers it.
            await other.run(ANA, "s1", "after the erasure")
            archive.release.set()
        (result,) = results
        # The tombstone stands as the resume wrote it (never a pending record over it).
        kept = await sessions.load(record_key, OpContext())
        assert kept is not None and kept.snapshot == tombstone.snapshot
        # Every erase call ran under an erasure in pending: none with its fence down.
        assert archive.pending_at_erase and all(archive.pending_at_erase), archive.pending_at_erase
        # What was written meanwhile went under a new erasure of the target, completed.
        assert result.record.erasure_id != erasure_id
        assert result.state is ErasureState.COMPLETE
        assert await history_texts(first) == []
    finally:
        await first.aclose()
        await other.aclose()


class _FailingSecondInventory(_GatedArchive):
    """As :class:`_GatedArchive`; every inventory after the first (the new erasure's) fails."""

    def __init__(self, sessions: InMemorySessionStore) -> None:
        super().__init__(sessions)
        self.inventories = 0

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        if kwargs.get("dry_run", False) and kwargs.get("max_items", 0) > 1:
            self.inventories += 1
            if self.inventories > 1:
                raise OSError("archive unreachable")
        return await super().erase(target, ctx, **kwargs)


async def test_a_new_erasure_that_stops_is_the_one_reported_pending() -> None:
    """The new erasure's inventory fails: the error carries *its* pending record, not the tombstone.

    The erasure the call started was completed by the resume (its tombstone
    stands); the new one it started for what was written since is the one
    left pending, fencing the scope. The caller is told that one's id, to
    resume, and gets its record — a completed record with "it stays
    pending" would be false on both counts.
    """
    sessions = InMemorySessionStore()
    archive = _FailingSecondInventory(sessions)
    first, other = _runtimes(archive, sessions, 2)
    errors: list[BaseException] = []
    try:
        await first.run(ANA, "s1", "before the erasure")

        async def erase_first() -> None:
            try:
                await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
            except ErasureIncompleteError as exc:
                errors.append(exc)

        archive.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(erase_first)
            with anyio.fail_after(30):
                await archive.entered.wait()
            resumed = await other.erase(TARGET, reason="dsr", attestation=OPERATOR)
            assert resumed.tombstone is not None
            await other.run(ANA, "s1", "after the erasure")
            archive.release.set()
        (error,) = errors
        assert isinstance(error, ErasureIncompleteError)
        stored = await sessions.load(PENDING, OpContext())
        assert stored is not None and stored.snapshot.ledger is not None
        (pending,) = stored.snapshot.ledger.records
        assert pending.erasure_id != resumed.record.erasure_id
        assert error.record.erasure_id == pending.erasure_id, (error.record.erasure_id, str(error))
        assert error.record.state is ErasureState.PENDING
        assert pending.erasure_id in str(error) and resumed.record.erasure_id not in str(error)
    finally:
        await first.aclose()
        await other.aclose()


async def test_a_late_resume_of_an_erasure_completed_meanwhile_keeps_its_tombstone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resume that loaded the record pending (every store done) completes it after another did.

    Its record said every store had erased (the call before it stopped
    just before its tombstone), so no store call — and no look at whether the
    erasure is still pending — comes before its own tombstone. The one the
    other resume wrote stands: never a second one over it, with another
    completion time.
    """
    sessions = InMemorySessionStore()
    archive = InMemoryArchive()
    first, other, stale = _runtimes(archive, sessions, 3)
    try:
        await first.run(ANA, "s1", "before the erasure")
        real_scrub = erasure_run.scrub_files

        async def fails(*args: Any) -> None:
            raise OSError("clean-up failed")

        # Every store erased (the record says so), then the call stops before its tombstone.
        monkeypatch.setattr(erasure_run, "scrub_files", fails)
        with pytest.raises(ErasureIncompleteError) as caught:
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        monkeypatch.setattr(erasure_run, "scrub_files", real_scrub)
        erasure_id = caught.value.record.erasure_id
        record_key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"e-{erasure_id}")
        real_load = erasure_api.load_record
        paused, go, done = anyio.Event(), anyio.Event(), anyio.Event()
        late: list[Any] = []

        async def load_late(*args: Any) -> Any:
            loaded = await real_load(*args)
            if not paused.is_set():  # the stale resume's: loaded pending, then slow
                paused.set()
                await go.wait()
            return loaded

        async def resume_late() -> None:
            try:
                late.extend(await stale.resume_erasures(OPERATOR))
            finally:
                done.set()

        monkeypatch.setattr(erasure_api, "load_record", load_late)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume_late)
                await paused.wait()
                (resumed,) = await other.resume_erasures(OPERATOR)
                assert resumed.tombstone is not None
                tombstone = await sessions.load(record_key, OpContext())
                go.set()
                await done.wait()
        kept = await sessions.load(record_key, OpContext())
        assert kept is not None and tombstone is not None
        assert kept.snapshot == tombstone.snapshot  # the first tombstone, as written
        (result,) = late
        assert result.record == resumed.record  # the late resume reports that tombstone
    finally:
        for runtime in (first, other, stale):
            await runtime.aclose()
