"""The history archive port: where evicted canonical groups go (R3).

The runtime appends complete groups, waits for one receipt per group, and only
then commits the session's new boundary. An archive is append-only: appending
a group again with the same ``seq`` and digest is a no-op success, the same
``seq`` with different content is an :class:`~agentium_harness._errors.ArchiveConflictError`,
and nothing is ever overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import attrs

from .._codec import digest_bytes, from_json
from .._errors import ArchiveCorruptError, InvalidArgumentError, RecordDecodeError
from .._history import MessageGroup, adopt_stored_encoding
from .._history_messages import stored_messages_issue
from .._scope import SessionKey
from .._validators import require_instance
from ._base import Capabilities, OpContext, port_stub, unsupported
from .erasure import DEFAULT_ERASE_BATCH, EraseReport, EraseTarget

__all__ = [
    "ArchiveCapabilities",
    "ArchiveReceipt",
    "HistoryArchive",
    "check_archived_group",
    "decode_archived_group",
]


@attrs.frozen(slots=True)
class ArchiveCapabilities(Capabilities):
    """What a history archive declares.

    - ``durable``: an acknowledged append survives a process crash.
    - ``idempotent_append``: re-appending an identical group is a no-op success (required).
    - ``bounded_reads``: :meth:`HistoryArchive.read_groups` returns groups by ``seq`` range under a bound.
    - ``health_check``: :meth:`HistoryArchive.health` runs a bounded probe.
    - ``erasure``: :meth:`HistoryArchive.erase` removes a tenant's, user's or session's groups
      (docs/erasure.md).
    """

    METHODS: ClassVar[dict[str, str]] = {
        "bounded_reads": "read_groups",
        "health_check": "health",
        "erasure": "erase",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("idempotent_append",)

    durable: bool = False
    idempotent_append: bool = False
    bounded_reads: bool = False
    health_check: bool = False
    erasure: bool = False


@attrs.frozen(slots=True)
class ArchiveReceipt:
    """The archive's acknowledgment of one group: its ``seq``, the digest it stored, and where."""

    seq: int
    digest: str
    location: str


def check_archived_group(
    key: SessionKey,
    group: MessageGroup,
    expected_seq: int | None = None,
    expected_digest: str | None = None,
) -> None:
    """Refuse an archived group read back under ``key`` unless it is the one that was stored there.

    Call it in :meth:`HistoryArchive.read_groups` on every decoded group, with
    the ``seq`` the row is keyed by and the digest stored beside it (when the
    backend keeps one). It raises
    :class:`~agentium_harness._errors.ArchiveCorruptError` when:

    - the group's retained scope (``group.retained.scope.session_key``) is
      another session's: a misfiled or copied row must not leak history
      across sessions (a group without a retained record has no scope to check);
    - ``expected_seq`` is given and differs from ``group.seq``;
    - ``expected_digest`` is given and differs from ``group.digest``, the
      digest of the group's canonical bytes.

    It changes nothing; the caller returns no groups from a read that fails.
    """
    key = require_instance(key, SessionKey, "key")
    group = require_instance(group, MessageGroup, "group")

    def where() -> str:  # only built for an error: a history read checks thousands of groups
        return f"archived group {group.seq} read under session {key.key()}"

    scope = group.retained.scope if group.retained is not None else None
    # Compared field by field: building the owner's SessionKey (validating each id again) for
    # every group of a long read costs more than the rest of this check.
    if scope is not None and (scope.tenant, scope.user, scope.session) != (key.tenant, key.user, key.session):
        owner = scope.session_key
        if owner != key:
            raise ArchiveCorruptError(
                f"{where()} belongs to session {owner.key()} by its retained scope; refusing to return it"
            )
    if expected_seq is not None and group.seq != expected_seq:
        raise ArchiveCorruptError(f"{where()} is stored at seq {expected_seq}; the row is damaged")
    if expected_digest is not None:
        actual = group.digest
        if actual != expected_digest:
            raise ArchiveCorruptError(
                f"{where()} does not match its stored digest (stored {expected_digest}, computed {actual}); "
                "the row is damaged"
            )


def decode_archived_group(
    key: SessionKey, seq: object, digest: object, data: object, where: str | Callable[[], str]
) -> MessageGroup:
    """Decode a stored group's bytes strictly and check them; any doubt is ``ArchiveCorruptError``.

    What every archive's ``read_groups`` (and a recall store's
    ``seek_groups``) does with a row it read: ``seq`` must be an int,
    ``data`` bytes whose digest is ``digest`` (the one stored beside them),
    decoded strictly (:func:`~agentium_harness._codec.from_json`), holding
    only what ``append`` commits (a ``tool_call_id`` that is an id, a payload
    with its well-formed format, payloads and arguments within their bounds:
    :func:`~agentium_harness._history_messages.stored_messages_issue`), exactly in
    canonical form (so the stored digest vouches for the group and is not
    computed again), then :func:`check_archived_group` with that seq and
    digest. ``where`` names the row in the message (``"group 3 of session …
    in db.sqlite"``); pass a function to build it only for an error, when a
    read decodes thousands of rows. The stored bytes are never changed.
    """

    def named() -> str:
        return where() if callable(where) else where

    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ArchiveCorruptError(f"{named()} has a non-integer seq; the row is damaged")
    if (
        not isinstance(data, bytes)
        or not isinstance(digest, str)
        or not digest
        or digest_bytes(data) != digest
    ):
        raise ArchiveCorruptError(f"{named()} does not match its stored digest; the row is damaged")
    try:
        group = from_json(data, MessageGroup)
    except RecordDecodeError as exc:
        raise ArchiveCorruptError(f"{named()} cannot be decoded: {exc}") from exc
    # The digest of the bytes is checked above, once: a group that re-encodes to exactly those
    # bytes (canonical form) has that digest, so it is not hashed again.
    if not adopt_stored_encoding(group, data, digest):
        raise ArchiveCorruptError(
            f"{named()} is not in canonical form (its bytes differ from the encoding of what they hold, "
            "so its stored digest cannot vouch for it); the row is damaged"
        )
    # Held to what append commits (the digest is unkeyed: a row written by anything else can
    # match it): the decode checked types and what the constructors check, this the rest.
    issue = stored_messages_issue(group.messages, data, 3)
    if issue is not None:
        raise ArchiveCorruptError(f"{named()} holds what history never commits ({issue}); the row is damaged")
    check_archived_group(key, group, expected_seq=seq, expected_digest=digest)
    return group


def checked_index_batch(
    key: SessionKey, groups: Sequence[MessageGroup], receipts: Sequence[ArchiveReceipt]
) -> list[tuple[MessageGroup, ArchiveReceipt]]:
    """What a recall store's ``index_groups`` checks of its batch, before anything is written.

    Raises :class:`~agentium_harness._errors.InvalidArgumentError` (the
    store writes nothing) unless ``key`` is a :class:`SessionKey`, there is
    one :class:`ArchiveReceipt` per
    :class:`MessageGroup`, each receipt names its group's seq and digest, no
    group's retained scope is another session's, and a seq that appears
    twice carries the same group. Returns the ``(group, receipt)`` pairs, a
    repeated identical group once, in the order given.
    """
    if not isinstance(key, SessionKey):
        raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
    if len(groups) != len(receipts):
        raise InvalidArgumentError(
            f"{len(groups)} groups but {len(receipts)} receipts for session {key.key()}; nothing was written"
        )
    seen: dict[int, str] = {}
    batch: list[tuple[MessageGroup, ArchiveReceipt]] = []
    for group, receipt in zip(groups, receipts, strict=True):
        if not isinstance(group, MessageGroup) or not isinstance(receipt, ArchiveReceipt):
            raise InvalidArgumentError("index_groups takes MessageGroup and ArchiveReceipt items")
        where = f"group {group.seq} of session {key.key()}"
        digest = group.digest
        if receipt.seq != group.seq or receipt.digest != digest:
            raise InvalidArgumentError(
                f"{where}: its receipt (seq {receipt.seq}, digest {receipt.digest}) does not match the "
                f"group (digest {digest}); nothing was written"
            )
        if group.retained is not None and group.retained.scope.session_key != key:
            raise InvalidArgumentError(
                f"{where} belongs to session {group.retained.scope.session_key.key()} by its retained "
                "scope; nothing was written"
            )
        if group.seq in seen:
            if seen[group.seq] != digest:
                raise InvalidArgumentError(
                    f"{where} appears twice with different content; nothing was written"
                )
            continue
        seen[group.seq] = digest
        batch.append((group, receipt))
    return batch


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

        Return one receipt per group, in order (a list or tuple), only after
        the groups are stored. Re-appending a stored group with an equal digest returns its
        receipt; a different digest at a stored ``seq`` raises
        ``ArchiveConflictError`` and changes nothing. A batch is all or
        nothing: on any error no group of it is stored.

        Call ``ctx.raise_if_expired("archive append")`` before writing, and
        do not commit a write after ``ctx.signal`` is cancelled.

        Raises: ``ArchiveConflictError`` for different content at a stored
        seq; ``ArchiveError`` when the backend fails; ``OperationCancelledError``
        when cancelled or past the deadline (nothing written).
        """
        raise unsupported(self, "append")

    @port_stub
    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Return up to ``max_groups`` archived groups with ``seq >= start_seq``, ascending.

        Declared by ``bounded_reads``. Must return whole groups only and never
        more than ``max_groups``, as a list or tuple: the engine reads no
        further than one group past ``max_groups`` and refuses anything else
        (docs/plugins.md, "Sequence answers"). It may return fewer (a shorter
        page, still ascending: an archive bounding the bytes one call returns,
        as the built-in SQLite archive does), but never none while a group
        with ``seq >= start_seq`` is stored: only an empty answer means there
        is nothing more. A caller reads on from the last returned group's
        ``seq + 1``, as the engine and ``agentium recall rebuild`` do; a short
        page is not the end of the history. Each group is re-checked before it is
        returned (:func:`check_archived_group`): a row that does not decode
        strictly, does not match its digest or belongs to another session
        raises ``ArchiveCorruptError``; nothing is changed.

        Call ``ctx.raise_if_expired("archive read")`` before reading.

        Raises: ``ArchiveCorruptError`` for a damaged or misfiled row;
        ``ArchiveError`` when the backend fails; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError``
        when not declared.
        """
        raise unsupported(self, "read_groups", "bounded_reads")

    @port_stub
    async def health(self, ctx: OpContext) -> str:
        """Run a bounded health probe and return a short description. Declared by ``health_check``.

        Call ``ctx.raise_if_expired("archive health")`` before probing.

        Raises: ``ArchiveError`` when the backend is unhealthy;
        ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "health", "health_check")

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

        Archive: every group of a covered session (:meth:`EraseTarget.covers_group`),
        counted as ``group``, each reported with its seq and digest. After
        the call returns, a group it removed must not come back through
        this adapter: an append of it that was already on its way must not
        land after its deadline (check before every write), and where a
        backend write cannot be stopped once sent, the erase waits for such
        writes of the target still in flight and removes what they stored,
        or reports ``partial`` so the engine calls again.

        Nothing outside the target changes: a neighbouring session, user or
        tenant keeps its stored bytes exactly. ``dry_run=True`` removes
        nothing and reports what would go. When the call stops at
        ``max_items`` the report's status is ``partial`` and the engine calls
        again; erasing what is already gone is a success reporting nothing.
        Report how physical the removal was (``physical`` and ``detail``:
        free pages, earlier object versions) truthfully.

        Call ``ctx.raise_if_expired("archive erase")`` before removing anything; a
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
