"""Archived groups the recall index missed are indexed again automatically, a bounded number per commit.

A recall store that is down when a commit archives groups misses them (the
run reports ``recall_index_failed``). Once indexing works again, each
archiving commit asks the store what it lacks and indexes up to
``CATCH_UP_GROUPS`` of those groups from the archive, saying so in a
diagnostic (issue 21, item 12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from agentium_harness import (
    OpContext,
    OperatorAttestation,
    RecallLimits,
    RecallUnavailableError,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    Scope,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.plugin_api import ArchiveReceipt, MessageGroup

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


class FlakyIndex(InMemoryRecallStore):
    """The in-memory recall store, whose archive indexing fails while ``down`` (its server is away)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        if self.down:
            raise RecallUnavailableError("the index is down")
        return await super().index_groups(key, groups, receipts, ctx)


def _codes(result: object) -> list[str]:
    return [d.code for d in getattr(result, "diagnostics", ())]


async def _indexed(store: InMemoryRecallStore) -> list[int]:
    return [g.seq for g in await store.seek_groups(KEY, 0, 1000, OpContext.with_timeout(30))]


async def test_groups_archived_while_the_index_was_down_are_indexed_by_a_later_commit() -> None:
    store = FlakyIndex()
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        for i in range(3):
            await runtime.run(ANA, "s1", f"note {i} about kiwis")
        assert await _indexed(store) == [0]
        store.down = True
        for i in range(3, 6):
            result = await runtime.run(ANA, "s1", f"note {i} about plums")
            assert "recall_index_failed" in _codes(result)
        assert await _indexed(store) == [0]  # groups 1-3 were archived while the index was down
        store.down = False
        result = await runtime.run(ANA, "s1", "note 6 about figs")
        assert "recall_index_caught_up" in _codes(result)
        [note] = [d for d in result.diagnostics if d.code == "recall_index_caught_up"]
        assert "seqs 1-3" in note.message
        assert await _indexed(store) == [0, 1, 2, 3, 4]
        quiet = await runtime.run(ANA, "s1", "note 7 about pears")
        assert not {"recall_index_caught_up", "recall_index_behind"} & set(_codes(quiet))
    finally:
        await runtime.aclose()


CATCH_UP_GROUPS = 16  # docs/recall.md, "Catching up": archived groups one commit indexes at most


async def test_catching_up_is_bounded_per_commit_and_says_when_more_is_left() -> None:
    store = FlakyIndex()
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        store.down = True
        missed = CATCH_UP_GROUPS + 4
        for i in range(missed + 1):
            await runtime.run(ANA, "s1", f"note {i}")
        assert await _indexed(store) == []
        store.down = False
        first = await runtime.run(ANA, "s1", "one more note")
        assert {"recall_index_caught_up", "recall_index_behind"} <= set(_codes(first))
        assert len(await _indexed(store)) == CATCH_UP_GROUPS + 1  # the commit's own group, and the bound
        second = await runtime.run(ANA, "s1", "and another")
        assert "recall_index_caught_up" in _codes(second)
        assert await _indexed(store) == list(range(missed + 2))
    finally:
        await runtime.aclose()


async def test_after_retention_erased_the_oldest_groups_a_lost_group_is_still_caught_up() -> None:
    """Retention leaves a leading erased range; the catch-up asks from its end, so it is not blind.

    Before ``start_seq`` the store listed the erased seqs 0, 1, … first, the
    engine passed over them, and nothing behind them was ever caught up.
    """
    store = FlakyIndex()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=3),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))
    try:
        for i in range(2 * CATCH_UP_GROUPS + 12):
            await runtime.run(ANA, "s1", f"note {i}")
        result = await runtime.apply_retention(operator)
        (erasure,) = result.erasures
        assert erasure.tombstone is not None
        kept = await _indexed(store)
        assert kept and kept[0] > CATCH_UP_GROUPS  # more erased seqs than one answer lists
        store.down = True
        lost = await runtime.run(ANA, "s1", "a note the index misses")
        assert "recall_index_failed" in _codes(lost)
        store.down = False
        caught = await runtime.run(ANA, "s1", "and the next one")
        assert "recall_index_caught_up" in _codes(caught)
        indexed = await _indexed(store)
        assert indexed == list(range(kept[0], indexed[-1] + 1)), "a lost group stayed out of the index"
    finally:
        await runtime.aclose()


BOB = VerifiedIdentity("acme", "bob", "test-auth")
BOB_KEY = SessionKey("acme", "bob", "private")


class Stripping(InMemoryArchive):
    """Answers a read of ana's s1 covering seq 1 with bob's group 1, its retained record stripped."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        groups = list(await super().read_groups(key, start_seq, max_groups, ctx))
        if key != KEY:
            return groups
        (theirs,) = await super().read_groups(BOB_KEY, 1, 1, ctx)
        return [attrs.evolve(theirs, retained=None) if g.seq == 1 else g for g in groups]


async def _found(store: InMemoryRecallStore, query: str) -> list[str]:
    """The text of every source recall finds for ``query`` in ana's s1."""
    session = await store.open(Scope.of(ANA, "s1"), RecallLimits(), OpContext.with_timeout(30))
    candidates = await session.discover(query, 50, OpContext.with_timeout(30))
    excerpts = await session.read([c.ref for c in candidates], 100_000, OpContext.with_timeout(30))
    return [e.text for e in excerpts]


async def test_another_sessions_group_stripped_of_its_record_is_never_caught_up_into_recall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The store refuses another session's retained scope, but let a group with none through: the
    # catch-up indexed bob's group into ana's recall scope, where recall showed it to the model.
    store = FlakyIndex()
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=Stripping(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        for i in range(3):
            await runtime.run(BOB, "private", f"Bob's secret {i}: the vault code is 90{i}1.")
        await runtime.run(ANA, "s1", "note 0 about kiwis")
        store.down = True
        for i in range(1, 4):
            await runtime.run(ANA, "s1", f"note {i} about plums")
        store.down = False
        with caplog.at_level("WARNING", logger="agentium"):
            result = await runtime.run(ANA, "s1", "note 4 about figs")
            again = await runtime.run(ANA, "s1", "note 5 about pears")
        assert result.committed and again.committed
        found = await _found(store, "vault code secret")
        assert not any("vault" in text for text in found)
        assert any("plums" in text for text in await _found(store, "plums"))  # ana's own were caught up
        assert 1 not in await _indexed(store)
        assert {2, 3} <= set(await _indexed(store))
        for run in (result, again):  # refused again on the next commit, never indexed, said each time
            (note,) = [
                d for d in run.diagnostics if d.code == "recall_index_behind" and "shown to be" in d.message
            ]
            assert note.severity.value == "warning" and "groups 1 " in note.message
            assert "vault" not in note.message
        assert any(r.levelname == "WARNING" and "vault" not in r.getMessage() for r in caplog.records)
        assert "vault" not in (await runtime.run(ANA, "s1", "what is the vault code?")).output
    finally:
        await runtime.aclose()
