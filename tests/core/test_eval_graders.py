"""Each grader passes, fails and is absent for the right reasons (R33, R34)."""

from __future__ import annotations

from _eval_support import case, label, trace

from agentium_harness.eval import (
    AbstentionGrader,
    BlockSeen,
    CandidateSeen,
    DiscoveredEvidenceGrader,
    ExcerptSeen,
    Grade,
    GradeStatus,
    PromptInclusionGrader,
    ReadEvidenceGrader,
    RequestSeen,
    ScopeGrader,
    StaleFactsGrader,
    SupportedAnswerGrader,
    abstained,
    cited_sources,
)
from agentium_harness.plugin_api import SourceOwner

ANA = SourceOwner("acme", "ana", "main")
GLOBEX = SourceOwner("globex")
SID = "group/acme/ana/main/0"
SETUP = [{"say": "My locker number is 12.", "label": "locker"}]
ABSTAIN = "I have no evidence in the provided sources to answer that."


def _block(sid: str = SID, content: str = "user: My locker number is 12.", labeled: bool = True) -> BlockSeen:
    attributes = (("revision", "r1"), ("completeness", "complete")) if labeled else ()
    return BlockSeen("recall", sid, content, attributes)


def test_discovered_evidence_pass_fail_absent() -> None:
    grader = DiscoveredEvidenceGrader()
    c = case(setup=SETUP, expect={"evidence": ["locker"]})
    found = trace(labels={"locker": label(SID, ANA)}, candidates=(CandidateSeen(SID, "r1", ANA),))
    assert grader.grade(c, found).status is GradeStatus.PASS
    other = trace(
        labels={"locker": label(SID, ANA)}, candidates=(CandidateSeen("group/acme/ana/main/9", "r", ANA),)
    )
    failed = grader.grade(c, other)
    assert failed.status is GradeStatus.FAIL and "was not discovered" in failed.reason
    no_recall = grader.grade(c, trace(labels={"locker": label(SID, ANA)}, has_recall=False))
    assert no_recall.status is GradeStatus.FAIL and "no recall store" in no_recall.reason
    unresolved = grader.grade(c, trace(labels={"locker": label(None, ANA)}))
    assert unresolved.status is GradeStatus.FAIL and "has no source" in unresolved.reason
    assert grader.grade(case(setup=SETUP), found).status is GradeStatus.ABSENT


def test_read_evidence_needs_whole_excerpts() -> None:
    grader = ReadEvidenceGrader()
    c = case(setup=SETUP, expect={"evidence": ["locker"]})
    labels = {"locker": label(SID, ANA)}
    whole = ExcerptSeen(SID, ANA, "user: My locker number is 12.", "complete")
    assert grader.grade(c, trace(labels=labels, excerpts=(whole,))).status is GradeStatus.PASS
    partial = ExcerptSeen(SID, ANA, "locker number", "partial", ("source",))
    failed = grader.grade(c, trace(labels=labels, excerpts=(partial,)))
    assert failed.status is GradeStatus.FAIL and "partial" in failed.reason and "source" in failed.reason
    assert grader.grade(c, trace(labels=labels)).status is GradeStatus.FAIL
    # A per-grader override of [] means "nothing expected": absent, not a pass.
    none = case(setup=SETUP, expect={"evidence": ["locker"], "read": []})
    assert grader.grade(none, trace(labels=labels)).status is GradeStatus.ABSENT


def test_prompt_inclusion_wants_labeled_blocks_and_keeps_excluded_out() -> None:
    grader = PromptInclusionGrader()
    labels = {"locker": label(SID, ANA)}
    c = case(setup=SETUP, expect={"in_prompt": ["locker"]})
    assert (
        grader.grade(c, trace(labels=labels, requests=(RequestSeen((_block(),)),))).status is GradeStatus.PASS
    )
    unlabeled = grader.grade(c, trace(labels=labels, requests=(RequestSeen((_block(labeled=False),)),)))
    assert unlabeled.status is GradeStatus.FAIL and "without its labels" in unlabeled.reason
    stopped = grader.grade(c, trace(labels=labels, status="stopped", committed=False))
    assert stopped.status is GradeStatus.FAIL and "no model request" in stopped.reason
    kept_out = case(setup=SETUP, expect={"excluded": ["locker"]})
    assert (
        grader.grade(kept_out, trace(labels=labels, requests=(RequestSeen(()),))).status is GradeStatus.PASS
    )
    leaked = grader.grade(kept_out, trace(labels=labels, requests=(RequestSeen((_block(),)),)))
    assert leaked.status is GradeStatus.FAIL and "excluded 'locker'" in leaked.reason
    assert grader.grade(case(setup=SETUP), trace()).status is GradeStatus.ABSENT


def test_supported_answer_needs_the_fact_and_cited_sources_in_the_request() -> None:
    grader = SupportedAnswerGrader()
    c = case(setup=SETUP, expect={"answer": ["12"]})
    answer = f'"user: My locker number is 12." [source: {SID}]'
    good = trace(answer=answer, requests=(RequestSeen((_block(),)),))
    assert grader.grade(c, good).status is GradeStatus.PASS
    uncited = grader.grade(c, trace(answer=answer, requests=(RequestSeen(()),)))
    assert uncited.status is GradeStatus.FAIL and "not in the request" in uncited.reason
    wrong = grader.grade(c, trace(answer="Your locker is 31.", requests=(RequestSeen(()),)))
    assert wrong.status is GradeStatus.FAIL and "does not state '12'" in wrong.reason
    declined = grader.grade(c, trace(answer=ABSTAIN))
    assert declined.status is GradeStatus.FAIL and "abstained" in declined.reason
    assert grader.grade(case(), good).status is GradeStatus.ABSENT


def test_stale_facts_fail_when_the_answer_uses_one() -> None:
    grader = StaleFactsGrader()
    c = case(setup=SETUP, expect={"stale": ["12"]})
    assert grader.grade(c, trace(answer="Your locker is 31.")).status is GradeStatus.PASS
    used = grader.grade(c, trace(answer="Your locker is 12."))
    assert used.status is GradeStatus.FAIL and "'12'" in used.reason
    assert grader.grade(case(), trace(answer="12")).status is GradeStatus.ABSENT


def test_abstention_both_ways() -> None:
    grader = AbstentionGrader()
    must = case(expect={"abstain": True})
    assert grader.grade(must, trace(answer=ABSTAIN)).status is GradeStatus.PASS
    assert grader.grade(must, trace(status="stopped", committed=False)).status is GradeStatus.PASS
    answered = grader.grade(must, trace(answer="Your locker is 12."))
    assert answered.status is GradeStatus.FAIL and "answered although" in answered.reason
    should_answer = case(expect={"abstain": False})
    assert grader.grade(should_answer, trace(answer=ABSTAIN)).status is GradeStatus.FAIL
    assert grader.grade(should_answer, trace(answer="12 [source: x]")).status is GradeStatus.PASS
    assert grader.grade(case(), trace()).status is GradeStatus.ABSENT


def test_scope_fails_on_any_foreign_item_in_the_trace() -> None:
    grader = ScopeGrader()
    foreign_sid = "doc/globex/~/~/~/~/secret"
    setup = [
        {
            "document": "Globex pays on the 25th.",
            "id": "secret",
            "label": "foreign",
            "owner": {"tenant": "globex"},
        }
    ]
    c = case(setup=setup, expect={"foreign_text": ["25th"]})
    labels = {"foreign": label(foreign_sid, GLOBEX)}
    assert grader.grade(c, trace(labels=labels, answer=ABSTAIN)).status is GradeStatus.PASS
    as_candidate = grader.grade(
        c, trace(labels=labels, candidates=(CandidateSeen(foreign_sid, "r", GLOBEX),))
    )
    assert as_candidate.status is GradeStatus.FAIL and "candidate" in as_candidate.reason
    as_excerpt = grader.grade(
        c, trace(labels=labels, excerpts=(ExcerptSeen(foreign_sid, GLOBEX, "x", "complete"),))
    )
    assert as_excerpt.status is GradeStatus.FAIL and "excerpt" in as_excerpt.reason
    in_request = trace(
        labels=labels, requests=(RequestSeen((_block(foreign_sid, "Globex pays on the 25th."),)),)
    )
    assert grader.grade(c, in_request).status is GradeStatus.FAIL
    in_answer = grader.grade(c, trace(labels=labels, answer="Salaries are paid on the 25th."))
    assert in_answer.status is GradeStatus.FAIL and "foreign text" in in_answer.reason
    # Nothing foreign planted: absent (never a pass).
    assert grader.grade(case(), trace()).status is GradeStatus.ABSENT


def test_abstained_and_citations() -> None:
    assert abstained(trace(answer=""))
    assert abstained(trace(answer="I DON'T KNOW."))
    assert not abstained(trace(answer="It is 12."))
    assert cited_sources("a [source: x/1] b [source: y] c [source: x/1]") == ("x/1", "y")


def test_grade_constructors() -> None:
    assert Grade.passed("ok") == Grade(GradeStatus.PASS, "ok")
    assert Grade.failed("no").status is GradeStatus.FAIL
    assert Grade.absent("-").status is GradeStatus.ABSENT
