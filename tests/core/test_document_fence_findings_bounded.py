"""What the document fence's looks report is said once per kind, and bounded for the whole run.

Before each later model call the document fence looks at the carried host
documents again (one recall round each look) and reports what the store
broke: its contract violations and notes. Two gaps:

- a note was deduplicated by its full text, so one whose text varies from
  look to look (a close that timed out after the seconds the caller had left,
  a close error that counts something) was reported again at every look;
  now a note is said once per kind (how it begins);
- each look listed up to 16 violations plus a count, but the run added them
  up whole: a store answering every look with new violations grew
  ``RunResult.recall.violations`` by 16 per look. The run now lists 16 and
  counts the rest in one line, and warns of no more than it lists
  (tests/core/test_recall_violation_warnings_bounded.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _recall_support import ANA, Scripted, ScriptedSession, runtime

from agentium_harness import EffectLevel, RecallStatus, Tool, ToolRegistry, current_session_recall_policy
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, Scope

pytestmark = pytest.mark.anyio

LOOKS = 3
#: Carried documents: the default recall limits read 8 (each validated twice out of 16).
DOCS = [(f"rota-{i}", f"The release train {i} leaves on Thursday.") for i in range(8)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(store: Scripted) -> Any:
    async def deploy(args: Any) -> str:
        return "deployed"

    provider = ScriptedProvider(replies=[DEPLOY] * LOOKS + ["Deployed."])
    rt, _, _ = runtime(
        store,
        provider,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        recall_policy=current_session_recall_policy(on_partial="continue"),
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "Thursday?", grants=["deploy"])
    assert store.validate_calls == LOOKS + 2  # recall's, each look's, the commit fence's
    return result


class ClosesWithACount(Scripted):
    """Every session's close fails at the looks, its error counting the closes: a new text each look."""

    closes = 0

    async def open(self, scope: Scope, limits: Any, ctx: OpContext) -> Any:
        return _CountingClose(self)


class _CountingClose(ScriptedSession):
    async def close(self) -> None:
        store = self.store
        assert isinstance(store, ClosesWithACount)
        store.closes += 1
        if 1 < store.validate_calls <= 1 + LOOKS:  # its validate_current was a look's
            raise ValueError(f"close broke after {store.closes} closes")


async def test_a_note_whose_text_varies_per_look_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        result = await _run(ClosesWithACount(DOCS))
    assert result.committed and result.recall.status is RecallStatus.COMPLETE, result.diagnostics
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall session close failed: ValueError: close broke after 2 closes"], notes


class OverrunsThenAbandoned(Scripted):
    """The first look's session close overruns its bound (and stops when cancelled); the second's is
    abandoned (blocked in a worker thread, it does not stop when cancelled)."""

    async def open(self, scope: Scope, limits: Any, ctx: OpContext) -> Any:
        return _SlowClose(self)


class _SlowClose(ScriptedSession):
    async def close(self) -> None:
        look = self.store.validate_calls - 1  # its validate_current was the look-th look's
        if look == 1:
            await anyio.sleep(5)  # cancelled at the close's 0.1 s bound
        elif look == 2:
            await anyio.to_thread.run_sync(time.sleep, 0.3)  # not cancellable: abandoned


async def test_a_close_abandoned_after_an_earlier_look_overran_is_said_too() -> None:
    """Abandonment is a kind of its own: its note began as an overrun's, so an earlier overrun hid it."""
    result = await _run(OverrunsThenAbandoned(DOCS))
    assert result.committed, result.diagnostics
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == [
        "recall session close did not finish within 0.1s",
        "recall session close was abandoned: it did not finish within 0.1s nor stop when cancelled",
    ], notes
