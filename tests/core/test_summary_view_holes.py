"""Task summaries past groups out of the view: a whole retracted group (and its control group) is
passed over, and the summary folds on from the next group the view shows, however the updates fell
behind (a summarizer that failed meanwhile): it never stops for good at the hole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from agentium_harness import (
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import MessageGroup, OpContext, SummaryState, TaskSummary, seal_snapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


class Flaky(ExtractiveSummarizer):
    """The extractive summarizer, failing while ``down`` (so the frontier lags the archive)."""

    down = False

    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        if self.down:
            raise RuntimeError("summarizer down")
        return await super().summarize(previous, groups, ctx)


def _runtime(summarizer: Flaky) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


async def _stuck_at(rt: Any, frontier: int) -> None:
    """Store ana's s1 summary with its frontier at ``frontier``, as an earlier version left it."""
    store, key = rt.session_store, SessionKey("acme", "ana", "s1")
    loaded = await store.load(key, OpContext())
    snap = loaded.snapshot
    summary = SummaryState(TaskSummary(text="", frontier=frontier, policy="extractive", version="1"))
    receipts = tuple(r for r in snap.receipts if r.seq >= frontier)
    sealed = seal_snapshot(attrs.evolve(snap, summary=summary, receipts=receipts, digest=None))
    await store.save(key, sealed, loaded.revision, OpContext())


@pytest.mark.parametrize("stuck", [False, True], ids=["lagging", "left-at-the-hole"])
async def test_the_summary_folds_on_past_a_whole_retracted_group(stuck: bool) -> None:
    """The summary lags (its summarizer failed) while a group is retracted whole, then folds again.

    Lagging: the next update is offered ``[1, 4]`` from frontier 1 (2 retracted whole, 3 its
    control group): a summarizer folds 1 and stops before 2, and the next update must not offer
    ``[4, ...]`` after a frontier of 2, which it cannot fold. Left at the hole: an earlier version
    stored that frontier of 2; the update moves it to the first group it offers.
    """
    summarizer = Flaky()
    async with _runtime(summarizer) as rt:
        await rt.run(ANA, "s1", "Alpha one is here.")
        summarizer.down = True
        await rt.run(ANA, "s1", "Bravo two is here.")
        await rt.run(ANA, "s1", "Charlie three is here.")
        retracted = await rt.retract(ANA, "s1", count=2, reason="wrong turn")
        assert [r.seq for r in retracted.retracted] == [2, 2]  # Charlie's group, whole
        await rt.run(ANA, "s1", "Delta four is here.")
        if stuck:
            await _stuck_at(rt, 2)
        summarizer.down = False
        result = None
        for word in ("Echo five", "Foxtrot six", "Golf seven"):
            result = await rt.run(ANA, "s1", f"{word} is here.")
        assert result is not None and result.summary is not None
        summary = result.summary.summary
        # Every archived group is passed (Golf's is still resident): the frontier never stops at the hole.
        assert summary.frontier == result.boundary
        assert "Foxtrot six" in summary.text and "Charlie" not in summary.text
        cited = [c.seq for c in summary.citations]
        assert 2 not in cited and 3 not in cited and 6 in cited
