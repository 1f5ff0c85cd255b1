"""A progress save that landed though it raised is not added to the record a second time.

An erasure saves its progress after every store call, adding what it did
since its last save to what another call resuming the same erasure saved
meanwhile (merge_progress). When that save raises after its write landed (a
reply lost on the way back), the call saves once more (its "stopped" note):
the record stored then is its own earlier write, not another call's
progress, and merging its counts over it again counted every item removed
twice — in the error's record, and in the tombstone a resume wrote. A
store that retries a write whose reply was lost finds its own write there and
says ``SessionConflictError``: the save retries, and must not add the same
progress again either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
TARGET = EraseTarget.session("acme", "ana", "s1")


def _group_count(record: Any) -> int:
    entry = record.store("archive")
    return sum(c.count for c in entry.counts if c.kind == "group")


def _runtime(stores: str, tmp_path: Path) -> tuple[Any, Any]:
    if stores == "memory":
        archive: Any = InMemoryArchive()
        sessions: Any = InMemorySessionStore()
    else:
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    return rt, sessions


async def _archived(rt: Any) -> int:
    for i in range(4):
        await rt.run(ANA, "s1", f"turn {i}")
    planned = await rt.erase(TARGET, reason="dsr", attestation=OPERATOR, dry_run=True)
    archived = _group_count(planned.record)
    assert archived >= 2
    return archived


def _lose_reply(sessions: Any, monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[bool]:
    """The archive call's progress save lands, then raises ``error`` (its reply is lost)."""
    real = sessions.save
    fired: list[bool] = []

    async def lands_then_raises(key: Any, snapshot: Any, *args: Any, **kwargs: Any) -> Any:
        saved = await real(key, snapshot, *args, **kwargs)
        ledger = snapshot.ledger
        progress = key.session.startswith("e-") and ledger is not None and ledger.records
        if not fired and progress and ledger.records[0].store("archive") is not None:
            fired.append(True)
            raise error
        return saved

    monkeypatch.setattr(sessions, "save", lands_then_raises)
    return fired


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_progress_save_that_landed_then_raised_is_counted_once(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, sessions = _runtime(stores, tmp_path)
    try:
        archived = await _archived(rt)
        fired = _lose_reply(sessions, monkeypatch, OSError("reply lost"))
        with pytest.raises(ErasureIncompleteError) as caught:
            await rt.erase(TARGET, reason="dsr", attestation=OPERATOR)
        monkeypatch.undo()
        assert fired
        stopped = caught.value.record
        assert stopped is not None and _group_count(stopped) == archived, (_group_count(stopped), archived)
        assert any(note.startswith("stopped: OSError") for note in stopped.notes)
        # The record stored says the same, and so does the tombstone the resume writes from it.
        (done,) = await rt.resume_erasures(OPERATOR)
        assert done.tombstone is not None and done.record.erasure_id == stopped.erasure_id
        assert _group_count(done.tombstone) == archived, (_group_count(done.tombstone), archived)
    finally:
        await rt.aclose()


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_progress_save_retried_after_its_own_write_landed_is_counted_once(
    stores: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, sessions = _runtime(stores, tmp_path)
    try:
        archived = await _archived(rt)
        fired = _lose_reply(sessions, monkeypatch, SessionConflictError("revision moved (our own write)"))
        result = await rt.erase(TARGET, reason="dsr", attestation=OPERATOR)
        assert fired and result.tombstone is not None
        assert _group_count(result.tombstone) == archived, (_group_count(result.tombstone), archived)
    finally:
        await rt.aclose()


class _Unreachable(InMemoryArchive):
    """An archive whose every real erase fails the same way (its dry runs answer)."""

    async def erase(self, target: Any, ctx: Any, **kwargs: Any) -> Any:
        if not kwargs.get("dry_run", False):
            raise OSError("archive unreachable")
        return await super().erase(target, ctx, **kwargs)


async def test_an_erasure_stopping_again_the_same_way_keeps_one_note_of_it() -> None:
    # Each stop notes it in the record, kept for good: resumed again and again against a store that
    # keeps failing the same way, the record grew a copy of the same note every time, without bound.
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=_Unreachable(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        for i in range(3):
            await rt.run(ANA, "s1", f"turn {i}")
        with pytest.raises(ErasureIncompleteError):
            await rt.erase(TARGET, reason="dsr", attestation=OPERATOR)
        for _ in range(3):
            with pytest.raises(ErasureIncompleteError) as caught:
                await rt.resume_erasures(OPERATOR)
        record = caught.value.record
        assert record is not None
        stops = [note for note in record.notes if note.startswith("stopped: OSError")]
        assert len(stops) == 1, record.notes
        (status,) = await rt.erasure_status(OPERATOR)
        assert status.notes == record.notes
    finally:
        await rt.aclose()
