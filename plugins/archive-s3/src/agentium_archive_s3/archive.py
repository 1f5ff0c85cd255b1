"""The S3 history archive: one create-only object per group, verified on every read (R3, R8).

Append (a batch sorted by seq):

1. The lowest group goes alone: ``PutObject`` with ``IfNoneMatch="*"``
   (create-only), ``Content-MD5`` and ``x-amz-checksum-sha256`` of the group's
   canonical bytes, the group's digest in the object's metadata, and its
   *link* (below). Nothing is ever overwritten.
2. If it was created, the rest of the batch is uploaded concurrently within
   the link's limiter. If it was already stored (equal bytes: a retry, or
   another writer), the batch meets stored groups: one listing finds which
   of the rest exist, every one of those is compared first, and only then
   are the missing ones created — so a conflict stored before the call
   leaves nothing of the batch behind.
3. **200**: the returned ETag is checked against the bytes' MD5 (when
   ``etag_is_md5``): a mismatch means the server stored other bytes (a
   corrupted upload on a server that does not verify checksums); that object,
   which this call created and nobody can hold a receipt for, is deleted and
   the upload is tried again.
4. **412**: the key exists. It is read back (bounded) and its digest compared:
   equal is success — this is how a lost acknowledgment followed by an SDK
   retry resolves, and how a second writer of the same group gets its
   receipt — and different is an :class:`ArchiveConflictError`.
5. **409** (a conflicting concurrent request): retried ``conflict_retries``
   times with backoff, then :class:`~agentium_archive_s3.errors.S3ConflictRetriesExhaustedError`.

**A failed batch deletes nothing.** A group this call stored may already be
another writer's receipt (its upload answered 412, equal bytes) under a
boundary that writer committed, and nothing here can prove otherwise; so the
groups a failed batch stored stay. They are exactly the bytes the caller
sent for those seqs (the engine only archives groups of a committed
snapshot), no receipt of this call named them, and appending them again is
a no-op.

**Links.** Each group records, in its metadata, the highest seq below it that
its writer had seen archived before sending it (the batch's lowest group,
groups of the batch found stored, or groups the same adapter appended or
read earlier). A read that covers a linked seq without
finding it fails closed with ``ArchiveCorruptError``: a group that was
archived and is gone is never skipped over. A group whose writer knew of no
earlier group carries no link (sparse seqs stay legal, as the port allows).

Reads list the session's folder from ``start_seq`` (pagination, ``StartAfter``),
fetch each object with a ranged GET bounded by ``max_object_bytes``, and
re-check every group: the bytes against the stored digest, strict decoding,
:func:`~agentium_harness.plugin_api.check_archived_group`, and the links.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar, Final

import anyio
import attrs
import botocore.exceptions

from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveCapabilities,
    ArchiveConflictError,
    ArchiveCorruptError,
    ArchiveReceipt,
    EraseReport,
    EraseStatus,
    EraseTarget,
    HistoryArchive,
    MessageGroup,
    OpContext,
    SessionKey,
    check_archived_group,
    check_max_items,
    check_target,
    decode_archived_group,
    digest_bytes,
)

from .archive_erase import erase_archived
from .config import S3Config
from .erasure import (
    WriteFence,
    drain_fenced_writes,
    owns,
)
from .errors import S3ArchiveError, S3ConflictRetriesExhaustedError, S3ObjectTooLargeError, first_failure
from .keys import (
    DIGEST_META,
    LINK_META,
    MAX_SEQ,
    archive_key,
    archive_prefix,
    parse_archive_key,
    read_arguments,
    upload_key,
)
from .link import S3Client, S3Link, conflict_backoff, error_code, error_status, unquote_etag
from .markers import is_erasure_marker
from .probe import run_probe

__all__ = ["ForgetReport", "S3Archive"]

_LIST_PAGE: Final = 1000
#: Sessions whose highest archived seq an adapter remembers (for links), least recent dropped first.
_KNOWN_SESSIONS: Final = 4096
_LINK: Final = re.compile(r"0|[1-9][0-9]{0,18}")
_CONFLICT_CODES: Final = frozenset({"ConditionalRequestConflict", "OperationAborted", "409"})
_DIGEST_CODES: Final = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})


@attrs.frozen(slots=True)
class ForgetReport:
    """What :meth:`S3Archive.forget_session` did: groups deleted, and whether any are left."""

    deleted: int
    complete: bool


@attrs.frozen(slots=True)
class _Upload:
    session: SessionKey
    seq: int
    key: str
    data: bytes
    digest: str
    md5_b64: str
    md5_hex: str
    sha256_b64: str


class S3Archive(HistoryArchive):
    """An append-only history archive on S3 or an S3-compatible server (Ceph RGW, MinIO).

    Build it from :class:`~agentium_archive_s3.config.S3Config`, optionally
    lending it a boto3 S3 client (``client=``), which it then never closes.
    """

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        durable=True, idempotent_append=True, bounded_reads=True, health_check=True, erasure=True
    )

    def __init__(self, config: S3Config, *, client: S3Client | None = None) -> None:
        self._config = config
        self._link = S3Link(config, client, family=S3ArchiveError, name="s3 archive")
        # Per session, the highest seq this adapter saw archived (appended or read).
        self._known: OrderedDict[SessionKey, int] = OrderedDict()
        # Appends in flight per session, and the erasures running (docs: erasure.py).
        self._fence = WriteFence()

    @property
    def config(self) -> S3Config:
        """The options this archive was built with."""
        return self._config

    @property
    def link(self) -> S3Link:
        """The client link (owned or lent client, limiter)."""
        return self._link

    # -- append ---------------------------------------------------------------------------------

    def _uploads(self, key: SessionKey, groups: Sequence[MessageGroup]) -> list[_Upload]:
        """Encode and check the whole batch before any request; repeated identical groups are one."""
        seen: dict[int, _Upload] = {}
        uploads: list[_Upload] = []
        for group in groups:
            data = group.canonical_bytes()
            if len(data) > self._config.max_object_bytes:
                raise S3ObjectTooLargeError(
                    f"s3 archive: group {group.seq} of session {key.key()} is {len(data)} bytes, more than "
                    f"max_object_bytes={self._config.max_object_bytes}; nothing of the batch was written",
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
            object_key = upload_key(self._config.prefix, key, group.seq)
            md5 = hashlib.md5(data, usedforsecurity=False).digest()
            upload = _Upload(
                session=key,
                seq=group.seq,
                key=object_key,
                data=data,
                digest=group.digest,
                md5_b64=base64.b64encode(md5).decode("ascii"),
                md5_hex=md5.hex(),
                sha256_b64=base64.b64encode(hashlib.sha256(data).digest()).decode("ascii"),
            )
            seen[group.seq] = upload
            uploads.append(upload)
        return uploads

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Create-only objects, lowest seq first; equal re-appends pass, different ones conflict.

        Nothing is ever deleted on failure (see the module docstring): a group
        this call stored may already be another writer's receipt.
        """
        ctx.raise_if_expired("archive append")
        uploads = sorted(self._uploads(key, groups), key=lambda u: u.seq)
        if uploads:
            await self._store(key, uploads, ctx)
        bucket = self._config.bucket
        by_seq = {u.seq: u for u in uploads}
        return [
            ArchiveReceipt(seq=g.seq, digest=g.digest, location=f"s3://{bucket}/{by_seq[g.seq].key}")
            for g in groups
        ]

    async def _store(self, key: SessionKey, uploads: list[_Upload], ctx: OpContext) -> None:
        """Store the sorted batch: the lowest group alone, then a check of what exists, then the rest."""
        known = self._known.get(key)
        lowest, rest = uploads[0], uploads[1:]
        first_link = known if known is not None and known < lowest.seq else None
        created = await self._link.call(
            ctx, "archive append", lambda s3: self._put(s3, lowest, first_link, ctx)
        )
        stored = [lowest.seq]
        if rest and not created:
            # The batch meets groups already stored (a retry, or another writer): compare every
            # stored one before creating any, so a conflict leaves nothing of the batch behind.
            existing = await self._existing(key, lowest.seq, rest[-1].seq, ctx)
            await self._each(ctx, [u for u in rest if u.seq in existing], self._compare_stored)
            stored.extend(sorted(existing))
            rest = [u for u in rest if u.seq not in existing]
        if known is not None:
            stored.append(known)

        def put(s3: S3Client, upload: _Upload) -> None:
            self._put(s3, upload, max((s for s in stored if s < upload.seq), default=None), ctx)

        await self._each(ctx, rest, put)
        self._remember(key, uploads[-1].seq)

    async def _each(
        self, ctx: OpContext, uploads: Sequence[_Upload], work: Callable[[S3Client, _Upload], object]
    ) -> None:
        """``work(s3, upload)`` for every upload, concurrently within the limiter; raise the worst failure."""
        failures: list[BaseException] = []

        async def one(upload: _Upload) -> None:
            try:
                await self._link.call(ctx, "archive append", lambda s3: work(s3, upload))
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for upload in uploads:
                tg.start_soon(one, upload)
        if failures:
            raise first_failure(failures)

    async def _existing(self, key: SessionKey, after: int, last: int, ctx: OpContext) -> set[int]:
        """The seqs in ``(after, last]`` the session's folder holds (one listing, paginated)."""
        listed = await self._link.call(
            ctx, "archive append", lambda s3: self._list(s3, key, after + 1, last - after)
        )
        return {seq for seq, _, _ in listed if seq <= last}

    def _remember(self, key: SessionKey, seq: int) -> None:
        """Note that ``seq`` of ``key`` is archived: later groups of the session link to it."""
        if seq > self._known.get(key, -1):
            self._known[key] = seq
        self._known.move_to_end(key)
        while len(self._known) > _KNOWN_SESSIONS:
            self._known.popitem(last=False)

    def _put(self, s3: S3Client, upload: _Upload, link: int | None, ctx: OpContext) -> bool:
        """Store ``upload`` create-only (worker thread), linked to the archived group ``link``.

        Returns True when this call created the object, False when an equal
        group was already stored. Counted in flight for its session while it
        runs, and refused while an erase of this adapter covers the group.
        """

        def refuse(target: EraseTarget) -> S3ArchiveError:
            return S3ArchiveError(
                f"s3 archive: group {upload.seq} of session {upload.session.key()} was not appended: an "
                f"erasure of {target.describe()} is running in this adapter; nothing was written",
                code="Erasing",
            )

        with self._fence.writing(
            upload.session, lambda target: target.covers_group(upload.session, upload.seq), refuse
        ):
            return self._put_once(s3, upload, link, ctx)

    def _put_once(self, s3: S3Client, upload: _Upload, link: int | None, ctx: OpContext) -> bool:
        metadata = {DIGEST_META: upload.digest}
        if link is not None:
            metadata[LINK_META] = str(link)
        conflicts = 0
        damaged = 0
        while True:
            ctx.raise_if_expired("archive append")
            try:
                reply = s3.put_object(
                    Bucket=self._config.bucket,
                    Key=upload.key,
                    # Bytes, not a stream: botocore then sends no Expect: 100-continue, which
                    # would cost a round trip per group (snapshots, often larger, do stream).
                    Body=upload.data,
                    IfNoneMatch="*",
                    ContentMD5=upload.md5_b64,
                    ChecksumSHA256=upload.sha256_b64,
                    ContentType="application/json",
                    Metadata=metadata,
                )
            except botocore.exceptions.ClientError as exc:
                code, status = error_code(exc), error_status(exc)
                if code == "PreconditionFailed" or status == 412:
                    self._compare_stored(s3, upload)
                    return False
                if code in _DIGEST_CODES:
                    # The server received other bytes than those sent and refused them.
                    damaged += 1
                    self._check_damaged(upload, damaged)
                    continue
                if code in _CONFLICT_CODES or status == 409:
                    conflicts += 1
                    if conflicts > self._config.conflict_retries:
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
            if not self._config.etag_is_md5 or etag == upload.md5_hex:
                return True
            # The server stored bytes other than those sent (it did not verify
            # Content-MD5). The object is ours and nobody can hold a receipt for it
            # (every receipt checks the stored bytes' digest): remove it, by its
            # version in a versioned bucket, so no damaged version stays behind.
            self._delete(s3, upload.key, version)
            damaged += 1
            self._check_damaged(upload, damaged)

    def _check_damaged(self, upload: _Upload, damaged: int) -> None:
        """Past ``conflict_retries`` damaged uploads of one group, give up (nothing acknowledged)."""
        if damaged > self._config.conflict_retries:
            raise S3ArchiveError(
                f"s3 archive: group {upload.seq} at {upload.key!r} reached the server damaged {damaged} "
                "times (its checksum or ETag did not match the bytes sent); nothing was acknowledged",
                code="BadDigest",
            )

    def _compare_stored(self, s3: S3Client, upload: _Upload) -> None:
        """The key exists: pass if it holds these bytes, else ``ArchiveConflictError`` (or damage)."""
        data, stored_digest, _ = self._get(s3, upload.key)
        if not data:
            # Only an exact marker is an erasure's work (one HEAD, on this rare path only).
            if not is_erasure_marker(s3, self._config.bucket, upload.key):
                raise ArchiveCorruptError(
                    f"{_where(upload.session, upload.seq, upload.key)} is empty but not an erased group's "
                    "marker; it was truncated or replaced outside the archive, and the append is refused "
                    "(the object is left as it is)"
                )
            raise ArchiveConflictError(
                f"s3 archive: group {upload.seq} at {upload.key!r} was erased (an erasure left an empty "
                "marker there); an erased group is never archived again"
            )
        if digest_bytes(data) == upload.digest and stored_digest == upload.digest:
            return
        raise ArchiveConflictError(
            f"s3 archive: {upload.key!r} already holds a different group {upload.seq} (stored "
            f"{digest_bytes(data)}, appending {upload.digest}); archived groups are never overwritten"
        )

    def _delete(self, s3: S3Client, object_key: str, version: str) -> None:
        """Delete an object this call created: by its version when the bucket has versions."""
        if version and version != "null":
            s3.delete_object(Bucket=self._config.bucket, Key=object_key, VersionId=version)
        else:
            s3.delete_object(Bucket=self._config.bucket, Key=object_key)

    # -- reads ----------------------------------------------------------------------------------

    def _get(self, s3: S3Client, object_key: str) -> tuple[bytes, str | None, str | None]:
        """At most ``max_object_bytes`` of one object, its stored digest and link (worker thread)."""
        limit = self._config.max_object_bytes
        try:
            reply = s3.get_object(Bucket=self._config.bucket, Key=object_key, Range=f"bytes=0-{limit}")
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) == "InvalidRange" or error_status(exc) == 416:
                return b"", None, None  # an empty object: an erased group's marker
            raise
        with reply["Body"] as body:
            data = body.read(limit + 1)
        if len(data) > limit:
            raise S3ObjectTooLargeError(
                f"s3 archive: {object_key!r} is larger than max_object_bytes={limit}; refusing to read it",
                code="TooLarge",
            )
        meta: dict[str, str] = reply.get("Metadata", {})
        return data, meta.get(DIGEST_META), meta.get(LINK_META)

    def _check_marker(self, s3: S3Client, key: SessionKey, seq: int, object_key: str) -> None:
        """An empty object listed in the folder must be an erased group's marker (worker thread).

        Any other empty object is a group truncated or replaced outside the
        archive, which a read must not pass over as erased (the group would
        vanish from the history unnoticed, linked to or not): :mod:`.markers`.
        """
        if not is_erasure_marker(s3, self._config.bucket, object_key):
            raise ArchiveCorruptError(
                f"{_where(key, seq, object_key)} is empty but not an erased group's marker; it was "
                "truncated or replaced outside the archive, and the read stops here"
            )

    def _decode(
        self, key: SessionKey, seq: int, object_key: str, data: bytes, stored: str | None
    ) -> MessageGroup:
        return decode_archived_group(key, seq, stored, data, lambda: _where(key, seq, object_key))

    def _list(self, s3: S3Client, key: SessionKey, start_seq: int, limit: int) -> list[tuple[int, str, bool]]:
        """Up to ``limit`` (seq, key, erased) of the session from ``start_seq``, ascending (worker thread).

        ``erased`` marks an erased group's marker (an empty object): listed, so
        links to it hold, and checked, but not counted in ``limit`` and never
        fetched. Markers past the ``limit``-th group are left to a later read.
        """
        folder = archive_prefix(self._config.prefix, key)
        found: list[tuple[int, str, bool]] = []
        groups = markers = 0
        args: dict[str, Any] = {"Bucket": self._config.bucket, "Prefix": folder}
        if start_seq > 0:
            args["StartAfter"] = archive_key(self._config.prefix, key, start_seq - 1)
        while groups < limit:
            # Markers do not count against ``limit``; each widens the next page (no request per marker).
            page = s3.list_objects_v2(**args, MaxKeys=min(_LIST_PAGE, limit - groups + markers))
            for item in page.get("Contents", []):
                seq = parse_archive_key(folder, item["Key"])
                if seq is None:
                    raise ArchiveCorruptError(
                        f"s3 archive: {item['Key']!r} in the folder of session {key.key()} is not an "
                        "archived group; the folder was changed outside the archive"
                    )
                if item.get("Size", 0) > self._config.max_object_bytes:
                    raise S3ObjectTooLargeError(
                        f"s3 archive: {item['Key']!r} is larger than max_object_bytes="
                        f"{self._config.max_object_bytes}; refusing to read it",
                        code="TooLarge",
                    )
                if groups == limit:
                    return found
                erased = item.get("Size", 0) == 0
                groups += not erased
                markers += erased
                found.append((seq, item["Key"], erased))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            args["ContinuationToken"] = token
        return found

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` whole, re-checked groups with ``seq >= start_seq``, ascending."""
        ctx.raise_if_expired("archive read")
        key, start_seq, limit = read_arguments(key, start_seq, max_groups)
        if limit == 0 or start_seq > MAX_SEQ:  # no key holds a seq past MAX_SEQ
            return []
        listed = await self._link.call(
            ctx, "archive read", lambda s3: self._list(s3, key, max(0, start_seq), limit)
        )
        fetched: dict[int, tuple[MessageGroup, int | None]] = {}
        failures: list[BaseException] = []

        async def one(seq: int, object_key: str, erased: bool) -> None:
            try:
                if erased:
                    # Every empty object met must be exactly an erasure's marker, linked to or
                    # not: one HEAD per erased group (rare), none for an ordinary group.
                    check = partial(self._check_marker, key=key, seq=seq, object_key=object_key)
                    await self._link.call(ctx, "archive read", check)
                    return
                data, stored, link = await self._link.call(
                    ctx, "archive read", lambda s3: self._get(s3, object_key)
                )
                fetched[seq] = (
                    self._decode(key, seq, object_key, data, stored),
                    _parse_link(key, seq, object_key, link),
                )
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for seq, object_key, erased in listed:
                tg.start_soon(one, seq, object_key, erased)
        if failures:
            raise first_failure(failures)
        # An erased group's (checked) marker keeps its seq present: a group linked to it reads on.
        present = {seq for seq, _, _ in listed}
        for seq, object_key, erased in listed:
            if erased:
                continue
            link = fetched[seq][1]
            if link is not None and link >= start_seq and link not in present:
                # The group was written after its writer had seen group ``link`` archived:
                # that group was deleted since. Skipping it would hand out the wrong history.
                raise ArchiveCorruptError(
                    f"s3 archive: group {link} of session {key.key()} is missing, yet "
                    f"{_where(key, seq, object_key)} was archived after it; it was deleted outside the "
                    "archive (or partly forgotten), and the read stops here"
                )
        if listed:
            self._remember(key, listed[-1][0])
        return [fetched[seq][0] for seq, _, erased in listed if not erased]

    # -- erasure -------------------------------------------------------------------------------

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete the target's groups with every version; at most ``max_items`` keys per call.

        A tenant, user or session target deletes every object of its folder.
        A groups target replaces each group in its ranges with an empty
        marker (metadata ``agentium-erased``), so the session's later groups,
        linked to it, still read, and an append of the erased group is refused
        (create-only); then it deletes the group's versions. Before listing,
        writes of the scope this adapter still has in flight are waited for,
        and new ones are refused until the call returns (:mod:`.erasure`).
        """
        check_target(target)
        bound = check_max_items(max_items)
        ctx.raise_if_expired("archive erase")
        if dry_run:
            return await erase_archived(self._config, self._link, target, bound, ctx, dry_run=True)
        with self._fence.erasing(target) as drain:
            await drain_fenced_writes(self._config, ctx, drain, target, "archive erase", S3ArchiveError)
            if not target.groups:
                for key in [k for k in self._known if owns(target, k)]:
                    del self._known[key]
            return await erase_archived(self._config, self._link, target, bound, ctx, dry_run=False)

    async def forget_session(
        self, key: SessionKey, ctx: OpContext, *, max_objects: int = 1000
    ) -> ForgetReport:
        """Delete up to ``max_objects`` archived groups of session ``key``: :meth:`erase` of the session.

        Kept for callers of earlier versions; erase through the runtime
        (``HarnessRuntime.erase``, ``agentium erase``) so the erasure is
        recorded, fenced and verified.
        """
        bound = max(1, max_objects)
        report = await self.erase(
            EraseTarget.session(key.tenant, key.user, key.session), ctx, max_items=bound
        )
        return ForgetReport(deleted=report.count("group"), complete=report.status is EraseStatus.COMPLETE)

    # -- health and lifecycle -------------------------------------------------------------------

    async def health(self, ctx: OpContext) -> str:
        """Bucket reachability, conditional-write support (a create-only probe object) and versioning."""
        return await run_probe(self._link, ctx, "archive health")

    async def aclose(self) -> None:
        """Close the client this archive created; a lent client is left open. Idempotent."""
        await self._link.aclose()


def _where(key: SessionKey, seq: int, object_key: str) -> str:
    return f"s3 archive: group {seq} of session {key.key()} at {object_key!r}"


def _parse_link(key: SessionKey, seq: int, object_key: str, link: str | None) -> int | None:
    """The archived group a group was linked to when it was written (``None``: no link)."""
    if link is None:
        return None
    if _LINK.fullmatch(link) is None or int(link) >= seq:
        raise ArchiveCorruptError(
            f"{_where(key, seq, object_key)} carries an invalid link {link[:40]!r}; it was changed "
            "outside the archive, and is not returned"
        )
    return int(link)
