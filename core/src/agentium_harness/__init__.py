"""Agentium: continuity for LLM agent hosts.

This module is the public API for hosts: build a runtime
(:func:`create_harness_runtime`, :func:`load_runtime`), read and check a
config file (:func:`load_config`, :func:`parse_config`), run turns, read the
results, and catch the errors, all from here. Adapter authors import from
:mod:`agentium_harness.plugin_api`; test helpers and contract suites come from
:mod:`agentium_harness.testing`; evaluation from :mod:`agentium_harness.eval`;
the built-in adapters from the modules of :mod:`agentium_harness.adapters`.
Every module whose name starts with ``_`` is an implementation detail and may
change without notice. See ``docs/api.md`` for the reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Names resolve on first use (PEP 562), so ``import agentium_harness`` -- and the ``agentium``
# command, which starts by importing this package -- loads only the modules a program uses.
# The type checker reads the imports; the table below must name the same modules
# (tests/core/test_public_api.py checks both agree).
if TYPE_CHECKING:
    from ._blocking import BlockingRuntime
    from ._blocking_memory import BlockingMemory
    from ._codec import canonical_json, digest_of
    from ._config import (
        HarnessConfig,
        ResolvedComponent,
        ResolvedConfig,
        load_config,
        parse_config,
        resolve_config,
    )
    from ._config.runtime import load_runtime
    from ._engine.arguments import MAX_RUN_GRANTS, MAX_RUN_SOURCES
    from ._engine.build import create_harness_runtime
    from ._engine.document_api import MAX_DOCUMENT_BYTES, MAX_DOCUMENT_TITLE_BYTES, DocumentResult
    from ._engine.erasure import ErasureResult, OperatorAttestation
    from ._engine.erasure_status import MAX_STATUS_LIMIT, ErasureStatusPage
    from ._engine.forget import ForgetResult, SourceHolder, SourcePlace, SourceState
    from ._engine.history_checks import (
        MAX_APPEND_BYTES,
        MAX_APPEND_MESSAGES,
        MAX_LIST_LIMIT,
        MAX_PAGE_BYTES,
        MAX_PAGE_GROUPS,
        MAX_RETRACT_COUNT,
        MAX_RETRACTION_SPANS,
    )
    from ._engine.history_records import (
        AppendResult,
        HistoryGroup,
        HistoryPage,
        ReadFence,
        ResetResult,
        RetractResult,
        SessionPage,
    )
    from ._engine.limits import ResidentLimits, RuntimeLimits
    from ._engine.maintenance import MigrationReport, ReconcileReport, SessionState, SessionView
    from ._engine.memory.agent import Agent, AgentReply, AgentState
    from ._engine.memory.erasure_reading import ErasureReading
    from ._engine.memory.manager import MemoryExtractor, MemoryLimits, MemoryManager
    from ._engine.memory.selection import MemorySelection, SelectionRequest, recent_and_relevant
    from ._engine.memory.sources import MemoryOmitted, memory_blocks
    from ._engine.memory.work import DrainItem, DrainResult, DrainStatus, OwnedWorkSource, WorkSource
    from ._engine.recall import RecallUsage
    from ._engine.recall_policy import (
        PolicyDecision,
        PolicyInput,
        QueryInput,
        RecallDecision,
        RecallFence,
        RecallPolicy,
        RecallStatus,
        current_session_recall_policy,
        latest_user_text,
        score_order,
        store_order,
    )
    from ._engine.recall_turn import RecallOutcome
    from ._engine.recall_view import ConditionalPublication, RecallView, source_view_revision
    from ._engine.results import (
        CleanupReport,
        CleanupStatus,
        CommitState,
        Diagnostic,
        EvictionStatus,
        RunResult,
        RunStatus,
        Severity,
    )
    from ._engine.retention import RetentionPolicy, RetentionResult
    from ._engine.runtime import (
        HarnessResources,
        HarnessRuntime,
        LifecycleState,
    )
    from ._engine.sources import SourceStatus
    from ._engine.tools import EffectLevel, Tool, ToolOutcome, ToolRegistry, ToolStatus
    from ._engine.verification import CompletionPolicy, verified_completion_policy
    from ._erasure_errors import ErasureOvertakenError
    from ._errors import (
        AgentCloseError,
        AgentiumError,
        AgentLifecycleError,
        ArchiveConflictError,
        ArchiveCorruptError,
        ArchiveError,
        BlockingCallInLoopError,
        CapabilityError,
        ConfigError,
        ConfigIssue,
        ContractViolationError,
        EmbeddingError,
        EmbeddingModelMismatchError,
        EncodingError,
        ErasedSinceReadError,
        ErasureIncompleteError,
        ErasureInProgressError,
        ErasureRefusedError,
        ExtractionConflictError,
        FeatureUnavailableError,
        IdentityError,
        IncompleteGroupError,
        InvalidArgumentError,
        InvalidIdError,
        InvalidJSONError,
        InvalidPayloadError,
        LegacySnapshotError,
        MemoryDrainError,
        MemoryFactForgottenError,
        MemoryFactNotFoundError,
        MemoryRejectedError,
        MemoryStoreError,
        OperationCancelledError,
        OperationTimeoutError,
        PluginError,
        PluginLoadError,
        PluginNotFoundError,
        ProviderError,
        ProviderTimeoutError,
        PublicationRefusedError,
        RecallUnavailableError,
        RecordDecodeError,
        RegistrationError,
        RetractionLimitError,
        RetractionRefusedError,
        RuntimeClosedError,
        RuntimeCloseError,
        ScopeMismatchError,
        SessionBusyError,
        SessionConflictError,
        SessionDivergedError,
        SessionStoreError,
        SnapshotCorruptError,
        ToolNotGrantedError,
        UnsupportedOperationError,
    )
    from ._errors_run import (
        DocumentDeletedDuringRunError,
        DocumentUncheckedDuringRunError,
        ErasedDuringRunError,
        FactForgottenDuringRunError,
    )
    from ._history import (
        MAX_PAYLOAD_BYTES,
        ControlKind,
        HistoryControl,
        InterruptionCause,
        Message,
        MessageGroup,
        MessageRef,
        RetainedRecord,
        RetractedSpan,
        Role,
        ToolCall,
        TurnInterruption,
        ViewState,
    )
    from ._observe.settings import Telemetry
    from ._ports import OpContext
    from ._ports.embedder import EmbeddingLimits, EmbeddingModel
    from ._ports.erasure import (
        ErasedCount,
        ErasedGroups,
        EraseLevel,
        EraseStatus,
        EraseTarget,
        ErasureKind,
        ErasureRecord,
        ErasureState,
        PhysicalErasure,
        SeqRange,
        StoreErasure,
    )
    from ._ports.memory import (
        AckStatus,
        FactStatus,
        GroupRef,
        MemoryAck,
        MemoryEvent,
        MemoryEventKind,
        MemoryFact,
        MemoryScope,
        StoredFact,
    )
    from ._ports.provider import SourceBlock, SourceKind, Usage
    from ._ports.recall import (
        Completeness,
        OmittedContext,
        RecallLimits,
        SourceOwner,
        SourceRef,
        Validation,
        ValidationStatus,
    )
    from ._ports.summary import Citation, CoverageGap, GapReason, SummaryLimits, SummaryState, TaskSummary
    from ._scope import RecallScope, Scope, SessionKey, VerifiedIdentity
    from ._verdicts import EvidenceEntry, EvidenceLimits, Verdict, VerificationAttempt, VerificationRecord
else:
    import importlib as _importlib

    #: Each private module and the public names it defines (space-separated, to stay compact).
    _MODULES: dict[str, str] = {
        "._blocking": "BlockingRuntime",
        "._blocking_memory": "BlockingMemory",
        "._codec": "canonical_json digest_of",
        "._config": "HarnessConfig ResolvedComponent ResolvedConfig load_config parse_config resolve_config",
        "._config.runtime": "load_runtime",
        "._engine.arguments": "MAX_RUN_GRANTS MAX_RUN_SOURCES",
        "._engine.build": "create_harness_runtime",
        "._engine.document_api": "MAX_DOCUMENT_BYTES MAX_DOCUMENT_TITLE_BYTES DocumentResult",
        "._engine.erasure": "ErasureResult OperatorAttestation",
        "._engine.erasure_status": "MAX_STATUS_LIMIT ErasureStatusPage",
        "._engine.forget": "ForgetResult SourceHolder SourcePlace SourceState",
        "._engine.history_checks": (
            "MAX_APPEND_BYTES MAX_APPEND_MESSAGES MAX_LIST_LIMIT MAX_PAGE_BYTES MAX_PAGE_GROUPS "
            "MAX_RETRACT_COUNT MAX_RETRACTION_SPANS"
        ),
        "._engine.history_records": (
            "AppendResult HistoryGroup HistoryPage ReadFence ResetResult RetractResult SessionPage"
        ),
        "._engine.limits": "ResidentLimits RuntimeLimits",
        "._engine.maintenance": "MigrationReport ReconcileReport SessionState SessionView",
        "._engine.memory.agent": "Agent AgentReply AgentState",
        "._engine.memory.erasure_reading": "ErasureReading",
        "._engine.memory.manager": "MemoryExtractor MemoryLimits MemoryManager",
        "._engine.memory.selection": "MemorySelection SelectionRequest recent_and_relevant",
        "._engine.memory.sources": "MemoryOmitted memory_blocks",
        "._engine.memory.work": "DrainItem DrainResult DrainStatus OwnedWorkSource WorkSource",
        "._engine.recall": "RecallUsage",
        "._engine.recall_policy": (
            "PolicyDecision PolicyInput QueryInput RecallDecision RecallFence RecallPolicy RecallStatus "
            "current_session_recall_policy latest_user_text score_order store_order"
        ),
        "._engine.recall_turn": "RecallOutcome",
        "._engine.recall_view": "ConditionalPublication RecallView source_view_revision",
        "._engine.results": (
            "CleanupReport CleanupStatus CommitState Diagnostic EvictionStatus RunResult RunStatus Severity"
        ),
        "._engine.retention": "RetentionPolicy RetentionResult",
        "._engine.runtime": "HarnessResources HarnessRuntime LifecycleState",
        "._engine.sources": "SourceStatus",
        "._engine.tools": "EffectLevel Tool ToolOutcome ToolRegistry ToolStatus",
        "._engine.verification": "CompletionPolicy verified_completion_policy",
        "._erasure_errors": "ErasureOvertakenError",
        "._errors": (
            "AgentCloseError AgentiumError AgentLifecycleError ArchiveConflictError ArchiveCorruptError "
            "ArchiveError BlockingCallInLoopError CapabilityError ConfigError ConfigIssue "
            "ContractViolationError EmbeddingError EmbeddingModelMismatchError EncodingError "
            "ErasedSinceReadError ErasureIncompleteError ErasureInProgressError ErasureRefusedError "
            "ExtractionConflictError FeatureUnavailableError IdentityError IncompleteGroupError "
            "InvalidArgumentError InvalidIdError InvalidJSONError InvalidPayloadError LegacySnapshotError "
            "MemoryDrainError MemoryFactForgottenError MemoryFactNotFoundError MemoryRejectedError "
            "MemoryStoreError OperationCancelledError OperationTimeoutError PluginError PluginLoadError "
            "PluginNotFoundError ProviderError ProviderTimeoutError PublicationRefusedError "
            "RecallUnavailableError RecordDecodeError RegistrationError RetractionLimitError "
            "RetractionRefusedError RuntimeClosedError RuntimeCloseError ScopeMismatchError SessionBusyError "
            "SessionConflictError SessionDivergedError SessionStoreError SnapshotCorruptError "
            "ToolNotGrantedError UnsupportedOperationError"
        ),
        "._errors_run": (
            "DocumentDeletedDuringRunError DocumentUncheckedDuringRunError ErasedDuringRunError "
            "FactForgottenDuringRunError"
        ),
        "._history": (
            "MAX_PAYLOAD_BYTES ControlKind HistoryControl InterruptionCause Message MessageGroup MessageRef "
            "RetainedRecord RetractedSpan Role ToolCall TurnInterruption ViewState"
        ),
        "._observe.settings": "Telemetry",
        "._ports": "OpContext",
        "._ports.embedder": "EmbeddingLimits EmbeddingModel",
        "._ports.erasure": (
            "ErasedCount ErasedGroups EraseLevel EraseStatus EraseTarget ErasureKind ErasureRecord "
            "ErasureState PhysicalErasure SeqRange StoreErasure"
        ),
        "._ports.memory": (
            "AckStatus FactStatus GroupRef MemoryAck MemoryEvent MemoryEventKind MemoryFact MemoryScope "
            "StoredFact"
        ),
        "._ports.provider": "SourceBlock SourceKind Usage",
        "._ports.recall": (
            "Completeness OmittedContext RecallLimits SourceOwner SourceRef Validation ValidationStatus"
        ),
        "._ports.summary": "Citation CoverageGap GapReason SummaryLimits SummaryState TaskSummary",
        "._scope": "RecallScope Scope SessionKey VerifiedIdentity",
        "._verdicts": "EvidenceEntry EvidenceLimits Verdict VerificationAttempt VerificationRecord",
    }  # fmt: skip
    _LAZY: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names.split()}

    def __getattr__(name: str) -> object:
        """Import the module defining ``name`` on first use, then keep the value here."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        """The module's names, the public ones not yet imported included."""
        return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    # erasure and retention (issue 23)
    "EraseLevel",
    "EraseStatus",
    "EraseTarget",
    "ErasedCount",
    "ErasedGroups",
    "ErasureInProgressError",
    "ErasureIncompleteError",
    "ErasureOvertakenError",
    "ErasureKind",
    "ErasureRecord",
    "ErasureRefusedError",
    "ErasureResult",
    "ErasureState",
    "ErasureStatusPage",
    "MAX_STATUS_LIMIT",
    "OperatorAttestation",
    "ForgetResult",
    "PhysicalErasure",
    "RetentionPolicy",
    "RetentionResult",
    "SeqRange",
    "SourceHolder",
    "SourcePlace",
    "SourceState",
    "StoreErasure",
    # config files (issue 27): read and check one without building anything
    "HarnessConfig",
    "ResolvedComponent",
    "ResolvedConfig",
    "load_config",
    "parse_config",
    "resolve_config",
    # observability (issue 24)
    "Telemetry",
    # history API (issue 22)
    "MAX_APPEND_BYTES",
    "MAX_APPEND_MESSAGES",
    "MAX_LIST_LIMIT",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_GROUPS",
    "MAX_PAYLOAD_BYTES",
    "MAX_RETRACT_COUNT",
    "MAX_RETRACTION_SPANS",
    "AppendResult",
    # host documents for recall, fenced against erasures
    "MAX_DOCUMENT_BYTES",
    "MAX_DOCUMENT_TITLE_BYTES",
    "DocumentResult",
    "ControlKind",
    "HistoryControl",
    "HistoryGroup",
    "HistoryPage",
    "IncompleteGroupError",
    "InvalidPayloadError",
    "MessageRef",
    "ReadFence",
    "DocumentDeletedDuringRunError",
    "DocumentUncheckedDuringRunError",
    "ErasedDuringRunError",
    "FactForgottenDuringRunError",
    "ErasedSinceReadError",
    "ResetResult",
    "RetractResult",
    "RetractedSpan",
    "RetractionLimitError",
    "RetractionRefusedError",
    "SessionPage",
    "ViewState",
    # memory lifecycle (issue 11)
    "Agent",
    "AgentReply",
    "AgentState",
    "DrainItem",
    "DrainResult",
    "DrainStatus",
    "ErasureReading",
    "MemoryExtractor",
    "MemoryLimits",
    "MemoryManager",
    "MemorySelection",
    "OwnedWorkSource",
    "SelectionRequest",
    "WorkSource",
    "recent_and_relevant",
    "AckStatus",
    "FactStatus",
    "GroupRef",
    "MemoryAck",
    "MemoryEvent",
    "MemoryEventKind",
    "MemoryFact",
    "MemoryScope",
    "StoredFact",
    "MemoryOmitted",
    "memory_blocks",
    "AgentCloseError",
    "ExtractionConflictError",
    "MemoryFactForgottenError",
    "MemoryFactNotFoundError",
    "MemoryRejectedError",
    "MemoryStoreError",
    "CompletionPolicy",
    "EvidenceEntry",
    "EvidenceLimits",
    "Verdict",
    "VerificationAttempt",
    "VerificationRecord",
    "verified_completion_policy",
    "RecallUsage",
    "PolicyDecision",
    "PolicyInput",
    "QueryInput",
    "RecallDecision",
    "RecallFence",
    "RecallPolicy",
    "RecallStatus",
    "current_session_recall_policy",
    "latest_user_text",
    "score_order",
    "store_order",
    "RecallOutcome",
    "ConditionalPublication",
    "RecallView",
    "source_view_revision",
    "PublicationRefusedError",
    "RecallUnavailableError",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "EmbeddingLimits",
    "EmbeddingModel",
    "Completeness",
    "OmittedContext",
    "RecallLimits",
    "Citation",
    "CoverageGap",
    "GapReason",
    "SummaryLimits",
    "SummaryState",
    "TaskSummary",
    "SourceOwner",
    "SourceRef",
    "Validation",
    "ValidationStatus",
    "AgentLifecycleError",
    "BlockingCallInLoopError",
    "AgentiumError",
    "ArchiveConflictError",
    "ArchiveCorruptError",
    "ArchiveError",
    "CapabilityError",
    "CleanupReport",
    "CleanupStatus",
    "CommitState",
    "ConfigError",
    "ConfigIssue",
    "ContractViolationError",
    "EncodingError",
    "InvalidJSONError",
    "Diagnostic",
    "EffectLevel",
    "EvictionStatus",
    "FeatureUnavailableError",
    "HarnessResources",
    "HarnessRuntime",
    "BlockingRuntime",
    "BlockingMemory",
    "IdentityError",
    "InvalidArgumentError",
    "InvalidIdError",
    "InterruptionCause",
    "LegacySnapshotError",
    "LifecycleState",
    "MemoryDrainError",
    "Message",
    "MessageGroup",
    "MigrationReport",
    "OpContext",
    "OperationCancelledError",
    "OperationTimeoutError",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "ProviderError",
    "ProviderTimeoutError",
    "RecallScope",
    "RecordDecodeError",
    "ReconcileReport",
    "RegistrationError",
    "ResidentLimits",
    "RetainedRecord",
    "Role",
    "RunResult",
    "RunStatus",
    "RuntimeCloseError",
    "RuntimeClosedError",
    "RuntimeLimits",
    "Scope",
    "ScopeMismatchError",
    "SessionBusyError",
    "SessionConflictError",
    "SessionDivergedError",
    "SessionKey",
    "SessionState",
    "SessionStoreError",
    "SessionView",
    "Severity",
    "SnapshotCorruptError",
    "SourceBlock",
    "SourceKind",
    "SourceStatus",
    "Tool",
    "ToolCall",
    "ToolNotGrantedError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolStatus",
    "TurnInterruption",
    "UnsupportedOperationError",
    "Usage",
    "VerifiedIdentity",
    "__version__",
    "canonical_json",
    "create_harness_runtime",
    # run() arguments read from a host iterable
    "MAX_RUN_GRANTS",
    "MAX_RUN_SOURCES",
    "digest_of",
    "load_runtime",
]
