"""Groups the session's view hides (a reset, a retraction) never crowd visible evidence out of recall.

The store cannot see the view, so it ranks cleared groups among the best
matches; the engine asks again, bounded, and says ``partial`` when the
bound stops it with hidden candidates dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from _recall_support import ANA, KEY, MINE, Scripted, ScriptedSession, runtime, sid

from agentium_harness import (
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    current_session_recall_policy,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.recall import gather_evidence
from agentium_harness._engine.recall_discovery import HIDDEN_ASK_FACTOR, HIDDEN_EXTRA_CALLS
from agentium_harness._engine.recall_policy import QueryInput
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    Candidate,
    OpContext,
    RecallSession,
    Scope,
    group_source_id,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_cleared_groups_do_not_crowd_out_a_visible_match(kind: str, tmp_path: Path) -> None:
    store: Any = (
        InMemoryRecallStore()
        if kind == "memory"
        else SQLiteRecallStore(SQLiteRecallConfig(path=(tmp_path / "r.db").as_posix()))
    )
    rt, provider, _ = runtime(store, limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    for i in range(12):  # more matches than max_candidates (8), all cleared by the reset below
        await rt.run(ANA, "s1", f"kiwi kiwi kiwi orchard note {i}")
    await rt.reset_view(ANA, "s1", reason="clear")
    await rt.run(ANA, "s1", "the kiwi code is 7731")
    for filler in ("filler a", "filler b"):  # archive (and index) the group after the reset
        await rt.run(ANA, "s1", filler)
    result = await rt.run(ANA, "s1", "kiwi?")
    # Before the fix: no_accessible_evidence, nothing included (8 hidden took every candidate slot).
    assert result.recall.status is RecallStatus.COMPLETE
    assert len(result.recall.included) == 1
    assert "7731" in str(provider.requests[-1])
    await store.aclose()


class CountingSession(ScriptedSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        assert isinstance(self.store, Counting)
        self.store.asked.append(max_candidates)
        return await super().discover(query, max_candidates, ctx)


class Counting(Scripted):
    """The scripted store over ``docs`` (source id to text), keeping what each discovery asked for."""

    def __init__(self, docs: dict[str, str]) -> None:
        super().__init__()
        self.docs = {s: (MINE, t) for s, t in docs.items()}
        self.asked: list[int] = []

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return CountingSession(self)


async def test_asking_again_is_bounded_and_stopping_at_the_bound_is_partial() -> None:
    hidden_ids = {group_source_id(KEY, seq) for seq in range(40)}
    docs = {s: "kiwi" for s in sorted(hidden_ids)} | {sid("visible"): "kiwi visible"}
    store = Counting(docs)
    limits = RecallLimits(max_candidates=2)
    evidence = await gather_evidence(
        Ticket(KEY, "test", 30.0),
        store,
        Scope("acme", "ana", "s1"),
        limits,
        current_session_recall_policy(),
        QueryInput("kiwi"),
        hidden=hidden_ids.__contains__,
    )
    assert len(store.asked) == 1 + HIDDEN_EXTRA_CALLS
    assert max(store.asked) <= limits.max_candidates * HIDDEN_ASK_FACTOR
    # Stopped at the bound with hidden candidates dropped: partial, never no_accessible_evidence.
    assert evidence.status is RecallStatus.PARTIAL
    assert evidence.refs == ()
    assert "hidden by the session's view" in evidence.crowded
    assert any("hidden by the session's view" in p for p in evidence.problems)


async def test_the_run_says_why_when_hidden_candidates_reach_the_bound() -> None:
    seen = SessionKey("acme", "ana", "s1")
    store = Counting({group_source_id(seen, seq): "kiwi" for seq in range(3)} | {sid("doc"): "kiwi doc"})
    rt, _, _ = runtime(store, recall_limits=RecallLimits(max_candidates=1))
    for i in range(3):
        await rt.run(ANA, "s1", f"note {i}")
    await rt.reset_view(ANA, "s1", reason="clear")
    before = len(store.asked)
    result = await rt.run(ANA, "s1", "kiwi?")
    assert result.recall.status is RecallStatus.PARTIAL
    codes = [d.code for d in result.diagnostics]
    assert "recall_view_crowded" in codes
    assert store.asked[before:] == [1, 2, 3]
