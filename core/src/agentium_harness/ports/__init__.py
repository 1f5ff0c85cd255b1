"""The seven ports: archive, sessions, recall, summary, verify, memory, provider.

Each module holds the port class, its records and its frozen capability class.
:data:`PORT_KINDS` maps each kind name (as used in config and hooks) to its
port and capability class.
"""

from __future__ import annotations

import attrs

from ._base import CancelSignal, Capabilities, OpContext, is_port_stub, port_stub
from .archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive
from .memory import MemoryCapabilities, MemoryStore
from .provider import ModelProvider, ProviderCapabilities
from .recall import RecallCapabilities, RecallStore
from .sessions import SessionStore, SessionStoreCapabilities
from .summary import Summarizer, SummarizerCapabilities
from .verify import CompletionVerifier, VerifierCapabilities

__all__ = [
    "PORT_KINDS",
    "ArchiveReceipt",
    "CancelSignal",
    "Capabilities",
    "OpContext",
    "PortKind",
    "is_port_stub",
    "port_stub",
]


@attrs.frozen(slots=True)
class PortKind:
    """A kind of adapter: its config/hook name, port class and capability class."""

    name: str
    port: type
    capability_class: type[Capabilities]
    #: Methods every adapter of the kind must implement (on the recall
    #: session class when prefixed ``session:``).
    core_methods: tuple[str, ...]


#: Every adapter kind, by the name used in config sections and registration hooks.
PORT_KINDS: dict[str, PortKind] = {
    k.name: k
    for k in (
        PortKind("archive", HistoryArchive, ArchiveCapabilities, ("append",)),
        PortKind("session_store", SessionStore, SessionStoreCapabilities, ("load", "save")),
        PortKind("recall", RecallStore, RecallCapabilities, ("open",)),
        PortKind("summarizer", Summarizer, SummarizerCapabilities, ("summarize",)),
        PortKind("verifier", CompletionVerifier, VerifierCapabilities, ("verify",)),
        PortKind("memory", MemoryStore, MemoryCapabilities, ("remember", "lookup")),
        PortKind("provider", ModelProvider, ProviderCapabilities, ("complete",)),
    )
}
