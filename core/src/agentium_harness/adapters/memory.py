"""In-memory reference adapters: a history archive and a session store.

They are real, simple and correct implementations of their ports (same
conflict rules, same compare-and-set) for tests and development. Data lives in
the process and is lost when it exits, so neither declares ``durable``.
Records are stored as canonical JSON bytes, not as live objects, so a caller
holding a record can never change what was stored.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import ClassVar

import attrs

from .._errors import (
    ArchiveConflictError,
    SessionConflictError,
)
from .._history import MessageGroup
from .._ports import OpContext
from .._ports.archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive, decode_archived_group
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    check_max_items,
    check_target,
    count_items,
    group_sessions,
)
from .._ports.recall_args import checked_argument, checked_ctx
from .._ports.sessions import (
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    check_snapshot_scope,
    decode_snapshot,
    snapshot_bytes,
    snapshot_erasure,
    verify_snapshot,
)
from .._scope import SessionKey

__all__ = ["InMemoryArchive", "InMemoryArchiveConfig", "InMemorySessionStore", "InMemorySessionStoreConfig"]


@attrs.frozen(slots=True)
class InMemoryArchiveConfig:
    """The in-memory archive takes no options."""


@attrs.frozen(slots=True)
class InMemorySessionStoreConfig:
    """The in-memory session store takes no options."""


class InMemoryArchive(HistoryArchive):
    """An append-only archive held in a dict, keyed by session then ``seq``."""

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        durable=False, idempotent_append=True, bounded_reads=True, health_check=True, erasure=True
    )

    def __init__(self, config: InMemoryArchiveConfig | None = None) -> None:
        self._groups: dict[SessionKey, dict[int, tuple[bytes, str]]] = {}
        # A thread lock, not an anyio one: the adapter serves any event loop, and nothing awaits inside.
        self._lock = threading.Lock()

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Append groups; identical re-appends are no-ops, differing ones conflict."""
        checked_ctx(ctx, "archive append").raise_if_expired("archive append")
        with self._lock:
            stored = self._groups.get(key, {})
            # Check every group before writing any, so a conflict changes nothing.
            # Digests seen earlier in the same batch count as stored: a batch that
            # repeats a seq with other content must conflict, not be acknowledged
            # with a digest the archive does not hold.
            encoded = [(g.seq, g.canonical_bytes(), g.digest) for g in groups]
            seen = {seq: digest for seq, (_, digest) in stored.items()}
            for seq, _, digest in encoded:
                if seen.setdefault(seq, digest) != digest:
                    raise ArchiveConflictError(
                        f"group {seq} of session {key.key()} is archived with digest {seen[seq]}; "
                        f"refusing different content {digest}"
                    )
            if encoded:
                stored = self._groups.setdefault(key, stored)
            receipts = []
            for seq, data, digest in encoded:
                stored.setdefault(seq, (data, digest))
                receipts.append(
                    ArchiveReceipt(seq=seq, digest=digest, location=f"memory://{key.key()}/{seq}")
                )
            return receipts

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` groups from ``start_seq``, ascending."""
        checked_ctx(ctx, "archive read").raise_if_expired("archive read")
        with self._lock:  # a copy: another thread's append may grow the dict meanwhile
            stored = dict(self._groups.get(key, {}))
        seqs = sorted(s for s in stored if s >= start_seq)[: max(0, max_groups)]
        return [self._decode(key, s, *stored[s]) for s in seqs]

    @staticmethod
    def _decode(key: SessionKey, seq: int, data: bytes, digest: str) -> MessageGroup:
        """Decode strictly and re-check a stored group; any doubt is an ``ArchiveCorruptError``."""
        return decode_archived_group(
            key, seq, digest, data, lambda: f"group {seq} of session {key.key()} in the in-memory archive"
        )

    def raw(self, key: SessionKey, seq: int) -> tuple[bytes, str] | None:
        """The stored bytes and digest of one group, or ``None`` (for tools and corruption tests)."""
        return self._groups.get(key, {}).get(seq)

    def put_raw(self, key: SessionKey, seq: int, data: bytes, digest: str) -> None:
        """Place raw bytes and a digest as a stored group, unchecked (for tools and corruption tests)."""
        self._groups.setdefault(key, {})[seq] = (data, digest)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Drop the target's groups (their bytes go with the dict entries); at most ``max_items``."""
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "archive erase")
        bound = check_max_items(max_items)
        checked_ctx(ctx, "archive erase").raise_if_expired("archive erase")
        with self._lock:
            found = [
                (key, seq, digest)
                for key in sorted(self._groups, key=SessionKey.key_segments)
                for seq, (_, digest) in sorted(self._groups[key].items())
                if target.covers_group(key, seq)
            ]
            taken = found[:bound]
            if not dry_run:
                for key, seq, _ in taken:
                    del self._groups[key][seq]
                    if not self._groups[key]:
                        del self._groups[key]
        return EraseReport(
            count_items(group=len(taken)),
            group_sessions(taken),
            EraseStatus.PARTIAL if len(found) > bound else EraseStatus.COMPLETE,
        )

    async def health(self, ctx: OpContext) -> str:
        """Always healthy: report how many sessions are held."""
        checked_ctx(ctx, "archive health").raise_if_expired("archive health")
        return f"in-memory archive, {len(self._groups)} session(s)"


class InMemorySessionStore(SessionStore):
    """Session snapshots held in a dict, with compare-and-set on an integer revision.

    Revisions never repeat for a key, even across an erasure of it: ``erase``
    raises a store-wide floor to the highest revision it removes, and a
    session created afterwards starts above that floor (see :meth:`save`).
    """

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True, durable=False, listing=True, health_check=True, erasure=True
    )

    def __init__(self, config: InMemorySessionStoreConfig | None = None) -> None:
        self._rows: dict[SessionKey, tuple[int, bytes]] = {}
        # The highest revision any erased snapshot had (store-wide, a number only: nothing of an
        # erased session survives but it). A session created after an erasure starts above it, so a
        # writer still holding a revision of the erased one can never pass the compare-and-set.
        self._floor = 0
        # A thread lock, not an anyio one: the adapter serves any event loop, and nothing awaits inside.
        self._lock = threading.Lock()

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """Return the snapshot and revision, or ``None``."""
        checked_ctx(ctx, "session load").raise_if_expired("session load")
        row = self._rows.get(key)
        if row is None:
            return None
        revision, data = row
        # Defence in depth (the engine checks too): a changed byte that still
        # decodes fails closed here; the row is left as it is.
        snapshot = decode_snapshot(key, data, f"snapshot of session {key.key()}")
        return StoredSnapshot(snapshot=snapshot, revision=revision)

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Compare-and-set: store only if the current revision is ``expected_revision``.

        A snapshot this store would refuse to load (format 3 or later without
        its digest, or with a wrong one) raises ``SnapshotCorruptError`` and
        writes nothing. A new session's first revision is one above the
        store's revision floor (1 in a store that never erased anything).
        Another session's snapshot raises ``SnapshotScopeMismatchError``, writing nothing.
        """
        checked_ctx(ctx, "session save").raise_if_expired("session save")
        verify_snapshot(key, snapshot)
        check_snapshot_scope(key, snapshot, "in-memory session store")
        data = snapshot_bytes(snapshot)
        with self._lock:
            current = self._rows.get(key)
            current_rev = None if current is None else current[0]
            if current_rev != expected_revision:
                raise SessionConflictError(
                    f"session {key.key()} is at revision {current_rev}, expected {expected_revision}"
                )
            new_rev = self._floor + 1 if current_rev is None else current_rev + 1
            self._rows[key] = (new_rev, data)
            return new_rev

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Sorted session ids of one user (after ``after``, when given), at most ``limit``."""
        checked_ctx(ctx, "session listing").raise_if_expired("session listing")
        with self._lock:  # a snapshot: another thread's save may add a row meanwhile
            keys = list(self._rows)
        ids = sorted(
            k.session
            for k in keys
            if k.tenant == tenant and k.user == user and (after is None or k.session > after)
        )
        return ids[: max(0, limit)]

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Drop the snapshots of every covered session (a groups target: none); at most ``max_items``.

        The revision floor rises to the highest revision dropped, under the
        same lock: no save can create one of these sessions again in between.
        """
        check_target(target)
        checked_argument(dry_run, bool, "dry_run", "session store erase")
        bound = check_max_items(max_items)
        checked_ctx(ctx, "session store erase").raise_if_expired("session store erase")
        with self._lock:
            found = sorted((k for k in self._rows if target.covers_session(k)), key=SessionKey.key_segments)
            taken = found[:bound]
            sessions = tuple(snapshot_erasure(k, self._rows[k][1]) for k in taken)
            if not dry_run:
                for key in taken:
                    self._floor = max(self._floor, self._rows.pop(key)[0])
        return EraseReport(
            count_items(snapshot=len(taken)),
            sessions,
            EraseStatus.PARTIAL if len(found) > bound else EraseStatus.COMPLETE,
        )

    async def health(self, ctx: OpContext) -> str:
        """Always healthy: report how many sessions are held."""
        checked_ctx(ctx, "session store health").raise_if_expired("session store health")
        return f"in-memory session store, {len(self._rows)} session(s)"

    def raw(self, key: SessionKey) -> tuple[int, bytes] | None:
        """The stored revision and bytes of one session, or ``None`` (for tools and corruption tests)."""
        return self._rows.get(key)

    def put_raw(self, key: SessionKey, revision: int, data: bytes) -> None:
        """Place raw bytes as a row, unchecked (for migration tools and corruption tests)."""
        self._rows[key] = (revision, data)
