"""The memory store port: durable facts whose lifecycle the host controls (R36–R40)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

import attrs

from .._scope import Scope
from ._base import Capabilities, OpContext, port_stub, unsupported

__all__ = [
    "MemoryAck",
    "MemoryCapabilities",
    "MemoryEvent",
    "MemoryEventKind",
    "MemoryFact",
    "MemoryStore",
]


@attrs.frozen(slots=True)
class MemoryCapabilities(Capabilities):
    """What a memory store declares.

    - ``acknowledged_writes``: ``remember`` returns only after the write is durable (required).
    - ``correction``: :meth:`MemoryStore.correct` replaces a fact, keeping its history.
    - ``forgetting``: :meth:`MemoryStore.forget` removes a fact.
    """

    METHODS: ClassVar[dict[str, str]] = {"correction": "correct", "forgetting": "forget"}
    REQUIRED: ClassVar[tuple[str, ...]] = ("acknowledged_writes",)

    acknowledged_writes: bool = False
    correction: bool = False
    forgetting: bool = False


@attrs.frozen(slots=True)
class MemoryFact:
    """A fact the host chose to keep, with its scope and validity."""

    fact_id: str
    scope: Scope
    text: str
    valid_until: str | None = None


@attrs.frozen(slots=True)
class MemoryAck:
    """The store's acknowledgment of a write (R39)."""

    fact_id: str
    revision: str
    durable: bool


class MemoryEventKind(enum.StrEnum):
    """What happened to memory; broadcast through the ``agentium_memory_event`` hook."""

    REMEMBERED = "remembered"
    CORRECTED = "corrected"
    FORGOTTEN = "forgotten"
    DRAINED = "drained"


@attrs.frozen(slots=True)
class MemoryEvent:
    """A memory lifecycle event."""

    kind: MemoryEventKind
    scope: Scope
    fact_id: str | None = None


class MemoryStore:
    """Port for durable memory."""

    capabilities: ClassVar[MemoryCapabilities]

    @port_stub
    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Store ``fact`` and acknowledge it (R39).

        Call ``ctx.raise_if_expired("memory remember")`` before writing; return
        the acknowledgment only once the write is durable as declared.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "remember")

    @port_stub
    async def lookup(self, scope: Scope, query: str, limit: int, ctx: OpContext) -> Sequence[MemoryFact]:
        """Return at most ``limit`` facts of ``scope`` relevant to ``query``.

        Call ``ctx.raise_if_expired("memory lookup")`` before starting.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` from the port stub.
        """
        raise unsupported(self, "lookup")

    @port_stub
    async def correct(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Replace a fact by id. Declared by ``correction``.

        Call ``ctx.raise_if_expired("memory correct")`` before writing.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "correct", "correction")

    @port_stub
    async def forget(self, scope: Scope, fact_id: str, ctx: OpContext) -> bool:
        """Remove a fact; return whether it existed. Declared by ``forgetting``.

        Call ``ctx.raise_if_expired("memory forget")`` before writing.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "forget", "forgetting")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself."""
