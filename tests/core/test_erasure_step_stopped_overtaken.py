"""A marking or clean-up failing once another call completed the erasure, its read back failing too.

Two runtimes (processes) share one SQLite file. The first call's snapshot
marking (a retention erasure's) or file clean-up runs long, the other
runtime resumes the erasure and completes it meanwhile (its tombstone, its
fence down), and then the first call's step fails. The read right after it
(is the erasure completed elsewhere?) fails as well, once, so the call goes
to ``_stopped`` (:mod:`agentium_harness._engine.erasure_run`), whose read
back succeeds: it finds the other call's tombstone out of ``pending`` and
goes on from it, as docs/erasure.md says of a marking or clean-up failing
once another call completed the erasure: its result is that tombstone (not
"pending"), after a marking it still cleans up the files it removed from,
and a WARNING (and an ``agentium.erasure.overtaken`` event naming the step)
says what the tombstone cannot: after a failed clean-up, that those files
may keep copies of what it removed.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
import test_erasure_groups_overtaken as groups_overtaken
import test_erasure_scrub_overtaken as scrub_overtaken
from _erasure_harness import ANA, OPERATOR, closed_after, completed_meanwhile, only_erasure_complete
from _telemetry_support import Telemetered

from agentium_harness import create_harness_runtime
from agentium_harness._engine import erasure_run
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio


def _read_after_fails_once(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], list[bool]]:
    """Once armed, the next read of whether the erasure completed elsewhere fails; every one after succeeds.

    Returns (armed, failed): the step appends to ``armed``; ``failed`` holds ``True`` once that read failed.
    """
    real = erasure_run.finished_elsewhere
    armed: list[bool] = []
    failed: list[bool] = []

    async def check(*args: Any, **kwargs: Any) -> Any:
        if armed and not failed:
            failed.append(True)
            raise OSError("erasure records unreachable")
        return await real(*args, **kwargs)

    monkeypatch.setattr(erasure_run, "finished_elsewhere", check)
    return armed, failed


def _stalls_then_fails(entered: anyio.Event, release: anyio.Event, armed: list[bool], failure: str) -> Any:
    """A step that says it ``entered``, waits for ``release`` (the other call completes it), then fails."""

    async def step(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        armed.append(True)  # the read right after this step fails
        raise OSError(failure)

    return step


def _telemetered(module: Any, monkeypatch: pytest.MonkeyPatch) -> Telemetered:
    """The runtimes ``module``'s processes make record to one in-memory tracer."""
    t = Telemetered()
    monkeypatch.setattr(
        module, "create_harness_runtime", partial(create_harness_runtime, telemetry=t.telemetry())
    )
    return t


def _overtaken_events(t: Telemetered) -> list[dict[str, Any]]:
    return [
        dict(e.attributes or {})
        for s in t.named("agentium.erasure")
        for e in s.events
        if e.name == "agentium.erasure.overtaken"
    ]


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentium.engine.erasure"]


async def test_a_marking_failing_then_its_read_back_failing_goes_on_from_the_other_calls_tombstone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    t = _telemetered(groups_overtaken, monkeypatch)
    path = tmp_path / "agentium.db"
    first, other = groups_overtaken._Process(path), groups_overtaken._Process(path)
    async with closed_after(first.runtime, other.runtime):
        for text in ("one", "two", "three", "four"):
            await first.runtime.run(ANA, "s1", text)
        armed, failed = _read_after_fails_once(monkeypatch)
        entered, release = anyio.Event(), anyio.Event()
        stalled = _stalls_then_fails(entered, release, armed, "session store unreachable")
        real_mark = erasure_run.mark_erased

        async def mark(ticket: Any, store: Any, *args: Any, **kwargs: Any) -> Any:
            if store is first.sessions:  # the first call's marking; the other call's marks as usual
                return await stalled()
            return await real_mark(ticket, store, *args, **kwargs)

        monkeypatch.setattr(erasure_run, "mark_erased", mark)
        result, done = await completed_meanwhile(
            lambda: first.runtime.apply_retention(OPERATOR), entered, release, other.runtime
        )
        monkeypatch.undo()
        assert failed == [True], "the read after the marking never failed"
        # Not "stopped part way; it stays pending": the other call's tombstone is the result.
        assert not isinstance(result, Exception), result
        assert not result.notes, result.notes
        (erased,) = result.erasures
        assert erased.record == done.record and erased.tombstone is not None
        await only_erasure_complete(first.runtime, done)
        # Its own store call removed the groups: it cleaned up that file (on one file, the archive's).
        assert first.cleaned == {"archive": 1, "session_store": 0}
        assert any(
            done.record.erasure_id in w and "snapshot marking" in w and "OSError" in w
            for w in _warned(caplog)
        ), _warned(caplog)
        assert _overtaken_events(t) == [
            {
                "error.type": "OSError",
                "agentium.erasure.step": "snapshot_marking",
                "agentium.erasure.cleaned_up": True,
            }
        ]


async def _clean_up_overtaken(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Telemetered, Any, Any, Any, Any, list[bool]]:
    """The first call's clean-up stalls while the other call completes the erasure, then fails.

    ``level``: ``retention`` (a groups erasure), or a level of
    :data:`test_erasure_scrub_overtaken.TARGETS`. Returns the tracer, the
    first process, its call's result (or error), the other's result, and
    whether the read after the clean-up failed.
    """
    module = groups_overtaken if level == "retention" else scrub_overtaken
    t = _telemetered(module, monkeypatch)
    path = tmp_path / "agentium.db"
    first, other = module._Process(path), module._Process(path)
    for text in ("one", "two", "three", "four"):
        await first.runtime.run(ANA, "s1", text)
    armed, failed = _read_after_fails_once(monkeypatch)
    entered, release = anyio.Event(), anyio.Event()
    stalled = _stalls_then_fails(entered, release, armed, "database is locked")

    async def scrub(ctx: OpContext) -> Any:
        return await stalled()

    stores = [first.archive, first.sessions] + ([first.memory] if level != "retention" else [])
    for store in stores:
        monkeypatch.setattr(store, "scrub_erased", scrub)
    call = (
        (lambda: first.runtime.apply_retention(OPERATOR))
        if level == "retention"
        else (lambda: first.runtime.erase(scrub_overtaken.TARGETS[level], reason="dsr", attestation=OPERATOR))
    )
    result, done = await completed_meanwhile(call, entered, release, other.runtime)
    monkeypatch.undo()
    return t, first, other, result, done, failed


@pytest.mark.parametrize("level", ["retention", *scrub_overtaken.TARGETS])
async def test_a_clean_up_failing_then_its_read_back_failing_says_the_files_may_keep_copies(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentium.engine.erasure")
    t, first, other, result, done, failed = await _clean_up_overtaken(level, tmp_path, monkeypatch)
    async with closed_after(first.runtime, other.runtime):
        assert failed == [True], "the read after the clean-up never failed"
        assert not isinstance(result, Exception), result
        (erased,) = result.erasures if level == "retention" else (result,)
        assert erased.record == done.record and erased.tombstone is not None
        await only_erasure_complete(first.runtime, done)
        # The tombstone (the other call's) cannot say it: the warning does, naming the failed step.
        assert any(
            done.record.erasure_id in w and "file clean-up" in w and "OSError" in w and "may keep copies" in w
            for w in _warned(caplog)
        ), _warned(caplog)
        assert _overtaken_events(t) == [
            {
                "error.type": "OSError",
                "agentium.erasure.step": "file_clean_up",
                "agentium.erasure.cleaned_up": False,
            }
        ]
