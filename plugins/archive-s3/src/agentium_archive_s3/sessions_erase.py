"""Erasure in the S3 session store: list a target's snapshots (every version), read, raise the floor, delete.

:meth:`~agentium_archive_s3.sessions.S3SessionStore.erase` fences the
scope's saves (:mod:`.erasure`) and then calls :func:`erase_snapshots`. Each
snapshot is read first (bounded), so the report names its resident groups,
and replaced by a tombstone before it is deleted (:mod:`.sessions_tombstone`
says why), so a save landing from elsewhere meanwhile is covered by the
revision floor too. The requests of one call: the listing (with the
bucket's versioning), one ``GET`` per snapshot, the floor (a ``GET``, and a
``PUT`` when it rises), one ``PUT`` (the tombstone) per snapshot, and the
batched deletes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

import anyio

from agentium_harness.plugin_api import (
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    PhysicalErasure,
    SessionKey,
    count_items,
)

from .config import S3Config
from .erasure import Listed, ScopeObjects, delete_listed, list_scope, parse_folder, scope_folder
from .errors import S3SessionStoreError
from .keys import session_object_key, sessions_root
from .link import S3Client, S3Link
from .revision_floor import raise_floor
from .sessions_tombstone import IfMatchForm, Tombstoned, merged, read_found, tombstone

__all__ = ["erase_snapshots"]

T = TypeVar("T")


async def erase_snapshots(
    config: S3Config,
    link: S3Link,
    target: EraseTarget,
    bound: int,
    ctx: OpContext,
    *,
    dry_run: bool,
    quoted: bool = True,
) -> EraseReport:
    """List the target's snapshots (at most ``bound`` keys), read each; remove them unless ``dry_run``.

    The erasure behind :meth:`~agentium_archive_s3.sessions.S3SessionStore.erase`, which fences
    the scope's saves first. ``quoted``: the ``IfMatch`` form the store learned (Ceph RGW: unquoted).
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
    others: list[Listed] = []
    revisions = 0
    for item in found.keys:
        revisions += len(item.older)
        key = _parse_session(root, item.key)
        if key is None or item.current is None:
            others.append(item)
        else:
            snapshots.append((item, key))
    reads = await _each(
        link,
        ctx,
        [
            partial(read_found, config=config, object_key=i.key, key=k, version=i.current)
            for i, k in snapshots
        ],
    )
    if found.versions_note:
        physical, detail = PhysicalErasure.VERSIONS_KEPT, found.versions_note
    else:
        physical, detail = PhysicalErasure.REMOVED, ""
    sessions = [read.erased for read in reads]
    if not dry_run:
        # Raised durably before anything is replaced or deleted (no transaction spans both): a crash in
        # between leaves it raised, which is safe. A damaged floor stops the erase here, nothing changed.
        covered = max((read.revision for read in reads), default=0)
        if covered:
            covered = await link.call(
                ctx, "session store erase", lambda s3: raise_floor(s3, config, covered, ctx)
            )
        form = IfMatchForm(quoted)
        stood = await _each(
            link,
            ctx,
            [
                partial(
                    tombstone, config=config, object_key=i.key, first=r, covered=covered, form=form, ctx=ctx
                )
                for (i, _), r in zip(snapshots, reads, strict=True)
            ],
        )
        sessions = [merged(done.seen) for done in stood]
        doomed, etags, landed = await _to_delete(link, ctx, config, found, others, snapshots, stood)
        # Revisions saved after the listing (their keys re-listed) are erased too: the report counts them.
        revisions += landed

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
                doomed,
                found.versioned,
                found.versions_note,
                lambda: ctx.raise_if_expired("session store erase"),
                failed,
                etags=etags,
            )
            return done.physical, done.detail

        physical, detail = await link.call(ctx, "session store erase", work)
    return EraseReport(
        count_items(snapshot=len(snapshots), object=len(others), revision=revisions),
        sessions,
        EraseStatus.PARTIAL if found.more else EraseStatus.COMPLETE,
        physical,
        detail,
    )


async def _to_delete(
    link: S3Link,
    ctx: OpContext,
    config: S3Config,
    found: ScopeObjects,
    others: list[Listed],
    snapshots: Sequence[tuple[Listed, SessionKey]],
    stood: Sequence[Tombstoned],
) -> tuple[list[Listed], dict[str, str], int]:
    """What to delete, the ETag each plainly deleted tombstone must still have, and the versions that landed.

    A key whose tombstone stands: in a versioned bucket every version, the
    tombstone last (the key re-listed when a revision landed after the
    listing); otherwise the key, on the tombstone's ETag. A key found gone:
    its listed versions (by id), or nothing (without versions a plain delete
    could remove a session created there since). The count: versions a
    re-listing found that the first listing did not, but for the tombstone
    this erase wrote (saves, or delete markers, that landed meanwhile).
    """
    doomed = list(others)
    etags: dict[str, str] = {}
    landed = 0
    for (item, key), done in zip(snapshots, stood, strict=True):
        if done.refused:
            if not found.versioned:
                raise S3SessionStoreError(
                    f"s3 session store: erasing session {key.key()}: the server refused a conditional write "
                    "(IfMatch) on its snapshot although it had not changed, so it cannot be removed safely; "
                    "nothing of it was deleted",
                    code="IfMatchRefused",
                )
            # Ceph RGW 16 in a bucket that keeps versions: the listed versions, by id, are exactly what
            # was read and covered; a save landing meanwhile would stay, never deleted unseen.
            doomed.append(item)
            continue
        if not found.versioned:
            if done.etag is not None:
                doomed.append(item)
                etags[item.key] = done.etag
            continue
        if done.etag is None:
            doomed.append(item)
        elif done.changed or not done.version:
            relisted = await link.call(ctx, "session store erase", partial(_versions_of, config, item.key))
            doomed.extend(relisted.keys)
            # Not new: what was listed, and the tombstone standing there (this erase's, or one it found).
            known = {*item.older, item.current, done.version}
            new = sum(1 for v in relisted.keys for ver in (v.current, *v.older) if ver and ver not in known)
            # A tombstone written with no version id in the reply is among the new ones: not a revision.
            landed += max(new - 1, 0) if done.version is None else new
        else:
            # Nothing landed in between: the versions listed, and the tombstone now current.
            older = tuple(v for v in (*item.older, item.current) if v and v != done.version)
            doomed.append(Listed(item.key, done.version, item.size, older))
    return doomed, etags, landed


def _versions_of(config: S3Config, object_key: str, s3: S3Client) -> ScopeObjects:
    """Every version of one key, listed again (worker thread)."""
    return list_scope(s3, config.bucket, object_key, 1, wanted=lambda k: k == object_key, versions=True)


async def _each(link: S3Link, ctx: OpContext, works: Sequence[Callable[[S3Client], T]]) -> list[T]:
    """Run each ``work`` concurrently (within the link's limit): the results in order, or a failure."""
    out: list[T | None] = [None] * len(works)
    failures: list[BaseException] = []

    async def one(index: int, work: Callable[[S3Client], T]) -> None:
        try:
            out[index] = await link.call(ctx, "session store erase", work)
        except Exception as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for index, work in enumerate(works):
            tg.start_soon(one, index, work)
    if failures:
        raise failures[0]
    return [result for result in out if result is not None]  # every one ran: none is left None


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
