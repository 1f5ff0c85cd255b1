"""The erasure tests of the contract suites catch realistic erase bugs, each exactly where it belongs.

``broken_erasing_adapters.py`` holds adapters whose ``erase`` has one bug
each; a pytester session runs their suites' erasure tests, and every class
must fail exactly the tests below, on both backends. Together they fail
every erasure test of the four suites, so none of those tests can pass
whatever the adapter does.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from _by_backend import run_by_backend

from agentium_harness.testing.erasure_contract import ArchiveErasureTests, SessionStoreErasureTests
from agentium_harness.testing.index_erasure_contract import MemoryErasureTests, RecallErasureTests

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
BACKENDS = {"asyncio", "trio"}

_DRY = "test_erase_dry_run_changes_nothing"
_BOUND = "test_erase_is_bounded_and_resumable"
_CANCEL = "test_cancelled_erase_removes_nothing"
_RAW = "test_erased_bytes_leave_the_storage"
_UNDECLARED = "test_erase_refused_when_undeclared"
_SESSION = "test_erase_removes_a_session_and_nothing_else"
_COLLIDING = "test_erase_keeps_colliding_session_keys_apart"
_REVISIONS = "test_a_session_created_again_after_erasure_never_reuses_a_revision"

EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestUndeclaredEraseArchive": {_UNDECLARED},
    "TestResplitEraseArchive": {_COLLIDING},
    "TestResplitEraseStore": {_COLLIDING},
    "TestResplitEraseRecall": {_COLLIDING},
    "TestResplitEraseMemory": {_COLLIDING},
    # Prefix matching takes neighbours, and what it takes beyond the bound is never reported.
    "TestPrefixEraseArchive": {
        _SESSION,
        "test_erase_user_and_tenant_take_every_session_below_them",
        _BOUND,
        _COLLIDING,
    },
    "TestWholeSessionArchive": {"test_erase_groups_takes_only_those_seqs"},
    # A read from inside an erased range ends there: only reading on past the gap shows it.
    "TestGapEndsReadArchive": {"test_erase_groups_takes_only_those_seqs"},
    "TestDryRunErasesArchive": {_DRY},
    "TestUnboundedEraseArchive": {_BOUND},
    "TestEraseIgnoresCancelArchive": {_CANCEL},
    "TestSoftEraseArchive": {_RAW},
    "TestUncountedEraseArchive": {
        _SESSION,
        "test_erase_user_and_tenant_take_every_session_below_them",
        "test_erase_groups_takes_only_those_seqs",
        _DRY,
        _BOUND,
    },
    "TestUndeclaredEraseStore": {_UNDECLARED},
    "TestWidenedEraseStore": {
        _SESSION,
        "test_erase_user_and_tenant_take_every_session_below_them",
        _RAW,
        _COLLIDING,
    },
    "TestDryRunErasesStore": {_DRY},
    "TestUnboundedEraseStore": {_BOUND},
    "TestEraseIgnoresCancelStore": {_CANCEL},
    "TestKeepsRevisionsStore": {_RAW},
    "TestRevisionsRestartAfterEraseStore": {_REVISIONS},
    "TestUndeclaredEraseRecall": {_UNDECLARED},
    "TestWidenedEraseRecall": {_SESSION, _RAW},
    "TestTenantForUserRecall": {"test_erase_user_and_tenant_take_every_source_below_them", _COLLIDING},
    "TestWholeSessionRecall": {"test_erase_groups_takes_only_those_seqs_and_their_text"},
    # The "before" dry run of the bound and cancellation tests already erases.
    "TestDryRunErasesRecall": {_DRY, _BOUND, _CANCEL},
    "TestUnboundedEraseRecall": {_BOUND},
    "TestEraseIgnoresCancelRecall": {_CANCEL},
    "TestAuditsErasedTextRecall": {_RAW},
    "TestUndeclaredEraseMemory": {_UNDECLARED},
    # Erasing the session only a duplicate named takes the user's other fact too.
    "TestWidenedEraseMemory": {
        "test_erase_removes_a_sessions_facts_and_nothing_else",
        "test_a_duplicate_remember_keeps_the_groups_it_adds",
    },
    "TestTenantForUserMemory": {"test_erase_user_and_tenant_take_every_fact_below_them", _RAW, _COLLIDING},
    "TestDryRunErasesMemory": {_DRY},
    "TestUnboundedEraseMemory": {_BOUND},
    "TestEraseIgnoresCancelMemory": {_CANCEL},
    # It also reports nothing, which three more tests notice.
    "TestUncheckpointedMemory": {"test_erase_removes_a_sessions_facts_and_nothing_else", _DRY, _BOUND, _RAW},
}


def test_each_broken_eraser_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken_erasing=(HERE / "broken_erasing_adapters.py").read_text("utf-8"))
    # Only the erasure tests: the bugs are all in ``erase``, and the rest of each suite is slow.
    outcomes = run_by_backend(pytester, "erase", on_trio=set().union(*EXPECTED_FAILURES.values()))
    failed: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    ran: set[str] = set()
    for report in outcomes:
        _, cls, test = report.nodeid.split("::")
        ran.add(cls)
        if report.failed:
            name, _, backend = test.partition("[")
            failed[cls][name].add(backend.rstrip("]"))
    assert ran == set(EXPECTED_FAILURES), "every broken eraser must have run"
    assert {cls: set(failed[cls]) for cls in EXPECTED_FAILURES} == EXPECTED_FAILURES
    for cls, tests in failed.items():
        for name, backends in tests.items():
            assert backends == BACKENDS, f"{cls}.{name} failed only on {backends}"


@pytest.mark.parametrize(
    ("mixin", "suffix"),
    [
        (ArchiveErasureTests, "Archive"),
        (SessionStoreErasureTests, "Store"),
        (RecallErasureTests, "Recall"),
        (MemoryErasureTests, "Memory"),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_every_erasure_test_is_failed_by_some_broken_eraser(mixin: type, suffix: str) -> None:
    failing = set().union(*(tests for cls, tests in EXPECTED_FAILURES.items() if cls.endswith(suffix)))
    erasure_tests = {name for name in vars(mixin) if name.startswith("test_")}
    # A broken eraser may also fail a suite test outside the erasure part (one that erases on the way).
    assert erasure_tests == failing & erasure_tests
