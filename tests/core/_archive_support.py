"""Archives for tests that need a read to wait: a group read held at a gate while something else happens."""

from __future__ import annotations

from typing import Any

import anyio

from agentium_harness import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive


class GatedReads(InMemoryArchive):
    """An archive whose group reads wait at a gate once it is set (the caller has loaded its snapshot)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()

    async def read_groups(self, key: SessionKey, first: int, count: int, ctx: Any) -> Any:
        gate = self.gate
        if gate is not None:
            self.gate = None
            self.entered.set()
            await gate.wait()
        return await super().read_groups(key, first, count, ctx)
