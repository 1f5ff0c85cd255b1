"""A run never sends again the excerpt of an archived group erased while it ran (docs/erasure.md).

Recall puts excerpts of the session's archived groups into a run's request,
and every model call of the run (a tool round each) sends them again.
Retention, or forgetting a fact with its sources, erases archived groups only:
the resident history stays, so the session's content is no sign of it. Such
an erasure still under way at a model call stopped the run; one that began
and finished between two calls did not, and the next call sent the erased
group's text. Now, when the tenant's erasures moved since the last look, a
recalled archived group the session's snapshot marks erased stops the run
before the call, nothing committed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, Recording, history_texts, tool_turn_while
from _fence_support import SECRET, TWO_RESIDENT, fence_pair, stopped_and_said, two_processes

from agentium_harness import ErasedDuringRunError, EraseTarget, RecallLimits, RetentionPolicy
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio

PRIMING = [f"Remember this: {SECRET}.", "Chatter one.", "Chatter two.", "Chatter three."]


def _pair(kind: str, tmp_path: Path, provider: Recording, held: HeldTool, keep: int = 1) -> Any:
    """Ana's runtime (recall, a deploy tool that waits); another process's, which keeps ``keep`` groups."""
    a, b = two_processes(kind, tmp_path, recall=True)
    # The best match only: which archived groups the request carries is then the test's choice.
    a["recall_limits"] = RecallLimits(max_candidates=1)
    b["retention"] = RetentionPolicy(max_archived_groups=keep)
    return fence_pair(provider, held, a, b, limits=TWO_RESIDENT)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_archived_group_erased_between_calls_is_not_sent_again(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention erases the recalled group during the tool round: no next call, nothing committed."""
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine, other = _pair(kind, tmp_path, provider, held)
    try:
        for text in PRIMING:
            await mine.run(ANA, "s1", text)
        # The secret's group is archived (two groups resident), and recall finds it.
        assert not [t for t in await history_texts(mine) if "qzvaultq" in t][1:]

        async def trim() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        caplog.set_level(logging.WARNING)
        outcome = await tool_turn_while(
            mine, held.entered, held.release, trim, "What is the vault code? Then deploy it."
        )
        # The call that asked for the tool had the recalled excerpt (the test's premise) ...
        assert len(provider.sent) == len(PRIMING) + 1, provider.sent[len(PRIMING) :]
        assert "qzvaultq" in provider.sent[-1]
        # ... and no call was made once its group was erased.
        stopped_and_said(outcome, caplog)
        # Nothing of the turn was committed: the session holds what the priming turns left.
        assert not [t for t in await history_texts(mine) if "deploy" in t.lower()]
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_retention_of_groups_the_run_did_not_recall_does_not_stop_it(kind: str, tmp_path: Path) -> None:
    """An erasure of archived groups none of the request's excerpts came from: the run goes on."""
    provider = Recording(["ok", "noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine, other = _pair(kind, tmp_path, provider, held, keep=2)
    try:
        # Groups 0 to 2 are archived; keeping the newest two erases group 0 ("Qqq.") only.
        for text in ["Qqq.", *PRIMING]:
            await mine.run(ANA, "s1", text)

        async def trim() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(
            mine, held.entered, held.release, trim, "What is the vault code? Then deploy it."
        )
        asked = provider.sent[len(PRIMING) + 1]
        assert "qzvaultq" in asked and "Qqq" not in asked  # recall took group 1, not the one erased
        # The call after the tool round was made: the fence did not stop the run (what the commit
        # then says of a snapshot retention changed meanwhile is the commit fence's, not tested here).
        assert not isinstance(outcome, ErasedDuringRunError), outcome
        assert len(provider.sent) == len(PRIMING) + 3, provider.sent[len(PRIMING) + 1 :]
        assert "qzvaultq" in provider.sent[-1]
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_with_no_erasure_the_fence_does_no_work_per_recalled_group(kind: str, tmp_path: Path) -> None:
    """No erasure moves the ledger: the recalled groups are never worked out (per run, per group).

    Counted with ``sys.setprofile`` over the run (its loop thread).
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine, other = _pair(kind, tmp_path, provider, held)
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("turn_fence.py"):
            calls.append(frame.f_code.co_name)

    try:
        for text in PRIMING:
            await mine.run(ANA, "s1", text)

        async def nothing() -> None:
            pass

        sys.setprofile(profile)
        try:
            outcome = await tool_turn_while(
                mine, held.entered, held.release, nothing, "What is the vault code? Then deploy it."
            )
        finally:
            sys.setprofile(None)
        assert "qzvaultq" in provider.sent[len(PRIMING)]  # the request carried a recalled group
        assert not isinstance(outcome, ErasedDuringRunError), outcome
        assert "check" in calls  # the fence looked (the counter sees it) ...
        assert "recalled_groups" not in calls, calls  # ... and worked nothing out per group
    finally:
        await mine.aclose()
        await other.aclose()
