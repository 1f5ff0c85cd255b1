"""A clarification round is part of its run: it shares its budgets, and the exchange is history (R17, R21).

Also: continuing with uncertainty always tells the model so, whatever the
evidence budget (R19, R22).
"""

from __future__ import annotations

import time

import anyio
import pytest
from _recall_support import ANA, KEY, Scripted, runtime, sid

from agentium_harness import (
    PolicyDecision,
    PolicyInput,
    RecallDecision,
    RecallLimits,
    RecallPolicy,
    RecallStatus,
    Role,
    RunStatus,
    ValidationStatus,
    current_session_recall_policy,
)
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

QUESTION = "Which train do you mean?"
ANSWER = "the Thursday release train"
DOCS = [("rota", "The release train leaves on Thursday."), ("signoff", "Thursday releases need a sign-off.")]


def _clarify_then_continue(seen: PolicyInput) -> PolicyDecision:
    """Clarify once on anything short of complete, then carry on with explicit uncertainty."""
    if seen.status is RecallStatus.COMPLETE:
        return PolicyDecision(RecallDecision.PROCEED)
    if not seen.clarified:
        return PolicyDecision(RecallDecision.CLARIFY, "ask", QUESTION)
    return PolicyDecision(RecallDecision.CONTINUE, "go on")


POLICY = RecallPolicy(name="clarify-then-continue", decide=_clarify_then_continue)


async def _answer(question: str) -> str:
    return ANSWER


async def test_a_clarification_round_shares_the_validation_budget() -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]  # round 1 is partial, then all current
    limits = RecallLimits(max_queries=2, max_validations=4)
    rt, _provider, _ = runtime(store, recall_policy=POLICY, recall_limits=limits)
    result = await rt.run(ANA, "s1", "when?", clarify=_answer)
    assert result.committed and result.recall.clarification == (QUESTION, ANSWER)
    # Round 1 validated 2 sources; 2 are left for the run: one source, at both fences.
    assert store.validated_refs <= limits.max_validations
    assert result.recall.usage.validations == store.validated_refs == 4
    assert [r.source_id for r in result.recall.included] == [sid("rota")]


async def test_a_clarification_round_shares_the_source_byte_budget() -> None:
    text = "Thursday " * 7  # 63 bytes
    store = Scripted([("rota", text)])
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]
    limits = RecallLimits(max_queries=2, max_source_bytes=100)
    rt, _provider, _ = runtime(store, recall_policy=POLICY, recall_limits=limits)
    result = await rt.run(ANA, "s1", "when?", clarify=_answer)
    assert store.read_budgets == [100, 100 - 63]  # round 2 is told what is left, not a fresh 100
    assert result.recall.usage.source_bytes <= 100
    assert result.recall.included == ()  # 63 more bytes do not fit what is left
    assert any("max_source_bytes" in v for v in result.recall.violations)


async def test_a_clarification_round_shares_the_latency_budget() -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]
    # Round 1's discovery spends SPENT_S of the budget; round 2's would run far past any budget (it
    # is cancelled at its deadline). BUDGET_S - SPENT_S leaves round 1 room for a stalled machine.
    budget_s, spent_s = 2.0, 0.5
    store.discover_sleeps_s = [spent_s, 60.0]
    limits = RecallLimits(max_queries=2, max_latency_s=budget_s)
    rt, _provider, _ = runtime(store, recall_policy=POLICY, recall_limits=limits)
    began = time.monotonic()
    result = await rt.run(ANA, "s1", "when?", clarify=_answer)
    elapsed = time.monotonic() - began
    # Round 1 spent 0.5 s of 2: round 2's discovery is given at most what is left (a stall only
    # leaves it less; a fresh budget per round would give it 2 s), is cut there, and recall fails.
    assert len(store.queries) == 2 and result.recall.status is RecallStatus.FAILED
    second = store.discover_time_left[1]
    assert second is not None
    assert second <= budget_s - spent_s, f"round 2 was given {second:.2f}s after round 1 spent {spent_s}s"
    assert result.recall.usage.latency_s <= budget_s + 1.5
    assert elapsed < budget_s + 1.5 + spent_s  # never round 2's discovery waited out


async def test_the_users_time_to_answer_is_not_recall_latency() -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]
    limits = RecallLimits(max_queries=2, max_latency_s=0.5)
    rt, _provider, _ = runtime(store, recall_policy=POLICY, recall_limits=limits)

    async def slow_user(question: str) -> str:
        await anyio.sleep(0.6)  # longer than the whole recall latency budget
        return ANSWER

    result = await rt.run(ANA, "s1", "when?", clarify=slow_user)
    assert result.committed and result.recall.status is RecallStatus.COMPLETE
    assert result.recall.usage.latency_s < 0.5


async def test_the_clarification_reaches_the_model_and_canonical_history() -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]
    rt, provider, sessions = runtime(store, recall_policy=POLICY, recall_limits=RecallLimits(max_queries=2))
    result = await rt.run(ANA, "s1", "when does it leave?", clarify=_answer)
    assert result.committed
    opening = [(m.role, m.content) for m in provider.requests[0].turn]
    assert opening == [
        (Role.USER, "when does it leave?"),
        (Role.ASSISTANT, QUESTION),
        (Role.USER, ANSWER),
    ]
    stored = await sessions.load(KEY, OpContext())
    assert stored is not None
    group = stored.snapshot.resident[-1]
    assert [(m.role, m.content) for m in group.messages[:3]] == opening
    assert group.messages[3].role is Role.ASSISTANT and result.output == group.messages[3].content
    assert group.is_complete


async def test_a_run_without_clarification_opens_with_the_input_alone() -> None:
    rt, provider, _ = runtime(Scripted(DOCS))
    await rt.run(ANA, "s1", "when does it leave?")
    assert [(m.role, m.content) for m in provider.requests[0].turn] == [(Role.USER, "when does it leave?")]


async def test_a_clarifier_answering_text_that_is_not_utf8_is_a_failed_clarification() -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("rota"): ValidationStatus.CHANGED}]
    rt, provider, sessions = runtime(store, recall_policy=POLICY, recall_limits=RecallLimits(max_queries=2))

    async def broken(question: str) -> str:
        return "the \ud800 train"

    result = await rt.run(ANA, "s1", "when?", clarify=broken)
    assert result.status is RunStatus.STOPPED and result.has("clarification_failed")
    assert provider.requests == [] and await sessions.load(KEY, OpContext()) is None


CONTINUE = current_session_recall_policy(on_partial="continue")


def _status(provider: object) -> list[str]:
    request = provider.requests[-1]  # type: ignore[attr-defined]
    return [b.content for b in request.sources if b.source_id == "recall-status"]


@pytest.mark.parametrize("budget", [1, 8, 20])
async def test_continuing_with_uncertainty_always_shows_the_notice(budget: int) -> None:
    store = Scripted(DOCS)
    store.statuses = [{sid("signoff"): ValidationStatus.DELETED}]
    rt, provider, _ = runtime(
        store, recall_policy=CONTINUE, recall_limits=RecallLimits(max_evidence_tokens=budget)
    )
    result = await rt.run(ANA, "s1", "Thursday?")
    assert result.committed and result.recall.decision is RecallDecision.CONTINUE
    [notice] = _status(provider)
    assert notice.startswith("Recalled evidence is incomplete")
    assert result.has("recall_status_over_budget")
    assert result.recall.included == ()  # no room left for evidence


async def test_a_long_notice_is_shortened_to_the_budget_and_says_so() -> None:
    docs = [(f"d{i}", f"Thursday fact number {i}.") for i in range(8)]
    store = Scripted(docs)
    store.statuses = [{sid(f"d{i}"): ValidationStatus.DELETED for i in range(8)}]
    rt, provider, _ = runtime(
        store, recall_policy=CONTINUE, recall_limits=RecallLimits(max_evidence_tokens=120)
    )
    result = await rt.run(ANA, "s1", "Thursday?")
    [notice] = _status(provider)
    assert "more not shown" in notice
    blocks = provider.requests[-1].sources
    assert sum(b.estimated_tokens for b in blocks if b.kind.value == "recall") <= 120
    assert not result.has("recall_status_over_budget")
    assert len(result.recall.uncertainty) >= 8  # every line is still in the result
