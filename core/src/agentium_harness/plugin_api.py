"""The public API for adapter and plugin authors.

Everything an adapter needs comes from this one module: the ``@hookimpl``
marker and :class:`AdapterSpec` to register, the seven ports with their
records and capability classes, the operation context, the canonical
encoding and digests, the injective key encoding for backend keys, the
errors an adapter raises, and reusable bases such as
:class:`ThreadBoundAdapter` for blocking clients. Hosts use
:mod:`agentium_harness`; contract suites and test helpers are in
:mod:`agentium_harness.testing`. See ``docs/api.md`` and ``docs/plugins.md``.
"""

from __future__ import annotations

from ._codec import (
    canonical_json,
    digest_bytes,
    digest_of,
    from_json,
    make_converter,
    register_structure_hook,
    to_json,
)
from ._engine.recall_policy import QueryInput
from ._errors import (
    ArchiveConflictError,
    ArchiveCorruptError,
    ArchiveError,
    ContractViolationError,
    EncodingError,
    OperationCancelledError,
    RecordDecodeError,
    SessionConflictError,
    SessionStoreError,
    SnapshotCorruptError,
    UnsupportedOperationError,
)
from ._history import Message, MessageGroup, RetainedRecord, Role, ToolCall, estimate_tokens
from ._plugins.hookspecs import hookimpl
from ._plugins.registry import PluginRegistry, ProblemStage
from ._plugins.spec import PATH_OPTION, AdapterSpec, Register
from ._plugins.strategies import RecallStrategy
from ._ports import PORT_KINDS, PortKind
from ._ports._base import CancelSignal, Capabilities, OpContext, port_stub
from ._ports.archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive, check_archived_group
from ._ports.memory import (
    MemoryAck,
    MemoryCapabilities,
    MemoryEvent,
    MemoryEventKind,
    MemoryFact,
    MemoryStore,
)
from ._ports.provider import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderCapabilities,
    SourceBlock,
    SourceKind,
    ToolSpec,
    Usage,
)
from ._ports.recall import (
    Candidate,
    Completeness,
    Excerpt,
    OmittedContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    document_source_id,
    group_source_id,
)
from ._ports.sessions import (
    SNAPSHOT_FORMAT_VERSION,
    ArchiveDivergence,
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    seal_snapshot,
    snapshot_bytes,
    verify_snapshot,
)
from ._ports.summary import (
    Citation,
    CoverageGap,
    GapReason,
    Summarizer,
    SummarizerCapabilities,
    SummaryLimits,
    SummaryState,
    TaskSummary,
)
from ._ports.verify import (
    MAX_EVIDENCE_BYTES,
    MAX_EVIDENCE_ENTRIES,
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    evidence_size,
    fit_evidence,
)
from ._scope import RecallScope, Scope, SessionKey, decode_segment, encode_segment
from .adapters._excerpts import MAX_QUERY_TERMS, make_excerpt, query_terms
from .adapters.threaded import ThreadBoundAdapter

__all__ = [
    "MAX_QUERY_TERMS",
    "make_excerpt",
    "query_terms",
    "QueryInput",
    "RecallStrategy",
    "MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_ENTRIES",
    "PATH_OPTION",
    "PORT_KINDS",
    "SNAPSHOT_FORMAT_VERSION",
    "AdapterSpec",
    "ArchiveCapabilities",
    "ArchiveConflictError",
    "ArchiveCorruptError",
    "ArchiveDivergence",
    "ArchiveError",
    "ArchiveReceipt",
    "CancelSignal",
    "Candidate",
    "Capabilities",
    "Citation",
    "CoverageGap",
    "GapReason",
    "SummaryLimits",
    "SummaryState",
    "CompletionCandidate",
    "CompletionVerifier",
    "Completeness",
    "ContractViolationError",
    "EncodingError",
    "EvidenceEntry",
    "Excerpt",
    "HistoryArchive",
    "MemoryAck",
    "MemoryCapabilities",
    "MemoryEvent",
    "MemoryEventKind",
    "MemoryFact",
    "MemoryStore",
    "Message",
    "MessageGroup",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OmittedContext",
    "OpContext",
    "OperationCancelledError",
    "PluginRegistry",
    "PortKind",
    "ProblemStage",
    "ProviderCapabilities",
    "RecallCapabilities",
    "RecallLimits",
    "RecallScope",
    "RecallSession",
    "RecallStore",
    "RecordDecodeError",
    "Register",
    "RetainedRecord",
    "Role",
    "Scope",
    "SessionConflictError",
    "SessionKey",
    "SessionSnapshot",
    "SessionStore",
    "SessionStoreCapabilities",
    "SessionStoreError",
    "SnapshotCorruptError",
    "SourceBlock",
    "SourceKind",
    "SourceOwner",
    "SourceRef",
    "StoredSnapshot",
    "Summarizer",
    "SummarizerCapabilities",
    "TaskSummary",
    "ThreadBoundAdapter",
    "ToolCall",
    "ToolSpec",
    "UnsupportedOperationError",
    "Usage",
    "Validation",
    "ValidationStatus",
    "Verdict",
    "VerificationResult",
    "VerifierCapabilities",
    "VerifyContext",
    "canonical_json",
    "check_archived_group",
    "decode_segment",
    "digest_bytes",
    "digest_of",
    "document_source_id",
    "encode_segment",
    "estimate_tokens",
    "from_json",
    "group_source_id",
    "hookimpl",
    "make_converter",
    "port_stub",
    "register_structure_hook",
    "seal_snapshot",
    "snapshot_bytes",
    "to_json",
    "verify_snapshot",
    "evidence_size",
    "fit_evidence",
]
