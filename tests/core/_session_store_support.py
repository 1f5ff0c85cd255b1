"""Session stores for engine tests: ones that break a port rule, one whose save hangs, one failing reads."""

from __future__ import annotations

from typing import Any

import anyio

from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseTarget,
    OpContext,
    SessionKey,
    SessionSnapshot,
)


class RevisionsRestartStore(InMemorySessionStore):
    """Breaks the port's rule on purpose: a session created again after its erasure starts at 1 again.

    The built-in stores keep a revision floor so that revisions never repeat
    for a key; the engine's checks that do not rely on it (the digests of
    its summary updates, the commit fence) must still hold with a store of
    a host's own that does not.
    """

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        self._floor = 0  # forgets the revisions it removed
        return report


class HangingStore(InMemorySessionStore):
    """A session store whose save never answers once ``hang_save`` is set."""

    capabilities = InMemorySessionStore.capabilities
    hang_save = False

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected: int | None, ctx: OpContext
    ) -> int:
        if self.hang_save:
            await anyio.sleep_forever()
        return await super().save(key, snapshot, expected, ctx)


class FailsAfterTheWrite(InMemorySessionStore):
    """A session store that fails every read once ``fail`` is set (a fence's second read, after a write)."""

    fail = False

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if self.fail:
            raise OSError("disk gone")
        return await super().load(key, ctx)
