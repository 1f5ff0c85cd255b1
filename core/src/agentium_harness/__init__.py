"""Agentium: continuity for LLM agent hosts.

The public API is re-exported here. See ``docs/`` for the guide.
"""

from __future__ import annotations

from .codec import canonical_json, converter, digest_of
from .errors import (
    AgentiumError,
    ArchiveConflictError,
    CapabilityError,
    ConfigError,
    ContractViolationError,
    IdentityError,
    InvalidIdError,
    LegacySnapshotError,
    OperationCancelledError,
    PluginError,
    RuntimeClosedError,
    ScopeMismatchError,
    SessionBusyError,
    SessionConflictError,
    SessionStoreError,
    SnapshotCorruptError,
    ToolNotGrantedError,
)
from .history import Message, MessageGroup, RetainedRecord, Role, ToolCall
from .ports import OpContext
from .scope import RecallScope, Scope, SessionKey, VerifiedIdentity

__version__ = "0.1.0"

__all__ = [
    "AgentiumError",
    "ArchiveConflictError",
    "CapabilityError",
    "ConfigError",
    "ContractViolationError",
    "IdentityError",
    "InvalidIdError",
    "LegacySnapshotError",
    "OperationCancelledError",
    "Message",
    "MessageGroup",
    "OpContext",
    "PluginError",
    "RecallScope",
    "RetainedRecord",
    "Role",
    "RuntimeClosedError",
    "Scope",
    "ScopeMismatchError",
    "SessionBusyError",
    "SessionConflictError",
    "SessionStoreError",
    "SessionKey",
    "SnapshotCorruptError",
    "ToolCall",
    "ToolNotGrantedError",
    "VerifiedIdentity",
    "__version__",
    "canonical_json",
    "converter",
    "digest_of",
]
