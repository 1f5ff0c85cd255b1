"""What the PostgreSQL erasure-race tests share: a model held mid-turn, a runtime over the database."""

from __future__ import annotations

from typing import Any

from agentium_harness import RuntimeLimits, create_harness_runtime
from agentium_harness.testing.erasure_races import HeldProvider
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresSessionStore

__all__ = ["Held", "pg_runtime"]


#: A model held mid-turn (core's, under the name these tests use).
Held = HeldProvider


def pg_runtime(
    provider: Any, config: PostgresConfig, limits: RuntimeLimits | None = None, **options: Any
) -> Any:
    """A runtime (one process) over the database ``config`` names; it owns its archive and store.

    ``options`` (``tools``, ``retention``, ...) go to ``create_harness_runtime`` as given.
    """
    archive, store = PostgresArchive(config), PostgresSessionStore(config)
    if limits is not None:
        options["limits"] = limits
    return create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store), **options
    )
