"""What the PostgreSQL erasure-race tests share: a model held mid-turn, a runtime over the database."""

from __future__ import annotations

from typing import Any

import anyio

from agentium_harness import RuntimeLimits, create_harness_runtime
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresSessionStore

__all__ = ["Held", "pg_runtime"]


class Held(ScriptedProvider):
    """Answers at once, except the armed call, which waits for ``release`` after saying it started."""

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.armed = False
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


def pg_runtime(provider: Any, config: PostgresConfig, limits: RuntimeLimits | None = None) -> Any:
    """A runtime (one process) over the database ``config`` names; it owns its archive and store."""
    archive, store = PostgresArchive(config), PostgresSessionStore(config)
    extra: dict[str, Any] = {} if limits is None else {"limits": limits}
    return create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store), **extra
    )
