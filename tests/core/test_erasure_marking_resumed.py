"""A forget erasure that stopped after its snapshot marking emptied the summary, resumed by another runtime.

Two runtimes (processes) share the archive's SQLite file and the session
store's (a file of its own). The first one's erasure of a forgotten fact's
sources erases the archived group, and its marking empties the task summary
covering it; then a step fails — the marking's reply is lost though it
landed, the check after it cannot read the records, or the file clean-up
fails — and the erasure stays pending. The other runtime resumes it
(``agentium erase --resume``): its marking finds nothing left to change. It
used to clean up only the archive's file then, so the session store's file
kept the summary's former text (the fact) in its free pages while the
tombstone said the erasure complete and removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _erasure_harness import OPERATOR
from test_erasure_groups_overtaken import KEY, SCOPE, _fact, _Process

from agentium_harness import ErasureIncompleteError, ErasureState
from agentium_harness._engine import erasure_run
from agentium_harness.plugin_api import OpContext
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

#: What fails in the first call once its marking emptied the summary.
STEPS = ["marking", "check", "clean-up"]
#: The source group's words, as the summary covering it states them (the fact is worded otherwise).
SOURCE = b"My vault code is 4471"


def _fail_after_marking(step: str, first: _Process, monkeypatch: pytest.MonkeyPatch) -> None:
    real_mark, real_check = erasure_run.mark_erased, erasure_run.finished_elsewhere
    marked: list[bool] = []

    async def mark(*args: Any, **kwargs: Any) -> Any:
        wrote = await real_mark(*args, **kwargs)
        marked.append(wrote)
        if step == "marking":
            raise OSError("the reply was lost (the snapshot's save landed)")
        return wrote

    async def check(*args: Any, **kwargs: Any) -> Any:
        if step == "check" and marked == [True]:
            marked.append(True)  # once
            raise OSError("erasure records unreachable")
        return await real_check(*args, **kwargs)

    async def refused(ctx: OpContext) -> Any:
        raise OSError("database file unreachable")

    monkeypatch.setattr(erasure_run, "mark_erased", mark)
    monkeypatch.setattr(erasure_run, "finished_elsewhere", check)
    if step == "clean-up":
        for store in (first.archive, first.sessions):
            monkeypatch.setattr(store, "scrub_erased", refused)


@pytest.mark.parametrize("step", STEPS)
async def test_a_resumed_forget_erasure_cleans_up_the_summary_an_earlier_call_emptied(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions.db"
    first = _Process(tmp_path / "archive.db", sessions)
    other = _Process(tmp_path / "archive.db", sessions)
    try:
        fact_id = await _fact(first)
        assert SOURCE in database_bytes(sessions)  # the summary states it
        _fail_after_marking(step, first, monkeypatch)
        with pytest.raises(ErasureIncompleteError) as stopped:
            await first.runtime.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
        assert stopped.value.record is not None
        assert stopped.value.record.state is ErasureState.PENDING
        monkeypatch.undo()
        assert (await first.sessions.load(KEY, OpContext())).snapshot.summary.summary.text == ""

        (done,) = await other.runtime.resume_erasures(OPERATOR)
        assert done.tombstone is not None
        assert SOURCE not in database_bytes(sessions), "the summary's former text is still in the file"
    finally:
        await first.runtime.aclose()
        await other.runtime.aclose()
