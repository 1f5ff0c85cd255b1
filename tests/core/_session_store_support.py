"""Session stores for tests of the engine's own defences against a store that breaks a port rule."""

from __future__ import annotations

from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.plugin_api import DEFAULT_ERASE_BATCH, EraseReport, EraseTarget, OpContext


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
