"""Assembly of labeled source data into a model request under a token budget (R4, R19, R38).

Blocks are taken whole, in the order given (the caller's rank order); a block
whose rendered size — wrapper included — does not fit is omitted, never cut.
Every omission is recorded.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from .._ports.provider import SourceBlock

__all__ = ["SourceAssembly", "SourceStatus", "assemble_sources"]


class SourceStatus(enum.StrEnum):
    """Whether every offered block made it into the request."""

    NONE = "none"
    COMPLETE = "complete"
    PARTIAL = "partial"


@attrs.frozen(slots=True)
class SourceAssembly:
    """The blocks included, the ids omitted, and the tokens used (wrappers included)."""

    included: tuple[SourceBlock, ...]
    omitted: tuple[str, ...]
    tokens: int
    budget: int

    @property
    def status(self) -> SourceStatus:
        """``NONE`` with nothing offered, ``PARTIAL`` if anything was omitted."""
        if not self.included and not self.omitted:
            return SourceStatus.NONE
        return SourceStatus.PARTIAL if self.omitted else SourceStatus.COMPLETE


def assemble_sources(blocks: Sequence[SourceBlock], budget_tokens: int) -> SourceAssembly:
    """Include whole blocks in order while their rendered tokens fit ``budget_tokens``."""
    included: list[SourceBlock] = []
    omitted: list[str] = []
    used = 0
    for block in blocks:
        cost = block.estimated_tokens
        if used + cost <= budget_tokens:
            included.append(block)
            used += cost
        else:
            omitted.append(block.source_id)
    return SourceAssembly(tuple(included), tuple(omitted), used, budget_tokens)
