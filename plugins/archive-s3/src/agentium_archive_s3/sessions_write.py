"""The S3 session store's conditional write: one snapshot ``PutObject``, and what its failures mean.

The write half of :class:`~agentium_archive_s3.sessions.S3SessionStore`
(see :mod:`.sessions` for the protocol): :meth:`SnapshotWrites._write` sends
the create-only or ``IfMatch`` write, retries 409s, flips the ``IfMatch``
ETag form a server wants, and on a lost or failed answer reads the session
back (:meth:`SnapshotWrites._settle`) to report truthfully whether it landed.
"""

from __future__ import annotations

import io
from typing import Final

import botocore.exceptions

from agentium_harness import AgentiumError
from agentium_harness.plugin_api import (
    OpContext,
    OperationCancelledError,
    SessionConflictError,
    SessionKey,
    one_line,
)

from .checksums import DIGEST_CODES, Checksums
from .config import S3Config
from .errors import (
    S3ConflictRetriesExhaustedError,
    S3Error,
    S3SaveOutcomeUnknownError,
    S3SessionStoreError,
)
from .link import S3Client, S3Link, conflict_backoff, error_code, error_status, unquote_etag
from .observe import SAVE_RESENT, SAVE_SETTLED, SAVE_UNKNOWN, degraded, logger
from .revision_floor import read_floor
from .sessions_create import ERASING, below_floor
from .snapshot_format import (
    is_empty_range,
    is_missing,
    is_tombstone,
    parse_snapshot,
    read_limit,
    revision_shown,
)

__all__ = ["SnapshotWrites", "logger"]


def _shown_code(cause: S3Error) -> str:
    """The failure's S3 error code for a log line, escaped: the server chose it and could forge a line."""
    return one_line(cause.code or type(cause).__name__)


_CONFLICT_CODES: Final = frozenset({"ConditionalRequestConflict", "OperationAborted", "409"})
#: Failures with no answer from the server: the request may have been stored, or may still be.
_NO_REPLY: Final = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ResponseStreamingError,
)


def _is_412(exc: botocore.exceptions.ClientError) -> bool:
    return error_code(exc) == "PreconditionFailed" or error_status(exc) == 412


class SnapshotWrites:
    """The conditional write and its read-backs: the save half of :class:`.sessions.S3SessionStore`.

    Uses the store's options, its link and the ``IfMatch`` ETag form it learned.
    """

    _config: S3Config
    _link: S3Link
    # Whether IfMatch is sent quoted (AWS, moto) or unquoted (Ceph RGW); learned on a 412.
    _quoted_if_match: bool

    def _read(self, s3: S3Client, object_key: str, limit: int) -> tuple[bytes, str] | None:
        """Up to ``limit`` bytes (plus one) and the ETag; ``None``: absent, or a tombstone (worker thread)."""
        try:
            reply = s3.get_object(Bucket=self._config.bucket, Key=object_key, Range=f"bytes=0-{limit}")
        except botocore.exceptions.ClientError as exc:
            if is_missing(exc):
                return None
            if is_empty_range(exc):
                return b"", ""  # an empty object: damaged, reported by the parse
            raise
        with reply["Body"] as body:
            data = body.read(limit + 1)
        return None if is_tombstone(data) else (data, unquote_etag(str(reply.get("ETag", ""))))

    def _conflict(self, key: SessionKey, expected: int | None, detail: str) -> SessionConflictError:
        wanted = "no snapshot" if expected is None else f"revision {expected}"
        return SessionConflictError(
            f"s3 session store: session {key.key()} expected {wanted} but {detail}; nothing was written"
        )

    def _write(
        self,
        s3: S3Client,
        key: SessionKey,
        object_key: str,
        body: bytes,
        expected: int | None,
        known_etag: str | None,
        ctx: OpContext,
    ) -> str:
        """The conditional write (worker thread); returns the new object's ETag (unquoted)."""
        condition: dict[str, str]
        if expected is None:
            condition = {"IfNoneMatch": "*"}
        else:
            etag = known_etag
            if etag is None:
                # The whole object: its revision is only trusted with its checksum verified.
                head = self._read(s3, object_key, read_limit(self._config))
                if head is None:
                    raise self._conflict(key, expected, "the session does not exist")
                stored, _ = parse_snapshot(self._config, key, head[0])
                if stored != expected:
                    raise self._conflict(key, expected, f"it is at revision {stored}")
                # Read after the header: a revision at or below the floor may be a new session's, created
                # after an erasure and not yet moved past the floor (sessions_create.py), not this caller's.
                if expected <= (floor := read_floor(s3, self._config)[0]):
                    raise self._conflict(key, expected, below_floor(expected, floor))
                etag = head[1]
            condition = {"IfMatch": self._if_match(etag)}
        flipped = False
        conflicts = 0
        damaged = 0
        resent = False
        # As the archive's uploads: a server that checks refuses bytes damaged on the way, and the
        # ETag (a single-part object's MD5) tells when one that does not check stored them.
        sums = Checksums(body)
        while True:
            ctx.raise_if_expired("session save")
            try:
                reply = s3.put_object(
                    Bucket=self._config.bucket,
                    Key=object_key,
                    # A stream: botocore sends Expect: 100-continue, so a refused condition
                    # (412) is answered before a large snapshot is uploaded in vain.
                    Body=io.BytesIO(body),
                    ContentType="text/plain; charset=utf-8",
                    **sums.args,  # type: ignore[arg-type]
                    **condition,  # type: ignore[arg-type]
                )
                etag = unquote_etag(str(reply.get("ETag", "")))
                if not sums.stored_other_bytes(etag, self._config.etag_is_md5):
                    return etag
                # The server stored other bytes than those sent (it checked neither checksum): the
                # object is ours (its condition held), so ours are written over it, conditioned on
                # its ETag. Acknowledged, it would fail every load and save of the session.
                damaged = self._damaged(key, damaged)
                condition = {"IfMatch": self._if_match(etag)}
                continue
            except botocore.exceptions.ClientError as exc:
                code, status = error_code(exc), error_status(exc)
                if code in DIGEST_CODES:
                    # Refused on arrival: nothing was written; the same write is sent again.
                    damaged = self._damaged(key, damaged)
                    continue
                if code in _CONFLICT_CODES or status == 409:
                    conflicts += 1
                    if conflicts > self._config.conflict_retries:
                        raise S3ConflictRetriesExhaustedError(
                            f"s3 session store: saving session {key.key()} kept answering 409 ({code}) "
                            f"after {conflicts} attempts; nothing was acknowledged",
                            code=code,
                            status=status,
                        ) from None
                    conflict_backoff(ctx, conflicts)
                    continue
                if not _is_412(exc):
                    if expected is not None and is_missing(exc):
                        # IfMatch on a key that is gone: AWS and moto answer 404, Ceph RGW 412 (below).
                        raise self._conflict(key, expected, "the session was removed") from None
                    if status is None or status >= 500:
                        # The server answered a failure, perhaps after storing the body.
                        return self._settle(
                            s3, key, object_key, body, expected, condition, exc, answered=True
                        )
                    raise
            except OperationCancelledError as exc:
                # Stopped before an SDK retry was sent: an earlier attempt may still land.
                raise OperationCancelledError(
                    f"session save of {key.key()} stopped ({exc.reason}); a request already sent may still "
                    "land: load the session to see its revision",
                    exc.reason,
                ) from None
            except _NO_REPLY as exc:
                if resent:
                    return self._settle(s3, key, object_key, body, expected, condition, exc, answered=False)
                # No answer at all: the write may have landed, or may still. Read back; if the
                # session is unchanged, send the same write again (equal bytes, same condition:
                # whichever copy lands, the other gets 412 and finds our bytes).
                landed = self._settle(s3, key, object_key, body, expected, condition, exc, answered=None)
                if landed:
                    return landed
                degraded(
                    SAVE_RESENT,
                    {"agentium.s3.reason": "reply_lost"},
                    "session save: a reply was lost, the session is unchanged; sending it again",
                )
                resent = True
                continue
            # 412: decide from what the object holds now.
            current = self._read(s3, object_key, read_limit(self._config))
            if current is not None and current[0] == body:
                degraded(
                    SAVE_SETTLED,
                    {"agentium.s3.outcome": "landed", "error.type": "PreconditionFailed"},
                    "session save: a reply was lost; the read-back shows the write landed",
                )
                return current[1]  # our write landed; its acknowledgment was lost
            if current is None:
                gone = ERASING if expected is None else "the session was removed"
                raise self._conflict(key, expected, gone)
            if expected is None and "IfMatch" not in condition:
                raise self._conflict(key, expected, "the session already exists")
            if not flipped and "IfMatch" in condition and current[1] == unquote_etag(condition["IfMatch"]):
                # Unchanged object, refused precondition: the server wants the other ETag form.
                flipped = True
                # The other form than the one this attempt sent (not a toggle of the shared flag:
                # saves of other sessions, on other threads or loops, may be flipping it too).
                self._quoted_if_match = not condition["IfMatch"].startswith('"')
                condition = {"IfMatch": self._if_match(current[1])}
                continue
            now = revision_shown(current[0])
            raise self._conflict(key, expected, f"another writer saved it first (now revision {now})")

    def _damaged(self, key: SessionKey, damaged: int) -> int:
        """One more upload of ``key`` that reached the server damaged; past ``conflict_retries``, give up."""
        damaged += 1
        if damaged > self._config.conflict_retries:
            raise S3SessionStoreError(
                f"s3 session store: saving session {key.key()} reached the server damaged {damaged} times "
                "(its checksum or ETag did not match the bytes sent); nothing was acknowledged: load the "
                "session before retrying (a server that checks no checksum may hold the damaged bytes)",
                code="BadDigest",
            )
        degraded(
            SAVE_RESENT,
            {"agentium.s3.reason": "damaged"},
            "session save: the upload reached the server damaged (checksum or ETag); sent again",
        )
        return damaged

    def _settle(
        self,
        s3: S3Client,
        key: SessionKey,
        object_key: str,
        body: bytes,
        expected: int | None,
        condition: dict[str, str],
        exc: Exception,
        *,
        answered: bool | None,
    ) -> str:
        """A write that may have reached the server failed: read the session back and decide (worker thread).

        Returns the ETag when our bytes are stored (the write landed). When the
        session is unchanged: with ``answered=None`` returns ``""`` (the caller
        sends the write again); with ``answered=True`` (the server answered the
        failure) raises the failure, saying nothing was written. Raises
        ``SessionConflictError`` when another writer's next revision is stored
        (compare-and-set: then ours cannot land), and
        :class:`S3SaveOutcomeUnknownError` when nothing else can be told.
        """
        cause = exc if isinstance(exc, S3Error) else self._link.translate("session save", exc)
        where = f"s3 session store: saving session {key.key()}"
        try:
            current = self._read(s3, object_key, read_limit(self._config))
        except (AgentiumError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as failed:
            degraded(
                SAVE_UNKNOWN,
                {"agentium.s3.read_back": "failed", "error.type": _shown_code(cause)},
                "session save failed (%s) and the read-back failed too (%s): outcome unknown",
                _shown_code(cause),
                one_line(type(failed).__name__),
                extra={"agentium_s3_code": one_line(cause.code), "agentium_http_status": cause.status},
            )
            raise S3SaveOutcomeUnknownError(
                f"{where} failed ({cause}) and reading it back failed too ({type(failed).__name__}"
                f"{' ' + error_code(failed) if error_code(failed) else ''}): the write may have landed; "
                "load the session before retrying (its revision tells whether it did)",
                code=cause.code,
                status=cause.status,
            ) from None
        if current is not None and current[0] == body:
            degraded(
                SAVE_SETTLED,
                {"agentium.s3.outcome": "landed", "error.type": _shown_code(cause)},
                "session save failed (%s) but the read-back shows it landed",
                _shown_code(cause),
                extra={"agentium_s3_code": one_line(cause.code), "agentium_http_status": cause.status},
            )
            return current[1]  # it landed
        if expected is None:
            unchanged = current is None
        else:
            unchanged = current is not None and current[1] == unquote_etag(condition["IfMatch"])
        if unchanged and answered is None:
            return ""
        if unchanged and answered:
            state = "absent" if expected is None else f"at revision {expected}"
            raise type(cause)(
                f"{cause}; nothing was written (read back after the failure: the session is still {state})",
                code=cause.code,
                status=cause.status,
            ) from None
        next_revision = revision_shown(body)  # ours: another writer's save of the same base has it too
        if current is not None and revision_shown(current[0]) == next_revision:
            raise self._conflict(
                key, expected, f"another writer saved it first (now revision {next_revision})"
            )
        now = "removed" if current is None else f"now at revision {revision_shown(current[0])}"
        degraded(
            SAVE_UNKNOWN,
            {"agentium.s3.read_back": "changed", "error.type": _shown_code(cause)},
            "session save failed (%s) and the session changed since: outcome unknown",
            _shown_code(cause),
            extra={"agentium_s3_code": one_line(cause.code), "agentium_http_status": cause.status},
        )
        raise S3SaveOutcomeUnknownError(
            f"{where} failed ({cause}) and the session has changed since ({now}): the write may have landed "
            "and been replaced; load the session before retrying",
            code=cause.code,
            status=cause.status,
        )

    def _if_match(self, etag: str) -> str:
        bare = unquote_etag(etag)
        return f'"{bare}"' if self._quoted_if_match else bare
