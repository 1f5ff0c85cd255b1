"""EmbedderContract (issue 25): the built-in embedder passes it; broken embedders fail exactly their bugs.

Each broken embedder carries one realistic bug (wrong dimension, NaN, too
many or too few vectors, vectors out of order, noise, a constant vector, a
batch it cannot serve, cancellation ignored, a model that drifts, a health
probe that raises). Together they make every standard test fail at least
once, so no standard test is one that cannot fail.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.testing import EmbedderContract
from agentium_harness.testing.contracts import GUARD_TEST_NAME, standard_tests

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent

EXPECTED_FAILURES: dict[str, set[str]] = {
    "TestReferenceEmbedder": set(),
    "TestInheritedCaps": {"test_declares_capabilities"},
    "TestWarmUpIgnoresCancellation": {"test_warm_up_can_repeat_and_honours_cancellation"},
    "TestWrongDimension": {
        "test_one_vector_per_text_of_the_declared_dimension",
        "test_same_text_same_vector_whatever_the_batch",
        "test_different_texts_get_different_vectors",
        "test_a_full_batch_is_accepted",
    },
    "TestReturnsNaN": {
        "test_one_vector_per_text_of_the_declared_dimension",
        "test_same_text_same_vector_whatever_the_batch",
        "test_different_texts_get_different_vectors",
        "test_a_full_batch_is_accepted",
    },
    "TestTooManyVectors": {
        "test_one_vector_per_text_of_the_declared_dimension",
        "test_same_text_same_vector_whatever_the_batch",
        "test_a_full_batch_is_accepted",
    },
    "TestTooFewVectors": {
        "test_one_vector_per_text_of_the_declared_dimension",
        "test_same_text_same_vector_whatever_the_batch",
        "test_a_full_batch_is_accepted",
    },
    "TestRotated": {"test_same_text_same_vector_whatever_the_batch"},
    "TestNoisy": {"test_same_text_same_vector_whatever_the_batch"},
    "TestConstant": {"test_different_texts_get_different_vectors"},
    "TestOverstatesItsBatch": {"test_a_full_batch_is_accepted"},
    "TestIgnoresCancellation": {"test_cancelled_calls_raise"},
    "TestDriftingModel": {"test_model_is_declared_and_stable"},
    "TestBrokenHealth": {"test_health_answers_when_declared"},
}


def test_each_broken_embedder_fails_exactly_its_bugs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=(HERE / "broken_embedders.py").read_text("utf-8"))
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
    # Together the broken embedders make every standard test fail at least once.
    every = set(standard_tests(EmbedderContract)) - {GUARD_TEST_NAME}
    assert set().union(*failed.values()) == every


class TestHashingEmbedder(EmbedderContract):
    """The built-in embedder passes the suite in this test run too (not only inside pytester)."""

    @pytest.fixture
    def embedder(self) -> HashingEmbedder:
        return HashingEmbedder()
