"""What the engine needs from the plugin registry: a lifecycle-hook broadcaster."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["HookBroadcaster"]


class HookBroadcaster(Protocol):
    """Anything that can broadcast a lifecycle hook and return the failures (the plugin registry)."""

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        """Call every implementation of ``hook``; return one record per implementation that raised."""
        ...
