"""The built-in extractive summarizer passes SummarizerContract; broken ones fail exactly their bugs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from agentium_harness.adapters.summarizers import ExtractiveSummarizer, ExtractiveSummarizerConfig
from agentium_harness.testing import SummarizerContract
from agentium_harness.testing.contracts import GUARD_TEST_NAME, standard_tests

pytestmark = pytest.mark.anyio
pytest_plugins = ["pytester"]

HERE = Path(__file__).parent


class TestExtractiveSummarizer(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> ExtractiveSummarizer:
        return ExtractiveSummarizer()


class TestTightExtractiveSummarizer(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> ExtractiveSummarizer:
        return ExtractiveSummarizer(ExtractiveSummarizerConfig(sentences_per_group=1, max_chars=64))


#: Every test that checks an answer's shape: a bug in the answer fails all of them.
SHAPE = {
    "test_first_fold_covers_the_groups_given",
    "test_folds_incrementally_into_the_previous_summary",
    "test_instruction_text_in_groups_does_not_change_the_answer_shape",
    "test_the_frontier_never_passes_a_gap",
    "test_a_fold_keeps_the_previous_summary",
    "test_the_summary_stays_bounded",
}

EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestInheritedCaps": {"test_declares_capabilities"},
    "TestOverclaims": SHAPE,
    "TestInventsCitations": SHAPE,
    "TestObeysTheGroup": {"test_instruction_text_in_groups_does_not_change_the_answer_shape"},
    "TestIgnoresDeadline": {
        "test_an_expired_context_is_refused_before_any_work",
        "test_a_cancelled_context_reads_no_group",
        "test_cancellation_is_honoured_mid_call",
    },
    # Issue 29's misses, each caught by the test named after it.
    "TestFoldsPastGaps": {"test_the_frontier_never_passes_a_gap"},
    "TestDropsThePrevious": {"test_a_fold_keeps_the_previous_summary"},
    "TestFrontierBehindCitations": SHAPE,
    "TestChecksCancellationAtTheEnd": {"test_a_cancelled_context_reads_no_group"},
    "TestChecksCancellationAtTheStart": {"test_cancellation_is_honoured_mid_call"},
    "TestGrowsWithoutBound": {"test_the_summary_stays_bounded"},
}


def test_each_broken_summarizer_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=(HERE / "broken_summarizers.py").read_text("utf-8"))
    reprec = pytester.inline_run("-p", "no:cacheprovider")
    failed: dict[str, set[str]] = defaultdict(set)
    ran: set[str] = set()
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.when != "call" and not report.failed:
            continue
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            failed[cls].add(test.split("[")[0])
    assert ran == set(EXPECTED_FAILURES)
    for cls, expected in EXPECTED_FAILURES.items():
        assert failed[cls] == expected, (cls, failed[cls])
    # Together the broken summarizers make every standard test fail at least once.
    every = set(standard_tests(SummarizerContract)) - {GUARD_TEST_NAME}
    assert set().union(*failed.values()) == every
