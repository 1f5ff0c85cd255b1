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
from _erasure_harness import ANA, OPERATOR, TARGET

from agentium_harness import (
    ErasureIncompleteError,
    ErasureState,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, OpContext

pytestmark = pytest.mark.anyio


def _two(tmp_path: Path) -> list[tuple[Any, Any]]:
    """Two (runtime, session store) pairs over one SQLite file."""
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    pairs = []
    for _ in range(2):
        sessions = SQLiteSessionStore(config)
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=SQLiteArchive(config),
            session_store=sessions,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
        pairs.append((runtime, sessions))
    return pairs


def _groups(record: Any) -> int:
    entry = record.store("archive")
    return 0 if entry is None else sum(c.count for c in entry.counts if c.kind == "group")


async def _archived(runtime: Any) -> int:
    for i in range(5):
        await runtime.run(ANA, "s1", f"turn {i}")
    planned = await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR, dry_run=True)
    archived = _groups(planned.record)
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


async def _stored(sessions: Any, erasure_id: str) -> Any:
    loaded = await sessions.load(SessionKey(ERASURE_RECORDS_TENANT, "acme", f"e-{erasure_id}"), OpContext())
    assert loaded is not None
    (record,) = loaded.snapshot.ledger.records
    return record


async def test_a_landed_save_under_another_calls_tombstone_is_not_counted_again_in_a_new_erasure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (first, sessions), (other, _) = _two(tmp_path)
    try:
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
        assert _groups(done.tombstone) == archived, (_groups(done.tombstone), archived)
        # The first call's archive items are in that tombstone (its save landed): no new erasure
        # counts them again.
        assert result.record.erasure_id == done.record.erasure_id, (_groups(result.record), archived)
        assert result.tombstone == done.tombstone
        statuses = await first.erasure_status(OPERATOR)
        assert [s.erasure_id for s in statuses] == [done.record.erasure_id]
        assert all(s.state is ErasureState.COMPLETE for s in statuses)
    finally:
        for runtime in (first, other):
            await runtime.aclose()


async def test_a_landed_save_under_another_calls_progress_is_counted_once_in_the_error_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (first, sessions), (other, other_sessions) = _two(tmp_path)
    try:
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
        assert fired and theirs.record is not None and _groups(theirs.record) == archived
        error = caught.value
        assert error.record is not None and error.record.state is ErasureState.PENDING
        stored = await _stored(sessions, error.record.erasure_id)
        # Once in the error's record and in the record the failure save wrote, not twice.
        assert _groups(error.record) == archived, (_groups(error.record), archived)
        assert _groups(stored) == archived, (_groups(stored), archived)
        (done,) = await first.resume_erasures(OPERATOR)
        assert done.tombstone is not None and _groups(done.tombstone) == archived
    finally:
        for runtime in (first, other):
            await runtime.aclose()
