"""The check before a call's clean-up failing, the erasure read pending, then completed: its files still go.

The timeline of tests/core/test_erasure_scrub_own.py (two runtimes on shared
SQLite files): the first call's archive call removes a late write after the
other call cleaned up the files; the other call's tombstone counts it as
``removed``. As in tests/core/test_erasure_scrub_own_check.py the first
call's check before its clean-up fails; here the read back in ``_carry``
still finds the erasure pending (it is made to, as a read made just before
the other call's tombstone landed would), so the error goes up to
``finish``, whose own read back finds that tombstone and goes on from it
(``_stopped_or_again``). That path was not told which files the call
removed rows from and cleaned none up: the late write's bytes stayed in
the archive file's log while the tombstone said ``removed``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import test_erasure_groups_overtaken as groups_overtaken
from _erasure_harness import closed_after
from _telemetry_support import Telemetered
from test_erasure_scrub_overtaken import TARGETS
from test_erasure_scrub_own import (
    _late_write_removed_after_the_other_cleaned_up,
    _went_on_from_the_tombstone,
)

from agentium_harness import create_harness_runtime
from agentium_harness._engine import erasure_run

pytestmark = pytest.mark.anyio


def _check_fails_and_reads_pending(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The first call's check before its clean-up fails once; its read back in ``_carry`` finds it pending.

    Returns the session stores whose check failed (the first call's, once it ran).
    """
    real = erasure_run.finished_elsewhere
    failed: list[Any] = []

    async def once(ticket: Any, store: Any, record: Any) -> Any:
        done = await real(ticket, store, record)
        # The first call's check, once the other call completed the erasure (the other's own check
        # found it pending): it fails, once.
        if done is not None and not failed:
            failed.append(store)
            raise OSError("session store unreachable")
        return done

    async def pending(ticket: Any, store: Any, record: Any) -> Any:
        return None  # read before the other call's tombstone landed: still pending

    monkeypatch.setattr(erasure_run, "finished_elsewhere", once)
    monkeypatch.setattr(erasure_run, "_completed_or_none", pending)
    return failed


@pytest.mark.parametrize("level", list(TARGETS))
async def test_finish_going_on_from_the_tombstone_leaves_no_removed_row_in_the_file(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    failed = _check_fails_and_reads_pending(monkeypatch)
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        level, tmp_path, monkeypatch
    )
    async with closed_after(first.runtime, other.runtime):
        assert failed == [first.sessions], "the first call's check never failed"
        # finish went on from the other call's tombstone (not "stopped part way; it stays pending").
        _went_on_from_the_tombstone(result, done, tmp_path)
        # Only the file this call removed something from, once.
        assert first.cleaned == {"archive": 1, "session_store": 0}
        warned = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]
        assert any(
            done.record.erasure_id in w and "check before its file clean-up" in w and "cleaned up the" in w
            for w in warned
        ), warned
        assert not any("may keep copies" in w for w in warned), warned


async def test_that_clean_up_failing_there_is_a_warning_and_an_overtaken_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    t = Telemetered()
    monkeypatch.setattr(
        groups_overtaken, "create_harness_runtime", partial(create_harness_runtime, telemetry=t.telemetry())
    )
    failed = _check_fails_and_reads_pending(monkeypatch)
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        "session", tmp_path, monkeypatch, failing=True
    )
    async with closed_after(first.runtime, other.runtime):
        assert failed == [first.sessions], "the first call's check never failed"
        assert not isinstance(result, Exception), result
        assert done.tombstone is not None and result.record == done.record
        warned = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]
        assert any(
            done.record.erasure_id in w and "OSError" in w and "may keep copies" in w for w in warned
        ), warned
        # Only the first call's span: the other's completed without a degraded step.
        events = [
            dict(e.attributes or {})
            for s in t.named("agentium.erasure")
            for e in s.events
            if e.name == "agentium.erasure.overtaken"
        ]
        assert events == [
            {"error.type": "OSError", "agentium.erasure.step": "check", "agentium.erasure.cleaned_up": False}
        ]
