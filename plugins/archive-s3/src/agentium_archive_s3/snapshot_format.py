"""The stored form of a session snapshot: a revision header with a checksum, then the snapshot's bytes.

Format 2 (written): ``agentium-s3-snapshot/2 revision=<n> sha256=<hex>`` and a
newline, then the bytes; the checksum covers the revision and the bytes, so a changed
revision or a damaged body is refused. Format 1 (no checksum) is still read.

An erasure first replaces a snapshot with :data:`TOMBSTONE` (one line, naming
nothing), then deletes it (:mod:`.sessions_tombstone`): every reader treats a
tombstone as no session at all.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

import botocore.exceptions

from agentium_harness.plugin_api import SessionKey, SnapshotCorruptError

from .config import S3Config
from .errors import S3ObjectTooLargeError
from .link import error_code, error_status

__all__ = [
    "MAX_REVISION",
    "TOMBSTONE",
    "is_tombstone",
    "is_empty_range",
    "is_missing",
    "parse_snapshot",
    "read_limit",
    "revision_shown",
    "snapshot_body",
]

#: The highest revision the header holds (19 digits): a save past it could never be read back.
MAX_REVISION: Final = 10**19 - 1

_HEADER: Final = re.compile(rb"agentium-s3-snapshot/2 revision=([1-9][0-9]{0,18}) sha256=([0-9a-f]{64})\n")
#: Format 1 (no checksum): read, never written.
_HEADER_V1: Final = re.compile(rb"agentium-s3-snapshot/1 revision=([1-9][0-9]{0,18})\n")
_HEADER_BYTES: Final = 160

#: What an erasure writes over a snapshot before deleting it. No snapshot object is this short
#: (a header alone is longer), so a listing reads only objects of this size to tell a tombstone.
TOMBSTONE: Final = b"agentium-s3-snapshot-erased/1\n"


def is_tombstone(data: bytes) -> bool:
    """True if ``data`` is an erasure's tombstone: the session is gone (or going)."""
    return data == TOMBSTONE


def _checksum(revision: int, data: bytes) -> str:
    return hashlib.sha256(b"agentium-s3-snapshot/2 revision=%d\n" % revision + data).hexdigest()


def snapshot_body(revision: int, data: bytes) -> bytes:
    """The stored object of ``data`` at ``revision``: the format-2 header, then the bytes."""
    header = b"agentium-s3-snapshot/2 revision=%d sha256=%s\n" % (
        revision,
        _checksum(revision, data).encode(),
    )
    return header + data


def revision_shown(data: bytes) -> str:
    """The revision a header names, unverified, for messages only."""
    match = _HEADER.match(data) or _HEADER_V1.match(data)
    return match.group(1).decode() if match is not None else "?"


def parse_snapshot(config: S3Config, key: SessionKey, data: bytes) -> tuple[int, bytes]:
    """The revision and the snapshot's bytes of a stored object, its checksum verified."""
    where = f"s3 session store: snapshot of session {key.key()}"
    if len(data) > read_limit(config):
        raise S3ObjectTooLargeError(
            f"{where} is larger than max_object_bytes={config.max_object_bytes}; not loaded",
            code="TooLarge",
        )
    match = _HEADER.match(data)
    if match is not None:
        revision, payload = int(match.group(1)), data[match.end() :]
        if _checksum(revision, payload) != match.group(2).decode():
            raise SnapshotCorruptError(
                f"{where} does not match its checksum (revision {revision} as stored); its revision "
                "or content was damaged or changed outside the store; nothing was changed"
            )
        return revision, payload
    legacy = _HEADER_V1.match(data)
    if legacy is None:
        raise SnapshotCorruptError(f"{where} has no valid revision header; nothing was changed")
    return int(legacy.group(1)), data[legacy.end() :]


def read_limit(config: S3Config) -> int:
    """The most bytes a stored snapshot may have: ``max_object_bytes`` and the header."""
    return config.max_object_bytes + _HEADER_BYTES


def is_empty_range(exc: botocore.exceptions.ClientError) -> bool:
    """True if ``exc`` answers a byte-range read of an empty object (S3 says 416, ``InvalidRange``).

    The snapshot reads ask for a range (a bound on what they take in); an
    object of no bytes has none, so its read fails this way. It is an
    object, damaged, not an error of the backend.
    """
    return error_code(exc) == "InvalidRange" or error_status(exc) == 416


def is_missing(exc: botocore.exceptions.ClientError) -> bool:
    """True if ``exc`` says the object is not there (a missing bucket is not: it is an error)."""
    # A missing bucket is a 404 too, and must not read as "no snapshot yet".
    code = error_code(exc)
    return code != "NoSuchBucket" and (code in ("NoSuchKey", "404", "NotFound") or error_status(exc) == 404)
