"""Archives for tests that need a read to wait: a group read held at a gate while something else happens."""

from __future__ import annotations

from typing import Any

import anyio

from agentium_harness import ArchiveError, SessionKey
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.plugin_api import OpContext


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


class ArchiveDownOnce(InMemoryArchive):
    """The public in-memory archive, whose first append fails: the run defers its eviction."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    async def append(self, key: SessionKey, groups: Any, ctx: OpContext) -> Any:
        if self.down:
            self.down = False
            raise ArchiveError("the archive is briefly down")
        return await super().append(key, groups, ctx)
