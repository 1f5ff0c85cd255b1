"""The built-in SQLite memory store passes MemoryStoreContract; broken stores fail exactly their bugs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from _by_backend import run_by_backend

from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.testing import MemoryStoreContract, RawStorage, raw_files
from agentium_harness.testing.contracts import GUARD_TEST_NAME, standard_tests
from agentium_harness.testing.erasure_contract import ArchiveErasureTests, SessionStoreErasureTests
from agentium_harness.testing.index_erasure_contract import MemoryErasureTests, RecallErasureTests

pytestmark = pytest.mark.anyio
pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
#: Covered by test_erasure_suites_catch_broken_adapters.py.
ERASURE_TESTS = {
    name
    for suite in (ArchiveErasureTests, SessionStoreErasureTests, RecallErasureTests, MemoryErasureTests)
    for name in vars(suite)
    if name.startswith("test_")
}


class TestSQLiteMemoryStore(MemoryStoreContract):
    @pytest.fixture
    async def memory_store(self, tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
        store = SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))
        yield store
        await store.aclose()

    @pytest.fixture
    def reopen_memory_store(self, tmp_path: Path) -> Callable[[], SQLiteMemoryStore]:
        return lambda: SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / "memory.db")))

    @pytest.fixture
    def raw_storage(self, tmp_path: Path) -> RawStorage:
        path = str(tmp_path / "memory.db")
        return raw_files(path, path + "-wal", path + "-journal")


class TestSQLiteMemoryStoreSharingTheHarnessFile(MemoryStoreContract):
    """The memory tables live beside the archive's and session store's in one agentium.db."""

    @pytest.fixture
    async def memory_store(self, tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
        from agentium_harness.adapters.sqlite import SQLiteArchive
        from agentium_harness.plugin_api import OpContext, SessionKey

        path = str(tmp_path / "agentium.db")
        archive = SQLiteArchive(SQLiteConfig(path=path))
        await archive.read_groups(SessionKey("t", "u", "s"), 0, 1, OpContext.with_timeout(30.0))
        await archive.aclose()
        store = SQLiteMemoryStore(SQLiteConfig(path=path))
        yield store
        await store.aclose()

    @pytest.fixture
    def raw_storage(self, tmp_path: Path) -> RawStorage:
        path = str(tmp_path / "agentium.db")
        return raw_files(path, path + "-wal", path + "-journal")


class TestInMemoryMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def memory_store(self) -> InMemoryMemoryStore:
        return InMemoryMemoryStore()

    @pytest.fixture
    def raw_storage(self, memory_store: InMemoryMemoryStore) -> RawStorage:
        return lambda: "".join(r.text for revs in memory_store._revisions.values() for r in revs).encode()


EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestLoopBound": {"test_one_adapter_serves_threads_each_with_its_own_event_loop"},
    "TestInheritedCaps": {"test_declares_capabilities"},
    # It answers a duplicate citing nothing new "stored" too.
    "TestNoDuplicates": {
        "test_an_identical_current_fact_is_acknowledged_as_a_duplicate",
        "test_a_duplicate_remember_keeps_the_groups_it_adds",
    },
    "TestLosesProvenance": {
        "test_remember_acknowledges_and_lookup_returns_the_fact",
        "test_a_duplicate_remember_keeps_the_groups_it_adds",
    },
    "TestDropsDuplicateProvenance": {"test_a_duplicate_remember_keeps_the_groups_it_adds"},
    "TestDropsCorrectionProvenance": {"test_a_duplicate_remember_keeps_the_groups_it_adds"},
    "TestDropsProvenancePastTheBound": {"test_a_duplicate_remember_keeps_the_groups_it_adds"},
    "TestRepairsBadFacts": {
        "test_bad_facts_are_rejected_and_nothing_is_written",
        "test_fact_text_is_kept_verbatim_whatever_it_says",
    },
    "TestLeaksTenants": {
        "test_lookup_is_bounded_and_never_crosses_scopes",
        "test_hostile_ids_stay_apart",
        "test_colliding_scopes_stay_apart_in_every_operation",
    },
    # Foreign rows take the places of the scope's own in the colliding set too.
    "TestFiltersAfterLimit": {
        "test_lookup_is_bounded_and_never_crosses_scopes",
        "test_colliding_scopes_stay_apart_in_every_operation",
    },
    "TestReturnsExpired": {
        "test_facts_outside_their_validity_window_are_not_returned",
        "test_lookup_is_bounded_and_never_crosses_scopes",
    },
    "TestLosesHistory": {
        "test_correct_writes_a_new_revision_and_keeps_the_history",
        "test_a_fact_holds_at_most_max_fact_revisions",
        "test_a_duplicate_remember_keeps_the_groups_it_adds",
    },
    "TestForgetDoesNothing": {
        "test_forget_tombstones_the_fact_and_removes_its_content",
        "test_a_forgotten_fact_cannot_be_corrected",
        "test_a_fact_holds_at_most_max_fact_revisions",
    },
    "TestRevealsForeignIds": {"test_another_tenants_fact_is_refused_exactly_like_a_missing_one"},
    "TestIgnoresDeadline": {"test_an_expired_context_is_refused_before_any_work"},
    "TestForgetsUndeclared": {"test_undeclared_operations_raise_unsupported"},
    "TestListsOldestFirst": {"test_list_facts_is_bounded_newest_first_and_shows_expired_facts"},
    # Its facts, stored under the joined tenant, are missed by a session erasure too.
    "TestJoinsIds": {
        "test_a_duplicate_remember_keeps_the_groups_it_adds",
        "test_hostile_ids_stay_apart",
        "test_colliding_scopes_stay_apart_in_every_operation",
        "test_every_mutation_checks_scope_directly_and_through_the_manager",
    },
    # Issue 29's misses: a change checked on joined ids, an absent id keyed as '~'.
    "TestJoinsOwnerOnChange": {
        "test_colliding_scopes_stay_apart_in_every_operation",
        "test_every_mutation_checks_scope_directly_and_through_the_manager",
    },
    "TestNotesAbsentAsTilde": {"test_colliding_scopes_stay_apart_in_every_operation"},
    "TestNotDurable": {"test_acknowledged_writes_survive_a_reopen"},
    "TestIgnoresRevisionCap": {"test_a_fact_holds_at_most_max_fact_revisions"},
}


def _failures(pytester: pytest.Pytester) -> tuple[dict[str, set[str]], set[str]]:
    pytester.makepyfile(test_broken=(HERE / "broken_memory_stores.py").read_text("utf-8"))
    # The erasure tests have their own broken adapters (test_erasure_suites_catch_broken_adapters.py).
    outcomes = run_by_backend(pytester, "not erase", on_trio=set().union(*EXPECTED_FAILURES.values()))
    failed: dict[str, set[str]] = defaultdict(set)
    ran: set[str] = set()
    for report in outcomes:
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            failed[cls].add(test.split("[")[0])
    return failed, ran


def test_each_broken_memory_store_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    failed, ran = _failures(pytester)
    assert ran == set(EXPECTED_FAILURES)
    mismatched = {cls: failed[cls] for cls, expected in EXPECTED_FAILURES.items() if failed[cls] != expected}
    assert not mismatched, mismatched
    # Together the broken stores make every standard test fail at least once.
    every = set(standard_tests(MemoryStoreContract)) - {GUARD_TEST_NAME} - ERASURE_TESTS
    assert set().union(*failed.values()) == every
