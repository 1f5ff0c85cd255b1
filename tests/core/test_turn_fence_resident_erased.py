"""A run never sends again resident history that another writer archived and an erasure then took.

A run sends its session's resident history, as its load saw it, on every
model call. Another process may commit to the same session meanwhile (its
commit evicts those groups to the archive), and retention, or forgetting a
fact with its sources, may then erase them, all between two of the run's
calls. Such an erasure is of archived groups only, so it is not one of the
whole session, and the turn fence passed it: the next call sent the erased
text again. Now the fence, once the ledger moved and the snapshot is no
longer the run's, stops the run when the snapshot now marks one of the
run's resident groups erased (docs/erasure.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, Recording, history_texts, tool_turn_while
from _fence_support import SECRET, TWO_RESIDENT, fence_pair, stopped_and_said, two_processes

from agentium_harness import ErasedDuringRunError, EraseTarget, RetentionPolicy
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio


def _pair(kind: str, tmp_path: Path, provider: Recording, held: HeldTool) -> Any:
    """Ana's runtime (a deploy tool that waits), and another process's over the same stores."""
    a, b = two_processes(kind, tmp_path)
    retention = RetentionPolicy(max_archived_groups=1)
    return fence_pair(provider, held, a, {**b, "retention": retention}, limits=TWO_RESIDENT)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_resident_history_archived_and_erased_between_calls_is_not_sent_again(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another writer evicts the run's resident groups, retention erases them: no next call."""
    provider = Recording(["ok", "ok", "noted", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine, other = _pair(kind, tmp_path, provider, held)
    try:
        for text in ["Chatter zero.", "Chatter one.", f"Remember this: {SECRET}.", "Chatter three."]:
            await mine.run(ANA, "s1", text)

        async def evict_and_trim() -> None:
            # Two turns of another process archive groups 2 and 3 (the run's resident history) ...
            await other.run(ANA, "s1", "Chatter four.")
            await other.run(ANA, "s1", "Chatter five.")
            # ... and retention, keeping the newest archived group, erases groups 0 to 2.
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result
            assert not [t for t in await history_texts(other) if "qzvaultq" in t]

        caplog.set_level(logging.WARNING)
        outcome = await tool_turn_while(mine, held.entered, held.release, evict_and_trim, "Deploy it.")
        # The call that asked for the tool had the secret in its resident history (the premise) ...
        assert len(provider.sent) == 5, provider.sent[4:]
        assert "qzvaultq" in provider.sent[-1]
        # ... and no call was made once its group was erased.
        (note,) = stopped_and_said(outcome, caplog)
        # It says what went (no erasure id is known here), not "erasure  began": an empty id.
        assert "(erasure )" not in note.message and "erased" in note.message, note.message
        assert not [t for t in await history_texts(mine) if "deploy" in t.lower()]
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_resident_history_archived_but_not_erased_does_not_stop_the_run(
    kind: str, tmp_path: Path
) -> None:
    """Another writer evicts the run's resident groups, retention erases older ones only: the run goes on."""
    provider = Recording(["ok", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine, other = _pair(kind, tmp_path, provider, held)
    try:
        for text in ["Chatter zero.", "Chatter one.", "Chatter two.", "Chatter three."]:
            await mine.run(ANA, "s1", text)

        async def evict_and_trim() -> None:
            await other.run(ANA, "s1", "Chatter four.")
            # Group 2 archived; retention keeping one archived group erases 0 and 1 (the run's
            # resident 2 and 3 stay: 2 archived, 3 resident).
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(mine, held.entered, held.release, evict_and_trim, "Deploy it.")
        assert not isinstance(outcome, ErasedDuringRunError), outcome
        assert len(provider.sent) == 6, provider.sent[4:]
    finally:
        await mine.aclose()
        await other.aclose()
