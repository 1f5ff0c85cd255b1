"""One group's upload to the S3 archive: encoded before any request, stored create-only (worker threads).

:meth:`~agentium_archive_s3.archive.S3Archive.append` encodes and checks the
whole batch with :func:`encode_batch`, then stores each group with
:func:`put_once` (create-only, checksummed, retried on 409 and on a damaged
upload) inside its write fence; :func:`compare_stored` decides what a key
found taken holds (see :mod:`.archive` for the whole protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs
import botocore.exceptions

from agentium_harness.plugin_api import (
    ArchiveConflictError,
    ArchiveCorruptError,
    MessageGroup,
    OpContext,
    SessionKey,
    check_archived_group,
    digest_bytes,
)

from .archive_read import get_group, where
from .checksums import DIGEST_CODES, Checksums
from .config import S3Config
from .errors import S3ArchiveError, S3ConflictRetriesExhaustedError, S3ObjectTooLargeError
from .keys import DIGEST_META, LINK_META, upload_key
from .link import S3Client, conflict_backoff, error_code, error_status, unquote_etag
from .markers import is_erasure_marker
from .observe import APPEND_RESENT, degraded

__all__ = ["Upload", "compare_stored", "encode_batch", "put_once"]

_CONFLICT_CODES: Final = frozenset({"ConditionalRequestConflict", "OperationAborted", "409"})


@attrs.frozen(slots=True)
class Upload:
    """One group's object as it is sent: its key, canonical bytes, digest and checksums."""

    session: SessionKey
    seq: int
    key: str
    data: bytes
    digest: str
    sums: Checksums


def encode_batch(config: S3Config, key: SessionKey, groups: Sequence[MessageGroup]) -> list[Upload]:
    """Encode and check the whole batch before any request; repeated identical groups are one."""
    seen: dict[int, Upload] = {}
    uploads: list[Upload] = []
    for group in groups:
        data = group.canonical_bytes()
        if len(data) > config.max_object_bytes:
            raise S3ObjectTooLargeError(
                f"s3 archive: group {group.seq} of session {key.key()} is {len(data)} bytes, more than "
                f"max_object_bytes={config.max_object_bytes}; nothing of the batch was written",
                code="TooLarge",
            )
        # A group of another session must never be filed under this one.
        check_archived_group(key, group)
        previous = seen.get(group.seq)
        if previous is not None:
            if previous.digest != group.digest:
                raise ArchiveConflictError(
                    f"s3 archive: the batch carries seq {group.seq} of session {key.key()} twice with "
                    "different content; nothing of the batch was written"
                )
            continue
        upload = Upload(
            session=key,
            seq=group.seq,
            key=upload_key(config.prefix, key, group.seq),
            data=data,
            digest=group.digest,
            sums=Checksums(data),
        )
        seen[group.seq] = upload
        uploads.append(upload)
    return uploads


def put_once(s3: S3Client, config: S3Config, upload: Upload, link: int | None, ctx: OpContext) -> bool:
    """Store ``upload`` create-only, linked to ``link``: True if created, False if equal bytes were stored."""
    metadata = {DIGEST_META: upload.digest}
    if link is not None:
        metadata[LINK_META] = str(link)
    conflicts = 0
    damaged = 0
    while True:
        ctx.raise_if_expired("archive append")
        try:
            reply = s3.put_object(
                Bucket=config.bucket,
                Key=upload.key,
                # Bytes, not a stream: botocore then sends no Expect: 100-continue, which
                # would cost a round trip per group (snapshots, often larger, do stream).
                Body=upload.data,
                IfNoneMatch="*",
                **upload.sums.args,  # type: ignore[arg-type]
                ContentType="application/json",
                Metadata=metadata,
            )
        except botocore.exceptions.ClientError as exc:
            code, status = error_code(exc), error_status(exc)
            if code == "PreconditionFailed" or status == 412:
                compare_stored(s3, config, upload)
                return False
            if code in DIGEST_CODES:
                # The server received other bytes than those sent and refused them.
                damaged += 1
                _check_damaged(config, upload, damaged)
                continue
            if code in _CONFLICT_CODES or status == 409:
                conflicts += 1
                if conflicts > config.conflict_retries:
                    raise S3ConflictRetriesExhaustedError(
                        f"s3 archive: group {upload.seq} at {upload.key!r} kept answering 409 ({code}) "
                        f"after {conflicts} attempts; nothing was acknowledged",
                        code=code,
                        status=status,
                    ) from None
                conflict_backoff(ctx, conflicts)
                continue
            raise
        etag = unquote_etag(str(reply.get("ETag", "")))
        version = str(reply.get("VersionId") or "")
        if not upload.sums.stored_other_bytes(etag, config.etag_is_md5):
            return True
        # The server stored bytes other than those sent (it did not verify
        # Content-MD5). The object is ours and nobody can hold a receipt for it
        # (every receipt checks the stored bytes' digest): remove it, by its
        # version in a versioned bucket, so no damaged version stays behind.
        _delete(s3, config, upload.key, version)
        damaged += 1
        _check_damaged(config, upload, damaged)


def _check_damaged(config: S3Config, upload: Upload, damaged: int) -> None:
    """Past ``conflict_retries`` damaged uploads of one group, give up; else it is sent again (a WARNING)."""
    if damaged > config.conflict_retries:
        raise S3ArchiveError(
            f"s3 archive: group {upload.seq} at {upload.key!r} reached the server damaged {damaged} "
            "times (its checksum or ETag did not match the bytes sent); nothing was acknowledged",
            code="BadDigest",
        )
    degraded(
        APPEND_RESENT,
        {"agentium.s3.reason": "damaged"},
        "archive append: a group's upload reached the server damaged (checksum or ETag); sent again",
    )


def compare_stored(s3: S3Client, config: S3Config, upload: Upload) -> None:
    """The key exists: pass if it holds these bytes, else ``ArchiveConflictError`` (or damage)."""
    data, stored_digest, _ = get_group(s3, config, upload.key)
    if not data:
        # Only an exact marker is an erasure's work (one HEAD, on this rare path only).
        if not is_erasure_marker(s3, config.bucket, upload.key):
            raise ArchiveCorruptError(
                f"{where(upload.session, upload.seq, upload.key)} is empty but not an erased group's "
                "marker; it was truncated or replaced outside the archive, and the append is refused "
                "(the object is left as it is)"
            )
        raise ArchiveConflictError(
            f"s3 archive: group {upload.seq} at {upload.key!r} was erased (an erasure left an empty "
            "marker there); an erased group is never archived again"
        )
    actual = digest_bytes(data)
    if actual == upload.digest and stored_digest == upload.digest:
        return
    if actual != stored_digest:
        # Damage (bytes or digest changed, or the digest dropped), not another group: reported as
        # a conflict, the engine kept the turn as a divergence from a group no writer stored.
        raise ArchiveCorruptError(
            f"{where(upload.session, upload.seq, upload.key)} does not match its stored digest; it was "
            "damaged or changed outside the archive, and the append is refused (the object is left as it is)"
        )
    raise ArchiveConflictError(
        f"s3 archive: {upload.key!r} already holds a different group {upload.seq} (stored "
        f"{digest_bytes(data)}, appending {upload.digest}); archived groups are never overwritten"
    )


def _delete(s3: S3Client, config: S3Config, object_key: str, version: str) -> None:
    """Delete an object this call created: by its version when the bucket has versions."""
    if version and version != "null":
        s3.delete_object(Bucket=config.bucket, Key=object_key, VersionId=version)
    else:
        s3.delete_object(Bucket=config.bucket, Key=object_key)
