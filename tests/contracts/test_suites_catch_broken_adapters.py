"""The contract suites must be able to fail: each broken adapter fails the tests naming its bug.

``broken_adapters.py`` holds one adapter per realistic bug (last writer wins,
a non-atomic batch, ids joined with ``:``, an ignored bound, a compare-and-set
with an ``await`` between compare and write, reads that do not re-check
digests or scopes, a load that decodes leniently and skips the digest, a save
that stores another session's snapshot, …). They run through the suites
in a pytester session. Each must fail exactly the expected standard tests, on
both anyio backends, and pass or skip the rest; together they make every
standard test fail at least once, so no standard test is one that cannot fail.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from _by_backend import run_by_backend

from agentium_harness.testing.contracts import (
    GUARD_TEST_NAME,
    ArchiveContract,
    SessionStoreContract,
    standard_tests,
)
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
BACKENDS = {"asyncio", "trio"}

EXPECTED_FAILURES: dict[str, set[str]] = {
    # A client bound to the loop of its first call: only the any-loop test catches it.
    "TestLoopBoundArchive": {"test_one_adapter_serves_threads_each_with_its_own_event_loop"},
    "TestLoopBoundStore": {"test_one_adapter_serves_threads_each_with_its_own_event_loop"},
    "TestOverwritingArchive": {
        "test_batch_repeating_a_seq_with_different_content_conflicts",
        "test_batch_with_a_conflict_writes_nothing",
        "test_conflicting_reappend_raises_and_keeps_the_stored_group",
    },
    "TestNonAtomicArchive": {
        "test_batch_repeating_a_seq_with_different_content_conflicts",
        "test_batch_with_a_conflict_writes_nothing",
    },
    # Its inherited read re-checks each group's retained scope against the
    # mangled key, so every read of a rich group fails closed as well.
    "TestColonKeyArchive": {
        "test_conflicting_reappend_raises_and_keeps_the_stored_group",
        "test_identical_reappend_is_a_noop_success",
        "test_read_groups_returns_whole_groups_ascending_from_start",
        "test_rich_groups_round_trip_exactly",
        "test_free_text_with_nul_and_control_characters_round_trips_exactly",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_tricky_ids_round_trip",
        "test_colliding_session_keys_stay_apart",
    },
    # Keys joined with '|', which no tricky key contains: only the collision set catches it.
    "TestPipeKeyArchive": {"test_colliding_session_keys_stay_apart"},
    "TestUnboundedReadArchive": {
        "test_read_groups_never_exceeds_max_groups",
        "test_reads_recheck_digests_of_stored_groups",
    },
    "TestDescendingReadArchive": {
        "test_batch_with_a_conflict_writes_nothing",
        "test_identical_reappend_is_a_noop_success",
        "test_read_groups_never_exceeds_max_groups",
        "test_read_groups_returns_whole_groups_ascending_from_start",
        "test_reads_recheck_digests_of_stored_groups",
        "test_rich_groups_round_trip_exactly",
        "test_free_text_with_nul_and_control_characters_round_trips_exactly",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
    },
    # A read from inside a gap in the numbering answers nothing: reading on from seq 5 (groups 7
    # and 9 follow) shows it, and so does a session whose only group is seq 3, read from 0.
    "TestGapEndsReadArchive": {
        "test_read_groups_returns_whole_groups_ascending_from_start",
        "test_tricky_ids_round_trip",
    },
    "TestWrongDigestArchive": {
        "test_append_empty_batch_returns_no_receipts",
        "test_append_returns_one_receipt_per_group_in_order",
        "test_batch_repeating_a_seq_with_different_content_conflicts",
        "test_batch_with_a_conflict_writes_nothing",
        "test_cancelled_signal_refuses_append",
        "test_conflicting_reappend_raises_and_keeps_the_stored_group",
        "test_identical_reappend_is_a_noop_success",
        "test_past_deadline_refuses_append",
        "test_rich_groups_round_trip_exactly",
        "test_free_text_with_nul_and_control_characters_round_trips_exactly",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_colliding_session_keys_stay_apart",
    },
    "TestDropsRetainedArchive": {
        "test_conflicting_reappend_raises_and_keeps_the_stored_group",
        "test_identical_reappend_is_a_noop_success",
        "test_read_groups_returns_whole_groups_ascending_from_start",
        "test_rich_groups_round_trip_exactly",
        "test_free_text_with_nul_and_control_characters_round_trips_exactly",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_tricky_ids_round_trip",
        "test_colliding_session_keys_stay_apart",
    },
    "TestIgnoresCancellationArchive": {
        "test_cancelled_signal_refuses_append",
        "test_cancelled_signal_refuses_read",
        "test_past_deadline_refuses_append",
    },
    "TestUndeclaredHealthArchive": {
        "test_health_refused_when_undeclared",
    },
    "TestUndeclaredReadsArchive": {
        "test_read_groups_refused_when_undeclared",
    },
    "TestStubReadsArchive": {
        "test_batch_with_a_conflict_writes_nothing",
        "test_cancelled_signal_refuses_read",
        "test_conflicting_reappend_raises_and_keeps_the_stored_group",
        "test_declared_capabilities_are_implemented",
        "test_identical_reappend_is_a_noop_success",
        "test_read_groups_never_exceeds_max_groups",
        "test_read_groups_returns_whole_groups_ascending_from_start",
        "test_reads_recheck_digests_of_stored_groups",
        "test_reads_refuse_a_group_of_another_session",
        "test_rich_groups_round_trip_exactly",
        "test_free_text_with_nul_and_control_characters_round_trips_exactly",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_tricky_ids_round_trip",
        "test_colliding_session_keys_stay_apart",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
    },
    "TestInheritedCapabilitiesArchive": {
        "test_declares_capabilities",
    },
    "TestForgetfulDurableArchive": {
        "test_durable_across_reopen",
    },
    "TestSilentHealthArchive": {
        "test_health_probe",
    },
    "TestCloseOnceArchive": {
        "test_aclose_is_idempotent",
    },
    "TestNoDigestCheckArchive": {
        "test_reads_recheck_digests_of_stored_groups",
        "test_reads_refuse_a_group_of_another_session",
    },
    # A text column that cannot hold NUL: only free text holding one shows it.
    "TestNulStrippingArchive": {"test_free_text_with_nul_and_control_characters_round_trips_exactly"},
    "TestNulStrippingStore": {"test_free_text_with_nul_and_control_characters_round_trips_exactly"},
    "TestNoScopeCheckArchive": {
        "test_reads_refuse_a_group_of_another_session",
    },
    "TestNoCompareStore": {
        "test_concurrent_saves_on_one_revision_have_one_winner",
        "test_create_on_existing_session_conflicts",
        "test_stale_revision_conflicts_and_changes_nothing",
        "test_update_of_missing_session_conflicts",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
    },
    "TestYieldingCompareStore": {
        "test_concurrent_saves_on_one_revision_have_one_winner",
    },
    "TestColonKeyStore": {
        "test_list_sessions_sorted_bounded_and_per_user",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_colliding_session_keys_stay_apart",
    },
    "TestPipeKeyStore": {"test_colliding_session_keys_stay_apart"},
    "TestStaticRevisionStore": {
        "test_concurrent_saves_on_one_revision_have_one_winner",
        "test_revision_increases_with_each_save",
        "test_stale_revision_conflicts_and_changes_nothing",
        "test_update_of_missing_session_conflicts",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
    },
    "TestUpgradesLegacyStore": {
        "test_snapshots_round_trip_exactly",
    },
    "TestLeakyListingStore": {
        "test_list_sessions_sorted_bounded_and_per_user",
        "test_colliding_session_keys_stay_apart",
    },
    "TestIgnoresCancellationStore": {
        "test_cancelled_signal_refuses_save",
        "test_past_deadline_refuses_save_and_load",
    },
    "TestUndeclaredListingStore": {
        "test_list_sessions_refused_when_undeclared",
    },
    "TestForgetfulDurableStore": {
        "test_durable_across_reopen",
    },
    "TestPhantomStore": {
        "test_cancelled_signal_refuses_save",
        "test_load_missing_returns_none",
        "test_past_deadline_refuses_save_and_load",
        "test_sessions_are_isolated_even_with_tricky_ids",
        "test_update_of_missing_session_conflicts",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
        "test_save_refuses_another_sessions_snapshot",  # its loads of a refused create find a snapshot
    },
    "TestMisreportedRevisionStore": {
        "test_concurrent_saves_on_one_revision_have_one_winner",
        "test_create_on_existing_session_conflicts",
        "test_first_save_creates_a_revision",
        "test_revision_increases_with_each_save",
        "test_stale_revision_conflicts_and_changes_nothing",
        "test_one_adapter_serves_threads_each_with_its_own_event_loop",
        "test_save_refuses_another_sessions_snapshot",  # the stored revision is not the one it returned
    },
    "TestUndeclaredHealthStore": {
        "test_health_refused_when_undeclared",
    },
    "TestStubListingStore": {
        "test_declared_capabilities_are_implemented",
        "test_list_sessions_sorted_bounded_and_per_user",
        "test_colliding_session_keys_stay_apart",
    },
    "TestInheritedCapabilitiesStore": {
        "test_declares_capabilities",
    },
    "TestSilentHealthStore": {
        "test_health_probe",
    },
    "TestCloseOnceStore": {
        "test_aclose_is_idempotent",
    },
    "TestNoVerifyStore": {
        "test_corrupt_stored_snapshot_raises_snapshot_corrupt_error",
    },
    "TestNoScopeCheckStore": {
        "test_save_refuses_another_sessions_snapshot",
    },
}


def _run(pytester: pytest.Pytester) -> dict[str, dict[str, set[str]]]:
    """Run the broken adapters; return, per test class, failing test names and their backends."""
    pytester.makepyfile(test_broken=(HERE / "broken_adapters.py").read_text("utf-8"))
    # The erasure tests have their own broken adapters (test_erasure_suites_catch_broken_adapters.py);
    # their names say "erase" or "erasure" (which does not contain "erase").
    outcomes = run_by_backend(
        pytester,
        "not erase and not erasure",
        on_trio=set().union(*EXPECTED_FAILURES.values(), *MAY_ALSO_FAIL.values()),
    )
    failed: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    ran: set[str] = set()
    for report in outcomes:
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            name, _, backend = test.partition("[")
            failed[cls][name].add(backend.rstrip("]"))
    assert ran == set(EXPECTED_FAILURES), "every broken adapter class must have run"
    return failed


# Failures that depend on a race between threads: the store that yields between its compare
# and its write usually lets two of the any-loop test's threads create one session (a catch),
# but the threads may also happen to run one after another.
MAY_ALSO_FAIL: dict[str, set[str]] = {
    "TestYieldingCompareStore": {"test_one_adapter_serves_threads_each_with_its_own_event_loop"},
}


def test_each_broken_adapter_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    failed = _run(pytester)
    actual = {cls: set(failed[cls]) - MAY_ALSO_FAIL.get(cls, set()) for cls in EXPECTED_FAILURES}
    assert actual == EXPECTED_FAILURES
    for cls, tests in failed.items():
        for name, backends in tests.items():
            if name not in MAY_ALSO_FAIL.get(cls, set()):
                assert backends == BACKENDS, f"{cls}.{name} failed only on {backends}"


@pytest.mark.parametrize("suite", [ArchiveContract, SessionStoreContract], ids=lambda c: c.__name__)
def test_every_standard_test_is_failed_by_some_broken_adapter(suite: type) -> None:
    prefix = "Archive" if suite is ArchiveContract else "Store"
    failing = set().union(*(tests for cls, tests in EXPECTED_FAILURES.items() if cls.endswith(prefix)))
    # The guard is proven able to fail in test_contract_guard.py.
    assert set(standard_tests(suite)) - {GUARD_TEST_NAME} - ERASURE_TESTS == failing
