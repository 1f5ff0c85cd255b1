"""Two calls resuming the same pending erasure at once: neither loses what the other saved.

Each resume loads the erasure's record and saves its progress after every
store call. The second resume here loaded the record before the first saved
its first call's progress, and saves its own after it: it must add to what
the first saved (compare-and-set on the record, merged), not write its own
record over it — the tombstone would then count fewer groups removed than
were removed. The archive removes one group per call, so each call is one
step of progress.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, TARGET, OneItemSteps, hooked_runtimes

from agentium_harness import (
    ErasureIncompleteError,
    ResidentLimits,
    RuntimeLimits,
)
from agentium_harness._engine import erasure_api

pytestmark = pytest.mark.anyio


def _runtimes(stores: str, tmp_path: Path) -> tuple[Any, Any, list[Any]]:
    return hooked_runtimes(
        stores, tmp_path, OneItemSteps(), 3, RuntimeLimits(resident=ResidentLimits(max_groups=1))
    )


def _group_count(record: Any) -> int:
    entry = record.store("archive")
    return sum(c.count for c in entry.counts if c.kind == "group")


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_two_resumes_at_once_keep_each_others_progress(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _, (first, other, stale) = _runtimes(stores, tmp_path)
    try:
        for i in range(5):
            await first.run(ANA, "s1", f"turn {i}")
        planned = await first.erase(TARGET, reason="dsr", attestation=OPERATOR, dry_run=True)
        archived = _group_count(planned.record)
        assert archived >= 3
        # The erasure stops at the archive's first call: pending, nothing removed yet.
        archive.hook.fail_next = OSError("archive unreachable")
        with pytest.raises(ErasureIncompleteError):
            await first.erase(TARGET, reason="dsr", attestation=OPERATOR)

        real_load = erasure_api.load_record
        paused, go = anyio.Event(), anyio.Event()

        async def load_late(*args: Any) -> Any:
            loaded = await real_load(*args)
            if not paused.is_set():  # the stale resume's: loaded before the other saves anything
                paused.set()
                with anyio.fail_after(30):
                    await go.wait()
            return loaded

        monkeypatch.setattr(erasure_api, "load_record", load_late)
        results: dict[str, Any] = {}
        stale_done = anyio.Event()

        async def resume(name: str, runtime: Any) -> None:
            (results[name],) = await runtime.resume_erasures(OPERATOR)
            if name == "stale":
                stale_done.set()

        archive.hook.hold = 2  # the other's second call waits: its first call's progress is saved
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, "stale", stale)
                await paused.wait()
                tg.start_soon(resume, "other", other)
                await archive.hook.held.wait()
                go.set()  # the stale resume erases the rest from the record it loaded, and completes
                await stale_done.wait()
                archive.hook.release.set()
        tombstone = results["stale"].tombstone
        assert tombstone is not None and results["other"].record == tombstone
        # Every group removed is counted: the other's first call's too.
        assert _group_count(tombstone) == archived, (_group_count(tombstone), archived)
        (status,) = await first.erasure_status(OPERATOR)
        assert status.erasure_id == tombstone.erasure_id and _group_count(status) == archived
    finally:
        for runtime in (first, other, stale):
            await runtime.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_the_inventory_saved_after_a_resume_made_progress_keeps_that_progress(
    stores: str, tmp_path: Path
) -> None:
    """The starting call saves its inventory after a resume (from its first saved record) saved progress."""
    archive, _, (first, other, _unused) = _runtimes(stores, tmp_path)
    try:
        for i in range(5):
            await first.run(ANA, "s1", f"turn {i}")
        planned = await first.erase(TARGET, reason="dsr", attestation=OPERATOR, dry_run=True)
        archived = _group_count(planned.record)
        results: dict[str, Any] = {}
        first_done = anyio.Event()

        async def erase_first() -> None:
            results["first"] = await first.erase(TARGET, reason="dsr", attestation=OPERATOR)
            first_done.set()

        async def resume_other() -> None:
            (results["other"],) = await other.resume_erasures(OPERATOR)

        archive.hook.hold_inventory = True
        archive.hook.hold = 2  # the resume's second call waits: its first call's progress is saved
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(erase_first)
                await archive.hook.in_inventory.wait()
                tg.start_soon(resume_other)
                await archive.hook.held.wait()
                archive.hook.inventory_release.set()  # the inventory is saved, then the rest erased
                await first_done.wait()
                archive.hook.release.set()
        tombstone = results["first"].tombstone
        assert tombstone is not None and results["other"].record == tombstone
        assert _group_count(tombstone) == archived, (_group_count(tombstone), archived)
    finally:
        for runtime in (first, other, _unused):
            await runtime.aclose()
