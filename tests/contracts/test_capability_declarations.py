"""Capability declarations per instance; skipped tests of an implemented capability (issue 29 item 5).

- An adapter instance may narrow its class's declaration (``instance_capabilities``,
  read by ``plugin_api.capabilities_of``): the suites and the runtime use it;
  building a runtime refuses one that turns on what the class leaves off.
- A standard test skipped because a capability is undeclared, while the
  adapter implements its method, warns (``UndeclaredCapabilityWarning``), or
  fails with ``strict_capabilities = True``.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentium_harness import CapabilityError, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import MemoryCapabilities, RecallCapabilities, capabilities_of

pytest_plugins = ["pytester"]

SUITE_FILE = '''
import attrs
import pytest

from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.plugin_api import RecallCapabilities
from agentium_harness.testing import RecallStoreContract


class SeeksUndeclared(InMemoryRecallStore):
    """Answers seek_groups and indexes groups, declaring neither."""

    capabilities = attrs.evolve(
        InMemoryRecallStore.capabilities, canonical_archive_reads=False, archive_indexing=False
    )


class TestWarns(RecallStoreContract):
    @pytest.fixture
    def recall_store(self):
        return SeeksUndeclared()


class TestStrict(RecallStoreContract):
    strict_capabilities = True

    @pytest.fixture
    def recall_store(self):
        return SeeksUndeclared()
'''


def _outcomes(pytester: pytest.Pytester) -> tuple[dict[str, set[str]], list[str]]:
    pytester.makepyfile(test_declarations=SUITE_FILE)
    reprec = pytester.inline_run("-p", "no:cacheprovider", "-W", "always")
    failed: dict[str, set[str]] = {"TestWarns": set(), "TestStrict": set()}
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.failed:
            _, cls, test = report.nodeid.split("::")
            failed[cls].add(test.partition("[")[0])
    warnings = [str(call.warning_message.message) for call in reprec.getcalls("pytest_warning_recorded")]
    return failed, warnings


def test_skipped_tests_of_an_implemented_capability_warn_or_fail(pytester: pytest.Pytester) -> None:
    failed, warnings = _outcomes(pytester)
    archive_tests = {
        "test_archived_groups_round_trip_through_seek",
        "test_mismatched_receipts_are_refused_and_nothing_is_written",
        "test_colliding_sessions_stay_apart_in_index_and_seek",
        "test_seek_rechecks_digests_of_indexed_groups",
        "test_unindexed_groups_lists_exactly_the_missing_seqs",
        "test_group_excerpts_are_pieces_of_the_indexed_text",
        # The erasure suite's groups and colliding-keys tests need archive_indexing as well.
        "test_erase_groups_takes_only_those_seqs_and_their_text",
        "test_erase_keeps_colliding_session_keys_apart",
    }
    # Answering what it does not declare fails the undeclared-operation test either way.
    assert failed["TestWarns"] == {"test_undeclared_operations_are_refused"}
    assert failed["TestStrict"] == archive_tests | {"test_undeclared_operations_are_refused"}
    assert any("implements index_groups but does not declare archive_indexing" in w for w in warnings), (
        warnings
    )


class NarrowedMemory(InMemoryMemoryStore):
    """A configurable store: this instance turns history off (and refuses it)."""

    capabilities = InMemoryMemoryStore.capabilities

    def __init__(self, caps: MemoryCapabilities) -> None:
        super().__init__()
        self.instance_capabilities = caps


def test_capabilities_of_reads_the_instance_declaration_first() -> None:
    narrowed = NarrowedMemory(attrs.evolve(InMemoryMemoryStore.capabilities, history=False))
    assert capabilities_of(narrowed) == attrs.evolve(InMemoryMemoryStore.capabilities, history=False)
    assert capabilities_of(InMemoryMemoryStore()) == InMemoryMemoryStore.capabilities


class NarrowedRecall(InMemoryRecallStore):
    capabilities = InMemoryRecallStore.capabilities

    def __init__(self, caps: Any) -> None:
        super().__init__()
        self.instance_capabilities = caps


def _runtime(**kwargs: Any) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        **kwargs,
    )


def test_the_runtime_builds_with_the_instance_declaration() -> None:
    # The class can seek; this instance says it cannot, so recall with summaries is refused at build.
    narrowed = NarrowedRecall(attrs.evolve(InMemoryRecallStore.capabilities, canonical_archive_reads=False))
    with pytest.raises(CapabilityError, match="canonical_archive_reads"):
        _runtime(recall=narrowed, summarizer=ExtractiveSummarizer())
    _runtime(recall=NarrowedRecall(InMemoryRecallStore.capabilities), summarizer=ExtractiveSummarizer())


@pytest.mark.parametrize(
    ("caps", "message"),
    [
        (
            MemoryCapabilities(acknowledged_writes=True, durable=True),
            "which the class's capabilities leave off",
        ),
        (MemoryCapabilities(correction=True), "lacks required flag 'acknowledged_writes'"),
        (RecallCapabilities(), "must be a MemoryCapabilities"),
    ],
)
def test_an_instance_declaration_may_only_narrow_the_class(caps: Any, message: str) -> None:
    with pytest.raises(CapabilityError, match=message):
        _runtime(memory=NarrowedMemory(caps))
