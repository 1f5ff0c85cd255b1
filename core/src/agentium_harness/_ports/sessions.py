"""The session store port: revisioned snapshots of resident canonical history (R2, R15).

A snapshot holds the session's resident (not yet archived) complete groups,
the archive boundary and the memory scope it belongs to. Stores save with
compare-and-set on the snapshot revision so that two writers can never both
commit on the same base.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar, Final

import attrs

from .._codec import canonical_json, digest_bytes, from_json, unstructure
from .._errors import RecordDecodeError, SnapshotCorruptError
from .._history import MessageGroup, ViewState
from .._scope import Scope, SessionKey
from .._tuples import tuple_of_archived_digests, tuple_of_message_groups
from .._validators import int_tuple
from ._base import Capabilities, OpContext, port_stub, unsupported
from .archive import ArchiveReceipt, HistoryArchive
from .erasure import DEFAULT_ERASE_BATCH, ErasedSession, EraseReport, EraseTarget, ErasureLedger, SeqRange
from .summary import SummaryState

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
    "StoredSnapshot",
    "decode_snapshot",
    "seal_snapshot",
    "snapshot_bytes",
    "snapshot_digest",
    "snapshot_erasure",
    "verify_snapshot",
]

#: Current snapshot format. Version 1 snapshots had no memory scope (legacy);
#: version 2 had no digest; version 3 carries the digest of its canonical bytes.
SNAPSHOT_FORMAT_VERSION = 3

#: First format version whose snapshots must carry a digest.
DIGESTED_FORMAT_VERSION = 3


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
class ArchiveDivergence:
    """The archive holds groups that differ from this session's at seqs it never committed.

    ``seqs`` are the conflicting sequence numbers found when eviction was
    attempted; ``detail`` is the archive's error message. A snapshot carrying a
    divergence is in the ``diverged`` state: runs are refused until
    reconciliation (docs/runtime.md), and neither copy is ever dropped.
    """

    seqs: tuple[int, ...] = attrs.field(converter=int_tuple)
    detail: str = ""


@attrs.frozen(slots=True)
class ArchivedDigest:
    """The digest the archive acknowledged for group ``seq`` when it was evicted (its receipt's digest)."""

    seq: int
    digest: str


#: Most archive marks a snapshot keeps (:attr:`SessionSnapshot.archived`).
MAX_ARCHIVE_MARKS: Final = 32


@attrs.frozen(slots=True)
class ArchiveMark:
    """Every group of the session below ``below`` was archived at ``at`` or earlier (retention by age)."""

    below: int
    at: datetime


def _marks(value: Iterable[ArchiveMark] | None) -> tuple[ArchiveMark, ...] | None:
    if value is None:
        return None
    marks = tuple(value)
    return marks or None


def add_archive_mark(
    marks: tuple[ArchiveMark, ...] | None, below: int, at: datetime
) -> tuple[ArchiveMark, ...]:
    """``marks`` and one for a boundary moved to ``below`` at ``at``; at most :data:`MAX_ARCHIVE_MARKS`.

    When there are too many, the mark closest in time to the next one is
    dropped: the groups it covered take the next mark's (later) time, so a
    group may look younger than it is, never older — retention by age keeps
    it a little longer rather than erasing it early.
    """
    kept = [m for m in (marks or ()) if m.below < below]
    kept.append(ArchiveMark(below, at))
    while len(kept) > MAX_ARCHIVE_MARKS:
        gaps = [(kept[i + 1].at - kept[i].at, i) for i in range(len(kept) - 1)]
        del kept[min(gaps)[1]]
    return tuple(kept)


def _erased_ranges(value: Iterable[SeqRange] | None) -> tuple[SeqRange, ...] | None:
    """``None`` for no range: a snapshot with nothing erased keeps the bytes it had before erasure existed."""
    if value is None:
        return None
    ranges = tuple(value)
    return ranges or None


@attrs.frozen(slots=True)
class SessionSnapshot:
    """The committed state of one session.

    - ``memory_scope``: the scope the history belongs to; ``None`` only for a
      legacy snapshot, which loads only with an explicit attestation.
    - ``boundary``: the ``seq`` of the first group still resident; every group
      below it is in the archive.
    - ``next_seq``: the ``seq`` the next group will get.
    - ``resident``: the resident groups, ascending, ``boundary <= seq < next_seq``.
    - ``digest``: ``sha256:`` of the canonical bytes of the snapshot with
      ``digest=None``; set by :func:`seal_snapshot`, checked by :func:`verify_snapshot`.
    - ``divergence``: set when the archive was found to hold different groups at
      seqs this session had not archived yet (the ``diverged`` state).
    - ``summary``: the session's task summary and its coverage gaps, when
      summaries are configured; absent (``None``) otherwise, and then left out
      of the canonical bytes, so snapshots written before summaries existed
      keep their digests.
    - ``receipts``: when summaries are configured, the digest the archive
      acknowledged for each archived group the summary has not folded yet
      (``summary frontier <= seq < boundary``), saved with the boundary move
      that archived it. A summary update folds a group only if the bytes it
      reads back have that digest, whatever digest the archive recomputes
      for them now. Empty, and then left out of the canonical bytes, without
      a summarizer.
    - ``view``: which committed messages the session's view shows, after its
      retractions and view resets (:class:`~agentium_harness._history.ViewState`);
      derived from its control groups and saved with them. Absent (``None``,
      left out of the canonical bytes) until the first one, so snapshots
      written before views existed keep their digests.
    - ``erased``: archived groups of this session that an erasure removed
      (retention, the sources of a forgotten fact), as ascending seq ranges
      below the boundary: summaries, reads and the recall index's catch-up
      pass over them. Absent (``None``) until the first one.
    - ``archived``: when groups were archived: each :class:`ArchiveMark` says
      every group below ``below`` was archived by ``at``. Written by each
      commit that moves the boundary, at most :data:`MAX_ARCHIVE_MARKS` of
      them (merged marks keep the later time, so a group never looks older
      than it is); retention by age reads them. Absent until the first move
      after they existed.
    - ``ledger``: only in the engine's erasure records, which the session
      store keeps under a reserved key (docs/erasure.md); ``None`` in every
      session's snapshot.
    """

    #: Left out of the encoding when ``None`` (see ``view``, ``erased`` and ``ledger`` above).
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("view", "erased", "archived", "ledger")

    memory_scope: Scope | None
    boundary: int = 0
    next_seq: int = 0
    resident: tuple[MessageGroup, ...] = attrs.field(default=(), converter=tuple_of_message_groups)
    format_version: int = SNAPSHOT_FORMAT_VERSION
    divergence: ArchiveDivergence | None = None
    digest: str | None = None
    summary: SummaryState | None = None
    receipts: tuple[ArchivedDigest, ...] = attrs.field(default=(), converter=tuple_of_archived_digests)
    view: ViewState | None = None
    erased: tuple[SeqRange, ...] | None = attrs.field(default=None, converter=_erased_ranges)
    archived: tuple[ArchiveMark, ...] | None = attrs.field(default=None, converter=_marks)
    ledger: ErasureLedger | None = None


_EMPTY_RESIDENT: Final = b'"resident":[]'
#: The one top-level key that sorts before ``boundary``: the archive marks, a list of
#: ``{"at": <time>, "below": <int>}`` objects (no ``]`` inside, so the list ends at the first one).
_ARCHIVED_HEAD: Final = b'{"archived":['

# A snapshot is frozen and a turn asks for its bytes several times (the seal's
# digest, the store's write, the store's read-back cache, a verification), so
# each snapshot object is encoded once. Keyed by object identity, like the
# groups' encodings (``_history._ENCODED``); an entry leaves with its object,
# so an id is never reused while listed. ``[bytes, verified]``: ``verified``
# says the digest is known to match the content (sealed here, or checked).
_SNAPSHOTS: dict[int, list[Any]] = {}


def _entry(snapshot: SessionSnapshot) -> list[Any]:
    key = id(snapshot)
    entry = _SNAPSHOTS.get(key)
    if entry is None:
        entry = _SNAPSHOTS[key] = [None, False]
        weakref.finalize(snapshot, _SNAPSHOTS.pop, key, None)
    return entry


# Each mark's text (a time formatted in UTC), by object identity like the groups' encodings: a
# snapshot carries its predecessor's mark objects on and adds at most one, so a turn formats one
# mark, not all of them. An entry leaves with its object, so an id is never reused while listed.
_MARKS: dict[int, bytes] = {}


def _mark_bytes(mark: ArchiveMark) -> bytes:
    key = id(mark)
    data = _MARKS.get(key)
    if data is None:
        data = _MARKS[key] = canonical_json(unstructure(mark))
        weakref.finalize(mark, _MARKS.pop, key, None)
    return data


def _encode(snapshot: SessionSnapshot) -> bytes:
    """The canonical bytes of ``snapshot``, joined from its groups' and marks' cached encodings."""
    marks = snapshot.archived
    data = unstructure(attrs.evolve(snapshot, resident=(), archived=None))
    if snapshot.summary is None:
        # Absent, not null: a snapshot without a summary has the bytes (and digest) it had before.
        del data["summary"]
    if not snapshot.receipts:
        del data["receipts"]  # likewise: snapshots written before receipts were kept keep their bytes
    head = canonical_json(data)
    if marks and head.startswith(b'{"boundary":'):
        # "archived" sorts before every other top-level key: the marks' text goes first.
        head = _ARCHIVED_HEAD + b",".join(_mark_bytes(m) for m in marks) + b"]," + head[1:]
    elif marks:  # pragma: no cover - only if a key sorting before "boundary" is ever added
        data["archived"] = unstructure(list(marks))
        head = canonical_json(data)
    if not snapshot.resident:
        return head
    # Keys are sorted and no other key at any depth is named "resident", and
    # a quote inside a JSON string is always escaped: the marker occurs once.
    joined = b",".join(g.canonical_bytes() for g in snapshot.resident)
    return head.replace(_EMPTY_RESIDENT, b'"resident":[' + joined + b"]", 1)


def snapshot_bytes(snapshot: SessionSnapshot) -> bytes:
    """The canonical JSON bytes of ``snapshot``; absent ``summary``/``view`` or empty ``receipts`` left out.

    Built from each resident group's own (cached) canonical bytes, so a
    snapshot whose groups were already encoded costs a join, not a re-encoding
    of the whole history; and computed once per snapshot object. Stores should
    write exactly these bytes.
    """
    entry = _entry(snapshot)
    data: bytes | None = entry[0]
    if data is None:
        data = entry[0] = _encode(snapshot)
    return data


def snapshot_digest(snapshot: SessionSnapshot) -> str:
    """The digest of ``snapshot``'s canonical bytes, computed with its ``digest`` field empty."""
    data = snapshot_bytes(snapshot)
    if snapshot.digest is not None:
        # Only the digest field differs from the encoding with it empty.
        swapped = _with_digest(data, snapshot.boundary, snapshot.digest, None)
        data = swapped if swapped is not None else _encode(attrs.evolve(snapshot, digest=None))
    return digest_bytes(data)


def _digest_field(boundary: int, digest: str | None) -> bytes:
    """The ``boundary`` and ``digest`` keys of a snapshot's encoding, adjacent in sorted order."""
    value = b"null" if digest is None else b'"' + digest.encode("ascii") + b'"'
    return b'"boundary":%d,"digest":%s,' % (boundary, value)


def _with_digest(data: bytes, boundary: int, old: str | None, new: str | None) -> bytes | None:
    """``data``, a snapshot's encoding with digest ``old``, as it is with digest ``new``; ``None`` if unsure.

    The top-level keys are sorted: ``boundary`` and ``digest`` come first, or
    right after the ``archived`` marks, whose text holds times and numbers
    only; and a digest is ``sha256:`` and hex digits (nothing JSON escapes). So
    the digest field sits at a known place and nothing else differs. Should
    another field ever sort before them, this says ``None`` and the caller encodes.
    """
    if old is not None and not old.isascii():
        return None
    at = 1
    if data.startswith(_ARCHIVED_HEAD):
        at = data.find(b"]", len(_ARCHIVED_HEAD)) + 2  # past "]," closing the marks
        if at < 2 or data[at - 1 : at] != b",":
            return None
    elif not data.startswith(b"{"):
        return None
    head = _digest_field(boundary, old)
    if not data.startswith(head, at):
        return None
    return data[:at] + _digest_field(boundary, new) + data[at + len(head) :]


def seal_snapshot(snapshot: SessionSnapshot) -> SessionSnapshot:
    """A copy at the current format version carrying its own digest; the engine saves only sealed ones.

    The content is encoded once: the sealed bytes are the unsealed ones with
    the digest field filled in, kept for the store's write.
    """
    current = attrs.evolve(snapshot, format_version=SNAPSHOT_FORMAT_VERSION, digest=None)
    unsealed = _encode(current)
    digest = digest_bytes(unsealed)
    sealed = attrs.evolve(current, digest=digest)
    entry = _entry(sealed)
    entry[0] = _with_digest(unsealed, current.boundary, None, digest)  # None: encoded on first use
    entry[1] = True
    return sealed


def verify_snapshot(key: SessionKey, snapshot: SessionSnapshot) -> None:
    """Raise :class:`~agentium_harness._errors.SnapshotCorruptError` unless ``snapshot`` is intact.

    A snapshot of format 3 or later must carry a digest equal to
    :func:`snapshot_digest`; older formats (written before digests) are
    accepted and sealed at their next save. A bit flip that still decodes
    therefore fails closed instead of reaching the model.
    """
    if snapshot.format_version > SNAPSHOT_FORMAT_VERSION:
        raise SnapshotCorruptError(
            f"snapshot of session {key.key()} has format {snapshot.format_version}, newer than this "
            f"version of agentium-harness understands ({SNAPSHOT_FORMAT_VERSION}); nothing was changed"
        )
    if snapshot.digest is None:
        if snapshot.format_version >= DIGESTED_FORMAT_VERSION:
            raise SnapshotCorruptError(
                f"snapshot of session {key.key()} (format {snapshot.format_version}) has no digest; "
                "nothing was changed"
            )
        return
    entry = _entry(snapshot)
    if entry[1]:
        return
    actual = snapshot_digest(snapshot)
    if actual != snapshot.digest:
        raise SnapshotCorruptError(
            f"snapshot of session {key.key()} does not match its digest (stored {snapshot.digest}, "
            f"computed {actual}); the stored data is damaged and was left as it is"
        )
    entry[1] = True


def decode_snapshot(key: SessionKey, data: bytes, where: str) -> SessionSnapshot:
    """Decode a stored snapshot's bytes strictly and check them; any doubt is ``SnapshotCorruptError``.

    What every session store's ``load`` does with the bytes it read: a
    bounded strict decode (:func:`~agentium_harness._codec.from_json`: size
    and depth caps, no duplicate keys, no coercion, no missing required
    field), :func:`verify_snapshot`, and, for a digested snapshot (format 3
    or later), a check that the bytes are exactly :func:`snapshot_bytes` of
    what they decoded to: other whitespace, key order, escapes or a field left
    out are damage too, even where the digest (computed over the canonical
    form) would still match. ``where`` names the row in the message. The
    stored bytes are never changed.
    """
    if not isinstance(data, bytes):
        raise SnapshotCorruptError(
            f"{where} holds {type(data).__name__}, not JSON bytes; nothing was changed"
        )
    try:
        snapshot = from_json(data, SessionSnapshot)
    except RecordDecodeError as exc:
        raise SnapshotCorruptError(f"{where} cannot be decoded ({exc}); nothing was changed") from exc
    verify_snapshot(key, snapshot)
    if snapshot.digest is not None and snapshot_bytes(snapshot) != data:
        raise SnapshotCorruptError(
            f"{where} is not in canonical form (the bytes differ from the canonical encoding of what "
            "they hold); the stored data is damaged and was left as it is"
        )
    return snapshot


def snapshot_erasure(key: SessionKey, data: bytes) -> ErasedSession:
    """What erasing the stored snapshot ``data`` of session ``key`` removes, for an :class:`EraseReport`.

    The resident groups' seqs and digests when the bytes decode
    (:func:`decode_snapshot`); a damaged snapshot is erased all the same and
    reported with no groups (its content cannot be vouched for). Session
    stores call it on each snapshot their ``erase`` removes.
    """
    try:
        snapshot = decode_snapshot(key, data, f"snapshot of session {key.key()}")
    except SnapshotCorruptError:
        return ErasedSession(key)
    return ErasedSession(key, [(g.seq, g.digest) for g in snapshot.resident])


@attrs.frozen(slots=True)
class StoredSnapshot:
    """A snapshot as loaded, with the store's revision of it (for compare-and-set)."""

    snapshot: SessionSnapshot
    revision: int


class SessionStore:
    """Port for revisioned session snapshots, keyed by :class:`~agentium_harness._scope.SessionKey`."""

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
        ``SessionConflictError`` and change nothing. Store the snapshot's bytes
        exactly (:func:`snapshot_bytes`), so its digest still matches on load.

        Call ``ctx.raise_if_expired("session save")`` before writing, and do
        not commit after ``ctx.signal`` is cancelled.

        Raises: ``SessionConflictError`` on a revision mismatch;
        ``SessionStoreError`` when the backend fails; ``OperationCancelledError``
        when cancelled or past the deadline (nothing written).
        """
        raise unsupported(self, "save")

    @port_stub
    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids of one user, sorted by code point. Declared by ``listing``.

        With ``after``, only ids sorting after it (strictly): the next page of a
        listing whose previous page ended at ``after``.

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
        ``HistoryArchive.append`` would. It must never store
        the snapshot without the groups.

        Call ``ctx.raise_if_expired("session commit with archive")`` before
        writing, and do not commit after ``ctx.signal`` is cancelled.

        Raises: ``ArchiveConflictError`` or ``SessionConflictError`` exactly as
        the separate calls would, writing nothing; ``SessionStoreError`` when
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
