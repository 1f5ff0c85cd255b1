"""The built-in plugin: registers the embedded adapters through the ordinary hooks.

The registry registers this module first, under the distribution name
``agentium-harness``, exactly as it registers an external plugin's module.
"""

from __future__ import annotations

from .._engine.recall_policy import (
    latest_user_text,
    previous_and_latest_user_text,
    score_order,
    store_order,
)
from .._plugins.graders import RegisterGrader
from .._plugins.hookspecs import hookimpl
from .._plugins.spec import AdapterSpec, Register
from .._plugins.strategies import RecallStrategy, RegisterStrategy
from .embedders import HashingEmbedder, HashingEmbedderConfig
from .memory import InMemoryArchive, InMemoryArchiveConfig, InMemorySessionStore, InMemorySessionStoreConfig
from .memory_facts import InMemoryMemoryConfig, InMemoryMemoryStore
from .memory_recall import InMemoryRecallConfig, InMemoryRecallStore
from .providers import (
    ExtractiveProvider,
    ExtractiveProviderConfig,
    ScriptedProvider,
    ScriptedProviderConfig,
)
from .recorded import RecordedProvider, RecordedProviderConfig
from .sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from .sqlite_memory import SQLiteMemoryStore
from .sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from .summarizers import (
    ExtractiveSummarizer,
    ExtractiveSummarizerConfig,
    ModelSummarizer,
    ModelSummarizerConfig,
)


@hookimpl
def agentium_register_archives(register: Register) -> None:
    """Register the built-in archives."""
    register(
        AdapterSpec(
            name="memory",
            adapter_class=InMemoryArchive,
            config_class=InMemoryArchiveConfig,
            description="in-process archive for tests and development (not durable)",
        )
    )
    register(
        AdapterSpec(
            name="sqlite",
            adapter_class=SQLiteArchive,
            config_class=SQLiteConfig,
            description="durable archive in one SQLite file (WAL), shared with the sqlite session store",
        )
    )


@hookimpl
def agentium_register_session_stores(register: Register) -> None:
    """Register the built-in session stores."""
    register(
        AdapterSpec(
            name="memory",
            adapter_class=InMemorySessionStore,
            config_class=InMemorySessionStoreConfig,
            description="in-process session store for tests and development (not durable)",
        )
    )
    register(
        AdapterSpec(
            name="sqlite",
            adapter_class=SQLiteSessionStore,
            config_class=SQLiteConfig,
            description="durable compare-and-set session store in one SQLite file (WAL)",
        )
    )


@hookimpl
def agentium_register_providers(register: Register) -> None:
    """Register the built-in deterministic providers."""
    register(
        AdapterSpec(
            name="scripted",
            adapter_class=ScriptedProvider,
            config_class=ScriptedProviderConfig,
            description="replays replies from a list or a JSONL file",
        )
    )
    register(
        AdapterSpec(
            name="extractive",
            adapter_class=ExtractiveProvider,
            config_class=ExtractiveProviderConfig,
            description="quotes the best-matching labeled source sentence, or abstains",
        )
    )
    register(
        AdapterSpec(
            name="recorded",
            adapter_class=RecordedProvider,
            config_class=RecordedProviderConfig,
            description="records another provider's requests and responses to JSONL, or replays them",
        )
    )


@hookimpl
def agentium_register_recall_stores(register: Register) -> None:
    """Register the built-in recall stores."""
    register(
        AdapterSpec(
            name="memory",
            adapter_class=InMemoryRecallStore,
            config_class=InMemoryRecallConfig,
            description="in-process recall store for tests and development (not durable)",
        )
    )
    register(
        AdapterSpec(
            name="sqlite",
            adapter_class=SQLiteRecallStore,
            config_class=SQLiteRecallConfig,
            description="FTS5 recall over archived groups and host documents in one SQLite file",
        )
    )


@hookimpl
def agentium_register_summarizers(register: Register) -> None:
    """Register the built-in summarizers."""
    register(
        AdapterSpec(
            name="extractive",
            adapter_class=ExtractiveSummarizer,
            config_class=ExtractiveSummarizerConfig,
            description="deterministic, model-free task summaries with citations",
        )
    )
    register(
        AdapterSpec(
            name="model",
            adapter_class=ModelSummarizer,
            config_class=ModelSummarizerConfig,
            description="task summaries written by the runtime's model provider, citations checked",
        )
    )


@hookimpl
def agentium_register_embedders(register: Register) -> None:
    """Register the built-in embedder."""
    register(
        AdapterSpec(
            name="hashing",
            adapter_class=HashingEmbedder,
            config_class=HashingEmbedderConfig,
            description="model-free word and trigram hashing, offline and deterministic (tests, examples)",
        )
    )


@hookimpl
def agentium_register_memory_stores(register: Register) -> None:
    """Register the built-in memory stores."""
    register(
        AdapterSpec(
            name="memory",
            adapter_class=InMemoryMemoryStore,
            config_class=InMemoryMemoryConfig,
            description="in-process memory store for tests and development (not durable)",
        )
    )
    register(
        AdapterSpec(
            name="sqlite",
            adapter_class=SQLiteMemoryStore,
            config_class=SQLiteConfig,
            description="durable, revisioned, forgettable memory facts in one SQLite file (WAL)",
        )
    )


@hookimpl
def agentium_register_recall_strategies(register: RegisterStrategy) -> None:
    """Register the built-in query formulators and rankings."""
    register(RecallStrategy("query", "latest_user_text", latest_user_text, "the latest user text"))
    register(
        RecallStrategy(
            "query",
            "previous_and_latest_user_text",
            previous_and_latest_user_text,
            "the previous resident user message and the latest user text",
        )
    )
    register(RecallStrategy("ranking", "store_order", store_order, "the store's own rank order"))
    register(RecallStrategy("ranking", "score", score_order, "highest score first, ties by source id"))


@hookimpl
def agentium_register_graders(register: RegisterGrader) -> None:
    """Register the built-in eval graders (``agentium_harness.eval``)."""
    from ..eval._graders import BUILTIN_GRADERS  # the eval package is loaded only when graders are

    for grader in BUILTIN_GRADERS:
        register(grader)
