"""A groups erasure completed by another runtime after its last store call: it marks nothing more.

Two runtimes (processes) share one SQLite file. The first one's groups
erasure (retention, or a forgotten fact's sources) has erased from every
store; before it records the erased groups in the session's snapshot, or
before it cleans up the file, the second resumes the same erasure from its
record and completes it: its marking, its clean-up, its tombstone, and the
fence goes. What the first then does is as the whole-session path does when
it finds its erasure completed before a store call: it checks first, and
writes nothing more under that erasure. It used to go on: a forget
erasure's marking emptying a task summary written after the erasure
completed (from groups that never held the fact), and a step failing then
reported the completed erasure as "pending". Its result is the other call's
tombstone, as the whole-session path's is. It still cleans up the files its
own store calls removed groups from (tests/core/test_erasure_scrub_own.py),
and the one its marking rewrote.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, completed_meanwhile, gate_after

from agentium_harness import (
    ErasureState,
    GroupRef,
    MemoryFact,
    MemoryScope,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SessionKey,
    SummaryLimits,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_run
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
SCOPE = MemoryScope("acme", "ana")
#: Where the first call waits while the other completes its erasure: after its last store call
#: (before the snapshot's marking), or once it marked (before the file's clean-up).
STEPS = ["marking", "clean-up"]


class _Process:
    """One runtime with its own adapters on the shared file(s); counts each store's file clean-ups.

    ``sessions_path`` puts the session store (and memory) on a file of its own.
    """

    def __init__(self, path: Path, sessions_path: Path | None = None) -> None:
        config = SQLiteConfig(path=str(path))
        own = config if sessions_path is None else SQLiteConfig(path=str(sessions_path))
        self.archive, self.sessions = SQLiteArchive(config), SQLiteSessionStore(own)
        memory = SQLiteMemoryStore(own)
        self.cleaned = {"archive": 0, "session_store": 0}
        self.runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=self._counted("archive", self.archive),
            session_store=self._counted("session_store", self.sessions),
            summarizer=ExtractiveSummarizer(),
            summary_limits=SummaryLimits(background=False),
            memory=memory,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
            retention=RetentionPolicy(max_archived_groups=1),
            owned=[self.archive, self.sessions, memory],
        )

    def _counted(self, role: str, store: Any) -> Any:
        real = store.scrub_erased

        async def counted(ctx: OpContext) -> Any:
            self.cleaned[role] += 1
            return await real(ctx)

        store.scrub_erased = counted
        return store


@asynccontextmanager
async def _pair(
    tmp_path: Path, *, own_sessions_file: bool = False
) -> AsyncIterator[tuple[_Process, _Process]]:
    """Two processes on one SQLite file (``own_sessions_file``: sessions on a second); closed after."""
    if own_sessions_file:
        first = _Process(tmp_path / "archive.db", tmp_path / "sessions.db")
        other = _Process(tmp_path / "archive.db", tmp_path / "sessions.db")
    else:
        first, other = _Process(tmp_path / "agentium.db"), _Process(tmp_path / "agentium.db")
    try:
        yield first, other
    finally:
        await first.runtime.aclose()
        await other.runtime.aclose()


def _forgetting(process: _Process, fact_id: str) -> Callable[[], Awaitable[Any]]:
    """The call that forgets ``fact_id`` on ``process``, erasing its sources."""
    return lambda: process.runtime.forget(
        SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR
    )


def _gate_at(step: str, monkeypatch: pytest.MonkeyPatch) -> tuple[anyio.Event, anyio.Event]:
    """The first erasure to reach ``step`` waits there for ``release`` (after saying it ``entered``)."""
    return gate_after(erasure_run, "carry_out" if step == "marking" else "mark_erased", monkeypatch)


async def _overtaken(
    step: str,
    monkeypatch: pytest.MonkeyPatch,
    first: _Process,
    other: _Process,
    call: Callable[[], Awaitable[Any]],
    meanwhile: Callable[[], Awaitable[Any]] | None = None,
) -> tuple[Any, Any]:
    """``call()`` on ``first``, whose erasure ``other`` completes at ``step``; then ``meanwhile()``.

    Returns what ``call()`` returned (or raised) and ``other``'s result.
    """
    entered, release = _gate_at(step, monkeypatch)
    result, done = await completed_meanwhile(call, entered, release, other.runtime, meanwhile=meanwhile)
    monkeypatch.undo()
    return result, done


async def _returns_the_tombstone(first: _Process, result: Any, done: Any) -> None:
    """``result`` (of ``first``'s call) is ``done``'s tombstone, the only erasure ``first`` sees: complete."""
    (erased,) = result.erasures
    assert erased.record == done.record and erased.tombstone is not None
    assert [s.state for s in await first.runtime.erasure_status(OPERATOR)] == [ErasureState.COMPLETE]


async def _four_turns(process: _Process) -> None:
    for text in ("one", "two", "three", "four"):
        await process.runtime.run(ANA, "s1", text)


async def _fact(process: _Process) -> str:
    """Three turns (groups 0 and 1 archived and summarized) and a fact whose source is group 0; its id."""
    await process.runtime.run(ANA, "s1", "My vault code is 4471. Remember the vault code.")
    await process.runtime.run(ANA, "s1", "The weather is fine today.")
    await process.runtime.run(ANA, "s1", "Tell me about the weather again.")
    (group,) = await process.archive.read_groups(KEY, 0, 1, OpContext())
    ack = await process.runtime.memory.remember(
        MemoryFact(SCOPE, "ana's vault code is 4471", provenance=[GroupRef("s1", 0, group.digest)])
    )
    assert ack.fact_id is not None
    return ack.fact_id


async def test_a_retention_erasure_completed_elsewhere_before_its_marking_marks_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Passed before the fix too: marking what the other call marked already wrote nothing."""
    async with _pair(tmp_path) as (first, other):
        await _four_turns(first)
        marked: list[int] = []

        async def remember_revision() -> None:
            stored = await first.sessions.load(KEY, OpContext())
            marked.append(stored.revision)

        result, done = await _overtaken(
            "marking",
            monkeypatch,
            first,
            other,
            lambda: first.runtime.apply_retention(OPERATOR),
            remember_revision,
        )
        # The truth, as a whole-session erasure reports it: the other call's tombstone, once.
        assert not result.notes, result.notes
        (erased,) = result.erasures
        assert erased.record == done.record and erased.record.state is ErasureState.COMPLETE
        statuses = await first.runtime.erasure_status(OPERATOR)
        assert [s.erasure_id for s in statuses] == [done.record.erasure_id]
        stored = await first.sessions.load(KEY, OpContext())
        assert stored.revision == marked[0], "the snapshot was written again after the erasure completed"
        assert [(r.start, r.stop) for r in stored.snapshot.erased] == [(0, 2)]


@pytest.mark.parametrize("step", STEPS)
async def test_a_groups_erasure_completed_elsewhere_cleans_up_only_the_file_it_removed_from(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _pair(tmp_path) as (first, other):
        await _four_turns(first)
        result, done = await _overtaken(
            step, monkeypatch, first, other, lambda: first.runtime.apply_retention(OPERATOR)
        )
        (erased,) = result.erasures
        assert erased.record == done.record
        # The other call rebuilt the file; this one once too, as its store calls removed the groups
        # (on one file, the clean-up counts as the archive's).
        assert other.cleaned == first.cleaned == {"archive": 1, "session_store": 0}


@pytest.mark.parametrize("step", STEPS)
async def test_a_step_that_would_fail_once_the_erasure_completed_elsewhere_does_not_say_it_is_pending(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the snapshot to mark it, or the clean-up, fails in the first process: it no longer runs."""
    async with _pair(tmp_path) as (first, other):
        await _four_turns(first)

        async def breaks() -> None:
            if step == "marking":
                real = first.sessions.load

                async def refused(key: SessionKey, ctx: OpContext) -> Any:
                    # The session's snapshot only: the erasure records stay readable.
                    if key == KEY:
                        raise OSError("session store unreachable")
                    return await real(key, ctx)

                monkeypatch.setattr(first.sessions, "load", refused)
            else:

                async def refused_scrub(ctx: OpContext) -> Any:
                    raise OSError("database file unreachable")

                monkeypatch.setattr(first.archive, "scrub_erased", refused_scrub)

        result, done = await _overtaken(
            step, monkeypatch, first, other, lambda: first.runtime.apply_retention(OPERATOR), breaks
        )
        # Not "stopped part way; it stays pending": it is complete, and its tombstone is the result.
        assert not result.notes, result.notes
        await _returns_the_tombstone(first, result, done)


async def test_a_forget_erasure_completed_elsewhere_leaves_a_summary_written_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary written after the erasure completed, from groups that never held the fact, stays."""
    async with _pair(tmp_path) as (first, other):
        fact_id = await _fact(first)
        written: list[Any] = []

        async def turns_since() -> None:
            # The erasure is complete and its fence down: the session goes on, and is summarized again.
            emptied = (await first.sessions.load(KEY, OpContext())).snapshot.summary.summary
            assert emptied.text == ""  # the other call's marking emptied the summary covering group 0
            await other.runtime.run(ANA, "s1", "What about tomorrow's weather?")
            await other.runtime.run(ANA, "s1", "And the day after?")
            written.append(await first.sessions.load(KEY, OpContext()))

        result, done = await _overtaken(
            "marking",
            monkeypatch,
            first,
            other,
            _forgetting(first, fact_id),
            turns_since,
        )
        (since,) = written
        assert "tomorrow" in since.snapshot.summary.summary.text
        (erased,) = result.erasures
        assert erased.record == done.record
        stored = await first.sessions.load(KEY, OpContext())
        assert stored.revision == since.revision, "the snapshot was written after the erasure completed"
        assert stored.snapshot.summary == since.snapshot.summary
        assert "4471" not in stored.snapshot.summary.summary.text


async def test_a_summary_this_call_emptied_before_the_other_completed_it_still_leaves_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call's marking empties the summary, then the other call completes the erasure.

    The other call finds nothing left to mark, and the summary emptied by
    this erasure: it cleans up the session store's file (a file of its own
    here) as well as the archive's (tests/core/test_erasure_marking_resumed.py).
    The first call still cleans up the file its marking rewrote, and the
    archive's, whose groups its own store call removed.
    """
    async with _pair(tmp_path, own_sessions_file=True) as (first, other):
        fact_id = await _fact(first)
        result, done = await _overtaken(
            "clean-up",
            monkeypatch,
            first,
            other,
            _forgetting(first, fact_id),
        )
        (erased,) = result.erasures
        assert erased.record == done.record
        assert other.cleaned == {"archive": 1, "session_store": 1}
        assert first.cleaned == {"archive": 1, "session_store": 1}
        assert (await first.sessions.load(KEY, OpContext())).snapshot.summary.summary.text == ""


async def test_the_clean_up_of_the_summary_this_call_emptied_failing_does_not_say_the_erasure_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, and the session store file's clean-up (the first call's own, known complete) fails.

    The erasure is complete (the other call's tombstone): "it stays pending;
    resume it" would be false, and a resume would find nothing to resume.
    """
    async with _pair(tmp_path, own_sessions_file=True) as (first, other):
        fact_id = await _fact(first)

        async def breaks() -> None:
            async def refused(ctx: OpContext) -> Any:
                raise OSError("database file unreachable")

            monkeypatch.setattr(first.sessions, "scrub_erased", refused)

        result, done = await _overtaken(
            "clean-up",
            monkeypatch,
            first,
            other,
            _forgetting(first, fact_id),
            breaks,
        )
        assert not isinstance(result, Exception), result
        await _returns_the_tombstone(first, result, done)


async def test_a_marking_failing_once_the_erasure_completed_elsewhere_meanwhile_does_not_say_it_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other call completes the erasure while the first's marking runs (past its check), which then fails.

    As a store call failing once the erasure completed elsewhere: not "pending".
    """
    async with _pair(tmp_path) as (first, other):
        await _four_turns(first)
        entered, release = anyio.Event(), anyio.Event()

        async def stalled(*args: Any, **kwargs: Any) -> Any:
            # A marking that takes long (the session busy) and then fails.
            entered.set()
            with anyio.fail_after(30):
                await release.wait()
            raise OSError("session store unreachable")

        monkeypatch.setattr(erasure_run, "mark_erased", stalled)
        result, done = await completed_meanwhile(
            lambda: first.runtime.apply_retention(OPERATOR),
            entered,
            release,
            other.runtime,
            before=monkeypatch.undo,  # the other call marks as usual
        )
        assert not result.notes, result.notes
        await _returns_the_tombstone(first, result, done)
