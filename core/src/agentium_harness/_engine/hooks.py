"""Lifecycle hooks from the engine: what it needs from the plugin registry, and the bounded broadcast."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.to_thread

from .results import Diagnostic, Severity

__all__ = ["HookBroadcaster", "broadcast"]


class HookBroadcaster(Protocol):
    """Anything that can broadcast a lifecycle hook and return the failures (the plugin registry)."""

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        """Call every implementation of ``hook``; return one record per implementation that raised."""
        ...


async def broadcast(hooks: HookBroadcaster, hook: str, timeout_s: float, **kwargs: Any) -> list[Diagnostic]:
    """Broadcast a lifecycle hook in a worker thread, bounded, and report failures as diagnostics.

    Hook implementations are plain functions that may block (a recall index
    writing to its backend), so they run off the event loop in a thread the
    caller abandons at ``timeout_s`` — the configured close timeout for the
    runtime's hooks, the drain timeout for the memory manager's — reporting a
    slower broadcast (``hook_timeout``) instead of hanging.
    """
    call = partial(hooks.broadcast, hook, **kwargs)
    failures: Sequence[object] = ()
    with anyio.move_on_after(timeout_s) as scope:
        failures = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    if scope.cancelled_caught:
        return [
            Diagnostic(
                "hook_timeout",
                f"{hook} did not return within {timeout_s}s; not awaited further",
                Severity.WARNING,
            )
        ]
    return [Diagnostic("hook_failed", str(f), Severity.WARNING) for f in failures]
