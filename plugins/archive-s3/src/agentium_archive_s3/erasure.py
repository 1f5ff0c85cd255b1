"""Erasure on S3: the write fence, and listing and deleting a scope's objects with every version.

**The fence.** An S3 request already sent cannot be recalled: an append or
save whose caller gave up at its deadline may still be running in a worker
thread and land later. Each adapter counts its writes in flight per session
(:class:`WriteFence`); an ``erase`` first registers its target — from then
on a write the target covers is refused before it is sent — then waits for
the covered writes already in flight to finish, and only then lists. So no
write of this adapter can land behind an erase of its scope.

A write's thread returning is not enough: an HTTP attempt that got no answer
(the SDK's read timeout, a connection dropped after sending) may have been
held on the way (a proxy, a load balancer, a busy server) and land after the
SDK retried it successfully or gave up. Such a write keeps its session in
flight for :func:`request_bound` more seconds after its thread returned
(``linger``): the time one request may take by the config's own timeouts;
an erase of its scope waits for that too. An attempt held longer than that
can still land late (README, Known limits).

**Listing.** The scope's objects are found by prefix: key segments are
injectively encoded and never hold ``/`` (:mod:`.keys`), so a tenant's,
user's or session's folder holds nothing of anyone else, and no listing
reaches another tenant. In a bucket that keeps versions (versioning enabled
or suspended), ``ListObjectVersions`` finds every version and delete marker.

**Deleting.** In a versioned bucket every version and delete marker of each
key is deleted by its version id, the current one last (a call stopped part
way never exposes an earlier version as current). Where the credentials may
not delete versions (``s3:DeleteObjectVersion``), or cannot read whether the
bucket keeps them, the keys are deleted plainly and the report says
``versions_kept``.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import attrs
import botocore.exceptions

from agentium_harness.plugin_api import (
    EraseTarget,
    OpContext,
    OperationCancelledError,
    PhysicalErasure,
    SessionKey,
    decode_segment,
    encode_segment,
)

from .link import S3Client, continuation, error_code, error_status

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

    from .config import S3Config
    from .errors import S3Error

__all__ = [
    "Listed",
    "ScopeObjects",
    "WriteFence",
    "after_saves",
    "delete_listed",
    "drain_fenced_writes",
    "list_scope",
    "owns",
    "parse_folder",
    "request_bound",
]

_PAGE: Final = 1000
_DENIED: Final = frozenset({"AccessDenied", "AllAccessDisabled", "403"})
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_%-]+")
#: Errors of a conditional delete that mean its object is not there any more (erasure.delete_listed).
_LEFT_ALONE: Final = frozenset({"PreconditionFailed", "NoSuchKey"})


def owns(target: EraseTarget, key: SessionKey) -> bool:
    """True if ``key`` lies within the target's tenant, user and session (its groups ranges aside)."""
    return (
        key.tenant == target.tenant_id
        and (target.user_id is None or key.user == target.user_id)
        and (target.session_id is None or key.session == target.session_id)
    )


def request_bound(config: S3Config) -> float:
    """The longest one request may take by ``config``: every attempt's connect and read timeouts."""
    return (config.connect_timeout_s + config.read_timeout_s) * config.max_attempts


class WriteFence:
    """Writes in flight per session, and the erasures running, of one adapter (thread-safe).

    ``unanswered`` counts, for the calling worker thread, the HTTP attempts that
    got no answer (:meth:`.link.S3Link.unanswered`); a write during which it
    grew stays in flight ``linger`` seconds after its thread returned.
    """

    def __init__(self, unanswered: Callable[[], int] = lambda: 0, linger: float = 0.0) -> None:
        self._cond = threading.Condition()
        self._writing: dict[SessionKey, int] = {}
        self._erasing: list[EraseTarget] = []
        self._unanswered = unanswered
        self._linger = linger
        #: Until when (``time.monotonic()``) a write of the key that lost an answer may still land.
        self._lingering: dict[SessionKey, float] = {}

    def _in_flight(self, key: SessionKey) -> bool:
        """Caller holds ``_cond``."""
        if key in self._writing:
            return True
        until = self._lingering.get(key)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self._lingering[key]
        return False

    def busy(self, key: SessionKey) -> bool:
        """True while a write of ``key`` is running in its thread (what a load waits for).

        Not while one that lost an answer may still land: that is for an erase
        (``drain``); a load would wait out a whole request's bound after every
        dropped connection, and a save settles its own lost answers.
        """
        return key in self._writing

    @contextlib.contextmanager
    def writing(
        self,
        key: SessionKey,
        covered: Callable[[EraseTarget], bool],
        refuse: Callable[[EraseTarget], Exception],
    ) -> Iterator[None]:
        """Count a write of ``key`` in flight; refused (``refuse(target)``) while an erasure covers it."""
        with self._cond:
            for target in self._erasing:
                if covered(target):
                    raise refuse(target)
            self._writing[key] = self._writing.get(key, 0) + 1
        sent = self._unanswered()
        try:
            yield
        finally:
            with self._cond:
                now = time.monotonic()
                # Bounded: an entry goes once its time has passed (few sessions lose an answer).
                for done in [k for k, until in self._lingering.items() if until <= now]:
                    del self._lingering[done]
                if self._unanswered() > sent:
                    # An attempt of this write went unanswered: it may still be on its way.
                    until = now + self._linger
                    self._lingering[key] = max(until, self._lingering.get(key, until))
                left = self._writing[key] - 1
                if left:
                    self._writing[key] = left
                else:
                    del self._writing[key]
                self._cond.notify_all()

    @contextlib.contextmanager
    def erasing(self, target: EraseTarget) -> Iterator[Callable[[float], bool]]:
        """Refuse writes ``target`` covers while the block runs; yields ``drain(timeout_s)``.

        ``drain`` (worker thread) waits until no write of the target's scope is
        in flight; False when some still were at the timeout.
        """
        with self._cond:
            self._erasing.append(target)

        def drain(timeout_s: float) -> bool:
            end = time.monotonic() + max(0.0, timeout_s)
            with self._cond:
                while True:
                    keys = [*self._writing, *self._lingering]
                    if not any(owns(target, key) and self._in_flight(key) for key in keys):
                        return True
                    left = end - time.monotonic()
                    if left <= 0:
                        return False
                    # A lingering write ends with no notification: wake to look again.
                    self._cond.wait(min(left, 0.05))

        try:
            yield drain
        finally:
            with self._cond:
                self._erasing.remove(target)


async def after_saves(fence: WriteFence, key: SessionKey, ctx: OpContext) -> None:
    """Wait, within ``ctx``, until no save of ``key`` that ``fence`` counts is still running (loads)."""
    if not fence.busy(key):
        return
    left = ctx.time_left()
    with anyio.move_on_after(math.inf if left is None else left):
        # Polled: the writer is a worker thread the caller may have abandoned, with no
        # event loop of its own to signal; this only runs while such a save is in flight.
        while fence.busy(key) and not ctx.expired:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    if fence.busy(key):
        raise OperationCancelledError(
            f"session load of {key.key()} stopped: a save of it by this store was still in flight "
            "(its caller had given up), so what the session holds is not known yet; load it again later",
            ctx.signal.reason or "deadline passed",
        )


# -- listing --------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Listed:
    """One key of a scope: its current object (if any) and every version to delete.

    ``current`` is the version id of the current object (``""`` in a bucket
    without versions), or ``None`` when the key shows no object (its latest
    version is a delete marker). ``size`` is the current object's size.
    ``older`` are the other versions and delete markers (versioned buckets).
    """

    key: str
    current: str | None
    size: int
    older: tuple[str, ...] = ()


@attrs.frozen(slots=True)
class ScopeObjects:
    """What one listing found: up to ``limit`` keys, whether more are left, and how versions stand."""

    keys: tuple[Listed, ...]
    more: bool
    #: True: every version was listed (and is deleted by id); False: only current objects.
    versioned: bool
    #: Why versions may be left behind (``""`` when none can be).
    versions_note: str


def _denied(exc: BaseException) -> bool:
    return isinstance(exc, botocore.exceptions.ClientError) and (
        error_code(exc) in _DENIED or error_status(exc) == 403
    )


def _versioning(s3: S3Client, bucket: str) -> bool | None:
    """True if the bucket keeps (or kept) versions, False if never; ``None`` when not allowed to ask."""
    try:
        status = s3.get_bucket_versioning(Bucket=bucket).get("Status")
    except botocore.exceptions.ClientError as exc:
        if _denied(exc):
            return None
        raise
    return status in ("Enabled", "Suspended")


Wanted = Callable[[str], bool]
Stop = Callable[[str], bool]
Skip = Callable[[Listed], bool]


def list_scope(
    s3: S3Client,
    bucket: str,
    prefix: str,
    limit: int,
    *,
    start_after: str = "",
    stop: Stop = lambda _: False,
    wanted: Wanted = lambda _: True,
    skip: Skip = lambda _: False,
    versions: bool | None = None,
) -> ScopeObjects:
    """Up to ``limit`` keys below ``prefix`` after ``start_after``, ascending, before the first ``stop`` key.

    Keys ``wanted`` rejects, and listed keys ``skip`` rejects (nothing left
    to delete), are passed over. ``versions`` is what the bucket's
    versioning is already known to be (``None``: asked here). Worker thread.
    """
    keeps = _versioning(s3, bucket) if versions is None else versions
    if keeps is False:
        return _current_only(s3, bucket, prefix, limit, start_after, stop, wanted, skip, "")
    try:
        return _every_version(s3, bucket, prefix, limit, start_after, stop, wanted, skip)
    except botocore.exceptions.ClientError as exc:
        if not _denied(exc):
            raise
        note = (
            "the credentials may not list object versions (s3:ListBucketVersions); if the bucket keeps "
            "versions, earlier versions of the erased objects stay in it"
        )
        return _current_only(s3, bucket, prefix, limit, start_after, stop, wanted, skip, note)


def _current_only(
    s3: S3Client,
    bucket: str,
    prefix: str,
    limit: int,
    start_after: str,
    stop: Stop,
    wanted: Wanted,
    skip: Skip,
    note: str,
) -> ScopeObjects:
    found: list[Listed] = []
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": _PAGE}
    if start_after:
        args["StartAfter"] = start_after
    while True:
        page = s3.list_objects_v2(**args)
        for item in page.get("Contents", []):
            key = item["Key"]
            if stop(key):
                return ScopeObjects(tuple(found), False, False, note)
            listed = Listed(key, "", int(item.get("Size", 0)))
            if not wanted(key) or skip(listed):
                continue
            if len(found) == limit:
                return ScopeObjects(tuple(found), True, False, note)
            found.append(listed)
        token = continuation(page, "NextContinuationToken", f"s3 listing of {prefix!r}")
        if token is None:
            return ScopeObjects(tuple(found), False, False, note)
        args["ContinuationToken"] = token


class _Versions:
    """Versions of one key gathered over listing pages (the current one, and the others)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.current: str | None = None
        self.size = 0
        self.older: list[str] = []

    def listed(self) -> Listed:
        return Listed(self.key, self.current, self.size, tuple(self.older))


def _every_version(
    s3: S3Client,
    bucket: str,
    prefix: str,
    limit: int,
    start_after: str,
    stop: Stop,
    wanted: Wanted,
    skip: Skip,
) -> ScopeObjects:
    found: list[Listed] = []
    # The key being gathered: its versions may continue on the next page.
    pending: _Versions | None = None

    def finish() -> bool:
        """Add the pending key (unless skipped); True once a key beyond ``limit`` was seen."""
        if pending is not None:
            listed = pending.listed()
            if not skip(listed):
                found.append(listed)
        return len(found) > limit

    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": _PAGE}
    if start_after:
        args["KeyMarker"] = start_after
    while True:
        page = s3.list_object_versions(**args)
        entries = [(v, False) for v in page.get("Versions", [])] + [
            (m, True) for m in page.get("DeleteMarkers", [])
        ]
        entries.sort(key=lambda e: str(e[0].get("Key", "")))
        for item, is_marker in entries:
            key = str(item.get("Key", ""))
            if stop(key):
                finish()
                return _versioned(found, limit)
            if key <= start_after or not wanted(key):
                # (Ceph RGW lists the KeyMarker key itself; S3 starts after it.)
                continue
            if pending is None or pending.key != key:
                if finish():
                    return _versioned(found, limit)
                pending = _Versions(key)
            version = str(item.get("VersionId") or "null")
            if item.get("IsLatest") and not is_marker:
                pending.current, pending.size = version, int(item.get("Size", 0))  # type: ignore[call-overload]
            else:
                pending.older.append(version)
        key_marker = continuation(page, "NextKeyMarker", f"s3 listing of the versions below {prefix!r}")
        version_marker = page.get("NextVersionIdMarker")
        if key_marker is None:
            finish()
            return _versioned(found, limit)
        args["KeyMarker"] = key_marker
        if version_marker:
            args["VersionIdMarker"] = version_marker
        else:
            args.pop("VersionIdMarker", None)


def _versioned(found: list[Listed], limit: int) -> ScopeObjects:
    # A key beyond ``limit`` only tells that more are left; every key before it was listed whole.
    return ScopeObjects(tuple(found[:limit]), len(found) > limit, True, "")


def parse_folder(rest: str, parts: int) -> tuple[str, ...] | None:
    """``rest`` split into ``parts`` ``/``-separated segments, each decoded; ``None`` if it is not one."""
    pieces = rest.split("/")
    if len(pieces) != parts or not all(_SEGMENT.fullmatch(p) for p in pieces):
        return None
    try:
        return tuple(decode_segment(p) for p in pieces)
    except ValueError:
        return None


def scope_folder(root: str, target: EraseTarget) -> str:
    """The folder below ``root`` (ending in ``/``) holding the target's tenant, user or session."""
    folder = f"{root}{encode_segment(target.tenant_id)}/"
    if target.user_id is not None:
        folder += f"{encode_segment(target.user_id)}/"
    return folder


# -- deleting -------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Deleted:
    """What :func:`delete_listed` did: how physical it was, and what it says about what is left."""

    physical: PhysicalErasure
    detail: str


def delete_listed(
    s3: S3Client,
    bucket: str,
    listed: Sequence[Listed],
    versioned: bool,
    note: str,
    check: Callable[[], None],
    failed: Callable[[str, int], Exception],
    *,
    etags: Mapping[str, str] | None = None,
) -> Deleted:
    """Delete every listed version (current ones last), or the keys plainly (worker thread).

    ``check`` runs before every request (the deadline); ``failed(code,
    count)`` builds the error for deletions the server refused. A key with
    an entry in ``etags`` (unquoted) is deleted plainly only while it holds
    that object (a conditional delete: AWS and moto honour it, Ceph RGW 16
    ignores it); one that no longer does, or is gone, is left as it is.
    """
    conditions = etags or {}

    def plain(key: str) -> ObjectIdentifierTypeDef:
        etag = conditions.get(key)
        return {"Key": key} if etag is None else {"Key": key, "ETag": f'"{etag}"'}

    if not versioned:
        _delete_batches(s3, bucket, [plain(item.key) for item in listed], check, failed, conditions)
        if note:
            return Deleted(PhysicalErasure.VERSIONS_KEPT, note)
        return Deleted(PhysicalErasure.REMOVED, "")
    older: list[ObjectIdentifierTypeDef] = [
        {"Key": item.key, "VersionId": version} for item in listed for version in item.older
    ]
    current: list[ObjectIdentifierTypeDef] = [
        {"Key": item.key, "VersionId": item.current} for item in listed if item.current is not None
    ]
    try:
        _delete_batches(s3, bucket, older, check, failed)
        _delete_batches(s3, bucket, current, check, failed)
    except _VersionsDenied:
        # Not allowed to delete versions: delete the keys (delete markers hide them from reads).
        _delete_batches(
            s3,
            bucket,
            [plain(item.key) for item in listed if item.current is not None],
            check,
            failed,
            conditions,
        )
        return Deleted(
            PhysicalErasure.VERSIONS_KEPT,
            "the credentials may not delete object versions (s3:DeleteObjectVersion): the objects are "
            "deleted, and their earlier versions stay in the bucket",
        )
    return Deleted(PhysicalErasure.REMOVED, "")


class _VersionsDenied(Exception):
    pass


def _delete_batches(
    s3: S3Client,
    bucket: str,
    objects: Sequence[ObjectIdentifierTypeDef],
    check: Callable[[], None],
    failed: Callable[[str, int], Exception],
    conditions: Mapping[str, str] | None = None,
) -> None:
    for start in range(0, len(objects), _PAGE):
        batch = list(objects[start : start + _PAGE])
        check()
        reply = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        # A conditional delete refused, or of a key gone: the object it was meant for is gone already.
        errors = [
            e
            for e in reply.get("Errors", [])
            if not (conditions and e.get("Key") in conditions and e.get("Code") in _LEFT_ALONE)
        ]
        if not errors:
            continue
        code = str(errors[0].get("Code", ""))
        if code in _DENIED and any("VersionId" in item for item in batch):
            raise _VersionsDenied
        raise failed(code, len(errors))


async def drain_fenced_writes(
    config: S3Config,
    ctx: OpContext,
    drain: Callable[[float], bool],
    target: EraseTarget,
    operation: str,
    family: type[S3Error],
) -> None:
    """Wait (in a worker thread, outside the limiter) for the writes of ``target`` still in flight.

    At most half the time ``ctx`` has left, or as long as one request can
    take; writes still running then fail the erase before it removes anything.
    """
    longest = request_bound(config)
    left = ctx.time_left()
    wait = longest if left is None else min(longest, left / 2)
    if await anyio.to_thread.run_sync(drain, wait, abandon_on_cancel=True):
        return
    raise family(
        f"{operation} of {target.describe()} stopped before removing anything: a write of that scope by "
        f"this adapter was still in flight after {wait:.1f}s (a caller gave up on it, and the request may "
        "still land); call again once it has finished",
        code="WritesInFlight",
    )
