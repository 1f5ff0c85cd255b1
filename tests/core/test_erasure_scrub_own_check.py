"""The check before a call's clean-up failing once another call completed the erasure: its files still go.

The timeline of tests/core/test_erasure_scrub_own.py (two runtimes on shared
SQLite files): the first call's archive call removes a late write after the
other call cleaned up the files; the other call's tombstone counts it as
``removed``. Here the first call's check before its clean-up (is the
erasure still pending?) fails once. Read back, the erasure is completed by
the other call, so the call goes on from its tombstone (8c747a7) — but it
skipped its clean-up of the files it removed rows from (71e3edd), which
only the failing check stood before: the late write's bytes stayed in the
archive file's log, and the warning blamed a clean-up that never ran.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from _erasure_harness import closed_after
from test_erasure_scrub_overtaken import TARGETS
from test_erasure_scrub_own import (
    _late_write_removed_after_the_other_cleaned_up,
    _went_on_from_the_tombstone,
)

from agentium_harness._engine import erasure_run

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("level", list(TARGETS))
async def test_the_check_before_the_clean_up_failing_leaves_no_removed_row_in_the_file(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    real = erasure_run.finished_elsewhere
    failed: list[str] = []

    async def once(ticket: Any, store: Any, record: Any) -> Any:
        done = await real(ticket, store, record)
        # The first call's check, once the other call completed the erasure (the other's own check
        # found it pending): it fails, once.
        if done is not None and not failed:
            failed.append(record.erasure_id)
            raise OSError("session store unreachable")
        return done

    monkeypatch.setattr(erasure_run, "finished_elsewhere", once)
    first, other, result, done = await _late_write_removed_after_the_other_cleaned_up(
        level, tmp_path, monkeypatch
    )
    async with closed_after(first.runtime, other.runtime):
        assert failed, "the check never ran"
        _went_on_from_the_tombstone(result, done, tmp_path)
        assert first.cleaned == {"archive": 1, "session_store": 0}
        warned = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]
        assert not any("may keep copies" in w for w in warned), warned
