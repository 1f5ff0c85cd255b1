"""A clarification round adds to the run's contract violations; it does not replace them.

``RunResult.recall.violations`` is the run's list (one bound for the run,
``recall_round.listed_violations``): the looks of the document fence and the
commit fence add to it. The round after a clarification replaced it with its
own, so what the store broke in the first round was in the diagnostics (a
``recall_contract_violation`` each) but gone from the result's list, neither
listed nor counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from _recall_support import ANA, Scripted, ScriptedSession, runtime, sid

from agentium_harness import (
    PolicyDecision,
    PolicyInput,
    RecallDecision,
    RecallLimits,
    RecallPolicy,
    RecallStatus,
)
from agentium_harness.plugin_api import Candidate, OpContext, SourceOwner, SourceRef

pytestmark = pytest.mark.anyio

FOREIGN = sid("salaries-globex", SourceOwner("globex", "bob", "s9"))
DOCS = [("rota", "The release train leaves on Thursday.")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _clarify_then_continue(seen: PolicyInput) -> PolicyDecision:
    if seen.status is RecallStatus.COMPLETE:
        return PolicyDecision(RecallDecision.PROCEED)
    if not seen.clarified:
        return PolicyDecision(RecallDecision.CLARIFY, "ask", "Which train?")
    return PolicyDecision(RecallDecision.CONTINUE, "go on")


class _ForeignFirst(ScriptedSession):
    """The first discovery also returns another tenant's source (a violation); later ones do not."""

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        first = not self.store.queries
        mine = await super().discover(query, max_candidates - 1, ctx)
        if not first:
            return mine
        return [Candidate(SourceRef(FOREIGN, "r1"), SourceOwner("globex", "bob", "s9"), 9.0, 10), *mine]


class ForeignFirst(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _ForeignFirst:
        return _ForeignFirst(self)


async def _answer(question: str) -> str:
    return "the Thursday one"


async def test_the_first_rounds_violations_stay_in_the_runs_list_after_a_clarification() -> None:
    policy = RecallPolicy(name="clarify-then-continue", decide=_clarify_then_continue)
    rt, _provider, _ = runtime(
        ForeignFirst(DOCS), recall_policy=policy, recall_limits=RecallLimits(max_queries=2)
    )
    async with rt:
        result = await rt.run(ANA, "s1", "when?", clarify=_answer)
    assert result.recall is not None and result.recall.clarification is not None
    said = [d.message for d in result.diagnostics if d.code == "recall_contract_violation"]
    assert len(said) == 1 and FOREIGN in said[0]
    assert result.recall.violations == tuple(said), result.recall.violations
