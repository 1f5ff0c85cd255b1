"""The session store port: revisioned snapshots of resident canonical history (R2, R15).

A snapshot holds the session's resident (not yet archived) complete groups,
the archive boundary and the memory scope it belongs to. Stores save with
compare-and-set on the snapshot revision so that two writers can never both
commit on the same base.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import attrs

from ..history import MessageGroup
from ..scope import Scope, SessionKey
from ._base import Capabilities, OpContext, port_stub

__all__ = [
    "SNAPSHOT_FORMAT_VERSION",
    "ArchiveDivergence",
    "SessionSnapshot",
    "SessionStore",
    "SessionStoreCapabilities",
    "StoredSnapshot",
]

#: Current snapshot format. Version 1 snapshots had no memory scope (legacy).
SNAPSHOT_FORMAT_VERSION = 2


def _tuple_of_messagegroup(value: Iterable[MessageGroup]) -> tuple[MessageGroup, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


@attrs.frozen(slots=True)
class SessionStoreCapabilities(Capabilities):
    """What a session store declares.

    - ``compare_and_set``: :meth:`SessionStore.save` honours ``expected_revision`` atomically (required).
    - ``durable``: saved snapshots survive a process crash.
    - ``listing``: :meth:`SessionStore.list_sessions` enumerates a user's sessions under a bound.
    - ``health_check``: :meth:`SessionStore.health` runs a bounded probe.
    """

    METHODS: ClassVar[dict[str, str]] = {"listing": "list_sessions", "health_check": "health"}
    REQUIRED: ClassVar[tuple[str, ...]] = ("compare_and_set",)

    compare_and_set: bool = False
    durable: bool = False
    listing: bool = False
    health_check: bool = False


def _tuple_of_int(value: Iterable[int]) -> tuple[int, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


@attrs.frozen(slots=True)
class ArchiveDivergence:
    """The archive holds groups that differ from this session's at seqs it never committed.

    ``seqs`` are the conflicting sequence numbers found when eviction was
    attempted; ``detail`` is the archive's error message. A snapshot carrying a
    divergence is in the ``diverged`` state: runs are refused until
    reconciliation (docs/runtime.md), and neither copy is ever dropped.
    """

    seqs: tuple[int, ...] = attrs.field(converter=_tuple_of_int)
    detail: str = ""


@attrs.frozen(slots=True)
class SessionSnapshot:
    """The committed state of one session.

    - ``memory_scope``: the scope the history belongs to; ``None`` only for a
      legacy snapshot, which loads only with an explicit attestation.
    - ``boundary``: the ``seq`` of the first group still resident; every group
      below it is in the archive.
    - ``next_seq``: the ``seq`` the next group will get.
    - ``resident``: the resident groups, ascending, ``boundary <= seq < next_seq``.
    - ``divergence``: set when the archive was found to hold different groups at
      seqs this session had not archived yet (the ``diverged`` state).
    """

    memory_scope: Scope | None
    boundary: int = 0
    next_seq: int = 0
    resident: tuple[MessageGroup, ...] = attrs.field(default=(), converter=_tuple_of_messagegroup)
    format_version: int = SNAPSHOT_FORMAT_VERSION
    divergence: ArchiveDivergence | None = None


@attrs.frozen(slots=True)
class StoredSnapshot:
    """A snapshot as loaded, with the store's revision of it (for compare-and-set)."""

    snapshot: SessionSnapshot
    revision: int


class SessionStore:
    """Port for revisioned session snapshots, keyed by :class:`~agentium_harness.scope.SessionKey`."""

    capabilities: ClassVar[SessionStoreCapabilities]

    @port_stub
    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """Return the stored snapshot and its revision, or ``None`` if there is none.

        A row that cannot be decoded raises ``SnapshotCorruptError``; the row is
        left as it is.
        """
        raise NotImplementedError

    @port_stub
    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Store ``snapshot`` if the current revision equals ``expected_revision``.

        ``expected_revision=None`` means the session must not exist yet. Return
        the new revision. On mismatch raise ``SessionConflictError`` and change
        nothing.
        """
        raise NotImplementedError

    @port_stub
    async def list_sessions(self, tenant: str, user: str, limit: int, ctx: OpContext) -> list[str]:
        """Up to ``limit`` session ids of one user, sorted. Declared by ``listing``."""
        raise NotImplementedError("this session store does not declare listing")

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe. Declared by ``health_check``."""
        raise NotImplementedError("this session store does not declare health_check")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
