"""RecallStoreContract can fail: each broken recall store fails exactly the tests naming its bug.

Together they make every standard recall test fail at least once, so no
standard test is one that cannot fail.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from _by_backend import run_by_backend

from agentium_harness.testing.contracts import GUARD_TEST_NAME, RecallStoreContract, standard_tests
from agentium_harness.testing.erasure_contract import ArchiveErasureTests, SessionStoreErasureTests
from agentium_harness.testing.index_erasure_contract import MemoryErasureTests, RecallErasureTests

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
#: Covered by test_erasure_suites_catch_broken_adapters.py.
ERASURE_TESTS = {
    name
    for suite in (ArchiveErasureTests, SessionStoreErasureTests, RecallErasureTests, MemoryErasureTests)
    for name in vars(suite)
    if name.startswith("test_")
}

EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestLoopBound": {"test_one_adapter_serves_threads_each_with_its_own_event_loop"},
    "TestInheritedCaps": {"test_declares_capabilities"},
    "TestStubSeek": {
        "test_declared_capabilities_are_implemented",
        "test_archived_groups_round_trip_through_seek",
        "test_mismatched_receipts_are_refused_and_nothing_is_written",
        "test_colliding_sessions_stay_apart_in_index_and_seek",
        "test_seek_rechecks_digests_of_indexed_groups",
    },
    # Leaked candidates also break the count and outlive a delete.
    "TestLeaky": {
        "test_no_scope_sees_another_scopes_sources",
        "test_discovery_respects_its_bounds",
        "test_revisions_are_truthful_after_update_and_delete",
        "test_colliding_owners_stay_apart",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
    },
    # Dropping the caller's context also drops its cancellation.
    "TestIgnoresDiscoveryBounds": {
        "test_discovery_respects_its_bounds",
        "test_close_after_a_cancelled_call_and_twice",
    },
    "TestIgnoresReadBounds": {"test_reads_respect_their_bounds"},
    "TestStaleValidation": {
        "test_no_scope_sees_another_scopes_sources",
        "test_revisions_are_truthful_after_update_and_delete",
        "test_colliding_owners_stay_apart",
    },
    "TestInterpretsSyntax": {"test_query_syntax_is_matched_as_words"},
    "TestRefusesEmptyQuery": {"test_empty_and_huge_queries"},
    "TestWritesFirst": {"test_cancelled_calls_raise_and_write_nothing"},
    "TestCloseFailsAfterCancel": {"test_close_after_a_cancelled_call_and_twice"},
    "TestSeekIgnoresBounds": {
        "test_archived_groups_round_trip_through_seek",
        "test_seek_rechecks_digests_of_indexed_groups",
    },
    "TestTrustsItsOwnDigests": {"test_mismatched_receipts_are_refused_and_nothing_is_written"},
    "TestCountsPastTheEnd": {"test_unindexed_groups_lists_exactly_the_missing_seqs"},
    "TestCountsFromZero": {"test_unindexed_groups_lists_exactly_the_missing_seqs"},
    # Hybrid recall (issue 25).
    # Ignoring the vector also ignores its model; dropping the words also loses the scope test's own match.
    "TestHybridIsWordsOnly": {
        "test_vectors_find_a_source_that_shares_no_word_with_the_query",
        "test_vectors_of_another_model_are_refused_and_nothing_is_mixed",
    },
    "TestHybridIsVectorsOnly": {
        "test_hybrid_discovery_keeps_lexical_matches_and_its_bounds",
        "test_hybrid_discovery_never_crosses_scopes",
    },
    "TestHybridIgnoresBounds": {"test_hybrid_discovery_keeps_lexical_matches_and_its_bounds"},
    "TestHybridLeaks": {"test_hybrid_discovery_never_crosses_scopes"},
    "TestMixesModels": {"test_vectors_of_another_model_are_refused_and_nothing_is_mixed"},
    "TestKeepsStaleVectors": {"test_stale_vectors_are_skipped_and_dropped_with_their_revision"},
    # Issue 29's misses: joined owner and session keys, a seek without its digest check,
    # and a seek answered without declaring canonical_archive_reads.
    "TestJoinsOwnerKeys": {"test_colliding_owners_stay_apart"},
    "TestJoinsSessionKeys": {"test_colliding_sessions_stay_apart_in_index_and_seek"},
    "TestSeekSkipsTheDigest": {"test_seek_rechecks_digests_of_indexed_groups"},
    "TestSeeksUndeclared": {"test_undeclared_operations_are_refused"},
    # A read that returns stored text as found, as the SQLite store did before a8346e8.
    "TestReturnsEditedText": {"test_text_edited_in_the_backend_is_never_read_as_evidence"},
    # Formats group excerpts itself: the engine cannot map them onto the group's messages.
    "TestRewritesGroupExcerpts": {"test_group_excerpts_are_pieces_of_the_indexed_text"},
}


def test_each_broken_recall_store_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken_recall=(HERE / "broken_recall_adapters.py").read_text("utf-8"))
    # The erasure tests have their own broken adapters (test_erasure_suites_catch_broken_adapters.py).
    outcomes = run_by_backend(pytester, "not erase", on_trio=set().union(*EXPECTED_FAILURES.values()))
    failed: dict[str, set[str]] = defaultdict(set)
    ran: set[str] = set()
    for report in outcomes:
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            failed[cls].add(test.partition("[")[0])
    assert ran == set(EXPECTED_FAILURES), "every broken recall store must have run"
    actual = {cls: failed[cls] for cls in EXPECTED_FAILURES}
    assert actual == EXPECTED_FAILURES
    # Every standard test (the guard aside) is made to fail by at least one bug.
    caught = set().union(*EXPECTED_FAILURES.values())
    assert caught == set(standard_tests(RecallStoreContract)) - {GUARD_TEST_NAME} - ERASURE_TESTS
