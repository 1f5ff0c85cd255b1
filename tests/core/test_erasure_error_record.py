"""The record an erasure's error carries is the record as stored when the call stopped.

Two runtimes (two processes) share one store file and carry out the same
erasure. When one call's save of the record fails because the other call's
save landed first (compare-and-set; one attempt here, where the engine tries
a few times), the error it raises must carry the record as it is stored
then — with the other call's progress — not the record as this call loaded
(or started) it, which says less was erased than was. A record read back
complete is the other call's tombstone (the call goes on from it), or this
call's, saved before the erasure left ``pending`` (carried as pending, as
``erasure_status`` shows it); a read back that fails is said in the message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _erasure_harness import (
    OPERATOR,
    TARGET,
    HookedArchive,
    HookedSQLiteArchive,
    OneItemSteps,
    archive_groups,
    five_turns,
    stored_record,
)

from agentium_harness import (
    ErasureIncompleteError,
    ErasureState,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_ledger, erasure_tombstone
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT

pytestmark = pytest.mark.anyio


class _SaveRace:
    """Once ``armed``, the next save of an erasure record waits until another save of one lands first.

    Then it is made as it was asked, on the revision its call read: the store
    refuses it (a real compare-and-set conflict).
    """

    def __init__(self, *, until_complete: bool = False) -> None:
        self.until_complete = until_complete  # wait for a tombstone's save, not any record's
        self.armed = self.break_reads = False
        self.waiting, self.landed, self.refused = anyio.Event(), anyio.Event(), anyio.Event()

    def wrap(self, sessions: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        real = sessions.save

        async def save(key: SessionKey, *args: Any, **kwargs: Any) -> Any:
            record = key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith("e-")
            if record and self.armed:
                self.armed = False
                self.waiting.set()
                with anyio.fail_after(30):
                    await self.landed.wait()
                try:
                    return await real(key, *args, **kwargs)
                finally:
                    self.refused.set()
            saved = await real(key, *args, **kwargs)
            (written,) = args[0].ledger.records if record else (None,)
            if written is not None and self.waiting.is_set():
                if not self.until_complete or written.state is ErasureState.COMPLETE:
                    self.landed.set()
            return saved

        real_load = sessions.load

        async def load(key: SessionKey, *args: Any, **kwargs: Any) -> Any:
            # With ``break_reads``, reading the record back after the refused save fails.
            if self.break_reads and self.refused.is_set() and key.session.startswith("e-"):
                raise OSError("session store unreachable")
            return await real_load(key, *args, **kwargs)

        monkeypatch.setattr(sessions, "save", save)
        monkeypatch.setattr(sessions, "load", load)


@asynccontextmanager
async def _two(
    stores: str, tmp_path: Path, race: _SaveRace, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, ...]]:
    """The hook, a session store to read from, and two runtimes: on one SQLite file, or shared in memory.

    Both runtimes are closed on the way out.
    """
    hook = OneItemSteps()
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1))
    if stores == "memory":
        archive, shared = HookedArchive(hook), InMemorySessionStore()
        pairs = [(archive, shared), (archive, shared)]
        race.wrap(shared, monkeypatch)
    else:
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        pairs = [(HookedSQLiteArchive(config, hook), SQLiteSessionStore(config)) for _ in range(2)]
        for _, sessions in pairs:
            race.wrap(sessions, monkeypatch)
    runtimes = [
        create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            limits=limits,
        )
        for archive, sessions in pairs
    ]
    try:
        yield hook, pairs[0][1], *runtimes
    finally:
        for runtime in runtimes:
            await runtime.aclose()


def _erasing(runtime: Any) -> Callable[[], Awaitable[Any]]:
    """The call that erases ``TARGET`` on ``runtime``."""
    return lambda: runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)


async def _started_pending(hook: OneItemSteps, runtime: Any) -> ErasureIncompleteError:
    """Erase ``TARGET`` on ``runtime``, its first store call failing: pending, nothing removed yet."""
    hook.fail_next = ConnectionError("archive unreachable")
    with pytest.raises(ErasureIncompleteError) as started:
        await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)
    return started.value


async def _stopped_while_other_resumes(
    hook: OneItemSteps,
    race: _SaveRace,
    sessions: Any,
    call: Callable[[], Awaitable[Any]],
    other: Any,
    *,
    inventory: bool = False,
    break_reads: bool = False,
) -> tuple[BaseException, Any]:
    """``call()``'s record save waits for ``other``'s resume to save progress; its error and the record then.

    With ``inventory``, the race is armed once the call's inventory runs (it
    waits there); otherwise it is armed before the call starts. The record as
    stored is read while the resume's second call waits (``None`` with
    ``break_reads``: reading it back fails then).
    """
    caught: list[BaseException] = []
    stopped = anyio.Event()

    async def stop_first() -> None:
        try:
            await call()
        except ErasureIncompleteError as exc:
            caught.append(exc)
            stopped.set()

    async def resume_other() -> None:
        await other.resume_erasures(OPERATOR)

    if inventory:
        hook.hold_inventory = True
    else:
        race.armed = True
    hook.hold = 2  # the resume's second call waits: its first call's progress is saved (and read)
    stored = None
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_first)
            if inventory:
                await hook.in_inventory.wait()
                race.armed = True  # the inventory's save waits for the resume's first one
                race.break_reads = break_reads
                hook.inventory_release.set()
            await race.waiting.wait()
            tg.start_soon(resume_other)
            await hook.held.wait()
            await stopped.wait()
            (error,) = caught
            if break_reads:
                race.break_reads = False
            else:
                stored = await stored_record(sessions, error.record.erasure_id)
            hook.release.set()
    return error, stored


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_an_inventory_save_refused_after_a_resume_saved_carries_the_record_as_stored(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The starting call's inventory save loses to a resume's progress save: its error has that progress."""
    monkeypatch.setattr(erasure_ledger, "_ATTEMPTS", 1)
    race = _SaveRace()
    async with _two(stores, tmp_path, race, monkeypatch) as (hook, sessions, first, other):
        await five_turns(first)
        error, stored = await _stopped_while_other_resumes(
            hook,
            race,
            sessions,
            _erasing(first),
            other,
            inventory=True,
        )
        assert isinstance(error.__cause__, SessionConflictError)
        assert stored.state is ErasureState.PENDING and archive_groups(stored) == 1
        # The record as stored when the call stopped: the resume's progress, not the one it started.
        assert error.record == stored, (error.record.stores, stored.stores)


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_failed_calls_save_refused_after_another_resume_saved_carries_the_record_as_stored(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume's store call fails; its save loses to another resume's: its error has that progress."""
    race = _SaveRace()
    async with _two(stores, tmp_path, race, monkeypatch) as (hook, sessions, first, other):
        await five_turns(first)
        started = await _started_pending(hook, first)
        loaded = await stored_record(sessions, started.record.erasure_id)
        assert archive_groups(loaded) == 0
        monkeypatch.setattr(erasure_ledger, "_ATTEMPTS", 1)
        # The first resume's store call fails (its note is new: its save writes), and its save waits.
        hook.fail_next = OSError("archive unreachable")
        error, stored = await _stopped_while_other_resumes(
            hook, race, sessions, lambda: first.resume_erasures(OPERATOR), other
        )
        assert error.record.erasure_id == loaded.erasure_id
        assert isinstance(error.__cause__, OSError)
        assert stored.state is ErasureState.PENDING and archive_groups(stored) == 1
        # The record as stored when the call stopped (the other resume's progress), with what this
        # call's refused save held that the stored one does not: the note of its failing call.
        note = next(n for n in error.record.notes if n.startswith("stopped: OSError"))
        assert error.record == attrs.evolve(stored, notes=(*stored.notes, note)), error.record.stores


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_record_that_cannot_be_read_back_is_the_calls_own_and_the_error_says_so(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inventory's save is refused, and reading the record back fails: the record it had, said so."""
    monkeypatch.setattr(erasure_ledger, "_ATTEMPTS", 1)
    race = _SaveRace()
    async with _two(stores, tmp_path, race, monkeypatch) as (hook, _, first, other):
        await five_turns(first)
        error, _ = await _stopped_while_other_resumes(
            hook,
            race,
            None,
            _erasing(first),
            other,
            inventory=True,
            break_reads=True,
        )
        assert isinstance(error.__cause__, SessionConflictError)
        # The record as this call started it (nothing erased by it), and the message says why.
        assert error.record.state is ErasureState.PENDING and error.record.stores == ()
        assert "record could not be read back (OSError: session store unreachable)" in str(error), str(error)


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_starts_record_save_refused_after_a_resume_saved_carries_the_record_as_stored(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's first save, right after the join, loses to a resume's (from the header) progress save."""
    monkeypatch.setattr(erasure_ledger, "_ATTEMPTS", 1)
    race = _SaveRace()
    async with _two(stores, tmp_path, race, monkeypatch) as (hook, sessions, first, other):
        await five_turns(first)
        # The record's first save (the header joined already) waits for the resume's.
        error, stored = await _stopped_while_other_resumes(hook, race, sessions, _erasing(first), other)
        assert isinstance(error.__cause__, SessionConflictError)
        assert stored.state is ErasureState.PENDING and archive_groups(stored) == 1
        assert error.record == stored, (error.record.stores, stored.stores)
        assert "could not be saved" in str(error) and "it is pending" in str(error)


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_failed_calls_save_refused_after_another_resume_completed_it_returns_that_tombstone(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read back, the record is the other resume's tombstone: "it stays pending" would be false."""
    race = _SaveRace(until_complete=True)
    async with _two(stores, tmp_path, race, monkeypatch) as (hook, sessions, first, other):
        await five_turns(first)
        started = await _started_pending(hook, first)
        erasure_id = started.record.erasure_id
        monkeypatch.setattr(erasure_ledger, "_ATTEMPTS", 1)
        results: dict[str, Any] = {}

        async def resume(name: str, runtime: Any) -> None:
            (results[name],) = await runtime.resume_erasures(OPERATOR)

        hook.fail_next = OSError("archive unreachable")  # the first resume's call; its save waits
        race.armed = True
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, "first", first)
                await race.waiting.wait()
                tg.start_soon(resume, "other", other)
        tombstone = await stored_record(sessions, erasure_id)
        assert tombstone.state is ErasureState.COMPLETE
        assert results["other"].record == tombstone and results["first"].record == tombstone


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_tombstone_saved_that_did_not_leave_pending_is_carried_as_pending(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error carries the record with its progress, pending as erasure_status shows it, not as started."""
    async with _two(stores, tmp_path, _SaveRace(), monkeypatch) as (_, sessions, first, _):
        await five_turns(first)

        async def fails(*args: Any) -> Any:
            raise OSError("pending ledger unreachable")

        monkeypatch.setattr(erasure_tombstone, "update_ledger", fails)
        with pytest.raises(ErasureIncompleteError) as caught:
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
        monkeypatch.undo()
        error = caught.value
        tombstone = await stored_record(sessions, error.record.erasure_id)
        assert tombstone.state is ErasureState.COMPLETE and archive_groups(tombstone) >= 3
        assert "stays pending" in str(error)
        assert error.record.state is ErasureState.PENDING
        assert error.record.stores == tombstone.stores and error.record.sessions == tombstone.sessions
        assert any("has not left the pending erasures" in note for note in error.record.notes)
        [status] = await first.erasure_status(OPERATOR)
        assert status.state is ErasureState.PENDING and status.stores == error.record.stores
        # The very record erasure_status shows: its note too, one text whatever says it.
        assert error.record == status, (error.record.notes, status.notes)
