"""The host's memory extractor (R36): what a manager configured with one calls after a turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..._history import Message
from ..._ports._base import OpContext
from ..._ports.memory import MemoryFact, MemoryScope

__all__ = ["MemoryExtractor"]


class MemoryExtractor(Protocol):
    """Host-configured extraction: facts worth keeping from a turn's messages (R36).

    It only proposes; the manager checks and writes each fact as owned work.
    """

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> Sequence[MemoryFact]:
        """The facts to remember from ``messages``, in ``scope`` (or narrower)."""
        ...
