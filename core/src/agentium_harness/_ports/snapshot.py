"""The session snapshot record and its canonical bytes: encoded once, sealed with its digest, checked.

A snapshot holds the session's resident (not yet archived) complete groups,
the archive boundary and the memory scope it belongs to (the session store
port, :mod:`.sessions`, saves and loads it). The record itself is defined in
:mod:`.snapshot_record` and importable from here as well. Its canonical bytes are joined
from its groups' and parts' cached encodings, once per snapshot object; its
digest covers them; every store writes exactly those bytes, and every load
decodes and checks them strictly.
"""

from __future__ import annotations

import hashlib
import operator
import weakref
from collections.abc import Iterable
from typing import Any, Final

import attrs

from .._codec import canonical_json, digest_bytes, from_json, unstructure
from .._errors import RecordDecodeError, SnapshotCorruptError
from .._history import MessageGroup, ViewState, bytes_and_digest
from .._history_messages import stored_messages_issue
from .._scope import Scope, SessionKey
from .._validators import require_instance
from .archive_marks import MAX_ARCHIVE_MARKS, ArchiveMark, add_archive_mark
from .erasure import ErasedSession
from .snapshot_record import (
    DIGESTED_FORMAT_VERSION,
    FIRST_FORMAT_VERSION,
    MAX_DIVERGENCE_DETAIL_BYTES,
    MAX_STORED_DIVERGENCE_DETAIL_BYTES,
    SNAPSHOT_FORMAT_VERSION,
    ArchivedDigest,
    ArchiveDivergence,
    SessionSnapshot,
)
from .snapshot_text import (
    EMPTY_RESIDENT,
    cut_head,
    marks_text,
    part_text,
    scope_text,
    with_digest,
)
from .summary import SummaryState

__all__ = [
    "DIGESTED_FORMAT_VERSION",
    "FIRST_FORMAT_VERSION",
    "MAX_DIVERGENCE_DETAIL_BYTES",
    "MAX_STORED_DIVERGENCE_DETAIL_BYTES",
    "SNAPSHOT_FORMAT_VERSION",
    "MAX_ARCHIVE_MARKS",
    "ArchiveDivergence",
    "ArchiveMark",
    "ArchivedDigest",
    "add_archive_mark",
    "GroupRow",
    "group_rows",
    "SessionSnapshot",
    "decode_snapshot",
    "seal_snapshot",
    "snapshot_bytes",
    "snapshot_digest",
    "snapshot_erasure",
    "snapshot_header",
    "snapshot_parts",
    "verify_snapshot",
]

#: Every field of a snapshot, in the constructor's order: a copy with one field changed is the
#: constructor called with these values (what ``attrs.evolve`` does, without looking them up by name).
_FIELD_VALUES: Final = operator.attrgetter(*(a.name for a in attrs.fields(SessionSnapshot)))
_DIGEST_AT: Final = [a.name for a in attrs.fields(SessionSnapshot)].index("digest")


_set_field: Final = object.__setattr__


def _with_field(snapshot: SessionSnapshot, at: int, value: object) -> SessionSnapshot:
    """``snapshot`` with its field number ``at`` set to ``value``, through the constructor."""
    values = list(_FIELD_VALUES(snapshot))
    values[at] = value
    return SessionSnapshot(*values)


# A snapshot is frozen and a turn asks for its bytes several times (the seal's
# digest, the store's write, the store's read-back cache, a verification), so
# each snapshot object is encoded once. Keyed by object identity, like the
# groups' encodings (``_history._ENCODED``); an entry leaves with its object,
# so an id is never reused while listed. ``[bytes, verified, header, ref, rows, tail]``:
# ``verified`` says the digest is known to match the content (sealed here, or
# checked); ``header`` is the bytes with ``"resident":[]`` in place of the
# groups, when the seal made them (what a store that keeps groups in rows of
# their own writes, :func:`snapshot_header`); ``ref`` is the weak reference whose
# callback removes the entry when the snapshot dies (before its id can be reused):
# kept in the entry, it costs a third of a ``weakref.finalize``; ``rows`` are
# those of :func:`snapshot_parts`, once known; ``tail`` is the id of the last resident group
# of a sealed snapshot, under which ``_TAILS`` lists the entry.
_SNAPSHOTS: dict[int, list[Any]] = {}

# The next snapshot of a session carries its predecessor's groups on (those it does not
# archive) and adds the turn's: found by the last group of the predecessor, the sealed
# snapshot's entry is listed under that group's id while the snapshot lives (it holds the
# group, so the id is not reused while listed), and a seal takes the rows of the groups
# carried on from it, by identity, instead of looking up every group's encoding again.
_TAILS: dict[int, list[Any]] = {}

#: ``(seq, canonical bytes, digest)`` of one group.
GroupRow = tuple[int, bytes, str]
_ROW_DATA: Final = operator.itemgetter(1)


def _forget_snapshot(key: int) -> None:
    entry = _SNAPSHOTS.pop(key, None)
    if entry is not None and entry[5] is not None and _TAILS.get(entry[5]) is entry:
        del _TAILS[entry[5]]


def _entry(snapshot: SessionSnapshot) -> list[Any]:
    key = id(snapshot)
    entry = _SNAPSHOTS.get(key)
    if entry is None:
        ref = weakref.ref(snapshot, lambda _, key=key: _forget_snapshot(key))  # type: ignore[misc]
        entry = _SNAPSHOTS[key] = [None, False, None, ref, None, None]
    return entry


def group_rows(groups: Iterable[MessageGroup]) -> tuple[GroupRow, ...]:
    """``(seq, canonical bytes, digest)`` per group, from the groups' cached encodings."""
    return tuple([(g.seq, *bytes_and_digest(g)) for g in groups])


def _carried_rows(resident: tuple[MessageGroup, ...]) -> tuple[GroupRow, ...] | None:
    """The rows of ``resident`` (see :func:`snapshot_parts`) taken from a live snapshot it carries on, if any.

    ``resident`` is a predecessor's last groups, by identity, and then groups
    of its own: a turn adds one (tried first), a seal that adds none has the
    predecessor's last group last, an append of more adds two.
    """
    last = len(resident) - 1
    for at in (last - 1, last, last - 2):
        found = _TAILS.get(id(resident[at])) if at >= 0 else None
        if found is None or found[4] is None:
            continue
        previous = found[3]()
        if previous is None:  # pragma: no cover - the entry leaves as its snapshot dies
            continue
        held = previous.resident
        start = len(held) - 1 - at
        if start >= 0 and all(map(operator.is_, held[start:], resident[: at + 1])):
            rows: tuple[GroupRow, ...] = found[4][start:]
            if at == last - 1:  # a turn's one new group, without a comprehension for it
                group = resident[last]
                return (*rows, (group.seq, *bytes_and_digest(group)))
            return rows + group_rows(resident[at + 1 :]) if at < last else rows
    return None


def _plain_head(snapshot: SessionSnapshot) -> bytes:
    """The canonical bytes of ``snapshot`` without its groups (``"resident":[]``), through the converter."""
    data = unstructure(attrs.evolve(snapshot, resident=()))
    if snapshot.summary is None:
        # Absent, not null: a snapshot without a summary has the bytes (and digest) it had before.
        del data["summary"]
    if not snapshot.receipts:
        del data["receipts"]  # likewise: snapshots written before receipts were kept keep their bytes
    return canonical_json(data)


def _head_parts(snapshot: SessionSnapshot) -> tuple[bytes, bytes, bytes] | None:
    """The canonical bytes of ``snapshot`` without its digest's value and its groups, in three parts.

    ``front`` runs to ``"digest":``, ``middle`` from the comma after the
    digest to ``"resident":[``, ``back`` from the ``]`` closing the groups:
    ``front + digest + middle + groups + back`` is the whole. Written key by
    key in sorted order from the parts' cached text, which is what the
    converter and :func:`canonical_json` give for the whole (a dict encodes
    as its sorted keys' values, each encoded alone); ``None`` when anything
    is not of the expected exact types (then the converter's path is taken).
    """
    s = snapshot
    boundary, next_seq, version, scope = s.boundary, s.next_seq, s.format_version, s.memory_scope
    summary, view = s.summary, s.view
    if (
        type(s) is not SessionSnapshot
        or type(boundary) is not int
        or type(next_seq) is not int
        or type(version) is not int
        or not (scope is None or type(scope) is Scope)
        or not (summary is None or type(summary) is SummaryState)
        or not (view is None or type(view) is ViewState)
    ):
        return None
    archived, divergence, erased, ledger, receipts = s.archived, s.divergence, s.erased, s.ledger, s.receipts
    if archived is None:
        front = b'{"boundary":%d,"digest":' % boundary
    else:
        front = b'{"archived":[%s],"boundary":%d,"digest":' % (marks_text(archived), boundary)
    middle = b',"divergence":%s%s,"format_version":%d%s,"memory_scope":%s,"next_seq":%d%s,"resident":[' % (
        b"null" if divergence is None else canonical_json(unstructure(divergence)),
        b"" if erased is None else b',"erased":' + canonical_json(unstructure(erased)),
        version,
        b"" if ledger is None else b',"ledger":' + canonical_json(unstructure(ledger)),
        b"null" if scope is None else scope_text(scope),
        next_seq,
        b',"receipts":[' + b",".join([part_text(r) for r in receipts]) + b"]" if receipts else b"",
    )
    if summary is None and view is None:
        return front, middle, b"]}"
    back = b"]%s%s}" % (
        b"" if summary is None else b',"summary":' + part_text(summary),
        b"" if view is None else b',"view":' + part_text(view),
    )
    return front, middle, back


def _head(snapshot: SessionSnapshot) -> bytes:
    """The canonical bytes of ``snapshot`` with ``"resident":[]`` in place of its groups."""
    digest = snapshot.digest
    parts = _head_parts(snapshot) if digest is None or type(digest) is str else None
    if parts is None:
        return _plain_head(snapshot)
    front, middle, back = parts
    return b"".join((front, b"null" if digest is None else canonical_json(digest), middle, back))


def _join(head: bytes, snapshot: SessionSnapshot) -> bytes:
    """``head`` (see :func:`_head`) with the resident groups' cached encodings in place."""
    if not snapshot.resident:
        return head
    # Keys are sorted and no other key at any depth is named "resident", and
    # a quote inside a JSON string is always escaped: the marker occurs once.
    joined = b",".join([g.canonical_bytes() for g in snapshot.resident])
    return head.replace(EMPTY_RESIDENT, b'"resident":[' + joined + b"]", 1)


def _encode(snapshot: SessionSnapshot) -> bytes:
    """The canonical bytes of ``snapshot``, joined from its parts' and groups' cached encodings."""
    return _join(_head(snapshot), snapshot)


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
        swapped = with_digest(data, snapshot.boundary, snapshot.digest, None)
        data = swapped if swapped is not None else _encode(attrs.evolve(snapshot, digest=None))
    return digest_bytes(data)


def seal_snapshot(snapshot: SessionSnapshot) -> SessionSnapshot:
    """A copy at the current format version carrying its own digest; the engine saves only sealed ones.

    The content is encoded once: the digest is taken over the unsealed
    header and the groups' cached encodings as they stand (never joined
    into one unsealed text), and the sealed bytes are the sealed header with
    the groups in place, kept for the store's write.
    """
    snapshot = require_instance(snapshot, SessionSnapshot, "snapshot")
    if snapshot.format_version != SNAPSHOT_FORMAT_VERSION or snapshot.digest is not None:
        # A copy of its own, which no one else has seen: sealed as it is.
        return _seal(attrs.evolve(snapshot, format_version=SNAPSHOT_FORMAT_VERSION, digest=None), True)
    return _seal(snapshot, False)


def seal_new_snapshot(**fields: Any) -> SessionSnapshot:
    """``seal_snapshot(SessionSnapshot(**fields))`` without the copy: the new snapshot is sealed itself.

    For a commit, which builds the snapshot it saves: nothing else holds it
    before it is sealed, so its digest is set on it as its constructor would
    (``object.__setattr__``, what attrs' own ``__init__`` does for a frozen
    record) instead of copying every field into a second one.
    """
    if fields.get("digest") is not None or fields.get("format_version", SNAPSHOT_FORMAT_VERSION) != (
        SNAPSHOT_FORMAT_VERSION
    ):
        return seal_snapshot(SessionSnapshot(**fields))
    return _seal(SessionSnapshot(**fields), True)


def _seal(current: SessionSnapshot, in_place: bool) -> SessionSnapshot:
    """Seal ``current`` (current format, no digest): itself when ``in_place`` (no one holds it), or a copy."""
    parts = _head_parts(current)
    if parts is None:
        head = _plain_head(current)
        parts = cut_head(head, current.boundary)
    resident = current.resident
    rows = _carried_rows(resident) if resident else None
    if rows is None:
        groups = b",".join([g.canonical_bytes() for g in resident])
    else:
        groups = b",".join(map(_ROW_DATA, rows))
    if parts is not None:
        front, middle, back = parts
        hasher = hashlib.sha256(front)
        hasher.update(b"null")
        hasher.update(middle)
    else:
        # Not with this layout: the digest of the whole, with no header kept (encoded on first use).
        at = head.find(EMPTY_RESIDENT) + len(EMPTY_RESIDENT) - 1
        hasher = hashlib.sha256(head[:at])
        back = head[at:]
    hasher.update(groups)
    hasher.update(back)
    digest = "sha256:" + hasher.hexdigest()  # digest_bytes of the joined bytes, without joining them
    if in_place:
        _set_field(current, "digest", digest)
        sealed = current
    else:
        sealed = _with_field(current, _DIGEST_AT, digest)
    entry = _entry(sealed)
    entry[1] = True
    if resident:
        entry[4] = rows
        entry[5] = tail = id(resident[-1])
        _TAILS[tail] = entry
    if parts is not None:
        # Only the digest's value, which sorts before "resident", differs from the unsealed parts.
        quoted = b'"%s"' % digest.encode("ascii")
        entry[0] = b"".join((front, quoted, middle, groups, back))
        entry[2] = b"".join((front, quoted, middle, back))
    return sealed


def snapshot_parts(snapshot: SessionSnapshot) -> tuple[bytes, bytes | None, tuple[GroupRow, ...]]:
    """:func:`snapshot_bytes`, :func:`snapshot_header` and each resident group's ``(seq, bytes, digest)``.

    What a store that keeps groups in rows of their own writes, kept with
    ``snapshot`` (a seal takes the rows of the groups it carries on from its
    predecessor's, by identity, and looks up only its new groups'). When the
    header is known, the seal wrote it and these bytes from the same parts:
    the header is these bytes without the rows' data (and the commas between).
    """
    entry = _entry(snapshot)
    data: bytes | None = entry[0]
    if data is None:
        data = entry[0] = _encode(snapshot)
    rows: tuple[GroupRow, ...] | None = entry[4]
    if rows is None:
        resident = snapshot.resident
        rows = entry[4] = group_rows(resident)
        if resident and entry[5] is None and id(resident[-1]) not in _TAILS:
            # Listed as a seal lists its snapshot: one sealed elsewhere (decoded from a store, and
            # saved again) is carried on by the next seal too, instead of every group looked up.
            entry[5] = tail = id(resident[-1])
            _TAILS[tail] = entry
    return data, entry[2], rows


def snapshot_header(snapshot: SessionSnapshot) -> bytes | None:
    """:func:`snapshot_bytes` of ``snapshot`` with ``"resident":[]`` in place of its groups, if known.

    Known for a snapshot :func:`seal_snapshot` made (it wrote them on the way
    to the whole); ``None`` otherwise, and then a store cuts the groups out of
    the whole itself.
    """
    entry = _SNAPSHOTS.get(id(snapshot))
    return None if entry is None else entry[2]


def verify_snapshot(key: SessionKey, snapshot: SessionSnapshot) -> None:
    """Raise :class:`~agentium_harness._errors.SnapshotCorruptError` unless ``snapshot`` is intact.

    A snapshot of format 3 or later must carry a digest equal to
    :func:`snapshot_digest`; older formats (written before digests) are
    accepted and sealed at their next save. A format below
    :data:`FIRST_FORMAT_VERSION` (1) or above :data:`SNAPSHOT_FORMAT_VERSION`
    is refused, digest or not. A bit flip that still decodes
    therefore fails closed instead of reaching the model.
    """
    # The exact classes pass without the helper's call (a load and a save each verify, every turn).
    if type(key) is not SessionKey:
        key = require_instance(key, SessionKey, "key")
    if type(snapshot) is not SessionSnapshot:
        snapshot = require_instance(snapshot, SessionSnapshot, "snapshot")
    version = snapshot.format_version
    if type(version) is not int:
        # An adapter's answer built without the strict decoder: a str would raise TypeError below,
        # an int subclass (or bool) could compare as it likes; every store decodes an exact int.
        raise SnapshotCorruptError(
            f"snapshot of session {key.key()} holds a format_version that is not an int "
            f"({type(version).__name__}); the stored data is damaged and was left as it is"
        )
    if version < FIRST_FORMAT_VERSION:
        # Before the digest checks: a format below 1 is not a pre-digest one that may go without.
        raise SnapshotCorruptError(
            f"snapshot of session {key.key()} has format {snapshot.format_version}, which no version of "
            f"agentium-harness writes (formats start at {FIRST_FORMAT_VERSION}); the stored data is damaged "
            "and was left as it is"
        )
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
    field), :func:`verify_snapshot`, a check that each resident group's
    messages hold only what ``append`` commits (as
    :func:`~agentium_harness._ports.archive.decode_archived_group` checks a
    group's), and, for a digested snapshot (format 3
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
    for group in snapshot.resident:
        # 5: a payload sits in the snapshot, its resident list, a group, its messages, a message.
        issue = stored_messages_issue(group.messages, data, 5)
        if issue is not None:
            raise SnapshotCorruptError(
                f"{where}: resident group {group.seq} holds what history never commits ({issue}); "
                "the stored data is damaged and was left as it is"
            )
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
    key = require_instance(key, SessionKey, "key")
    try:
        snapshot = decode_snapshot(key, data, f"snapshot of session {key.key()}")
    except SnapshotCorruptError:
        return ErasedSession(key)
    return ErasedSession(key, [(g.seq, g.digest) for g in snapshot.resident])
