"""The session store port: revisioned snapshots of resident canonical history (R2, R15).

A snapshot (:mod:`.snapshot`) holds the session's resident (not yet
archived) complete groups, the archive boundary and the memory scope it
belongs to. Stores save with compare-and-set on the snapshot revision so that
two writers can never both commit on the same base.

The revisions a store hands out for a key never repeat, including across an
erasure of it: otherwise a writer that loaded revision N of an erased session
would pass the compare-and-set once a session created again under the same
id is back at N, writing erased text over the new session's turns. The
suggested way is one store-wide revision floor (a number, no identifier) that
``erase`` raises to the highest revision it removes, a new session starting
one above it (see :meth:`SessionStore.save` and :meth:`SessionStore.erase`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from .._history import MessageGroup
from .._scope import SessionKey
from ._base import Capabilities, OpContext, port_stub, unsupported
from .archive import ArchiveReceipt, HistoryArchive
from .erasure import DEFAULT_ERASE_BATCH, EraseReport, EraseTarget

# The snapshot record and its bytes live in .snapshot; the port's users import them from here.
from .snapshot import (
    MAX_ARCHIVE_MARKS,
    SNAPSHOT_FORMAT_VERSION,
    ArchivedDigest,
    ArchiveDivergence,
    ArchiveMark,
    SessionSnapshot,
    add_archive_mark,
    decode_snapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_digest,
    snapshot_erasure,
    snapshot_header,
    verify_snapshot,
)
from .snapshot_scope import SnapshotScopeMismatchError, check_snapshot_scope, snapshot_scope_issue

__all__ = [
    "SNAPSHOT_FORMAT_VERSION",
    "MAX_ARCHIVE_MARKS",
    "ArchiveDivergence",
    "ArchiveMark",
    "ArchivedDigest",
    "add_archive_mark",
    "SessionSnapshot",
    "SessionStore",
    "SessionStoreCapabilities",
    "SnapshotScopeMismatchError",
    "StoredSnapshot",
    "check_snapshot_scope",
    "decode_snapshot",
    "seal_snapshot",
    "snapshot_bytes",
    "snapshot_digest",
    "snapshot_erasure",
    "snapshot_header",
    "snapshot_scope_issue",
    "verify_snapshot",
]


@attrs.frozen(slots=True)
class SessionStoreCapabilities(Capabilities):
    """What a session store declares.

    - ``compare_and_set``: :meth:`SessionStore.save` honours ``expected_revision`` atomically (required).
    - ``durable``: saved snapshots survive a process crash.
    - ``listing``: :meth:`SessionStore.list_sessions` enumerates a user's sessions under a bound.
    - ``health_check``: :meth:`SessionStore.health` runs a bounded probe.
    - ``joint_archive_commit``: :meth:`SessionStore.commit_with_archive` appends
      evicted groups and saves the snapshot in one atomic transaction when the
      archive shares the store's backend (:meth:`SessionStore.shares_transactions_with`).
    - ``erasure``: :meth:`SessionStore.erase` removes the snapshots of a tenant, user or session
      (docs/erasure.md).
    """

    METHODS: ClassVar[dict[str, str]] = {
        "listing": "list_sessions",
        "health_check": "health",
        "joint_archive_commit": "commit_with_archive",
        "erasure": "erase",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("compare_and_set",)

    compare_and_set: bool = False
    durable: bool = False
    listing: bool = False
    health_check: bool = False
    joint_archive_commit: bool = False
    erasure: bool = False


@attrs.frozen(slots=True)
class StoredSnapshot:
    """A snapshot as loaded, with the store's revision of it (for compare-and-set)."""

    snapshot: SessionSnapshot
    revision: int


class SessionStore:
    """Port for revisioned session snapshots, keyed by :class:`~agentium_harness._scope.SessionKey`.

    Revisions handed out for a key never repeat, even across an erasure of
    the key (see the module docstring).
    """

    capabilities: ClassVar[SessionStoreCapabilities]

    @port_stub
    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """Return the stored snapshot and its revision, or ``None`` if there is none.

        A row that cannot be decoded strictly, or whose digest does not match
        (:func:`verify_snapshot`), raises ``SnapshotCorruptError``; the row is
        left as it is. The engine verifies again whatever the store returns.

        Call ``ctx.raise_if_expired("session load")`` before reading.

        Raises: ``SnapshotCorruptError`` for a damaged row; ``SessionStoreError``
        when the backend fails; ``OperationCancelledError`` when cancelled or
        past the deadline.
        """
        raise unsupported(self, "load")

    @port_stub
    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Store ``snapshot`` if the current revision equals ``expected_revision``.

        ``expected_revision=None`` means the session must not exist yet. Return
        the new revision, greater than ``expected_revision``. On mismatch raise
        ``SessionConflictError`` and change nothing. A revision is never handed
        out twice for a key, even after an erasure removed it: a session
        created again after its erasure starts above every revision the erased
        one had (suggested: one above a store-wide revision floor that ``erase``
        raises; 1 in a store that never erased anything). Store the snapshot's bytes
        exactly (:func:`snapshot_bytes`), so its digest still matches on load.
        A snapshot that is another session's (:func:`check_snapshot_scope`:
        its memory scope, or a resident group's retained scope, names other
        ids than ``key``) is refused before anything is written.

        Call ``ctx.raise_if_expired("session save")`` before writing, and do
        not commit after ``ctx.signal`` is cancelled.

        Raises: ``SessionConflictError`` on a revision mismatch;
        ``SnapshotScopeMismatchError`` for another session's snapshot (nothing
        written); ``SessionStoreError`` when the backend fails;
        ``OperationCancelledError`` when cancelled or past the deadline
        (nothing written).
        """
        raise unsupported(self, "save")

    @port_stub
    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids of one user, sorted by code point. Declared by ``listing``.

        With ``after``, only ids sorting after it (strictly): the next page of a
        listing whose previous page ended at ``after``. A list or tuple of
        ``str``: the engine reads no further than one id past ``limit`` and
        refuses anything else (docs/plugins.md, "Sequence answers").

        Call ``ctx.raise_if_expired("session listing")`` before reading.

        Raises: ``SessionStoreError`` when the backend fails;
        ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "list_sessions", "listing")

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe. Declared by ``health_check``.

        Call ``ctx.raise_if_expired("session store health")`` before probing.

        Raises: ``SessionStoreError`` when unhealthy; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError`` when
        not declared.
        """
        raise unsupported(self, "health", "health_check")

    def shares_transactions_with(self, archive: object) -> bool:
        """True if :meth:`commit_with_archive` can write to ``archive`` in this store's transaction.

        Only consulted when ``joint_archive_commit`` is declared; the default is
        False. It must be a cheap, local check (no I/O), so it takes no context
        and never needs ``ctx.raise_if_expired()``.

        Raises: nothing; an exception here is treated as False by the engine.
        """
        return False

    @port_stub
    async def commit_with_archive(
        self,
        archive: HistoryArchive,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        snapshot: SessionSnapshot,
        expected_revision: int | None,
        ctx: OpContext,
    ) -> tuple[int, Sequence[ArchiveReceipt]]:
        """Append ``groups`` to ``archive`` and save ``snapshot`` atomically: both or neither.

        Declared by ``joint_archive_commit``, and called only when
        :meth:`shares_transactions_with` is True for ``archive``. Returns the
        new revision and one receipt per group, as ``save`` and
        ``HistoryArchive.append`` would (a session created here starts above
        every revision an erased one of its key had, as in ``save``). It must
        never store the snapshot without the groups.

        Call ``ctx.raise_if_expired("session commit with archive")`` before
        writing, and do not commit after ``ctx.signal`` is cancelled.

        Raises: ``ArchiveConflictError``, ``SessionConflictError`` or
        ``SnapshotScopeMismatchError`` exactly as the separate calls would,
        writing nothing; ``SessionStoreError`` when
        the backend fails; ``OperationCancelledError`` when cancelled or past
        the deadline; ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "commit_with_archive", "joint_archive_commit")

    @port_stub
    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Remove what this store holds of ``target``, at most ``max_items`` per call (``erasure``).

        Session store: the snapshot of every covered session
        (:meth:`EraseTarget.covers_session`), counted as ``snapshot``, with
        its resident groups reported (:func:`snapshot_erasure`), and every
        earlier revision the backend still keeps. A groups target removes
        nothing here (the engine rewrites the snapshot itself).

        A real erase (not ``dry_run``) makes sure no revision a removed
        snapshot had is handed out again for its key (see :meth:`save`):
        suggested, raise a store-wide revision floor to the highest revision
        removed, atomically with the removal where the backend has
        transactions. The floor is a number only: nothing that identifies an
        erased tenant, user or session survives the erasure.

        Nothing outside the target changes: a neighbouring session, user or
        tenant keeps its stored bytes exactly. ``dry_run=True`` removes
        nothing and reports what would go. When the call stops at
        ``max_items`` the report's status is ``partial`` and the engine calls
        again; erasing what is already gone is a success reporting nothing.
        Report how physical the removal was (``physical`` and ``detail``:
        free pages, earlier object versions) truthfully.

        Call ``ctx.raise_if_expired("session store erase")`` before removing anything; a
        call stopped part way may have removed part of the target (calling
        again continues).

        Raises: ``InvalidArgumentError`` for a target that is not an
        ``EraseTarget``; the store's backend errors; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError``
        when not declared.
        """
        raise unsupported(self, "erase", "erasure")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself. Borrowed clients are never closed."""
