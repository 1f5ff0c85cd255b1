"""The public API has a stability boundary (issue 6, item 10).

Hosts import from ``agentium_harness``; adapter authors from
``agentium_harness.plugin_api``; tests from ``agentium_harness.testing``. The
names are pinned here so that adding or removing one is a deliberate change,
and ``docs/api.md`` is regenerated from the docstrings and must be current.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import agentium_harness
from agentium_harness.testing._api_docs import PUBLIC_MODULES, port_methods, render_api_docs

ROOT = Path(__file__).resolve().parents[2]

HOST_NAMES = {
    # erasure and retention (issue 23)
    "EraseLevel", "EraseStatus", "EraseTarget", "ErasedCount", "ErasedGroups", "ErasureKind", "ErasureRecord",
    "ErasureResult", "ErasureState", "OperatorAttestation", "PhysicalErasure", "SeqRange", "StoreErasure",
    "ErasureStatusPage", "MAX_STATUS_LIMIT",
    "ForgetResult", "RetentionPolicy", "RetentionResult", "SourceHolder", "SourcePlace", "SourceState",
    # config files (issue 27)
    "HarnessConfig", "ResolvedComponent", "ResolvedConfig", "load_config", "parse_config",
    "resolve_config",
    # observability (issue 24)
    "Telemetry",
    # memory lifecycle (issue 11)
    "Agent", "AgentReply", "AgentState", "DrainItem", "DrainResult", "DrainStatus", "ErasureReading",
    "MemoryExtractor",
    "MemoryLimits", "MemoryManager", "MemorySelection", "OwnedWorkSource", "SelectionRequest", "WorkSource",
    "recent_and_relevant", "AckStatus", "FactStatus", "GroupRef", "MemoryAck", "MemoryEvent",
    "MemoryEventKind", "MemoryFact", "MemoryScope", "StoredFact", "MemoryOmitted", "memory_blocks",
    # completion verification (issue 10)
    "CompletionPolicy", "EvidenceEntry", "EvidenceLimits", "Verdict", "VerificationAttempt",
    "VerificationRecord", "verified_completion_policy",
    # summaries (issue 9)
    "Citation", "CoverageGap", "GapReason", "SummaryLimits", "SummaryState", "TaskSummary",
    # recall (issue 8)
    "RecallUsage", "PolicyDecision", "PolicyInput", "QueryInput", "RecallDecision", "RecallFence",
    "RecallPolicy", "RecallStatus", "current_session_recall_policy", "latest_user_text", "score_order",
    "store_order", "RecallOutcome", "ConditionalPublication", "RecallView", "source_view_revision",
    "Completeness", "OmittedContext", "RecallLimits", "SourceOwner", "SourceRef", "Validation",
    "ValidationStatus",
    "create_harness_runtime", "load_runtime", "HarnessRuntime", "HarnessResources", "RuntimeLimits",
    "BlockingRuntime",
    "BlockingMemory",
    "ResidentLimits", "RunResult", "RunStatus", "EvictionStatus", "SourceStatus", "CleanupReport",
    "CleanupStatus", "Diagnostic", "Severity", "SessionView", "SessionState", "MigrationReport",
    "ReconcileReport", "LifecycleState", "Tool", "ToolRegistry", "ToolOutcome", "ToolStatus",
    "EffectLevel", "SourceBlock", "SourceKind", "Usage", "VerifiedIdentity", "RecallScope", "Scope",
    "SessionKey", "Message", "MessageGroup", "Role", "ToolCall", "RetainedRecord", "OpContext",
    "canonical_json", "digest_of", "__version__", "ConfigIssue",
    # issue 21: what a run says about its commit, and why a committed turn has no answer
    "CommitState", "TurnInterruption", "InterruptionCause",
    # issue 22: the history API for hosts that run their own agent loop
    "AppendResult", "HistoryGroup", "HistoryPage", "ReadFence", "ResetResult", "RetractResult", "SessionPage",
    # host documents indexed through the runtime, fenced against erasures
    "DocumentResult", "MAX_DOCUMENT_BYTES", "MAX_DOCUMENT_TITLE_BYTES",
    "ControlKind", "HistoryControl", "MessageRef", "RetractedSpan", "ViewState", "MAX_APPEND_BYTES",
    "MAX_APPEND_MESSAGES", "MAX_LIST_LIMIT", "MAX_PAGE_BYTES", "MAX_PAGE_GROUPS", "MAX_PAYLOAD_BYTES",
    # run() arguments read from a host iterable
    "MAX_RUN_GRANTS", "MAX_RUN_SOURCES",
    "MAX_RETRACT_COUNT", "MAX_RETRACTION_SPANS",
    # issue 25: hybrid recall's embedder bounds and vector space
    "EmbeddingLimits", "EmbeddingModel",
}  # fmt: skip


def test_host_names_are_pinned() -> None:
    exported = set(agentium_harness.__all__)
    errors = {n for n in exported if n.endswith("Error")}
    assert exported - errors == HOST_NAMES
    for name in exported:
        assert hasattr(agentium_harness, name), name


def test_the_whole_error_family_is_exported_and_rooted() -> None:
    from agentium_harness import _errors as errors_module

    family = {
        name
        for name, obj in vars(errors_module).items()
        if inspect.isclass(obj) and issubclass(obj, agentium_harness.AgentiumError)
    }
    assert family <= set(agentium_harness.__all__)


def test_adapter_authors_have_one_module() -> None:
    api = importlib.import_module("agentium_harness.plugin_api")
    needed = {
        "hookimpl", "AdapterSpec", "OpContext", "ThreadBoundAdapter", "HistoryArchive", "SessionStore",
        "RecallStore", "RecallSession", "Summarizer", "CompletionVerifier", "MemoryStore", "ModelProvider",
        "ArchiveCapabilities", "SessionStoreCapabilities", "RecallCapabilities", "SummarizerCapabilities",
        "VerifierCapabilities", "MemoryCapabilities", "ProviderCapabilities", "encode_segment",
        "canonical_json", "digest_bytes",
    }  # fmt: skip
    assert needed <= set(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None, name


@pytest.mark.parametrize("module_name", [m for m, _ in PUBLIC_MODULES])
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [
        name
        for name in module.__all__
        if not name.startswith("__")
        and (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not inspect.getdoc(getattr(module, name))
    ]
    assert missing == []


def test_port_methods_say_when_to_check_the_context_and_what_they_raise() -> None:
    api = importlib.import_module("agentium_harness.plugin_api")
    ports = [
        api.HistoryArchive, api.SessionStore, api.RecallStore, api.RecallSession, api.Embedder,
        api.Summarizer, api.CompletionVerifier, api.MemoryStore, api.ModelProvider,
    ]  # fmt: skip
    problems = []
    for port in ports:
        for name, method in port_methods(port):
            if name in ("aclose", "close"):
                continue
            doc = inspect.getdoc(method) or ""
            if "raise_if_expired" not in doc or "Raises:" not in doc:
                problems.append(f"{port.__name__}.{name}")
    assert problems == []


def test_api_reference_is_current() -> None:
    current = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert current == render_api_docs(), (
        "docs/api.md is stale: run python -m agentium_harness.testing._api_docs docs/api.md"
    )
