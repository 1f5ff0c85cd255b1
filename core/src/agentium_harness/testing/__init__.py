"""Testing support for hosts and adapter authors.

- The contract suites (:class:`ArchiveContract`, :class:`SessionStoreContract`,
  :class:`RecallStoreContract`, :class:`EmbedderContract`, :class:`SummarizerContract`,
  :class:`VerifierContract`, :class:`MemoryStoreContract`)
  live in :mod:`agentium_harness.testing.contracts` and are re-exported here.
  They need pytest, so they are imported on first access: importing this
  package alone does not require pytest.
- :func:`create_harness_eval_target` (:mod:`agentium_harness.testing.eval_target`):
  an eval target over the actual runtime for :mod:`agentium_harness.eval` (R32).
- Helpers that need no pytest (:mod:`agentium_harness.testing.helpers`):
  :func:`plain_group`, :func:`rich_group`, :func:`control_text_group` (with
  :data:`CONTROL_TEXT`), :data:`TRICKY_SESSION_KEYS`,
  :data:`HOSTILE_IDS`, the collision sets (:func:`collision_pairs`,
  :data:`COLLIDING_SESSION_KEYS`, :data:`COLLIDING_MEMORY_SCOPES`,
  :data:`COLLIDING_SOURCE_OWNERS`),
  :func:`scoped_snapshot`, :func:`legacy_snapshot`, the ``Reopen`` fixture
  type with :func:`reopen` and :func:`reopened`, and the ``CorruptStored``
  hook type with :func:`replace_once`.
- Any-loop helpers (:mod:`agentium_harness.testing.loops`): :func:`run_in_threads`
  runs one async callable from several threads at once, each on an event loop
  of its own (the OpenAI Agents SDK's concurrent-access pattern), and
  :func:`run_in_turn` from successive loops, as ``anyio.run`` per request does.
- Span recording (:mod:`agentium_harness.testing.spans`, needs
  ``opentelemetry-sdk`` when used): :class:`SpanRecorder` keeps finished spans
  in memory (``finished``, ``carried()``), and :func:`recording_spans` installs
  one as the global tracer provider for a ``with`` block.
- Request recording (:mod:`agentium_harness.testing.providers`):
  :func:`record_requests` keeps every request a model provider is asked, for a
  test to check what a turn sent the model.
- Erasure races (:mod:`agentium_harness.testing.erasure_races`): :class:`HeldProvider`
  holds one model call until the test lets it go, :func:`counting_index_loads`
  wraps a session store class to count its erasure-index reads, and
  :func:`first_turn_during_erasure` runs a turn held while another runtime
  erases; :class:`HeldTool` and :func:`tool_turn_while` hold a turn in a tool
  round, :class:`RecordingProvider` keeps the text of each request, and
  :func:`resident_history_erased_mid_run`, :func:`fact_forgotten_mid_run`
  (a memory fact another process forgets while a run carries it; given a
  memory store factory too) and :func:`document_deleted_mid_run` (a host
  document another process deletes; given a recall store factory) are whole tests any backend runs with a
  :class:`RuntimeBuilder` over its own server (the PostgreSQL and S3
  plugins' erasure-race tests use them).
- Dependency floors (:mod:`agentium_harness.testing.floors`): :func:`declared_floors`,
  :func:`install_floors`, :func:`run_python` and :func:`run_pytest` run a
  distribution's code and tests on the oldest releases its metadata accepts
  (the core's and every plugin's floor tests use them).

The suites' modules are registered for pytest's assertion rewriting before
they are imported, so a failing standard test shows the values it compared.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .eval_target import HarnessEvalTarget, create_harness_eval_target
from .floors import declared_floors, install_floors, run_pytest, run_python
from .helpers import (
    ABSENT_MARKERS,
    COLLIDING_MEMORY_SCOPES,
    COLLIDING_SESSION_KEYS,
    COLLIDING_SOURCE_OWNERS,
    COLLISION_SEPARATORS,
    CONTROL_TEXT,
    HOSTILE_IDS,
    TRICKY_SESSION_KEYS,
    CorruptStored,
    RawStorage,
    Reopen,
    collision_pairs,
    control_text_group,
    legacy_snapshot,
    plain_group,
    raw_files,
    reopen,
    reopened,
    replace_once,
    rich_group,
    scoped_snapshot,
)
from .loops import LoopStyle, run_in_threads, run_in_turn
from .providers import record_requests
from .spans import SpanRecorder, recording_spans

if TYPE_CHECKING:
    from .contracts import (
        ArchiveContract,
        ContractSuite,
        EmbedderContract,
        MemoryStoreContract,
        RecallStoreContract,
        SessionStoreContract,
        SummarizerContract,
        UndeclaredCapabilityWarning,
        VerifierContract,
    )

__all__ = [
    "ABSENT_MARKERS",
    "COLLIDING_MEMORY_SCOPES",
    "COLLIDING_SESSION_KEYS",
    "COLLIDING_SOURCE_OWNERS",
    "COLLISION_SEPARATORS",
    "HOSTILE_IDS",
    "SUITE_MODULES",
    "TRICKY_SESSION_KEYS",
    "ArchiveContract",
    "ContractSuite",
    "CorruptStored",
    "EmbedderContract",
    "HarnessEvalTarget",
    "LoopStyle",
    "RawStorage",
    "MemoryStoreContract",
    "RecallStoreContract",
    "Reopen",
    "SpanRecorder",
    "SessionStoreContract",
    "SummarizerContract",
    "UndeclaredCapabilityWarning",
    "VerifierContract",
    "collision_pairs",
    "create_harness_eval_target",
    "CONTROL_TEXT",
    "control_text_group",
    "legacy_snapshot",
    "plain_group",
    "raw_files",
    "register_assert_rewrite",
    "reopen",
    "record_requests",
    "recording_spans",
    "reopened",
    "replace_once",
    "rich_group",
    "run_in_threads",
    "run_in_turn",
    "declared_floors",
    "install_floors",
    "run_pytest",
    "run_python",
    "scoped_snapshot",
]

#: The modules whose ``assert`` statements are the standard tests' checks.
SUITE_MODULES = (
    "agentium_harness.testing._suite",
    "agentium_harness.testing.archive_contract",
    "agentium_harness.testing.session_store_contract",
    "agentium_harness.testing.recall_contract",
    "agentium_harness.testing.recall_archive_contract",
    "agentium_harness.testing.recall_hybrid_contract",
    "agentium_harness.testing.embedder_contract",
    "agentium_harness.testing.summarizer_contract",
    "agentium_harness.testing.verifier_contract",
    "agentium_harness.testing.memory_contract",
    "agentium_harness.testing.memory_provenance_contract",
    "agentium_harness.testing.erasure_contract",
    "agentium_harness.testing.index_erasure_contract",
    "agentium_harness.testing.contracts",
)

_LAZY = frozenset(
    {
        "UndeclaredCapabilityWarning",
        "ArchiveContract",
        "ContractSuite",
        "EmbedderContract",
        "RecallStoreContract",
        "SessionStoreContract",
        "SummarizerContract",
        "VerifierContract",
        "MemoryStoreContract",
    }
)


def register_assert_rewrite() -> None:
    """Ask pytest to rewrite the suites' asserts (so failures show values), if pytest is in use.

    Called before the suites are imported (here and in
    :mod:`~agentium_harness.testing.contracts`); it has an effect only when the
    modules are not imported yet and pytest is already loaded, so it never
    imports pytest itself.
    """
    pytest = sys.modules.get("pytest")
    if pytest is None:
        return
    pending = [name for name in SUITE_MODULES if name not in sys.modules]
    if pending:
        pytest.register_assert_rewrite(*pending)


# Inside a pytest run this package is imported (by a test module) before the
# suites, which is the moment registration must happen.
register_assert_rewrite()


def __getattr__(name: str) -> Any:
    """Import the contract suites (and pytest) only when one of them is used."""
    if name in _LAZY:
        import pytest  # noqa: F401  (loaded first so the rewrite registration applies)

        register_assert_rewrite()
        from . import contracts

        return getattr(contracts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
