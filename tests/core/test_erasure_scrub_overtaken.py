"""A session, user or tenant erasure completed by another runtime just before its file clean-up.

Two runtimes (processes) share one SQLite file. The first one's erasure has
erased from every store (and verified); before its clean-up of the file
(``scrub_files``: one ``VACUUM`` and log emptying per file), the second
resumes the same erasure from its record and completes it: its clean-up,
its tombstone, and the fence goes. The first then checks first, as a groups
erasure does (tests/core/test_erasure_groups_overtaken.py): its result is
the other call's tombstone, and a clean-up failing then no longer reports
the completed erasure as "pending". It still cleans up the file its own
store calls removed rows from (here, all of them): it cannot tell whether
the other call's clean-up came after its deletions
(tests/core/test_erasure_scrub_own.py, where it did not; and where this
call removed nothing, it cleans up nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import (
    ANA,
    OPERATOR,
    closed_after,
    completed_meanwhile,
    gate_after,
    only_erasure_complete,
)

from agentium_harness import (
    EraseTarget,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_run
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

TARGETS = {
    "session": EraseTarget.session("acme", "ana", "s1"),
    "user": EraseTarget.user("acme", "ana"),
    "tenant": EraseTarget.tenant("acme"),
}


class _Process:
    """One runtime with its own adapters on the shared file; counts the file's clean-ups (any store's)."""

    def __init__(self, path: Path) -> None:
        config = SQLiteConfig(path=str(path))
        self.archive, self.sessions = SQLiteArchive(config), SQLiteSessionStore(config)
        self.memory = SQLiteMemoryStore(config)
        self.cleaned = 0
        for store in (self.archive, self.sessions, self.memory):
            self._count(store)
        self.runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=self.archive,
            session_store=self.sessions,
            memory=self.memory,
            owned=[self.archive, self.sessions, self.memory],
        )

    def _count(self, store: Any) -> None:
        real = store.scrub_erased

        async def counted(ctx: OpContext) -> Any:
            self.cleaned += 1
            return await real(ctx)

        store.scrub_erased = counted


def _erasing(process: _Process, level: str) -> Callable[[], Awaitable[Any]]:
    """The call that erases ``level``'s target on ``process``."""
    return lambda: process.runtime.erase(TARGETS[level], reason="dsr", attestation=OPERATOR)


async def _overtaken(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, failing: bool = False
) -> tuple[_Process, _Process, Any, Any]:
    """The first process erases ``level``; the other completes it just before the first's clean-up.

    With ``failing``, the first's clean-up raises once the other completed it.
    Returns both processes, what the first's ``erase`` returned (or raised), and the other's result.
    """
    first, other = _Process(tmp_path / "agentium.db"), _Process(tmp_path / "agentium.db")
    for text in ("one", "two", "three"):
        await first.runtime.run(ANA, "s1", text)
    # Every store erased and verified: what the first call does next is its clean-up.
    entered, release = gate_after(erasure_run, "carry_out", monkeypatch)

    async def refuse_clean_ups() -> None:
        async def refused(ctx: OpContext) -> Any:
            raise OSError("database file unreachable")

        for store in (first.archive, first.sessions, first.memory):
            monkeypatch.setattr(store, "scrub_erased", refused)

    result, done = await completed_meanwhile(
        _erasing(first, level),
        entered,
        release,
        other.runtime,
        meanwhile=refuse_clean_ups if failing else None,
    )
    monkeypatch.undo()
    return first, other, result, done


@pytest.mark.parametrize("level", list(TARGETS))
async def test_an_erasure_completed_elsewhere_before_its_clean_up_cleans_up_the_file_it_removed_from(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other, result, done = await _overtaken(level, tmp_path, monkeypatch)
    async with closed_after(first.runtime, other.runtime):
        # Its result is the other call's tombstone (so it was before the fix too), and no other
        # erasure was started: the target held nothing more.
        assert result.record == done.record and result.tombstone is not None
        await only_erasure_complete(first.runtime, done)
        # The other call rebuilt the file; this one too, once: its own store calls removed the rows.
        assert (other.cleaned, first.cleaned) == (1, 1)


@pytest.mark.parametrize("level", list(TARGETS))
async def test_a_clean_up_that_would_fail_once_the_erasure_completed_elsewhere_does_not_say_it_is_pending(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other, result, done = await _overtaken(level, tmp_path, monkeypatch, failing=True)
    async with closed_after(first.runtime, other.runtime):
        # The other call's tombstone is the only erasure (so it was before the fix too)...
        await only_erasure_complete(first.runtime, done)
        # ... and the result is that tombstone, not "stopped part way; it stays pending".
        assert not isinstance(result, Exception), result
        assert result.record == done.record and result.tombstone is not None


@pytest.mark.parametrize("level", list(TARGETS))
async def test_a_clean_up_failing_once_the_erasure_completed_elsewhere_meanwhile_does_not_say_it_is_pending(
    level: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The other call completes the erasure while the first's clean-up runs (past its check); it fails.

    A clean-up waiting on the file's lock while the other call rebuilds it,
    say, then failing: as a store call failing once the erasure completed
    elsewhere, the result is the other call's tombstone, not "it stays pending".
    """
    first, other = _Process(tmp_path / "agentium.db"), _Process(tmp_path / "agentium.db")
    async with closed_after(first.runtime, other.runtime):
        for text in ("one", "two", "three"):
            await first.runtime.run(ANA, "s1", text)
        entered, release = anyio.Event(), anyio.Event()
        caplog.set_level(logging.WARNING, "agentium.engine.erasure")

        async def stalled(ctx: OpContext) -> Any:
            entered.set()
            with anyio.fail_after(30):
                await release.wait()
            raise OSError("database is locked")

        for store in (first.archive, first.sessions, first.memory):
            store.scrub_erased = stalled
        result, done = await completed_meanwhile(_erasing(first, level), entered, release, other.runtime)
        assert not isinstance(result, Exception), result
        assert result.record == done.record and result.tombstone is not None
        # The failure is not silent: a warning names the erasure and the error's type.
        (warned,) = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]
        assert done.record.erasure_id in warned and "OSError" in warned
        await only_erasure_complete(first.runtime, done)
