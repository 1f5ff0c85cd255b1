"""The eight ports: archive, sessions, recall, embedder, summarizer, verifier, memory, provider.

Each module holds the port class, its records and its frozen capability class.
:data:`PORT_KIND_TABLE` is *the* list of adapter kinds: one :class:`PortKind`
record per kind names its port and capability class, the methods every adapter
must implement, its config section, its registration hook and its argument of
``create_harness_runtime``. Config sections, hook names, load-time checks, the
loader and the CLI are all derived from it, so a kind has one name everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from .._validators import non_empty_str, str_tuple
from ._base import CancelSignal, Capabilities, OpContext, is_port_stub, port_stub
from .archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive
from .embedder import Embedder, EmbedderCapabilities
from .memory import MemoryCapabilities, MemoryStore
from .provider import ModelProvider, ProviderCapabilities
from .recall import RecallCapabilities, RecallStore
from .sessions import SessionStore, SessionStoreCapabilities
from .summary import Summarizer, SummarizerCapabilities
from .verify import CompletionVerifier, VerifierCapabilities

__all__ = [
    "OPTIONAL_KINDS",
    "PORT_KINDS",
    "PORT_KIND_TABLE",
    "REQUIRED_KINDS",
    "ArchiveReceipt",
    "CancelSignal",
    "Capabilities",
    "OpContext",
    "PortKind",
    "is_port_stub",
    "port_kind_by_section",
    "port_stub",
]


@attrs.frozen(slots=True)
class PortKind:
    """One kind of adapter, and every name it goes by.

    - ``name``: the kind (``"summarizer"``), as in ``registry.get(kind, name)``.
    - ``title``: how messages and docs call it (``"summarizer"``, ``"history archive"``).
    - ``port``: the port class adapters subclass.
    - ``capability_class``: the frozen capability class adapters declare.
    - ``core_methods``: methods every adapter of the kind implements, whatever it declares.
    - ``session_methods``: methods every session object the adapter opens implements
      (recall: the class named by ``session_class``); empty for other kinds.
    - ``section``: the config file section (``[summarizer]``).
    - ``hook``: the registration hook plugins implement (``agentium_register_summarizers``).
    - ``factory_arg``: the keyword argument of ``create_harness_runtime``.
    - ``required``: every runtime needs one (provider, archive, session store).
    """

    name: str = attrs.field(validator=non_empty_str)
    title: str = attrs.field(validator=non_empty_str)
    port: type
    capability_class: type[Capabilities]
    core_methods: tuple[str, ...] = attrs.field(converter=str_tuple)
    section: str = attrs.field(validator=non_empty_str)
    hook: str = attrs.field(validator=non_empty_str)
    factory_arg: str = attrs.field(validator=non_empty_str)
    required: bool = False
    session_methods: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)


def _kind(
    name: str,
    title: str,
    port: type,
    caps: type[Capabilities],
    core: tuple[str, ...],
    hook: str,
    *,
    required: bool = False,
    session_methods: tuple[str, ...] = (),
) -> PortKind:
    # The section and factory argument are the kind's own name: one name per
    # kind is the rule, so only the hook (a plural verb phrase) differs.
    return PortKind(
        name=name,
        title=title,
        port=port,
        capability_class=caps,
        core_methods=core,
        section=name,
        hook=hook,
        factory_arg=name,
        required=required,
        session_methods=session_methods,
    )


#: Every adapter kind, in the order config sections and reports list them.
PORT_KIND_TABLE: tuple[PortKind, ...] = (
    _kind(
        "provider",
        "model provider",
        ModelProvider,
        ProviderCapabilities,
        ("complete",),
        "agentium_register_providers",
        required=True,
    ),
    _kind(
        "archive",
        "history archive",
        HistoryArchive,
        ArchiveCapabilities,
        ("append",),
        "agentium_register_archives",
        required=True,
    ),
    _kind(
        "session_store",
        "session store",
        SessionStore,
        SessionStoreCapabilities,
        ("load", "save"),
        "agentium_register_session_stores",
        required=True,
    ),
    _kind(
        "recall",
        "recall store",
        RecallStore,
        RecallCapabilities,
        ("open",),
        "agentium_register_recall_stores",
        session_methods=("discover", "read", "validate", "validate_current"),
    ),
    _kind(
        "embedder",
        "embedder",
        Embedder,
        EmbedderCapabilities,
        ("embed",),
        "agentium_register_embedders",
    ),
    _kind(
        "summarizer",
        "summarizer",
        Summarizer,
        SummarizerCapabilities,
        ("summarize",),
        "agentium_register_summarizers",
    ),
    _kind(
        "verifier",
        "completion verifier",
        CompletionVerifier,
        VerifierCapabilities,
        ("verify",),
        "agentium_register_verifiers",
    ),
    _kind(
        "memory",
        "memory store",
        MemoryStore,
        MemoryCapabilities,
        ("remember", "lookup"),
        "agentium_register_memory_stores",
    ),
)

#: Every adapter kind by name (read-only view of :data:`PORT_KIND_TABLE`).
PORT_KINDS: Mapping[str, PortKind] = MappingProxyType({k.name: k for k in PORT_KIND_TABLE})
#: Kinds every runtime needs, in table order.
REQUIRED_KINDS: tuple[str, ...] = tuple(k.name for k in PORT_KIND_TABLE if k.required)
#: Kinds a runtime may go without, in table order.
OPTIONAL_KINDS: tuple[str, ...] = tuple(k.name for k in PORT_KIND_TABLE if not k.required)

_BY_SECTION: Mapping[str, PortKind] = MappingProxyType({k.section: k for k in PORT_KIND_TABLE})


def port_kind_by_section(section: str) -> PortKind:
    """The kind configured by config section ``section``; :class:`KeyError` if there is none."""
    return _BY_SECTION[section]
