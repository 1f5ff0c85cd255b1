"""VerifierContract: a reference verifier passes it; broken verifiers fail exactly their bugs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from _by_backend import run_by_backend

from agentium_harness.testing import VerifierContract
from agentium_harness.testing.contracts import GUARD_TEST_NAME, standard_tests

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent

EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestReferenceVerifier": set(),
    "TestInheritedCaps": {"test_declares_capabilities"},
    "TestPassesAnything": {
        "test_contradicting_evidence_fails",
        "test_each_evidence_kind_alone_fails_whatever_the_claim",
        "test_claimed_digests_and_words_are_not_evidence",
        "test_verdict_follows_the_current_evidence",
        "test_evidence_fits_a_narrowed_budget_in_whole_entries",
        "test_revisions_are_judged_like_first_attempts",
    },
    "TestMissingIsFailure": {
        "test_missing_evidence_is_unknown",
        "test_claimed_digests_and_words_are_not_evidence",
        "test_verdict_follows_the_current_evidence",
    },
    "TestTrustsClaimedDigests": {
        "test_claimed_digests_and_words_are_not_evidence",
        "test_each_evidence_kind_alone_fails_whatever_the_claim",
    },
    "TestCachesTheFirstReading": {
        "test_claimed_digests_and_words_are_not_evidence",
        "test_verdict_follows_the_current_evidence",
        "test_evidence_fits_a_narrowed_budget_in_whole_entries",
        "test_revisions_are_judged_like_first_attempts",
    },
    "TestForgetsEvidenceOnPass": {"test_passing_evidence_passes_with_evidence"},
    "TestIgnoresTheBudget": {"test_evidence_fits_a_narrowed_budget_in_whole_entries"},
    "TestCutsEntriesToFit": {"test_evidence_fits_a_narrowed_budget_in_whole_entries"},
    "TestIgnoresCancellation": {"test_a_cancelled_or_expired_context_raises_or_does_not_pass"},
    "TestKeepsItsLockWhenCancelled": {"test_a_cancelled_call_leaves_the_verifier_usable"},
    "TestRepairsWhatItJudges": {
        "test_verify_does_not_change_the_evidence",
        "test_each_evidence_kind_alone_fails_whatever_the_claim",
        "test_evidence_fits_a_narrowed_budget_in_whole_entries",
    },
    "TestIgnoresTheRunStart": {"test_evidence_from_before_the_run_does_not_pass"},
    "TestGivesUpOnRevisions": {"test_revisions_are_judged_like_first_attempts"},
    # Issue 29's misses. The stale-record test now runs for arranged test records too.
    "TestStopsDeclaringTestRecords": {
        "test_each_evidence_kind_alone_fails_whatever_the_claim",
        "test_evidence_from_before_the_run_does_not_pass",
    },
    "TestLeavesItsChildRunning": {"test_nothing_a_cancelled_call_started_outlives_it"},
    "TestLeavesItsThreadRunning": {"test_nothing_a_cancelled_call_started_outlives_it"},
    # Its arrange_failing breaks both kinds, which hides the bug from the older claim test.
    "TestTrustsClaimedDigestsBehindABothKindsFixture": {
        "test_each_evidence_kind_alone_fails_whatever_the_claim"
    },
}


def test_each_broken_verifier_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=(HERE / "broken_verifiers.py").read_text("utf-8"))
    outcomes = run_by_backend(pytester)
    failed: dict[str, set[str]] = defaultdict(set)
    ran: set[str] = set()
    for report in outcomes:
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            failed[cls].add(test.split("[")[0])
    assert ran == set(EXPECTED_FAILURES)
    for cls, expected in EXPECTED_FAILURES.items():
        assert failed[cls] == expected, (cls, failed[cls])
    # The reference verifier passes every standard test, on every backend.
    assert not failed["TestReferenceVerifier"]
    # Together the broken verifiers make every standard test fail at least once.
    every = set(standard_tests(VerifierContract)) - {GUARD_TEST_NAME}
    assert set().union(*failed.values()) == every
