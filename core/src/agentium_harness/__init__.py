"""Agentium: continuity for LLM agent hosts.

This module is the public API for hosts: build a runtime
(:func:`create_harness_runtime`, :func:`load_runtime`), run turns, read the
results, and catch the errors, all from here. Adapter authors import from
:mod:`agentium_harness.plugin_api`; test helpers and contract suites come from
:mod:`agentium_harness.testing`. Every other module is an implementation
detail and may change without notice. See ``docs/api.md`` for the reference.
"""

from __future__ import annotations

from ._codec import canonical_json, digest_of
from ._engine.build import create_harness_runtime
from ._engine.limits import ResidentLimits, RuntimeLimits
from ._engine.loader import load_runtime
from ._engine.maintenance import MigrationReport, ReconcileReport, SessionState, SessionView
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
    Diagnostic,
    EvictionStatus,
    RunResult,
    RunStatus,
    Severity,
)
from ._engine.runtime import (
    HarnessResources,
    HarnessRuntime,
    LifecycleState,
)
from ._engine.sources import SourceStatus
from ._engine.tools import EffectLevel, Tool, ToolOutcome, ToolRegistry, ToolStatus
from ._engine.verification import CompletionPolicy, verified_completion_policy
from ._errors import (
    AgentiumError,
    AgentLifecycleError,
    ArchiveConflictError,
    ArchiveCorruptError,
    ArchiveError,
    CapabilityError,
    ConfigError,
    ConfigIssue,
    ContractViolationError,
    EncodingError,
    FeatureUnavailableError,
    IdentityError,
    InvalidArgumentError,
    InvalidIdError,
    LegacySnapshotError,
    MemoryDrainError,
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
from ._history import Message, MessageGroup, RetainedRecord, Role, ToolCall
from ._ports import OpContext
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

__version__ = "0.1.0"

__all__ = [
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
    "AgentiumError",
    "ArchiveConflictError",
    "ArchiveCorruptError",
    "ArchiveError",
    "CapabilityError",
    "CleanupReport",
    "CleanupStatus",
    "ConfigError",
    "ConfigIssue",
    "ContractViolationError",
    "EncodingError",
    "Diagnostic",
    "EffectLevel",
    "EvictionStatus",
    "FeatureUnavailableError",
    "HarnessResources",
    "HarnessRuntime",
    "IdentityError",
    "InvalidArgumentError",
    "InvalidIdError",
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
    "UnsupportedOperationError",
    "Usage",
    "VerifiedIdentity",
    "__version__",
    "canonical_json",
    "create_harness_runtime",
    "digest_of",
    "load_runtime",
]
