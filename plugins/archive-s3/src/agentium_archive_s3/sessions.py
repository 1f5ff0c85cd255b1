r"""The S3 session store: one snapshot object per session, compare-and-set through conditional writes.

The object's body is one header line naming the revision and the SHA-256 of
everything the revision vouches for, then the snapshot's canonical bytes
(:func:`~agentium_harness.plugin_api.snapshot_bytes`)::

    agentium-s3-snapshot/2 revision=7 sha256=<hex>\n{"boundary":...}

where ``<hex>`` is the SHA-256 of ``agentium-s3-snapshot/2 revision=7\n``
followed by the snapshot's bytes. The snapshot seals its own digest, but the
revision is the store's: inside this checksum, a flipped bit in it fails the
load closed instead of reporting one revision for two commits. Objects of
format 1 (``agentium-s3-snapshot/1 revision=7\n...``, no checksum) still load
and are written in format 2 at their next save.

Keeping the revision in the body makes every revision's ETag different, even
when a snapshot is saved again unchanged, so ``IfMatch=<etag>`` can never
match an older revision.

- **Create** (``expected_revision=None``): ``PutObject`` with ``IfNoneMatch="*"``,
  at one past the store's revision floor (:mod:`.revision_floor`: raised by
  every erase, so revisions of an erased session never repeat under its id),
  then moved past the floor if an erase in another process raised it
  meanwhile (:mod:`.sessions_create`).
- **Replace**: ``PutObject`` with ``IfMatch=<etag of expected_revision>``;
  the ETag comes from the last load or save of this instance, or a read of
  the object, then of the floor: a revision at or below it is refused, as
  it may be a session created again (:mod:`.sessions_create`).
- **Tombstone** (an erase's, until it deletes the key: :mod:`.sessions_tombstone`):
  read as no session; a save or create meeting it is a conflict.
- **412**: the object is read back. If it holds exactly the bytes sent, the
  write had landed and its acknowledgment was lost (success). If it is still
  the expected object, the server compares ``IfMatch`` against the other ETag
  form (Ceph RGW compares the unquoted ETag; AWS and moto the quoted one):
  the write is retried once in the other form, which is then kept. Anything
  else is a :class:`~agentium_harness.plugin_api.SessionConflictError`.
- **404** on ``IfMatch`` (AWS and moto, for a key that is gone; Ceph RGW answers
  412): ``SessionConflictError``, as for any session removed meanwhile.
- **409**: retried ``conflict_retries`` times, then a typed error.

The write and its read-backs are :mod:`.sessions_write`.

- **No answer, or a 5xx** (the write may have been stored): the session is
  read back. Our bytes: the write landed (success). Unchanged after a 5xx:
  the error says nothing was written. Unchanged after no answer at all: the
  same write is sent once more (equal bytes, same condition, so whichever
  copy lands the other finds it via 412). Another writer's next revision:
  ``SessionConflictError`` (compare-and-set: ours can no longer land).
  Anything else, or a read-back that fails too:
  :class:`~agentium_archive_s3.errors.S3SaveOutcomeUnknownError`.

A save whose snapshot is another session's (its memory scope, or a resident
group's retained scope, names other ids than the key) raises
:class:`~agentium_archive_s3.errors.S3ScopeMismatchError` before any request.

Loads are bounded by ``max_object_bytes``, decode strictly and verify the
snapshot's digest and the header's checksum; a damaged object raises
``SnapshotCorruptError`` and is left as it is. A load first waits (within
its deadline) for any save of the same session by this store still running
in a worker thread — one whose caller gave up at its deadline may still
land — so a read-back after a failed save sees where it landed; past its
deadline it raises ``OperationCancelledError`` rather than report the
state from before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseTarget,
    OpContext,
    OperationCancelledError,
    SessionKey,
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    check_max_items,
    check_snapshot_scope,
    check_target,
    checked_argument,
    checked_count,
    checked_ctx,
    decode_snapshot,
    snapshot_bytes,
    verify_snapshot,
)

from .config import S3Config
from .erasure import WriteFence, after_saves, drain_fenced_writes, request_bound
from .errors import (
    S3CreateUnsettledError,
    S3ObjectTooLargeError,
    S3ScopeMismatchError,
    S3SessionStoreError,
)
from .keys import key_too_long, parse_session_key, session_object_key, sessions_prefix
from .link import S3Client, S3Link
from .probe import run_probe
from .revision_floor import read_floor
from .sessions_create import settle_past_floor, unsettled
from .sessions_erase import erase_snapshots
from .sessions_write import SnapshotWrites
from .snapshot_format import (
    MAX_REVISION,
    TOMBSTONE,
    parse_snapshot,
    read_limit,
    snapshot_body,
)

__all__ = ["S3SessionStore"]


class S3SessionStore(SnapshotWrites, SessionStore):
    """Revisioned session snapshots on S3, saved with create-only and ``IfMatch`` conditional writes.

    Build it from :class:`~agentium_archive_s3.config.S3Config`, optionally
    lending it a boto3 S3 client (``client=``), which it then never closes.
    """

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True, durable=True, listing=True, health_check=True, erasure=True
    )

    def __init__(self, config: S3Config, *, client: S3Client | None = None) -> None:
        self._config = config
        self._link = S3Link(config, client, family=S3SessionStoreError, name="s3 session store")
        # The ETag of the last revision this instance loaded or saved, per session.
        self._etags: dict[SessionKey, tuple[int, str]] = {}
        # Whether IfMatch is sent quoted (AWS, moto) or unquoted (Ceph RGW); learned on a 412.
        self._quoted_if_match = True
        # Saves running in worker threads, per session: one its caller gave up on (a deadline)
        # may still land, so a load waits for it rather than report the state from before, and
        # an erase waits for it before it lists (docs: erasure.py).
        self._fence = WriteFence(self._link.unanswered, request_bound(config))

    @property
    def config(self) -> S3Config:
        """The options this store was built with."""
        return self._config

    @property
    def link(self) -> S3Link:
        """The client link (owned or lent client, limiter)."""
        return self._link

    # -- load -----------------------------------------------------------------------------------

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        """The snapshot and its revision, or ``None``; a damaged object raises ``SnapshotCorruptError``."""
        checked_ctx(ctx, "session load").raise_if_expired("session load")
        # Closed, refused at once: a save left running past aclose would hold the fence's wait up.
        self._link.refuse_if_closed("session load")
        await after_saves(self._fence, key, ctx)
        object_key = session_object_key(self._config.prefix, key)
        found = await self._link.call(
            ctx, "session load", lambda s3: self._read(s3, object_key, read_limit(self._config))
        )
        if found is None:
            self._etags.pop(key, None)
            return None
        data, etag = found
        revision, payload = parse_snapshot(self._config, key, data)
        snapshot = decode_snapshot(key, payload, f"s3 session store: snapshot of session {key.key()}")
        self._etags[key] = (revision, etag)
        return StoredSnapshot(snapshot=snapshot, revision=revision)

    # -- save -----------------------------------------------------------------------------------

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        """Compare-and-set: write only over ``expected_revision`` (``None``: only if absent); new revision."""
        checked_ctx(ctx, "session save").raise_if_expired("session save")
        verify_snapshot(key, snapshot)
        # Stored, another session's snapshot would only be refused by the engine's next load of the key.
        check_snapshot_scope(key, snapshot, "s3 session store", error=S3ScopeMismatchError)
        # Before any request: a str failed in the worker thread as a bare TypeError, and True
        # saved over revision 1 as if it were 1.
        if expected_revision is not None:
            checked_count(expected_revision, "expected_revision", "session save")
        data = snapshot_bytes(snapshot)
        if len(data) > self._config.max_object_bytes:
            raise S3ObjectTooLargeError(
                f"s3 session store: the snapshot of session {key.key()} is {len(data)} bytes, more than "
                f"max_object_bytes={self._config.max_object_bytes}; nothing was written",
                code="TooLarge",
            )
        object_key = session_object_key(self._config.prefix, key)
        if (too_long := key_too_long(object_key)) is not None:
            raise S3SessionStoreError(
                f"s3 session store: session {key.key()} cannot be saved: {too_long}; nothing was written",
                code="KeyTooLong",
            )
        cached = self._etags.get(key)
        known = cached[1] if cached is not None and cached[0] == expected_revision else None
        chosen: list[int] = []
        # What a create stored (revision, ETag), as it lands: the create has committed from then on.
        landed: list[tuple[int, str]] = []

        def write(s3: S3Client) -> str:
            if expected_revision is None:
                # A new session starts past the store's revision floor (revision_floor.py). Read here,
                # inside the save's fence (an erase of this store waits for it, or it is refused while
                # one runs), and never cached: an erase since, by any process, would be missed.
                revision = read_floor(s3, self._config)[0] + 1
            else:
                revision = expected_revision + 1
            if revision > MAX_REVISION:
                raise S3SessionStoreError(
                    f"s3 session store: session {key.key()} would be at revision {revision}, past the "
                    "highest its object's header can hold; nothing was written (the stored revision or "
                    "the revision floor was changed outside the store)"
                )
            chosen.append(revision)
            body = snapshot_body(revision, data)
            etag = self._write(s3, key, object_key, body, expected_revision, known, ctx)
            if expected_revision is not None:
                return etag
            landed.append((revision, etag))
            # An erasure in another process may have raised the floor between its read above and
            # this write: read it again and move past it (sessions_create.py says why that suffices).
            revision, etag = settle_past_floor(
                s3,
                self._config,
                key,
                data,
                (revision, etag),
                lambda moved, base, tag: self._write(s3, key, object_key, moved, base, tag, ctx),
                lambda moved_to, tag: landed.append((moved_to, tag)),
                lambda: ctx.raise_if_expired("session save"),
            )
            chosen.append(revision)
            return etag

        try:
            etag = await self._link.call(
                ctx, "session save", lambda s3: self._tracked(key, lambda: write(s3))
            )
        except OperationCancelledError as exc:
            if not landed:
                raise
            # The caller's deadline passed with the create stored and the floor check unfinished
            # (its worker thread may still move the session): the create's write landed all the same.
            self._etags[key] = landed[-1]
            raise unsettled(
                key, landed[-1][0], None, f"the save stopped ({exc.reason}) before it was settled"
            ) from None
        except S3CreateUnsettledError:
            # A cached ETag is an older object's, perhaps the erased session's at the very revision the
            # create landed on. Its own last write's replaces it: a save on the error's revision (at or
            # below the floor, so it could not read the header: _write) lands only over exactly that.
            if landed:  # (always: the error is only raised once the create landed)
                self._etags[key] = landed[-1]
            else:
                self._etags.pop(key, None)
            raise
        revision = chosen[-1]
        self._etags[key] = (revision, etag)
        return revision

    def _tracked(self, key: SessionKey, work: Callable[[], str]) -> str:
        """Run a save's ``work`` (worker thread), counted as in flight for ``key`` until it returns.

        Refused while an erase of this store covers ``key``.
        """

        def refuse(target: EraseTarget) -> S3SessionStoreError:
            return S3SessionStoreError(
                f"s3 session store: session {key.key()} was not saved: an erasure of {target.describe()} "
                "is running in this store; nothing was written",
                code="Erasing",
            )

        with self._fence.writing(key, lambda target: target.covers_session(key), refuse):
            return work()

    # -- listing, health, lifecycle -------------------------------------------------------------

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` session ids of one user after ``after`` (when given), sorted by code point.

        It reads the user's whole folder: at most ``max_listed_sessions``
        entries of it, snapshots or not (a subfolder is one entry), or it
        raises ``S3SessionStoreError`` (code ``TooMany``) and changes nothing;
        a page the server says is not the last, without a continuation
        token, is ``S3SessionStoreError`` (code ``ListingIncomplete``).
        """
        checked_ctx(ctx, "session listing").raise_if_expired("session listing")
        # Ids no key could hold are refused (InvalidIdError) before any request, not listed as empty.
        ids = SessionKey(tenant, user, "-" if after is None else after)
        limit = checked_count(limit, "limit", "session listing")
        if limit <= 0:
            return []
        folder = sessions_prefix(self._config.prefix, ids.tenant, ids.user)
        most = self._config.max_listed_sessions

        def work(s3: S3Client) -> list[str]:
            found: list[str] = []
            # Every entry counts, not only snapshots: objects put in the folder out of band (not named
            # like a snapshot) were paged through without end. A subfolder is one entry (Delimiter).
            examined = 0
            args: dict[str, Any] = {"Bucket": self._config.bucket, "Prefix": folder, "Delimiter": "/"}
            while True:
                ctx.raise_if_expired("session listing")
                # One past the bound at most: enough to tell the folder is over it.
                page = s3.list_objects_v2(**args, MaxKeys=min(1000, most + 1 - examined))
                items = page.get("Contents", [])
                examined += len(items) + len(page.get("CommonPrefixes", []))
                if examined > most:
                    raise S3SessionStoreError(
                        f"s3 session store: the folder of user {user!r} of tenant {tenant!r} holds more "
                        f"than max_listed_sessions={most} entries (snapshots, or objects put there outside "
                        "the store); nothing was listed or changed: raise the option, or remove what is "
                        "not a snapshot",
                        code="TooMany",
                    )
                for item in items:
                    session = parse_session_key(folder, item["Key"])
                    # An erasure's tombstone is skipped. Told by its size first; that size is read (rare:
                    # only a tombstone, or a damaged object, has it), so damage is listed, as load shows it.
                    if session is not None and not (
                        item.get("Size") == len(TOMBSTONE) and self._tombstone_at(s3, item["Key"])
                    ):
                        found.append(session)
                if not page.get("IsTruncated"):
                    return found
                token = page.get("NextContinuationToken")
                if not token:
                    # Read as the end, a listing the server says goes on was returned as whole.
                    raise S3SessionStoreError(
                        f"s3 session store: the listing of the folder of user {user!r} of tenant "
                        f"{tenant!r} goes on by the server's answer, which gave no continuation token "
                        "to read on with; nothing was listed or changed",
                        code="ListingIncomplete",
                    )
                args["ContinuationToken"] = token

        listed = sorted(await self._link.call(ctx, "session listing", work))
        return [s for s in listed if after is None or s > ids.session][:limit]

    def _tombstone_at(self, s3: S3Client, object_key: str) -> bool:
        """Whether ``object_key`` holds an erasure's tombstone, or nothing any more (worker thread)."""
        return self._read(s3, object_key, len(TOMBSTONE)) is None

    # -- erasure -------------------------------------------------------------------------------

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Delete the snapshots of every covered session with every version; at most ``max_items`` keys.

        A groups target removes nothing (snapshots are not archived groups).
        Each snapshot is read first (bounded), to report its resident groups.
        Saves of the scope this store still has in flight are waited for
        before listing, and new ones are refused until the call returns.
        """
        check_target(target)
        checked_ctx(ctx, "session store erase")
        # Exactly a bool: a truthy or falsy stand-in (0, "no", None) must not pick real or dry for the caller.
        checked_argument(dry_run, bool, "dry_run", "session store erase")
        bound = check_max_items(max_items)
        ctx.raise_if_expired("session store erase")
        # Closed, refused at once: a save left running past aclose would hold the drain's wait up.
        self._link.refuse_if_closed("session store erase")
        if target.groups:
            return EraseReport()
        if dry_run:
            return await erase_snapshots(self._config, self._link, target, bound, ctx, dry_run=True)
        with self._fence.erasing(target) as drain:
            await drain_fenced_writes(
                self._config, ctx, drain, target, "session store erase", S3SessionStoreError
            )
            for key in [k for k in self._etags if target.covers_session(k)]:
                del self._etags[key]
            return await erase_snapshots(
                self._config, self._link, target, bound, ctx, dry_run=False, quoted=self._quoted_if_match
            )

    async def health(self, ctx: OpContext) -> str:
        """Bucket reachability, conditional-write support (a create-only probe object) and versioning."""
        return await run_probe(self._link, checked_ctx(ctx, "session store health"), "session store health")

    async def aclose(self) -> None:
        """Close the client this store created; a lent client is left open. Idempotent."""
        await self._link.aclose()
