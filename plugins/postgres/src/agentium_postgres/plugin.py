"""The plugin module named by the ``agentium`` entry point: registers the ``postgres`` adapters."""

from __future__ import annotations

from typing import Any

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .archive import PostgresArchive
from .cli import COMMAND
from .config import PostgresConfig
from .memory import PostgresMemoryStore
from .recall import PostgresRecallStore
from .sessions import PostgresSessionStore

__all__ = [
    "agentium_register_archives",
    "agentium_register_commands",
    "agentium_register_memory_stores",
    "agentium_register_recall_stores",
    "agentium_register_session_stores",
]


@hookimpl
def agentium_register_archives(register: Register) -> None:
    """Register the PostgreSQL history archive as archive adapter ``postgres`` (options: ``PostgresConfig``).

    Building it does no I/O; the pool is opened on the first call.
    """
    register(
        AdapterSpec(
            name="postgres",
            adapter_class=PostgresArchive,
            config_class=PostgresConfig,
            description="PostgreSQL history archive: immutable rows, one transaction per batch, "
            "row-level security",
        )
    )


@hookimpl
def agentium_register_session_stores(register: Register) -> None:
    """Register the PostgreSQL session store as session store adapter ``postgres``."""
    register(
        AdapterSpec(
            name="postgres",
            adapter_class=PostgresSessionStore,
            config_class=PostgresConfig,
            description="PostgreSQL session snapshots: compare-and-set, archive and boundary in one "
            "transaction",
        )
    )


@hookimpl
def agentium_register_recall_stores(register: Register) -> None:
    """Register the PostgreSQL recall store as recall store adapter ``postgres``."""
    register(
        AdapterSpec(
            name="postgres",
            adapter_class=PostgresRecallStore,
            config_class=PostgresConfig,
            description="PostgreSQL full-text recall (tsvector, GIN): bounded discovery, reads and "
            "validation, "
            "canonical archive reads",
        )
    )


@hookimpl
def agentium_register_memory_stores(register: Register) -> None:
    """Register the PostgreSQL memory store as memory store adapter ``postgres``."""
    register(
        AdapterSpec(
            name="postgres",
            adapter_class=PostgresMemoryStore,
            config_class=PostgresConfig,
            description="PostgreSQL memory: revisions, tombstones, scoped bounded lookups",
        )
    )


@hookimpl
def agentium_register_commands(register: Any) -> None:
    """Register ``agentium postgres migrate CONFIG``."""
    register(COMMAND)
