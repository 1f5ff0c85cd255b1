"""Erasure in the S3 session store: list a target's snapshots (every version), read, raise the floor, delete.

:meth:`~agentium_archive_s3.sessions.S3SessionStore.erase` fences the
scope's saves (:mod:`.erasure`) and then calls :func:`erase_snapshots`. Each
snapshot is read first (bounded), so the report names its resident groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import botocore.exceptions

from agentium_harness.plugin_api import (
    ErasedSession,
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    PhysicalErasure,
    SessionKey,
    SnapshotCorruptError,
    count_items,
    snapshot_erasure,
)

from .config import S3Config
from .erasure import Listed, ScopeObjects, delete_listed, list_scope, parse_folder, scope_folder
from .errors import S3ObjectTooLargeError, S3SessionStoreError
from .keys import session_object_key, sessions_root
from .link import S3Client, S3Link
from .revision_floor import raise_floor
from .snapshot_format import is_empty_range, is_missing, parse_snapshot, read_limit, revision_shown

__all__ = ["erase_snapshots"]


async def erase_snapshots(
    config: S3Config, link: S3Link, target: EraseTarget, bound: int, ctx: OpContext, *, dry_run: bool
) -> EraseReport:
    """List the target's snapshots (at most ``bound`` keys), read what each holds; delete unless ``dry_run``.

    The erasure behind :meth:`~agentium_archive_s3.sessions.S3SessionStore.erase`, which fences
    the scope's saves first.
    """
    root = sessions_root(config.prefix)
    bucket = config.bucket
    exact = target.session_key
    folder = scope_folder(root, target)
    only = session_object_key(config.prefix, exact) if exact is not None else None

    def listing(s3: S3Client) -> ScopeObjects:
        if only is not None:
            return list_scope(s3, bucket, only, bound, wanted=lambda object_key: object_key == only)
        return list_scope(s3, bucket, folder, bound)

    found = await link.call(ctx, "session store erase", listing)
    snapshots: list[tuple[Listed, SessionKey]] = []
    objects = revisions = 0
    for item in found.keys:
        revisions += len(item.older)
        key = _parse_session(root, item.key)
        if key is None or item.current is None:
            objects += 1
        else:
            snapshots.append((item, key))
    sessions = await _erased_snapshots(config, link, snapshots, ctx)
    if found.versions_note:
        physical, detail = PhysicalErasure.VERSIONS_KEPT, found.versions_note
    else:
        physical, detail = PhysicalErasure.REMOVED, ""
    if not dry_run:
        # Raised durably before anything is deleted (no transaction spans both): a crash in between
        # leaves it raised, which is safe. A damaged floor stops the erase here, nothing deleted.
        highest = max((revision for _, revision in sessions), default=0)
        if highest:
            await link.call(ctx, "session store erase", lambda s3: raise_floor(s3, config, highest, ctx))

        def failed(code: str, count: int) -> S3SessionStoreError:
            return S3SessionStoreError(
                f"s3 session store: erasing {target.describe()}: {count} deletion(s) failed ({code}); "
                "what was deleted stays deleted, call again",
                code=code,
            )

        def work(s3: S3Client) -> tuple[PhysicalErasure, str]:
            done = delete_listed(
                s3,
                bucket,
                found.keys,
                found.versioned,
                found.versions_note,
                lambda: ctx.raise_if_expired("session store erase"),
                failed,
            )
            return done.physical, done.detail

        physical, detail = await link.call(ctx, "session store erase", work)
    return EraseReport(
        count_items(snapshot=len(snapshots), object=objects, revision=revisions),
        [session for session, _ in sessions],
        EraseStatus.PARTIAL if found.more else EraseStatus.COMPLETE,
        physical,
        detail,
    )


async def _erased_snapshots(
    config: S3Config, link: S3Link, snapshots: Sequence[tuple[Listed, SessionKey]], ctx: OpContext
) -> list[tuple[ErasedSession, int]]:
    """What each snapshot holds (its resident groups' seqs and digests) and its revision, read concurrently.

    The revision of a damaged snapshot is the one its header shows, unverified (0 when none): the
    floor is raised to it all the same, since raising it too far only makes revisions skip ahead.
    """
    out: list[tuple[ErasedSession, int] | None] = [None] * len(snapshots)
    failures: list[BaseException] = []

    def read(s3: S3Client, item: Listed, key: SessionKey) -> tuple[ErasedSession, int]:
        args: dict[str, Any] = {"Bucket": config.bucket, "Key": item.key}
        if item.current:
            args["VersionId"] = item.current
        args["Range"] = f"bytes=0-{read_limit(config)}"
        try:
            reply = s3.get_object(**args)
        except botocore.exceptions.ClientError as exc:
            if is_missing(exc):
                return ErasedSession(key), 0  # deleted since the listing
            if is_empty_range(exc):
                return ErasedSession(key), 0  # an empty object: damaged, erased all the same
            raise
        with reply["Body"] as body:
            data = body.read(read_limit(config) + 1)
        try:
            revision, payload = parse_snapshot(config, key, data)
        except (SnapshotCorruptError, S3ObjectTooLargeError):
            # Damaged: erased all the same, its groups not vouched for.
            shown = revision_shown(data)
            return ErasedSession(key), int(shown) if shown.isdigit() else 0
        return snapshot_erasure(key, payload), revision

    async def one(index: int, item: Listed, key: SessionKey) -> None:
        try:
            out[index] = await link.call(ctx, "session store erase", lambda s3: read(s3, item, key))
        except Exception as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for index, (item, key) in enumerate(snapshots):
            tg.start_soon(one, index, item, key)
    if failures:
        raise failures[0]
    return [entry for entry in out if entry is not None]


def _parse_session(root: str, object_key: str) -> SessionKey | None:
    """The session of a snapshot's key below ``root``; ``None`` for any other key."""
    if not object_key.startswith(root) or not object_key.endswith(".json"):
        return None
    ids = parse_folder(object_key[len(root) : -len(".json")], 3)
    if ids is None:
        return None
    try:
        return SessionKey(*ids)
    except ValueError:
        return None
