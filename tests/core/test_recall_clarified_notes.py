"""The round after a clarification does not note again a kind the first round noted.

A note is the same when its kind is (``recall_findings.said_as``): a recall
session's close failing is said once in the run, however many looks (and the
commit fence) fail theirs too. The round after a clarification opened and
closed a session of its own, and its notes were added whole: a store whose
close failed at both dispatch rounds carried two close notes, and a query
truncated at both two identical notes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, ScriptedSession, runtime

from agentium_harness import (
    PolicyDecision,
    PolicyInput,
    RecallDecision,
    RecallLimits,
    RecallPolicy,
)
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

DOCS = [("rota", "The release train leaves on Thursday.")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _clarify_then_continue(seen: PolicyInput) -> PolicyDecision:
    if not seen.clarified:
        return PolicyDecision(RecallDecision.CLARIFY, "ask", "Which train?")
    return PolicyDecision(RecallDecision.CONTINUE, "go on")


async def _answer(question: str) -> str:
    return "the Thursday one"


class CloseFails(Scripted):
    """Every session's close fails, each time in other words."""

    closes = 0

    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _CloseFails:
        return _CloseFails(self)


class _CloseFails(ScriptedSession):
    def __init__(self, store: CloseFails) -> None:
        super().__init__(store)
        self.owner = store

    async def close(self) -> None:
        self.owner.closes += 1
        raise RuntimeError(f"close number {self.owner.closes} refused")


async def _run(store: Scripted, user_input: str, limits: RecallLimits) -> Any:
    policy = RecallPolicy(name="clarify-then-continue", decide=_clarify_then_continue)
    rt, _, _ = runtime(store, recall_policy=policy, recall_limits=limits)
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", user_input, clarify=_answer)
    assert result.recall.clarification is not None
    return result


async def test_a_close_failing_at_both_dispatch_rounds_is_one_note() -> None:
    store = CloseFails(DOCS)
    result = await _run(store, "when?", RecallLimits(max_queries=2))
    assert store.closes == 3  # both dispatch rounds', the commit fence's
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall session close failed: RuntimeError: close number 1 refused"], notes


async def test_a_query_truncated_at_both_dispatch_rounds_is_one_note() -> None:
    result = await _run(Scripted(DOCS), "train " * 40, RecallLimits(max_queries=2, max_query_bytes=64))
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall query truncated to 64 bytes"], notes
