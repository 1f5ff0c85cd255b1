"""The history archive port: where evicted canonical groups go (R3).

The runtime appends complete groups, waits for one receipt per group, and only
then commits the session's new boundary. An archive is append-only: appending
a group again with the same ``seq`` and digest is a no-op success, the same
``seq`` with different content is an :class:`~agentium_harness.errors.ArchiveConflictError`,
and nothing is ever overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from ..history import MessageGroup
from ..scope import SessionKey
from ._base import Capabilities, OpContext, port_stub

__all__ = ["ArchiveCapabilities", "ArchiveReceipt", "HistoryArchive"]


@attrs.frozen(slots=True)
class ArchiveCapabilities(Capabilities):
    """What a history archive declares.

    - ``durable``: an acknowledged append survives a process crash.
    - ``idempotent_append``: re-appending an identical group is a no-op success (required).
    - ``bounded_reads``: :meth:`HistoryArchive.read_groups` returns groups by ``seq`` range under a bound.
    - ``health_check``: :meth:`HistoryArchive.health` runs a bounded probe.
    """

    METHODS: ClassVar[dict[str, str]] = {"bounded_reads": "read_groups", "health_check": "health"}
    REQUIRED: ClassVar[tuple[str, ...]] = ("idempotent_append",)

    durable: bool = False
    idempotent_append: bool = False
    bounded_reads: bool = False
    health_check: bool = False


@attrs.frozen(slots=True)
class ArchiveReceipt:
    """The archive's acknowledgment of one group: its ``seq``, the digest it stored, and where."""

    seq: int
    digest: str
    location: str


class HistoryArchive:
    """Port for append-only storage of complete canonical message groups.

    Adapters subclass this (or match it structurally) and declare a
    ``capabilities`` class attribute of type :class:`ArchiveCapabilities` on
    their own class.
    """

    capabilities: ClassVar[ArchiveCapabilities]

    @port_stub
    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Durably append ``groups`` (complete, ascending ``seq``) for session ``key``.

        Return one receipt per group, in order, only after the groups are
        stored. Re-appending a stored group with an equal digest returns its
        receipt; a different digest at a stored ``seq`` raises
        ``ArchiveConflictError`` and changes nothing.
        """
        raise NotImplementedError

    @port_stub
    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Return up to ``max_groups`` archived groups with ``seq >= start_seq``, ascending.

        Declared by ``bounded_reads``. Must return whole groups only and never
        more than ``max_groups``.
        """
        raise NotImplementedError("this archive does not declare bounded_reads")

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe and return a short description. Declared by ``health_check``."""
        raise NotImplementedError("this archive does not declare health_check")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
