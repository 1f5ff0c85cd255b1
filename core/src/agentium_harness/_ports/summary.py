"""The summarizer port: incremental task summaries with citations (R5, R23, R26)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import attrs

from .._history import MessageGroup
from .._validators import str_tuple
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = ["Citation", "Summarizer", "SummarizerCapabilities", "TaskSummary"]


def _tuple_of_citation(value: Iterable[Citation]) -> tuple[Citation, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


@attrs.frozen(slots=True)
class SummarizerCapabilities(Capabilities):
    """What a summarizer declares.

    - ``incremental``: folds new groups into a previous summary (required).
    - ``citations``: every statement cites the groups it came from.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("incremental",)

    incremental: bool = False
    citations: bool = False


@attrs.frozen(slots=True)
class Citation:
    """Identifies evidence (a group ``seq`` and its digest); it never restores omitted raw text (R5)."""

    seq: int
    digest: str


@attrs.frozen(slots=True)
class TaskSummary:
    """A summary of canonical groups below ``frontier`` (exclusive), with citations and uncertainty."""

    text: str
    frontier: int
    citations: tuple[Citation, ...] = attrs.field(default=(), converter=_tuple_of_citation)
    policy: str = "default"
    version: str = "1"
    uncertainty: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)


class Summarizer:
    """Port for a summarizer."""

    capabilities: ClassVar[SummarizerCapabilities]

    @port_stub
    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        """Fold complete ``groups`` (contiguous from ``previous.frontier``) into a new summary.

        Call ``ctx.raise_if_expired("summarize")`` before starting and between
        groups; the result must cite only groups it was given.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "summarize")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself."""
