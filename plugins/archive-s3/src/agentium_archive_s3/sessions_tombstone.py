"""Erasing one snapshot: a tombstone first, so a save from elsewhere is never deleted unseen.

An erase (:mod:`.sessions_erase`) reads each snapshot (revision R) and raises
the revision floor (:mod:`.revision_floor`) to cover R before removing it. A
plain delete would remove whatever the key holds by then: a save from
another process or adapter object (its own write fence does not reach it)
landing between the read and the delete, at revision R + 1, would be
deleted while R + 1 is above the floor, and a later create would hand out
R + 1 again, which a stale holder of the erased session could take for its
own (ABA).

So the snapshot is first replaced by :data:`~.snapshot_format.TOMBSTONE`
with ``IfMatch`` on the ETag the erase read (:func:`tombstone`):

- it lands only over exactly the revision the floor covers. When it is
  refused (412; moto and AWS answer 404 for a key that is gone), the object
  is read again: another revision is covered by raising the floor to it,
  then tombstoned on its ETag, at most ``_ATTEMPTS`` times within the
  erase's deadline (Ceph RGW compares the unquoted ETag: an unchanged
  object after a 412 means the other form, as for saves);
- nothing writes over a tombstone: every write of the store is conditional
  (``IfMatch`` on a snapshot's ETag, never a tombstone's, which no load
  caches; ``IfNoneMatch="*"`` fails while the key exists). Loads read it as
  no session, saves over it are ``SessionConflictError``, a create meeting
  it too (an erasure of the id is under way), and listings skip it (an
  object of its size is read: a damaged one is still listed);
- only then is the key deleted: in a versioned bucket by version ids (every
  version, the tombstone last; re-listed when a revision landed meanwhile),
  otherwise with the tombstone's ETag as the delete's condition, which AWS
  and moto honour (a key whose tombstone another erasure removed, and that
  holds a new session since, is left alone) and Ceph RGW 16 ignores.

Ceph RGW 16 refuses ``IfMatch`` in a bucket that keeps versions (and
ignores ``IfNoneMatch``: the store's saves do not work there). Refused in
both forms on an object that has not changed, the erase writes no tombstone
there and deletes the versions it listed, by id: exactly what it read and
covered (a save landing meanwhile would stay, never deleted unseen). In a
bucket without versions that refusal fails the erase of that session,
typed (code ``IfMatchRefused``), nothing of it deleted.

A crash between the tombstone and the delete leaves the tombstone: loads
read no session, and the next erase of the scope (``agentium erase
--resume``) finds it, reports the session (with no groups: the tombstone
holds none) and deletes it; the floor already covers every revision it
replaced. What remains, on a server that ignores delete conditions (Ceph
RGW 16) in a bucket without versions: two erasures of one session in
different processes at once, and a create landing between their deletes,
which the later delete removes unseen.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import botocore.exceptions

from agentium_harness.plugin_api import (
    ErasedSession,
    OpContext,
    SessionKey,
    SnapshotCorruptError,
    snapshot_erasure,
)

from .checksums import DIGEST_CODES, Checksums
from .config import S3Config
from .errors import S3ConflictRetriesExhaustedError, S3ObjectTooLargeError
from .link import S3Client, conflict_backoff, error_code, error_status, unquote_etag
from .revision_floor import raise_floor
from .snapshot_format import (
    TOMBSTONE,
    is_empty_range,
    is_missing,
    is_tombstone,
    parse_snapshot,
    read_limit,
    revision_shown,
)

#: The tombstone's transfer checksums (one body for every session).
_TOMBSTONE_SUMS: Final = Checksums(TOMBSTONE)

__all__ = ["Found", "IfMatchForm", "Tombstoned", "merged", "read_found", "tombstone"]

#: Tombstone writes per snapshot; each retry follows another writer's save landing meanwhile.
_ATTEMPTS: Final = 8


@attrs.frozen(slots=True)
class Found:
    """What one read of a snapshot's key found.

    ``revision`` is the one to cover with the floor (a damaged snapshot's
    header revision, unverified; 0 when there is none); ``etag`` and
    ``version`` identify the object read (``etag`` unquoted; ``None`` when
    the key was missing).
    """

    erased: ErasedSession
    revision: int = 0
    etag: str | None = None
    version: str | None = None
    tombstone: bool = False


@attrs.define(slots=True)
class IfMatchForm:
    """Whether ``IfMatch`` is sent quoted (AWS, moto) or not (Ceph RGW); learned on a 412."""

    quoted: bool = True
    #: The server refused both forms on an unchanged object: later keys do not try again.
    refused: bool = False


@attrs.frozen(slots=True)
class Tombstoned:
    """Where :func:`tombstone` left one key.

    ``etag``/``version``: the tombstone standing at the key (``None``: the
    key was gone, deleted by another erasure). ``seen``: every read of it, in
    order. ``changed``: another revision landed after the first read.
    ``refused``: the server refused ``IfMatch`` in both forms on an object
    that had not changed (Ceph RGW 16 in a bucket that keeps versions): no
    tombstone was written.
    """

    etag: str | None
    version: str | None
    seen: tuple[Found, ...]
    changed: bool
    refused: bool = False


def read_found(
    s3: S3Client, config: S3Config, object_key: str, key: SessionKey, version: str | None = None
) -> Found:
    """Read the snapshot at ``object_key`` (``version``: that one, else the current one); worker thread."""
    args: dict[str, Any] = {"Bucket": config.bucket, "Key": object_key}
    if version:
        args["VersionId"] = version
    try:
        reply = s3.get_object(Range=f"bytes=0-{read_limit(config)}", **args)
    except botocore.exceptions.ClientError as exc:
        if is_missing(exc):
            return Found(ErasedSession(key))  # deleted since the listing
        if not is_empty_range(exc):
            raise
        # An empty object: damaged, erased all the same; a ranged read has no ETag to give.
        head = s3.head_object(**args)
        return Found(ErasedSession(key), 0, unquote_etag(str(head.get("ETag", ""))), head.get("VersionId"))
    with reply["Body"] as body:
        data = body.read(read_limit(config) + 1)
    etag, got = unquote_etag(str(reply.get("ETag", ""))), reply.get("VersionId")
    if is_tombstone(data):
        # An erasure's, not yet deleted (it may have stopped there): the floor covers what it replaced.
        return Found(ErasedSession(key), 0, etag, got, tombstone=True)
    try:
        revision, payload = parse_snapshot(config, key, data)
    except (SnapshotCorruptError, S3ObjectTooLargeError):
        # Damaged: erased all the same, its groups not vouched for; the floor covers its header's revision.
        shown = revision_shown(data)
        return Found(ErasedSession(key), int(shown) if shown.isdigit() else 0, etag, got)
    return Found(snapshot_erasure(key, payload), revision, etag, got)


def tombstone(
    s3: S3Client,
    config: S3Config,
    object_key: str,
    first: Found,
    covered: int,
    form: IfMatchForm,
    ctx: OpContext,
) -> Tombstoned:
    """Replace the snapshot ``first`` read with a tombstone, following saves landing meanwhile (worker).

    ``covered``: the floor is known to be at least this high. Each newer
    revision found is covered by raising the floor before the tombstone is
    written over it.

    :raises S3ConflictRetriesExhaustedError: other writers kept saving it.
    """
    seen = [first]
    current = first
    flipped = False
    conflicts = 0
    damaged = 0
    for _ in range(_ATTEMPTS):
        if form.refused and not current.tombstone:
            return Tombstoned(None, None, tuple(seen), len(seen) > 1, refused=True)
        if current.etag is None:
            return Tombstoned(None, None, tuple(seen), len(seen) > 1)
        if current.tombstone:
            return Tombstoned(current.etag, current.version, tuple(seen), len(seen) > 1)
        if current.revision > covered:
            # A save landed after the erase's read: the floor must cover it before it goes.
            covered = raise_floor(s3, config, current.revision, ctx)
        ctx.raise_if_expired("session store erase")
        quoted = form.quoted
        try:
            reply = s3.put_object(
                Bucket=config.bucket,
                Key=object_key,
                Body=TOMBSTONE,
                ContentType="text/plain; charset=utf-8",
                IfMatch=f'"{current.etag}"' if quoted else current.etag,
                **_TOMBSTONE_SUMS.args,  # type: ignore[arg-type]
            )
            # Not compared with the ETag, unlike a save: the erase deletes this object next (by its
            # version in a versioned bucket, where writing a whole one over a damaged one would
            # leave the damaged version current once the whole one is deleted); until then a
            # damaged tombstone reads as a damaged snapshot, failing closed, never as the session.
            etag = unquote_etag(str(reply.get("ETag", "")))
            return Tombstoned(etag, reply.get("VersionId"), tuple(seen), len(seen) > 1)
        except botocore.exceptions.ClientError as exc:
            code, status = error_code(exc), error_status(exc)
            if code in DIGEST_CODES:
                damaged += 1  # refused on arrival: nothing was written; the same write again
                if damaged > config.conflict_retries:
                    raise
                continue
            if code in ("ConditionalRequestConflict", "OperationAborted") or status == 409:
                conflicts += 1
                conflict_backoff(ctx, conflicts)
                continue
            if not (is_missing(exc) or code == "PreconditionFailed" or status == 412):
                raise
        # Refused: read what the key holds now.
        now = read_found(s3, config, object_key, first.erased.session)
        if flipped and now.etag == current.etag and not now.tombstone:
            form.refused = True  # unchanged, and refused in both forms: IfMatch is not honoured here
        elif not flipped and now.etag == current.etag and not now.tombstone:
            # Unchanged, yet refused: the server compares the other ETag form (Ceph RGW: unquoted).
            # The other form than this attempt sent: tombstones of other keys may be learning it too.
            flipped = True
            form.quoted = not quoted
        else:
            seen.append(now)
        current = now
    raise S3ConflictRetriesExhaustedError(
        f"s3 session store: erasing session {first.erased.session.key()}: other writers kept saving it "
        f"({_ATTEMPTS} attempts to replace it with a tombstone were refused); the revision floor covers "
        "every revision it replaced, and the session was not deleted; the scope's other sessions this "
        "erase already replaced by tombstones read as erased but are deleted only by the next erase: "
        "call again",
        code="SessionKeptChanging",
    )


def merged(seen: tuple[Found, ...]) -> ErasedSession:
    """One report entry for every revision of the session the erase read: the union of their groups."""
    groups = sorted({pair for found in seen for pair in found.erased.groups})
    return ErasedSession(seen[0].erased.session, groups)
