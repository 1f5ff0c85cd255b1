"""An erasure whose own store call removed rows after another call's clean-up still cleans up that file.

Two runtimes (processes) share the archive's SQLite file and the session
store's (with memory, a file of its own). The first one's erasure is
pending; the other resumes it and erases from every store and cleans up
both files (``scrub_files``). Then a late write from a third process lands
in the archive, and the first call's archive call removes it and saves its
progress while the erasure is still pending; the other call's tombstone,
saved next, counts it (``removed``). The first call then finds the erasure
completed before its own clean-up. It used to skip that clean-up (since
617e5f6), so the removed row's bytes stayed in the archive file's log while
the tombstone said ``removed``. It now cleans up every file where its own
store calls removed anything, and only those.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, closed_after, only_erasure_complete
from test_erasure_groups_overtaken import KEY, _Process
from test_erasure_scrub_overtaken import TARGETS

from agentium_harness import Message, MessageGroup, Role
from agentium_harness._engine import erasure_run
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.plugin_api import OpContext
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

#: The late write's text: found in the file's bytes only if its row's copies are still there.
MARKER = "late-write-marker-7f3a9c"
#: The seq of the late write's group (the turns' groups come first).
LATE_SEQ = 40


def _went_on_from_the_tombstone(result: Any, done: Any, tmp_path: Path) -> None:
    """The first call's result is the other's tombstone; the late row it removed is gone from the file."""
    assert not isinstance(result, Exception), result
    assert done.tombstone is not None and result.record == done.record
    assert done.record.store("archive").physical.value == "removed"
    assert MARKER.encode() not in database_bytes(tmp_path / "archive.db"), "the removed row is still there"


def _count_memory(process: _Process) -> None:
    """The memory store's clean-ups count as the session store's: they clean up the same file."""
    memory = process.runtime.memory.store
    real = memory.scrub_erased

    async def counted(ctx: OpContext) -> Any:
        process.cleaned["session_store"] += 1
        return await real(ctx)

    memory.scrub_erased = counted


async def _late_write_removed_after_the_other_cleaned_up(
    level: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    failing: bool = False,
    late: bool = True,
) -> tuple[_Process, _Process, Any, Any]:
    """The timeline above; with ``failing`` the first call's clean-up raises; without ``late``, no late write.

    Returns both processes, what the first's ``erase`` returned (or raised), and the other's result.
    """
    archive_db = tmp_path / "archive.db"
    first = _Process(archive_db, tmp_path / "sessions.db")
    other = _Process(archive_db, tmp_path / "sessions.db")
    for process in (first, other):
        _count_memory(process)
    for text in ("one", "two", "three"):
        await first.runtime.run(ANA, "s1", text)
    first_waits, first_go = anyio.Event(), anyio.Event()
    first_carried, first_finish = anyio.Event(), anyio.Event()
    other_cleaned, other_go, other_done = anyio.Event(), anyio.Event(), anyio.Event()
    real_carry, real_complete = erasure_run.carry_out, erasure_run.complete

    async def carry(ticket: Any, stores: Any, session_store: Any, record: Any, **kwargs: Any) -> Any:
        if session_store is not first.sessions or first_carried.is_set():
            return await real_carry(ticket, stores, session_store, record, **kwargs)
        # The first call's erasure is pending (and inventoried): it waits before its store calls...
        first_waits.set()
        with anyio.fail_after(30):
            await first_go.wait()
        got = await real_carry(ticket, stores, session_store, record, **kwargs)
        # ... and after them (its progress saved, the erasure still pending), before its clean-up.
        first_carried.set()
        with anyio.fail_after(30):
            await first_finish.wait()
        return got

    async def complete(ticket: Any, store: Any, record: Any, base: Any, *rest: Any) -> Any:
        if store is other.sessions and not other_cleaned.is_set():
            # The other call erased from every store and cleaned up the files: its tombstone waits.
            other_cleaned.set()
            with anyio.fail_after(30):
                await other_go.wait()
        return await real_complete(ticket, store, record, base, *rest)

    monkeypatch.setattr(erasure_run, "carry_out", carry)
    monkeypatch.setattr(erasure_run, "complete", complete)
    outcome: list[Any] = []
    resumed: list[Any] = []

    async def run_first() -> None:
        try:
            outcome.append(await first.runtime.erase(TARGETS[level], reason="dsr", attestation=OPERATOR))
        except Exception as exc:
            outcome.append(exc)

    async def run_other() -> None:
        try:
            resumed.extend(await other.runtime.resume_erasures(OPERATOR))
        finally:
            other_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_first)
        with anyio.fail_after(30):
            await first_waits.wait()
        tg.start_soon(run_other)
        with anyio.fail_after(30):
            await other_cleaned.wait()
        if late:
            # A third process's write, admitted before the fence went up, lands only now.
            third = SQLiteArchive(SQLiteConfig(path=str(archive_db)))
            try:
                await third.append(KEY, [MessageGroup(LATE_SEQ, (Message(Role.USER, MARKER),))], OpContext())
            finally:
                await third.aclose()
            assert MARKER.encode() in database_bytes(archive_db)
        first_go.set()
        with anyio.fail_after(30):
            await first_carried.wait()
        other_go.set()
        with anyio.fail_after(30):
            await other_done.wait()
        if failing:

            async def refused(ctx: OpContext) -> Any:
                raise OSError("database file unreachable")

            for store in (first.archive, first.sessions, first.runtime.memory.store):
                monkeypatch.setattr(store, "scrub_erased", refused)
        first_finish.set()
    monkeypatch.undo()
    (done,) = resumed
    return first, other, outcome[0], done


@pytest.mark.parametrize("level", list(TARGETS))
async def test_rows_this_call_removed_after_the_other_call_cleaned_up_leave_the_file(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        level, tmp_path, monkeypatch
    )
    async with closed_after(first.runtime, other.runtime):
        assert not isinstance(result, Exception), result
        # Its result is the other call's tombstone, which counts the late write this call removed.
        assert done.tombstone is not None and result.record == done.record
        (erased,) = [s for s in done.record.sessions if s.session == KEY]
        assert any(r.start <= LATE_SEQ < r.stop for r in erased.ranges)
        assert done.record.store("archive").physical.value == "removed"
        await only_erasure_complete(first.runtime, done)
        assert MARKER.encode() not in database_bytes(tmp_path / "archive.db"), (
            "the removed row is still there"
        )
        # This call removed something from the archive's file only: it cleans up that one, once.
        assert other.cleaned == {"archive": 1, "session_store": 1}
        assert first.cleaned == {"archive": 1, "session_store": 0}


@pytest.mark.parametrize("level", list(TARGETS))
async def test_a_call_that_removed_nothing_cleans_up_nothing(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No late write: the first call's store calls find nothing left, so the files are the other's alone."""
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        level, tmp_path, monkeypatch, late=False
    )
    async with closed_after(first.runtime, other.runtime):
        assert not isinstance(result, Exception), result
        assert done.tombstone is not None and result.record == done.record
        assert other.cleaned == {"archive": 1, "session_store": 1}
        assert first.cleaned == {"archive": 0, "session_store": 0}


@pytest.mark.parametrize("level", list(TARGETS))
async def test_that_clean_up_failing_does_not_say_the_completed_erasure_is_pending(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        level, tmp_path, monkeypatch, failing=True
    )
    async with closed_after(first.runtime, other.runtime):
        # As 8c747a7: the other call's tombstone, not "stopped part way; it stays pending"...
        assert not isinstance(result, Exception), result
        assert done.tombstone is not None and result.record == done.record
        await only_erasure_complete(first.runtime, done)
        # ... and a warning naming the erasure and the error's type.
        warned = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]
        assert any(done.record.erasure_id in w and "OSError" in w and "clean-up" in w for w in warned), warned
