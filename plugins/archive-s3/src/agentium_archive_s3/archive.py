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

An empty object listed is an erased group's marker only after one ``HEAD``
shows it is exactly one (:mod:`.markers`); a marker this archive verified
before, unchanged since, is not checked again (:mod:`.marker_cache`).

One group's upload is :mod:`.archive_append`; the listing and the ranged GET
are :mod:`.archive_read`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import ClassVar, Final

import anyio
import attrs

from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveCapabilities,
    ArchiveCorruptError,
    ArchiveReceipt,
    EraseReport,
    EraseStatus,
    EraseTarget,
    HistoryArchive,
    MessageGroup,
    OpContext,
    SessionKey,
    check_max_items,
    check_target,
    checked_argument,
    checked_count,
    checked_ctx,
    checked_key,
    checked_sequence,
    decode_archived_group,
)

from .archive_append import Upload, compare_stored, encode_batch, put_once
from .archive_erase import erase_archived
from .archive_read import ListedGroup, get_group, list_groups, parse_link, where
from .config import S3Config
from .erasure import (
    WriteFence,
    drain_fenced_writes,
    owns,
    request_bound,
)
from .errors import S3ArchiveError, first_failure
from .keys import MAX_SEQ, read_arguments
from .link import S3Client, S3Link
from .marker_cache import VerifiedMarkers
from .markers import head_marker
from .probe import run_probe

__all__ = ["ForgetReport", "S3Archive"]

#: Sessions whose highest archived seq an adapter remembers (for links), least recent dropped first.
_KNOWN_SESSIONS: Final = 4096


@attrs.frozen(slots=True)
class ForgetReport:
    """What :meth:`S3Archive.forget_session` did: groups deleted, and whether any are left."""

    deleted: int
    complete: bool


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
        self._fence = WriteFence(self._link.unanswered, request_bound(config))
        # Markers reads verified, unchanged since: not HEADed again (docs: marker_cache.py).
        self._markers = VerifiedMarkers()

    @property
    def config(self) -> S3Config:
        """The options this archive was built with."""
        return self._config

    @property
    def link(self) -> S3Link:
        """The client link (owned or lent client, limiter)."""
        return self._link

    # -- append ---------------------------------------------------------------------------------

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        """Create-only objects, lowest seq first; equal re-appends pass, different ones conflict.

        Nothing is ever deleted on failure (see the module docstring): a group
        this call stored may already be another writer's receipt.
        """
        # Checked before anything else: a host's None or str reached botocore or encode_batch as a bare
        # AttributeError or TypeError.
        checked_ctx(ctx, "archive append").raise_if_expired("archive append")
        key = checked_key(key, "archive append")
        for group in checked_sequence(groups, "groups", "archive append"):
            checked_argument(group, MessageGroup, "each of groups", "archive append")
        uploads = sorted(encode_batch(self._config, key, groups), key=lambda u: u.seq)
        if uploads:
            await self._store(key, uploads, ctx)
        bucket = self._config.bucket
        by_seq = {u.seq: u for u in uploads}
        return [
            ArchiveReceipt(seq=g.seq, digest=g.digest, location=f"s3://{bucket}/{by_seq[g.seq].key}")
            for g in groups
        ]

    async def _store(self, key: SessionKey, uploads: list[Upload], ctx: OpContext) -> None:
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
            taken = [u for u in rest if u.seq in existing]
            await self._each(ctx, taken, lambda s3, u: compare_stored(s3, self._config, u))
            stored.extend(sorted(existing))
            rest = [u for u in rest if u.seq not in existing]
        if known is not None:
            stored.append(known)

        def put(s3: S3Client, upload: Upload) -> None:
            self._put(s3, upload, max((s for s in stored if s < upload.seq), default=None), ctx)

        await self._each(ctx, rest, put)
        self._remember(key, uploads[-1].seq)

    async def _each(
        self, ctx: OpContext, uploads: Sequence[Upload], work: Callable[[S3Client, Upload], object]
    ) -> None:
        """``work(s3, upload)`` for every upload, concurrently within the limiter; raise the worst failure."""
        failures: list[BaseException] = []

        async def one(upload: Upload) -> None:
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
            ctx, "archive append", lambda s3: list_groups(s3, self._config, key, after + 1, last - after)
        )
        return {listed_group.seq for listed_group in listed if listed_group.seq <= last}

    def _remember(self, key: SessionKey, seq: int) -> None:
        """Note that ``seq`` of ``key`` is archived: later groups of the session link to it."""
        if seq > self._known.get(key, -1):
            self._known[key] = seq
        self._known.move_to_end(key)
        while len(self._known) > _KNOWN_SESSIONS:
            self._known.popitem(last=False)

    def _put(self, s3: S3Client, upload: Upload, link: int | None, ctx: OpContext) -> bool:
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
            return put_once(s3, self._config, upload, link, ctx)

    # -- reads ----------------------------------------------------------------------------------

    def _check_marker(self, s3: S3Client, key: SessionKey, item: ListedGroup) -> None:
        """An empty object listed in the folder must be an erased group's marker (worker thread).

        Any other empty object is a group truncated or replaced outside the
        archive, which a read must not pass over as erased (the group would
        vanish from the history unnoticed, linked to or not): :mod:`.markers`.
        An exact one is noted as verified (:mod:`.marker_cache`).
        """
        head = head_marker(s3, self._config.bucket, item.key)
        if not head.exact:
            raise ArchiveCorruptError(
                f"{where(key, item.seq, item.key)} is empty but not an erased group's marker; it was "
                "truncated or replaced outside the archive, and the read stops here"
            )
        self._markers.note(item.key, item.etag, item.modified, head)

    def _decode(
        self, key: SessionKey, seq: int, object_key: str, data: bytes, stored: str | None
    ) -> MessageGroup:
        return decode_archived_group(key, seq, stored, data, lambda: where(key, seq, object_key))

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` whole, re-checked groups with ``seq >= start_seq``, ascending."""
        checked_ctx(ctx, "archive read").raise_if_expired("archive read")
        key, start_seq, limit = read_arguments(key, start_seq, max_groups)
        if limit == 0 or start_seq > MAX_SEQ:  # no key holds a seq past MAX_SEQ
            return []
        listed = await self._link.call(
            ctx, "archive read", lambda s3: list_groups(s3, self._config, key, max(0, start_seq), limit)
        )
        fetched: dict[int, tuple[MessageGroup, int | None]] = {}
        failures: list[BaseException] = []

        async def one(item: ListedGroup) -> None:
            seq, object_key = item.seq, item.key
            try:
                if item.erased:
                    # Every empty object met must be exactly an erasure's marker, linked to or not:
                    # one HEAD per erased group not verified before, none for an ordinary group.
                    if self._markers.known(object_key, item.etag, item.modified):
                        return
                    check = partial(self._check_marker, key=key, item=item)
                    await self._link.call(ctx, "archive read", check)
                    return
                data, stored, link = await self._link.call(
                    ctx, "archive read", lambda s3: get_group(s3, self._config, object_key)
                )
                fetched[seq] = (
                    self._decode(key, seq, object_key, data, stored),
                    parse_link(key, seq, object_key, link),
                )
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for item in listed:
                tg.start_soon(one, item)
        if failures:
            raise first_failure(failures)
        # An erased group's (checked) marker keeps its seq present: a group linked to it reads on.
        present = {item.seq for item in listed}
        for item in listed:
            seq, object_key = item.seq, item.key
            if item.erased:
                continue
            link = fetched[seq][1]
            if link is not None and link >= start_seq and link not in present:
                # The group was written after its writer had seen group ``link`` archived:
                # that group was deleted since. Skipping it would hand out the wrong history.
                raise ArchiveCorruptError(
                    f"s3 archive: group {link} of session {key.key()} is missing, yet "
                    f"{where(key, seq, object_key)} was archived after it; it was deleted outside the "
                    "archive (or partly forgotten), and the read stops here"
                )
        if listed:
            self._remember(key, listed[-1].seq)
        return [fetched[item.seq][0] for item in listed if not item.erased]

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
        checked_ctx(ctx, "archive erase")
        # Exactly a bool: a truthy or falsy stand-in (0, "no", None) must not pick real or dry for the caller.
        checked_argument(dry_run, bool, "dry_run", "archive erase")
        bound = check_max_items(max_items)
        ctx.raise_if_expired("archive erase")
        # Closed, refused at once: an append left running past aclose would hold the drain's wait up.
        self._link.refuse_if_closed("archive erase")
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
        key = checked_key(key, "forget session")
        bound = max(1, checked_count(max_objects, "max_objects", "forget session"))
        report = await self.erase(
            EraseTarget.session(key.tenant, key.user, key.session), ctx, max_items=bound
        )
        return ForgetReport(deleted=report.count("group"), complete=report.status is EraseStatus.COMPLETE)

    # -- health and lifecycle -------------------------------------------------------------------

    async def health(self, ctx: OpContext) -> str:
        """Bucket reachability, conditional-write support (a create-only probe object) and versioning."""
        return await run_probe(self._link, checked_ctx(ctx, "archive health"), "archive health")

    async def aclose(self) -> None:
        """Close the client this archive created; a lent client is left open. Idempotent."""
        await self._link.aclose()
