"""A marking or file clean-up that fails leaves the erasure pending; a resume completes it, losing nothing.

Two runtimes (processes) share SQLite files. After the first one's store
calls, a step of its erasure past them fails once: a groups erasure's
snapshot marking (its read of the session's snapshot), or the file
clean-up of any erasure (``scrub_erased``). Read back right after that
step, the erasure is still pending (no other call completed it), so the
call ends in ``_stopped`` (:mod:`agentium_harness._engine.erasure_run`):
``erase`` and ``forget`` raise :class:`ErasureIncompleteError` with the
record pending, ``apply_retention`` notes it (docs/erasure.md); the scope
is refused meanwhile. The other runtime's ``resume_erasures`` (what
``agentium erase --resume`` runs) completes that erasure: the snapshot is
marked, the erased text is gone from the files' bytes (their clean-up
runs in the resume), and what the erasure did not cover is all still there.

Guards: these passed on the source they were written against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _erasure_harness import ANA, OPERATOR, closed_after, history_texts
from test_erasure_groups_overtaken import KEY, SCOPE, _fact
from test_erasure_groups_overtaken import _Process as _GroupsProcess
from test_erasure_scrub_overtaken import TARGETS
from test_erasure_scrub_overtaken import _Process as _WholeProcess

from agentium_harness import (
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    SessionKey,
    VerifiedIdentity,
)
from agentium_harness._engine import erasure_run
from agentium_harness.plugin_api import OpContext
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")
ZOE = VerifiedIdentity("globex", "zoe", "test-auth")
#: The forgotten fact's source group, as its turn and the summary covering it state it.
SOURCE = b"My vault code is 4471"
#: The retention turns' texts: the first two groups are past the policy (one archived group kept).
RETAINED = ["quokka alpha", "quokka bravo", "quokka charlie", "quokka delta"]


def _marking_read_fails_once(first: Any, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The first call's marking: its read of the session's snapshot fails, once; every read after succeeds.

    Returns a list holding ``True`` once that read failed.
    """
    real_mark, real_load = erasure_run.mark_erased, first.sessions.load
    armed: list[bool] = []
    failed: list[bool] = []

    async def mark(*args: Any, **kwargs: Any) -> Any:
        armed.append(True)
        return await real_mark(*args, **kwargs)

    async def load(key: SessionKey, ctx: OpContext) -> Any:
        if key == KEY and armed and not failed:
            failed.append(True)
            raise OSError("session store unreachable")
        return await real_load(key, ctx)

    monkeypatch.setattr(erasure_run, "mark_erased", mark)
    monkeypatch.setattr(first.sessions, "load", load)
    return failed


def _clean_up_fails_once(stores: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The first file clean-up of any of ``stores`` (the first process's) fails; every one after succeeds."""
    failed: list[bool] = []
    for store in stores:
        real = store.scrub_erased

        async def scrub(ctx: OpContext, real: Any = real) -> Any:
            if not failed:
                failed.append(True)
                raise OSError("database file unreachable")
            return await real(ctx)

        monkeypatch.setattr(store, "scrub_erased", scrub)
    return failed


async def _pending_then_resumed(first: Any, other: Any, record: Any, said: str) -> Any:
    """``said`` (the call's error, or note) says ``record``'s erasure is pending, and it is.

    The scope is refused meanwhile; ``other`` completes it. Returns ``other``'s result for it.
    """
    assert record is not None and record.state is ErasureState.PENDING, record
    assert "stays pending" in said and record.erasure_id in said, said
    statuses = await first.runtime.erasure_status(OPERATOR)
    assert [(s.erasure_id, s.state) for s in statuses] == [(record.erasure_id, ErasureState.PENDING)]
    with pytest.raises(ErasureInProgressError):
        await first.runtime.run(ANA, "s1", "written while the erasure is pending")
    (done,) = await other.runtime.resume_erasures(OPERATOR)
    assert done.resumed and done.tombstone is not None and done.record.erasure_id == record.erasure_id
    statuses = await first.runtime.erasure_status(OPERATOR)
    assert [(s.erasure_id, s.state) for s in statuses] == [(record.erasure_id, ErasureState.COMPLETE)]
    return done


async def _retained_turns(first: Any) -> list[str]:
    for text in RETAINED:
        await first.runtime.run(ANA, "s1", text)
    return await history_texts(first.runtime)


async def _retention_pending(first: Any) -> tuple[Any, str]:
    """``apply_retention`` notes the erasure left pending: its record, the note."""
    result = await first.runtime.apply_retention(OPERATOR)
    assert result.erasures == (), result
    (note,) = result.notes
    (record,) = await first.runtime.erasure_status(OPERATOR)
    return record, note


async def _retention_resumed(first: Any, other: Any, before: list[str], tmp_path: Path) -> None:
    record, note = await _retention_pending(first)
    held = database_bytes(tmp_path / "archive.db")
    assert RETAINED[0].encode() in held and RETAINED[1].encode() in held  # not cleaned up yet
    await _pending_then_resumed(first, other, record, note)
    stored = await first.sessions.load(KEY, OpContext())
    assert [(r.start, r.stop) for r in stored.snapshot.erased] == [(0, 2)]
    # The two groups past the policy are gone from the archive's file; the others are all there.
    archive = database_bytes(tmp_path / "archive.db")
    assert RETAINED[0].encode() not in archive and RETAINED[1].encode() not in archive
    assert await history_texts(first.runtime) == before[4:]


async def _forget_resumed(first: Any, other: Any, fact_id: str, before: list[str], tmp_path: Path) -> None:
    for path in (tmp_path / "archive.db", tmp_path / "sessions.db"):
        assert SOURCE in database_bytes(path), path.name  # the source group; the summary states it
    with pytest.raises(ErasureIncompleteError) as stopped:
        await first.runtime.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    await _pending_then_resumed(first, other, stopped.value.record, str(stopped.value))
    stored = await first.sessions.load(KEY, OpContext())
    assert [(r.start, r.stop) for r in stored.snapshot.erased] == [(0, 1)]
    assert stored.snapshot.summary.summary.text == ""  # the summary covering the source lost its text
    for path in (tmp_path / "archive.db", tmp_path / "sessions.db"):
        assert SOURCE not in database_bytes(path), f"the erased source is still in {path.name}"
    # Only the source group went: the two turns after it are all there.
    assert await history_texts(first.runtime) == before[2:]


def _groups_pair(tmp_path: Path) -> tuple[_GroupsProcess, _GroupsProcess]:
    """Two processes on the archive's file and the session store's (a file of its own)."""
    archive, sessions = tmp_path / "archive.db", tmp_path / "sessions.db"
    return _GroupsProcess(archive, sessions), _GroupsProcess(archive, sessions)


async def test_a_retention_marking_that_fails_leaves_the_erasure_pending_for_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = _groups_pair(tmp_path)
    async with closed_after(first.runtime, other.runtime):
        before = await _retained_turns(first)
        failed = _marking_read_fails_once(first, monkeypatch)
        await _retention_resumed(first, other, before, tmp_path)
        assert failed == [True], "the marking's read never failed"


async def test_a_forget_marking_that_fails_leaves_the_erasure_pending_for_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = _groups_pair(tmp_path)
    async with closed_after(first.runtime, other.runtime):
        fact_id = await _fact(first)
        before = await history_texts(first.runtime)
        failed = _marking_read_fails_once(first, monkeypatch)
        await _forget_resumed(first, other, fact_id, before, tmp_path)
        assert failed == [True], "the marking's read never failed"


async def test_a_retention_clean_up_that_fails_leaves_the_erasure_pending_for_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = _groups_pair(tmp_path)
    async with closed_after(first.runtime, other.runtime):
        before = await _retained_turns(first)
        failed = _clean_up_fails_once((first.archive, first.sessions), monkeypatch)
        await _retention_resumed(first, other, before, tmp_path)
        assert failed == [True], "the clean-up never failed"


async def test_a_forget_clean_up_that_fails_leaves_the_erasure_pending_for_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = _groups_pair(tmp_path)
    async with closed_after(first.runtime, other.runtime):
        fact_id = await _fact(first)
        before = await history_texts(first.runtime)
        failed = _clean_up_fails_once((first.archive, first.sessions), monkeypatch)
        await _forget_resumed(first, other, fact_id, before, tmp_path)
        assert failed == [True], "the clean-up never failed"


#: Who writes what: the erased session (ana's s1), and three others, each outside some targets.
WRITERS = {"ana s1": (ANA, "s1"), "ana s2": (ANA, "s2"), "bob": (BOB, "s1"), "zoe": (ZOE, "s1")}
#: The writers each level's target covers.
COVERED = {"session": {"ana s1"}, "user": {"ana s1", "ana s2"}, "tenant": {"ana s1", "ana s2", "bob"}}


def _said(writer: str, turn: str) -> str:
    return f"wombat {writer} {turn}"


@pytest.mark.parametrize("level", list(TARGETS))
async def test_a_clean_up_that_fails_leaves_the_erasure_pending_for_a_resume(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agentium.db"
    first, other = _WholeProcess(path), _WholeProcess(path)
    async with closed_after(first.runtime, other.runtime):
        for writer, (who, session) in WRITERS.items():
            for turn in ("alpha", "bravo", "charlie"):
                await first.runtime.run(who, session, _said(writer, turn))
        before = {w: await _history(first, w) for w in WRITERS}
        failed = _clean_up_fails_once((first.archive, first.sessions, first.memory), monkeypatch)
        with pytest.raises(ErasureIncompleteError) as stopped:
            await first.runtime.erase(TARGETS[level], reason="dsr", attestation=OPERATOR)
        assert failed == [True], "the clean-up never failed"
        assert _said("ana s1", "alpha").encode() in database_bytes(path)  # not cleaned up yet
        await _pending_then_resumed(first, other, stopped.value.record, str(stopped.value))
        held = database_bytes(path)
        for writer in WRITERS:
            if writer in COVERED[level]:
                assert await _history(first, writer) == []
                for turn in ("alpha", "bravo", "charlie"):
                    assert _said(writer, turn).encode() not in held, (writer, turn)
            else:
                assert await _history(first, writer) == before[writer], writer


async def _history(process: Any, writer: str) -> list[str]:
    who, session = WRITERS[writer]
    page = await process.runtime.read_history(who, session, max_groups=100, view=False)
    return [m.content for g in page.groups for m in g.messages]
