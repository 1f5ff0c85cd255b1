"""Hook specifications of the ``agentium`` pluggy project.

A plugin is a module with ``@hookimpl`` functions, named by an entry point in
the ``agentium`` group. Registration hooks (one per adapter kind) run once when
the registry loads; lifecycle hooks broadcast events. Hooks are not on the hot
path: a turn calls adapters directly. A hook implementation that raises is
isolated, and reported in load errors or diagnostics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pluggy

from .._history import MessageGroup
from .._ports import PORT_KIND_TABLE
from .._ports.archive import ArchiveReceipt
from .._ports.memory import MemoryEvent
from .._scope import SessionKey
from .spec import Register

__all__ = ["LIFECYCLE_HOOKS", "PROJECT_NAME", "REGISTRATION_HOOKS", "hookimpl", "hookspec"]

#: The pluggy project name, entry-point group and CLI command.
PROJECT_NAME = "agentium"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def agentium_register_archives(register: Register) -> None:
    """Register history archive adapters.

    Called once when the registry loads. Call ``register(AdapterSpec(...))``
    for each archive; its ``adapter_class`` must declare
    ``capabilities = ArchiveCapabilities(...)`` in its own class body.

    :param register: validates and records one :class:`~agentium_harness._plugins.spec.AdapterSpec`.
    """


@hookspec
def agentium_register_session_stores(register: Register) -> None:
    """Register session store adapters (capabilities: ``SessionStoreCapabilities``).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_recall_stores(register: Register) -> None:
    """Register recall store adapters (capabilities: ``RecallCapabilities``).

    The recall store class must name its session class in ``session_class``.

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_embedders(register: Register) -> None:
    """Register embedder adapters (capabilities: ``EmbedderCapabilities``).

    An embedder beside a recall store that declares ``vector_indexing`` and
    ``hybrid_discovery`` makes recall hybrid (``[embedder]`` in a config).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_summarizers(register: Register) -> None:
    """Register summarizer adapters (capabilities: ``SummarizerCapabilities``).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_verifiers(register: Register) -> None:
    """Register completion verifier adapters (capabilities: ``VerifierCapabilities``).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_memory_stores(register: Register) -> None:
    """Register memory store adapters (capabilities: ``MemoryCapabilities``).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_providers(register: Register) -> None:
    """Register model provider adapters (capabilities: ``ProviderCapabilities``).

    :param register: validates and records one adapter spec.
    """


@hookspec
def agentium_register_recall_strategies(register: Any) -> None:
    """Register named recall strategies: query formulators and rankings.

    Call ``register(RecallStrategy(kind="query" | "ranking", name=..., function=...))``
    for each; a config selects them by name in ``[recall] query`` and
    ``[recall] ranking``.

    :param register: validates and records one ``RecallStrategy``.
    """


@hookspec
def agentium_register_graders(register: Any) -> None:
    """Register named eval graders (``agentium eval``, ``agentium_harness.eval``).

    Called once when the registry loads. Call ``register(grader)`` for each:
    an object with an identifier ``name``, a ``description``, an ``evidence``
    flag and ``grade(case, trace)`` returning a ``Grade`` (pass, fail or
    absent with a reason). A case file selects graders by name.

    :param register: validates and records one grader.
    """


@hookspec
def agentium_register_commands(register: Any) -> None:
    """Register subcommands of the ``agentium`` command line (``agentium <name> ...``).

    Called once when the registry loads. Call
    ``register(CliCommand(name=..., help=..., configure=..., run=...))`` for
    each: ``configure(parser)`` declares the arguments (no I/O), ``run(args)``
    returns the exit status. A name the core uses, a malformed name or a
    name registered twice is refused and reported by ``agentium plugins``.

    :param register: validates and records one ``CliCommand``.
    """


@hookspec
def agentium_groups_archived(
    key: SessionKey, receipts: Sequence[ArchiveReceipt], groups: Sequence[MessageGroup]
) -> None:
    """Called after the archive acknowledged groups and the session boundary committed.

    An external index can follow the archive from here (the runtime's own
    recall store, when it declares ``archive_indexing``, is called directly
    by the engine in the same step). The call happens after
    the commit, so raising cannot undo it; a raising implementation is
    isolated and reported in the run's diagnostics.

    :param key: the session whose groups were archived.
    :param receipts: one receipt per archived group, ascending ``seq``.
    :param groups: the archived groups, in the same order as ``receipts``.
    """


@hookspec
def agentium_memory_event(event: MemoryEvent) -> None:
    """Called when memory is remembered, corrected, forgotten or drained.

    :param event: what happened, to which scope and fact.
    """


@hookspec
def agentium_session_closed(key: SessionKey, report: Any) -> None:
    """Called after ``resources.close_session`` finished for a session.

    :param key: the closed session.
    :param report: the ``CleanupReport`` returned to the host.
    """


#: Registration hook name for each adapter kind, derived from ``agentium_harness._ports.PORT_KIND_TABLE``
#: (the hook specifications above are written out so plugin authors can read them; a test
#: checks that they and the table name the same hooks).
REGISTRATION_HOOKS: Mapping[str, str] = MappingProxyType({k.name: k.hook for k in PORT_KIND_TABLE})

#: Lifecycle (broadcast) hook names.
LIFECYCLE_HOOKS: tuple[str, ...] = (
    "agentium_groups_archived",
    "agentium_memory_event",
    "agentium_session_closed",
)
