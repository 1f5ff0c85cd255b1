"""Erasure in the S3 archive: list a target's groups with every version, read their digests, delete.

:meth:`~agentium_archive_s3.archive.S3Archive.erase` fences the scope's
writes (:mod:`.erasure`) and then calls :func:`erase_archived`. A groups
target leaves an empty marker (metadata ``agentium-erased``) at each group's
key before deleting its versions, so later groups linked to it still read.
An empty object in a groups target's ranges must be exactly such a marker
(one ``HEAD`` each, :mod:`.markers`); any other fails the erasure with
``ArchiveCorruptError`` before it changes anything. A tenant, user or
session target removes every empty object of its folder, but counts as a
``marker`` only an exact one (the same ``HEAD``); any other is counted as
``damaged``, so the report never passes damage off as an erased group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import botocore.exceptions

from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    PhysicalErasure,
    SessionKey,
    count_items,
    group_sessions,
)

from .config import S3Config
from .erasure import Listed, delete_listed, list_scope, parse_folder, scope_folder
from .errors import S3ArchiveError, first_failure
from .keys import (
    DIGEST_META,
    ERASED_META,
    MAX_SEQ,
    STORED_DIGEST,
    archive_key,
    archive_prefix,
    archive_root,
    parse_archive_key,
)
from .link import S3Client, S3Link, error_status
from .markers import is_erasure_marker

__all__ = ["erase_archived"]


async def erase_archived(
    config: S3Config, link: S3Link, target: EraseTarget, bound: int, ctx: OpContext, *, dry_run: bool
) -> EraseReport:
    """List the target's objects (at most ``bound`` keys) and their digests; delete unless ``dry_run``.

    The erasure behind :meth:`~agentium_archive_s3.archive.S3Archive.erase`, which fences the
    scope's writes first.
    """
    root = archive_root(config.prefix)
    bucket = config.bucket

    def listing(s3: S3Client) -> tuple[list[Listed], bool, bool, str]:
        if not target.groups:
            folder = scope_folder(root, target)
            key = target.session_key
            if key is not None:
                folder = archive_prefix(config.prefix, key)
            found = list_scope(s3, bucket, folder, bound)
            return list(found.keys), found.more, found.versioned, found.versions_note
        return _list_ranges(config, s3, target, bound)

    listed, more, versioned, note = await link.call(ctx, "archive erase", listing)
    rows: list[tuple[SessionKey, int, str]] = []
    groups: list[tuple[Listed, SessionKey, int]] = []
    empty: list[Listed] = []
    markers = objects = revisions = 0
    for item in listed:
        where = _parse_group(root, item.key)
        revisions += len(item.older)
        if where is None or item.current is None:
            objects += 1
        elif item.size == 0:
            # A groups erase listed only exact markers (_erased_already); a whole-scope erase
            # removes every empty object, but counts as a marker only what is exactly one.
            empty.append(item)
        else:
            groups.append((item, *where))
    damaged = 0
    if target.groups:
        markers = len(empty)
    else:
        for exact in await _check_empty(config, link, empty, ctx):
            if exact is None:
                objects += 1  # gone since the listing: neither a marker nor damage was seen
            elif exact:
                markers += 1
            else:
                damaged += 1
    digests = await _digests(config, link, groups, ctx)
    for (_, key, seq), digest in zip(groups, digests, strict=True):
        rows.append((key, seq, digest))
    physical, detail = (PhysicalErasure.VERSIONS_KEPT, note) if note else (PhysicalErasure.REMOVED, "")
    if not dry_run:
        physical, detail = await _remove(config, link, target, listed, groups, versioned, note, ctx)
    if target.groups:
        # Markers left by a groups erasure stay (they are listed only when older versions remain).
        objects += markers
        markers = 0
    return EraseReport(
        count_items(group=len(groups), marker=markers, damaged=damaged, object=objects, revision=revisions),
        group_sessions(rows),
        EraseStatus.PARTIAL if more else EraseStatus.COMPLETE,
        physical,
        detail,
    )


def _list_ranges(
    config: S3Config, s3: S3Client, target: EraseTarget, bound: int
) -> tuple[list[Listed], bool, bool, str]:
    """The groups of a groups target: one listing per seq range (``StartAfter``), markers passed over."""
    key = target.session_key
    assert key is not None  # a groups target names its session
    folder = archive_prefix(config.prefix, key)
    found: list[Listed] = []
    versioned, note = False, ""
    for span in target.groups:
        after = archive_key(config.prefix, key, span.start - 1) if span.start > 0 else ""
        stop_at = min(span.stop, MAX_SEQ + 1)

        def past(object_key: str, stop_at: int = stop_at) -> bool:
            seq = parse_archive_key(folder, object_key)
            return seq is not None and seq >= stop_at

        page = list_scope(
            s3,
            config.bucket,
            folder,
            bound - len(found),
            start_after=after,
            stop=past,
            wanted=lambda object_key: parse_archive_key(folder, object_key) is not None,
            skip=lambda item: _erased_already(config, s3, target, key, item),
        )
        found.extend(page.keys)
        versioned, note = page.versioned, page.versions_note or note
        if page.more:
            return found, True, versioned, note
        if len(found) >= bound and span is not target.groups[-1]:
            return found, True, versioned, note
    return found, False, versioned, note


def _erased_already(
    config: S3Config, s3: S3Client, target: EraseTarget, key: SessionKey, item: Listed
) -> bool:
    """True for an exact marker with no earlier version left; damage in range fails the erasure.

    Each empty object is checked with one ``HEAD`` (of its current version)
    and must be exactly an erasure's marker (:mod:`.markers`). Any other is a
    group truncated or replaced outside the archive: the erasure stops while
    still listing, before it writes or deletes anything, and the object
    stays for someone to look at (see the README for why it is not
    overwritten with a marker).
    """
    if item.current is None or item.size != 0:
        return False
    try:
        exact = is_erasure_marker(s3, config.bucket, item.key, item.current)
    except botocore.exceptions.ClientError as exc:
        if error_status(exc) != 404:
            raise
        exact = True  # gone since the listing: nothing current there to erase or to check
    if not exact:
        seq = parse_archive_key(archive_prefix(config.prefix, key), item.key)
        raise ArchiveCorruptError(
            f"s3 archive: group {seq} of session {key.key()} at {item.key!r} is empty but not an "
            "erased group's marker; it was truncated or replaced outside the archive. The erasure of "
            f"{target.describe()} stopped before changing anything: restore the group, or erase the "
            "whole session (which removes every object of its folder), then call again"
        )
    return not item.older


async def _check_empty(
    config: S3Config, link: S3Link, empty: Sequence[Listed], ctx: OpContext
) -> list[bool | None]:
    """Whether each empty object of a whole-scope erase is an exact marker (a HEAD each, concurrently).

    The same check reads use (:mod:`.markers`). The object is removed either way; the answer only
    keeps the report truthful: damage (an empty object that is not exactly a marker) is counted as
    ``damaged``, never as an erased group's marker. ``None``: the object was gone by the HEAD.
    """
    found: list[bool | None] = [None] * len(empty)
    failures: list[BaseException] = []

    def head(s3: S3Client, item: Listed) -> bool | None:
        try:
            return is_erasure_marker(s3, config.bucket, item.key, item.current or "")
        except botocore.exceptions.ClientError as exc:
            if error_status(exc) == 404:
                return None
            raise

    async def one(index: int, item: Listed) -> None:
        try:
            found[index] = await link.call(ctx, "archive erase", lambda s3: head(s3, item))
        except Exception as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for index, item in enumerate(empty):
            tg.start_soon(one, index, item)
    if failures:
        raise first_failure(failures)
    return found


async def _digests(
    config: S3Config, link: S3Link, groups: Sequence[tuple[Listed, SessionKey, int]], ctx: OpContext
) -> list[str]:
    """The stored digest of each group (a HEAD each, concurrently within the limiter); ``""`` if none."""
    digests = [""] * len(groups)
    failures: list[BaseException] = []

    def head(s3: S3Client, item: Listed) -> str:
        args: dict[str, Any] = {"Bucket": config.bucket, "Key": item.key}
        if item.current:
            args["VersionId"] = item.current
        try:
            meta: dict[str, str] = s3.head_object(**args).get("Metadata", {})
        except botocore.exceptions.ClientError as exc:
            if error_status(exc) == 404:
                return ""  # deleted since the listing
            raise
        stored = meta.get(DIGEST_META, "")
        return stored if STORED_DIGEST.fullmatch(stored) else ""

    async def one(index: int, item: Listed) -> None:
        try:
            digests[index] = await link.call(ctx, "archive erase", lambda s3: head(s3, item))
        except Exception as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for index, (item, _, _) in enumerate(groups):
            tg.start_soon(one, index, item)
    if failures:
        raise first_failure(failures)
    return digests


async def _remove(
    config: S3Config,
    link: S3Link,
    target: EraseTarget,
    listed: Sequence[Listed],
    groups: Sequence[tuple[Listed, SessionKey, int]],
    versioned: bool,
    note: str,
    ctx: OpContext,
) -> tuple[PhysicalErasure, str]:
    """Delete what was listed; for a groups target, leave a marker at each group's key first."""
    bucket = config.bucket
    kept = listed
    if target.groups:
        # Once a group's marker is written, every listed version of its key is an earlier one;
        # a marker listed with earlier versions left keeps its current version.
        replaced = {item.key for item, _, _ in groups}
        kept = [
            Listed(
                item.key,
                None,
                0,
                (*item.older, item.current or "null") if item.key in replaced else item.older,
            )
            for item in listed
        ]

    def failed(code: str, count: int) -> S3ArchiveError:
        return S3ArchiveError(
            f"s3 archive: erasing {target.describe()}: {count} deletion(s) failed ({code}); what was "
            "deleted stays deleted, call again",
            code=code,
        )

    def work(s3: S3Client) -> tuple[PhysicalErasure, str]:
        for item, _, _ in groups if target.groups else ():
            ctx.raise_if_expired("archive erase")
            s3.put_object(Bucket=bucket, Key=item.key, Body=b"", Metadata={ERASED_META: "1"})
        if target.groups and not versioned:
            # The markers replaced the groups' bytes; nothing else to delete.
            return (PhysicalErasure.VERSIONS_KEPT, note) if note else (PhysicalErasure.REMOVED, "")
        done = delete_listed(
            s3, bucket, kept, versioned, note, lambda: ctx.raise_if_expired("archive erase"), failed
        )
        return done.physical, done.detail

    return await link.call(ctx, "archive erase", work)


def _parse_group(root: str, object_key: str) -> tuple[SessionKey, int] | None:
    """The session and seq of an archived group's key below ``root``; ``None`` for any other key."""
    if not object_key.startswith(root):
        return None
    folder, _, name = object_key[len(root) :].rpartition("/")
    ids = parse_folder(folder, 3)
    if ids is None:
        return None
    try:
        key = SessionKey(*ids)
    except ValueError:
        return None
    seq = parse_archive_key("", name)
    return None if seq is None else (key, seq)
