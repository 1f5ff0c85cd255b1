"""A run's recall contract violations are WARNINGs (and span events) within the bound of their listing.

``RunResult.recall.violations`` lists 16 per run and counts the rest in one
line, however many rounds add to it (the document fence's look before each
later model call, the commit fence). Seven gaps:

- each look still logged one WARNING (and added one ``agentium.diagnostic``
  event) per violation it found, so their number grew with the looks; now a
  run says what it lists: a WARNING for each of the 16 and one for the count;
- a look's line counting what it did not list was said once by its text, so
  two looks that each left 4 unlisted counted 4 in all; now the run's count is
  the sum;
- what the dispatch fence found was not among what the looks had said, so the
  first look that met the same answer listed it (and warned) a second time;
  so did the round after a clarification, of what the first round listed;
- a round's count added up the violations it did not list, those an earlier
  round met among them: the same 20 met at 3 looks and the commit fence were
  counted 4 a round; now a round counts only what is new to the run;
- a violation was the same as an earlier one by its text, so the same answer
  worded with the round's count ("more than the 2 answers asked" at recall,
  "the 1" at a look) was listed twice; now by its misbehaviour and item;
- a look's notes were deduped against other looks' only: the dispatch
  fence's close failing, then a look's, said two notes of one kind;
- with nothing added after the dispatch fence the run's count line kept its
  round's words ("in this round"); it speaks of the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _recall_support import ANA, Scripted, ScriptedSession, sid
from _recall_violation_support import CloseFails, clarified_run, deploy_run, said
from _telemetry_support import Telemetered

from agentium_harness import (
    EffectLevel,
    RecallLimits,
    ResidentLimits,
    RuntimeLimits,
    Tool,
    ToolRegistry,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallSession, InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.plugin_api import (
    Candidate,
    OpContext,
    RecallSession,
    Scope,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(store: Scripted, looks: int, caplog: pytest.LogCaptureFixture, **kw: Any) -> tuple[Any, Any]:
    """A run making ``looks`` tool rounds (a document fence look before each later call); its result
    and its telemetry, the WARNING records in ``caplog``."""
    result, t = await deploy_run(store, looks, caplog, **kw)
    assert store.validate_calls == looks + 2  # recall's, each look's, the commit fence's
    return result, t


class NewRevisionEachLook(Scripted):
    """At each look, calls every carried document current at a revision of that look: one violation
    per document, each a new text per look; at recall and the commit fence, current as read."""

    def __init__(self, docs: Sequence[tuple[str, str]], looks: int) -> None:
        super().__init__(docs)
        self.looks = looks

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        look = self.validate_calls
        answers = super().validations(refs)
        if 1 <= look <= self.looks:  # validate_calls is counted on: this call was the look-th look
            return [Validation(r, ValidationStatus.CURRENT, f"r-look{look}") for r in refs]
        return answers


def _docs(n: int) -> list[tuple[str, str]]:
    return [(f"rota-{i}", f"The release train {i} leaves on Thursday.") for i in range(n)]


async def test_the_looks_warn_of_what_the_run_lists_and_once_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three looks, 8 new violations each: 16 WARNINGs (and events) listed, one counting 8, not 24."""
    result, t = await _run(NewRevisionEachLook(_docs(8), 3), 3, caplog)
    found = said(result, caplog, t)
    assert len(found) == 17, len(found)
    assert found == list(result.recall.violations), found
    assert found[16] == "and 8 more contract violation(s) in this run, not listed"


#: 20 documents carried, each validated at recall, at every look and at the commit fence.
_WIDE = RecallLimits(max_candidates=20, max_validations=64, max_evidence_tokens=8192, max_latency_s=10.0)


async def test_two_looks_leaving_as_many_unlisted_are_both_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Each look finds 20: lists 16 and counts 4 in the same words; the run counts 4 + 16 + 4."""
    result, t = await _run(NewRevisionEachLook(_docs(20), 2), 2, caplog, recall_limits=_WIDE)
    assert len(result.recall.included) == 20
    listed = result.recall.violations
    assert listed[16:] == ("and 24 more contract violation(s) in this run, not listed",), listed[16:]
    assert said(result, caplog, t) == list(listed)


class OneExtraAnswer(Scripted):
    """Every validate_current answers once more than asked: the same violation, in the same words,
    at recall (the dispatch fence), at each look and at the commit fence."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        answers = super().validations(refs)
        return [*answers, answers[-1]]


@pytest.mark.parametrize("looks", [0, 2], ids=["commit-fence-only", "two-looks"])
async def test_what_the_dispatch_fence_listed_is_not_listed_again_by_a_look(
    caplog: pytest.LogCaptureFixture, looks: int
) -> None:
    """Said once, by the dispatch fence: not again by the looks, nor by the commit fence (the last look)."""
    result, t = await _run(OneExtraAnswer(_docs(1)), looks, caplog)
    once = "validate_current returned more than the 1 answers asked; the extra were ignored"
    assert result.recall.violations == (once,), result.recall.violations
    assert said(result, caplog, t) == [once]


class _ForeignEachQuery(ScriptedSession):
    """Every discovery returns 20 sources of another tenant first: 20 violations a round, other
    sources each round, or with ``same`` the same 20 each round."""

    def __init__(self, store: Scripted, same: bool) -> None:
        super().__init__(store)
        self.same = same

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        nth = len(self.store.queries)
        mine = await super().discover(query, max_candidates, ctx)
        owner = SourceOwner("globex", "bob", "s9")
        names = [f"pay-{i}" if self.same else f"pay-{nth}-{i}" for i in range(20)]
        foreign = [Candidate(SourceRef(sid(name, owner), "r1"), owner, 9.0, 10) for name in names]
        return [*foreign, *mine][:max_candidates]


class ForeignEachQuery(Scripted):
    same_sources = False

    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _ForeignEachQuery:
        return _ForeignEachQuery(self, self.same_sources)


async def test_the_round_after_a_clarification_warns_within_the_runs_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two dispatch rounds of 20 violations each: 17 WARNINGs (16 and the count of 24), not 34."""
    t = Telemetered()
    limits = RecallLimits(max_queries=2, max_candidates=24)
    result = await clarified_run(ForeignEachQuery(_docs(1)), "when?", limits, caplog, telemetry=t.telemetry())
    listed = result.recall.violations
    assert listed[16:] == ("and 24 more contract violation(s) in this run, not listed",), listed[16:]
    assert said(result, caplog, t) == list(listed)


async def test_the_round_after_a_clarification_does_not_list_again_what_the_first_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both dispatch rounds validate the one source and meet the same answer: one violation, said once."""
    t = Telemetered()
    limits = RecallLimits(max_queries=2)
    result = await clarified_run(OneExtraAnswer(_docs(1)), "when?", limits, caplog, telemetry=t.telemetry())
    once = "validate_current returned more than the 1 answers asked; the extra were ignored"
    assert result.recall.violations == (once,), result.recall.violations
    assert said(result, caplog, t) == [once]


class _OneExtraGroupAnswer(InMemoryRecallSession):
    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        answers = list(await super().validate_current(refs, ctx))
        return [*answers, answers[-1]]


class OneExtraGroupAnswer(InMemoryRecallStore):
    """Recalls the session's archived groups (no host document: no document fence), and answers
    every validate_current once more than asked, at recall and at the commit fence alike."""

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        await super().open(scope, limits, ctx)
        return _OneExtraGroupAnswer(self, scope)


async def _deploy(args: Any) -> str:
    return "deployed"


async def _group_recalled_run(
    caplog: pytest.LogCaptureFixture, provider: Any, with_document: bool = False
) -> tuple[Any, Telemetered]:
    """Four runs archiving groups (one resident: the release train's first, then three unrelated),
    then, the WARNING records and span events cleared, one asking when the train leaves: recalled
    through ``OneExtraGroupAnswer``; its result (committed) and telemetry. ``with_document``: a host
    document on the train is indexed first, and the last run may deploy (a tool round: a look)."""
    t = Telemetered()
    tools = ToolRegistry([Tool("deploy", _deploy, EffectLevel.WRITE)]) if with_document else None
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=OneExtraGroupAnswer(),
        recall_policy=current_session_recall_policy(on_partial="continue"),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        tools=tools,
        telemetry=t.telemetry(),
    )
    async with rt:
        with anyio.fail_after(30):
            if with_document:
                await rt.index_document(
                    SourceOwner("acme", "ana", "s1"), "rota.md", "The release train leaves on Thursday."
                )
            await rt.run(ANA, "s1", "The release train leaves on Thursday.")
            for i in range(3):
                await rt.run(ANA, "s1", f"Unrelated chatter number {i}.")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            t.exporter.clear()
            grants = ["deploy"] if with_document else []
            result = await rt.run(ANA, "s1", "When does the release train leave?", grants=grants)
    assert result.committed, result.diagnostics
    return result, t


async def test_the_commit_fence_without_a_document_fence_does_not_list_again_what_dispatch_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a recalled group is included: the commit fence reports without a document fence."""
    result, t = await _group_recalled_run(caplog, ExtractiveProvider())
    included = [r.source_id for r in result.recall.included]
    assert included and all(s.startswith("group/") for s in included), included
    once = f"validate_current returned more than the {len(included)} answers asked; the extra were ignored"
    assert result.recall.violations == (once,), result.recall.violations
    assert said(result, caplog, t) == [once]


class SameAnswerEachLook(Scripted):
    """After recall, calls every carried document current at one other revision, at every look and at
    the commit fence alike: the same 20 violations each time (16 listed by a round, 4 counted)."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        later = self.validate_calls >= 1
        answers = super().validations(refs)
        return [Validation(r, ValidationStatus.CURRENT, "r-other") for r in refs] if later else answers


async def test_the_same_answer_at_every_look_counts_its_unlisted_violations_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """3 looks and the commit fence meet the same 20 violations: 16 listed and 4 counted, not 4 a round."""
    result, t = await _run(SameAnswerEachLook(_docs(20)), 3, caplog, recall_limits=_WIDE)
    listed = result.recall.violations
    assert len(set(listed[:16])) == 16, listed
    assert listed[16:] == ("and 4 more contract violation(s) in this run, not listed",), listed[16:]
    assert said(result, caplog, t) == list(listed)


class ForeignThenOneExtraAnswer(ForeignEachQuery):
    """Recall meets 20 foreign sources (listed 16, counted 4), then validate_current answering once
    more than asked (counted, the 21st); every look and the commit fence meet that answer again."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        answers = super().validations(refs)
        return [*answers, answers[-1]]


async def test_what_the_dispatch_fence_counted_is_not_counted_again_by_a_look(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The violation recall counted (past its 16) is the one each look meets: counted once, 5 not 8."""
    result, t = await _run(
        ForeignThenOneExtraAnswer(_docs(1)), 2, caplog, recall_limits=RecallLimits(max_candidates=24)
    )
    listed = result.recall.violations
    assert listed[16:] == ("and 5 more contract violation(s) in this run, not listed",), listed[16:]
    assert said(result, caplog, t) == list(listed)


class SameForeignEachQuery(ForeignEachQuery):
    """Every discovery returns the same 20 sources of another tenant first: the same 20 violations."""

    same_sources = True


async def test_the_round_after_a_clarification_does_not_count_again_what_the_first_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both dispatch rounds meet the same 20 violations: 16 listed and 4 counted once, not 8."""
    t = Telemetered()
    limits = RecallLimits(max_queries=2, max_candidates=24)
    result = await clarified_run(
        SameForeignEachQuery(_docs(1)), "when?", limits, caplog, telemetry=t.telemetry()
    )
    listed = result.recall.violations
    assert len(set(listed[:16])) == 16, listed
    assert len(listed) == 17 and listed[16].startswith("and 4 more contract violation(s) in this "), listed[
        16:
    ]
    assert said(result, caplog, t) == list(listed)
    # The model is still told how often the store broke its contract in the round it sees.
    assert any("answered out of contract 20 time(s)" in u for u in result.recall.uncertainty), (
        result.recall.uncertainty
    )


async def test_a_run_listed_by_its_dispatch_fence_alone_counts_in_the_runs_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Recall meets 20 violations, nothing later adds one: the run's count line speaks of the run."""
    result, t = await _run(
        ForeignEachQuery(_docs(1)), 0, caplog, recall_limits=RecallLimits(max_candidates=24)
    )
    listed = result.recall.violations
    assert listed[16:] == ("and 4 more contract violation(s) in this run, not listed",), listed[16:]
    assert said(result, caplog, t) == list(listed)


async def test_the_same_answer_asked_for_fewer_at_a_look_is_one_violation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Recall validates a recalled group and a document (2 answers asked), the look the document alone
    (1 asked), the commit fence both again: one misbehaviour, listed once, whatever count it names."""
    provider = ScriptedProvider(replies=["Noted."] * 4 + [DEPLOY, "Deployed."])
    result, t = await _group_recalled_run(caplog, provider, with_document=True)
    kinds = sorted(r.source_id.split("/", 1)[0] for r in result.recall.included)
    assert kinds == ["doc", "group"], result.recall.included
    once = "validate_current returned more than the 2 answers asked; the extra were ignored"
    assert result.recall.violations == (once,), result.recall.violations
    assert said(result, caplog, t) == [once]


async def test_a_look_does_not_note_again_a_kind_the_dispatch_fence_noted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Recall's close, each look's and the commit fence's fail: one close note in the run, recall's."""
    store = CloseFails(_docs(1))
    result, _ = await _run(store, 2, caplog)
    assert store.closes == 4  # recall's, each look's, the commit fence's
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall session close failed: RuntimeError: close number 1 refused"], notes
