"""The engine's checks of a loaded snapshot (R2, R15), and what it remembers of them.

A snapshot found well formed for a session is not checked again when the
store hands back the same (frozen) object for that session; any other object,
or the same object for another session, is checked in full.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import OpContext, Scope, SessionKey, SnapshotCorruptError, VerifiedIdentity
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._ports.snapshot import MAX_ARCHIVE_MARKS, ArchiveMark, add_archive_mark  # not public
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import SessionSnapshot, StoredSnapshot, seal_snapshot
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-suite")
KEY_A = SessionKey("acme", "alice", "a")


class OneAnswerStore(InMemorySessionStore):
    """Answers every load with the one stored snapshot it was given (the same object each time)."""

    capabilities = InMemorySessionStore.capabilities

    def __init__(self, answer: StoredSnapshot) -> None:
        super().__init__()
        self.answer = answer

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        return self.answer if key.session in ("a", "b", "marks") else None


def _runtime(store: InMemorySessionStore) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]), archive=InMemoryArchive(), session_store=store
    )


async def test_a_snapshot_found_well_formed_for_one_session_is_checked_again_for_another() -> None:
    store = OneAnswerStore(StoredSnapshot(scoped_snapshot(KEY_A, "x"), 1))
    runtime = _runtime(store)
    for _ in range(2):  # the second load of "a" gets the remembered answer
        assert (await runtime.inspect_session(ALICE, "a")).revision == 1
    # The same object for session "b": its groups are retained under "a", which the check finds.
    with pytest.raises(SnapshotCorruptError, match="retained under another scope"):
        await runtime.inspect_session(ALICE, "b")
    assert (await runtime.inspect_session(ALICE, "a")).revision == 1


# -- archive marks: each snapshot's are checked against the last ones found in order -----------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY_M = SessionKey("acme", "alice", "marks")


def _reference_marks_problem(marks: tuple[ArchiveMark, ...], boundary: int) -> bool:
    """The full check of every mark, as the engine did it on every load before it remembered any."""
    if len(marks) > MAX_ARCHIVE_MARKS or any(not 0 < m.below <= boundary for m in marks):
        return True
    return any(a.below >= b.below or a.at > b.at for a, b in itertools.pairwise(marks))


def _marked(marks: tuple[ArchiveMark, ...], boundary: int) -> SessionSnapshot:
    scope = Scope(KEY_M.tenant, KEY_M.user, KEY_M.session)
    return seal_snapshot(SessionSnapshot(scope, boundary, boundary, archived=marks or None))


class Steps:
    """One session's marks from commit to commit: mostly as the engine moves them, sometimes damaged."""

    def __init__(self) -> None:
        self.marks: tuple[ArchiveMark, ...] = ()
        self.boundary = 1

    def apply(self, step: tuple[str, int, int]) -> None:
        kind, i, n = step
        marks = list(self.marks)
        if kind == "archive":  # what a commit that moves the boundary does
            self.boundary += 1 + n % 3
            self.marks = add_archive_mark(self.marks, self.boundary, T0 + timedelta(seconds=self.boundary))
            return
        if kind == "boundary":  # the very same marks (tuple) under a boundary moved either way
            self.boundary = max(0, self.boundary + n - 3)
            return
        if kind == "append" and marks:  # the same mark (object) again, or an equal one
            marks.append(marks[i % len(marks)] if n % 2 else ArchiveMark(marks[-1].below, marks[-1].at))
        elif kind == "drop" and marks:
            del marks[i % len(marks)]
        elif kind == "swap" and len(marks) > 1:
            j = i % (len(marks) - 1)
            marks[j], marks[j + 1] = marks[j + 1], marks[j]
        elif kind == "replace" and marks:
            j = i % len(marks)
            marks[j] = ArchiveMark(marks[j].below + n - 3, marks[j].at + timedelta(seconds=n - 3))
        elif kind == "tail":  # a new last mark anywhere, in or out of range and order
            marks.append(ArchiveMark(self.boundary + n - 4, T0 + timedelta(seconds=self.boundary + n - 4)))
        self.marks = tuple(marks)


STEP = st.tuples(
    st.sampled_from(["archive"] * 4 + ["boundary", "append", "drop", "swap", "replace", "tail"]),
    st.integers(0, 40),
    st.integers(0, 7),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=45))
def test_archive_marks_are_refused_exactly_when_the_full_check_refuses_them(steps: list[Any]) -> None:
    # The runtime remembers the marks it found in order: a remembered answer must never be stale.
    async def main() -> None:
        marks = Steps()
        store = OneAnswerStore(StoredSnapshot(_marked((), 1), 1))
        runtime = _runtime(store)
        for step in steps:
            marks.apply(step)
            store.answer = StoredSnapshot(_marked(marks.marks, marks.boundary), 1)
            if _reference_marks_problem(marks.marks, marks.boundary):
                with pytest.raises(SnapshotCorruptError, match="archive marks"):
                    await runtime.inspect_session(ALICE, "marks")
            else:
                assert (await runtime.inspect_session(ALICE, "marks")).revision == 1

    anyio.run(main)
