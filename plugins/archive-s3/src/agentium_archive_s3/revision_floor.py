r"""The S3 session store's revision floor: revisions a session id gets never repeat across erasure.

One small object per store (the configured prefix)::

    P/sessions/revision-floor

holding one line, ``agentium-s3-revision-floor/1 revision=<n> sha256=<hex>\n``,
where ``<hex>`` is the SHA-256 of ``agentium-s3-revision-floor/1 revision=<n>\n``.
Its key cannot be a snapshot's: snapshots live below ``P/sessions/v1/`` and
end in ``.json`` (keys.py), and no listing of a scope reaches outside that
folder. It names no tenant, user or session: nothing of an erased one survives
in it but a number.

- An erase raises the floor to the highest revision among the snapshots it is
  about to delete, durably, **before** deleting them (S3 has no transaction
  to do both at once; a crash in between leaves the floor raised, which is
  safe: revisions then only skip ahead). Raising is a read and a conditional
  write (``IfMatch`` on the floor's ETag, ``IfNoneMatch="*"`` when it is
  absent), retried a bounded number of times when another erase raced it.
- A create (``expected_revision=None``) reads the floor (one GET) and stores
  revision floor + 1; a store that never erased anything has no floor object
  and starts at 1, as before. Never cached: another process, or another store
  on the same prefix, may have erased since, and a cached floor would hand
  out a revision of the session it erased. After the create lands it reads
  the floor again and moves the session past it when an erase raised it in
  between (:mod:`.sessions_create`).
- A replace whose store has no ETag cached reads the floor after the
  object, and is refused at or below it (:mod:`.sessions_create`).
- An erase replaces each snapshot by a tombstone before deleting it, raising
  the floor again to any revision saved meanwhile (:mod:`.sessions_tombstone`).

A floor object that does not decode exactly (a damaged body, a checksum
mismatch, an over-long object) raises :class:`~.errors.S3RevisionFloorCorruptError`
and nothing is written or deleted: failing open would let revisions repeat.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

import botocore.exceptions

from agentium_harness.plugin_api import OpContext

from .checksums import DIGEST_CODES, Checksums
from .config import S3Config
from .errors import S3ConflictRetriesExhaustedError, S3RevisionFloorCorruptError
from .link import S3Client, conflict_backoff, error_code, error_status, unquote_etag
from .snapshot_format import MAX_REVISION, is_empty_range, is_missing

__all__ = ["floor_body", "floor_key", "parse_floor", "raise_floor", "read_floor"]

_FORMAT: Final = b"agentium-s3-revision-floor/1"
_LINE: Final = re.compile(
    rb"agentium-s3-revision-floor/1 revision=(0|[1-9][0-9]{0,18}) sha256=([0-9a-f]{64})\n"
)
#: More than any valid floor object holds (about 120 bytes): a longer one is damaged.
_MAX_BYTES: Final = 256
#: Raising attempts when other erases keep moving the floor between the read and the write.
_ATTEMPTS: Final = 16


def floor_key(prefix: str) -> str:
    """The object key of the store's revision floor (never a snapshot's key: see the module)."""
    return f"{prefix}/sessions/revision-floor"


def _checksum(revision: int) -> str:
    return hashlib.sha256(_FORMAT + b" revision=%d\n" % revision).hexdigest()


def floor_body(revision: int) -> bytes:
    """The stored floor object of ``revision``."""
    return _FORMAT + b" revision=%d sha256=%s\n" % (revision, _checksum(revision).encode())


def parse_floor(data: bytes) -> int:
    """The revision a floor object holds, its checksum verified; anything else is damaged (typed)."""
    match = _LINE.fullmatch(data)
    if match is None or _checksum(int(match.group(1))) != match.group(2).decode():
        raise S3RevisionFloorCorruptError(
            "s3 session store: the revision floor object is damaged (it does not decode, or does not "
            "match its checksum), so revisions of erased sessions could repeat; nothing was written or "
            "deleted. Restore it from a version the bucket keeps, or write it again at a revision no "
            "lower than any session's ever was",
            code="RevisionFloorCorrupt",
        )
    return int(match.group(1))


def read_floor(s3: S3Client, config: S3Config) -> tuple[int, str | None]:
    """The floor and its ETag (unquoted); ``(0, None)`` when there is none yet (worker thread)."""
    try:
        reply = s3.get_object(
            Bucket=config.bucket, Key=floor_key(config.prefix), Range=f"bytes=0-{_MAX_BYTES}"
        )
    except botocore.exceptions.ClientError as exc:
        if is_missing(exc):
            return 0, None
        if is_empty_range(exc):  # an empty object: damaged
            parse_floor(b"")
        raise
    with reply["Body"] as body:
        data = body.read(_MAX_BYTES + 1)
    return parse_floor(data), unquote_etag(str(reply.get("ETag", "")))


def raise_floor(s3: S3Client, config: S3Config, revision: int, ctx: OpContext) -> int:
    """Raise the floor to at least ``revision`` (worker thread); returns the floor now stored.

    Nothing is written when it is already that high. A write refused because
    another erase moved the floor meanwhile (412) is retried from a fresh read;
    a 412 on an unchanged floor means the server wants the other ETag form
    (Ceph RGW compares the unquoted one), which the next attempt sends.
    """
    revision = min(revision, MAX_REVISION)
    quoted = True
    conflicts = 0
    damaged = 0
    for _ in range(_ATTEMPTS):
        ctx.raise_if_expired("session store erase")
        floor, etag = read_floor(s3, config)
        if floor >= revision:
            return floor
        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": f'"{etag}"' if quoted else etag}
        body = floor_body(revision)
        sums = Checksums(body)
        try:
            reply = s3.put_object(
                Bucket=config.bucket,
                Key=floor_key(config.prefix),
                Body=body,
                ContentType="text/plain; charset=utf-8",
                **sums.args,  # type: ignore[arg-type]
                **condition,  # type: ignore[arg-type]
            )
            stored = unquote_etag(str(reply.get("ETag", "")))
            while sums.stored_other_bytes(stored, config.etag_is_md5):
                # A server that checks neither checksum stored the floor damaged on the way: every
                # save and erase would then fail closed on it. Ours goes over it, on its ETag.
                damaged += 1
                if damaged > config.conflict_retries:
                    raise S3RevisionFloorCorruptError(
                        f"s3 session store: raising the revision floor to {revision}: the upload reached "
                        f"the server damaged {damaged} times (its ETag did not match the bytes sent)",
                        code="BadDigest",
                    )
                reply = s3.put_object(
                    Bucket=config.bucket,
                    Key=floor_key(config.prefix),
                    Body=body,
                    ContentType="text/plain; charset=utf-8",
                    IfMatch=f'"{stored}"' if quoted else stored,
                    **sums.args,  # type: ignore[arg-type]
                )
                stored = unquote_etag(str(reply.get("ETag", "")))
            return revision
        except botocore.exceptions.ClientError as exc:
            code, status = error_code(exc), error_status(exc)
            if code in DIGEST_CODES:
                damaged += 1  # refused on arrival: nothing was written; read and send again
                if damaged > config.conflict_retries:
                    raise
                continue
            if code == "PreconditionFailed" or status == 412:
                if etag is not None and read_floor(s3, config)[1] == etag:
                    quoted = not quoted  # the floor is unchanged: the server wants the other form
                continue
            if code in ("ConditionalRequestConflict", "OperationAborted") or status == 409:
                conflicts += 1
                conflict_backoff(ctx, conflicts)
                continue
            raise
    raise S3ConflictRetriesExhaustedError(
        f"s3 session store: raising the revision floor to {revision} kept being refused after {_ATTEMPTS} "
        "attempts (other erasures kept moving it); nothing was deleted, call again",
        code="RevisionFloorContended",
    )
