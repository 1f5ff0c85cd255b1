"""Object keys: built only from injectively encoded id segments, parsed back strictly.

Layout below the configured prefix ``P`` (``t``, ``u``, ``s`` are the
tenant, user and session ids through :func:`~agentium_harness.plugin_api.encode_segment`,
which never yields ``/`` or ``.``)::

    P/archive/v1/t/u/s/00000000000000000042.json   one archived group (seq zero-padded to 20 digits)
    P/sessions/v1/t/u/s.json                       one session snapshot
    P/probe/<random hex>                           the health probe's create-only object

Because a segment cannot hold ``/``, a listing below ``P/archive/v1/t/u/s/``
or ``P/sessions/v1/t/u/`` can only ever return that session's or that user's
objects: ``../``, ``/`` and ``%2F`` inside an id are encoded, not followed.
Zero padding makes S3's byte order of archive keys the numeric order of
``seq``, so a read resumes with ``StartAfter``.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    SessionKey,
    SnapshotCorruptError,
    checked_count,
    checked_key,
    decode_segment,
    encode_segment,
)

from .errors import S3ArchiveError

__all__ = [
    "DIGEST_META",
    "ERASED_META",
    "LINK_META",
    "STORED_DIGEST",
    "MAX_KEY_BYTES",
    "MAX_SEQ",
    "archive_key",
    "archive_prefix",
    "archive_root",
    "key_too_long",
    "parse_archive_key",
    "parse_session_key",
    "probe_key",
    "read_arguments",
    "session_object_key",
    "upload_key",
    "sessions_prefix",
    "sessions_root",
]

#: The largest ``seq`` a 20-digit key can hold.
MAX_SEQ: Final = 10**20 - 1

#: The longest object key S3 takes, in UTF-8 bytes (AWS, Ceph RGW and MinIO refuse longer ones).
MAX_KEY_BYTES: Final = 1024

_SEQ_NAME: Final = re.compile(r"([0-9]{20})\.json")
_SESSION_NAME: Final = re.compile(r"([A-Za-z0-9_%-]+)\.json")
#: A snapshot's name as a listing may show it: one folder level, ending in ``.json``.
_SNAPSHOT_FORM: Final = re.compile(r"([^/]+)\.json")


def archive_root(prefix: str) -> str:
    """The folder of every tenant's archived groups, ending in ``/``."""
    return f"{prefix}/archive/v1/"


def sessions_root(prefix: str) -> str:
    """The folder of every tenant's snapshots, ending in ``/``."""
    return f"{prefix}/sessions/v1/"


def archive_prefix(prefix: str, key: SessionKey) -> str:
    """The folder of one session's archived groups, ending in ``/``."""
    tenant, user, session = key.key_segments()
    return f"{prefix}/archive/v1/{tenant}/{user}/{session}/"


def archive_key(prefix: str, key: SessionKey, seq: int) -> str:
    """The object key of group ``seq`` of session ``key``.

    :raises ValueError: ``seq`` is negative or does not fit in 20 digits.
    """
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError(f"seq {seq} is outside [0, {MAX_SEQ}] and cannot be archived on S3")
    return f"{archive_prefix(prefix, key)}{seq:020d}.json"


def read_arguments(key: object, start_seq: object, max_groups: object) -> tuple[SessionKey, int, int]:
    """``read_groups``' key, ``start_seq`` and limit (at least 0), checked before any request.

    ``start_seq`` is not clamped: a seq past :data:`MAX_SEQ` reads nothing, as no key holds one.

    :raises InvalidArgumentError: ``key`` is not a :class:`SessionKey`, or a count is not an ``int``.
    """
    if isinstance(start_seq, bool) or not isinstance(start_seq, int):
        raise InvalidArgumentError(
            f"archive read: start_seq must be an int, got {type(start_seq).__name__}; nothing was read"
        )
    limit = checked_count(max_groups, "max_groups", "archive read")
    # int.__int__: an int subclass as its number (its own comparisons are not trusted).
    return checked_key(key, "archive read"), int.__int__(start_seq), max(0, limit)


def parse_archive_key(folder: str, object_key: str) -> int | None:
    """The ``seq`` of ``object_key`` listed below ``folder``; ``None`` for a key this plugin never writes."""
    if not object_key.startswith(folder):
        return None
    match = _SEQ_NAME.fullmatch(object_key[len(folder) :])
    return int(match.group(1)) if match else None


def session_object_key(prefix: str, key: SessionKey) -> str:
    """The object key of session ``key``'s snapshot.

    :raises InvalidArgumentError: ``key`` is not a :class:`SessionKey` (checked before any request).
    """
    tenant, user, session = checked_key(key, "session store").key_segments()
    return f"{prefix}/sessions/v1/{tenant}/{user}/{session}.json"


def sessions_prefix(prefix: str, tenant: str, user: str) -> str:
    """The folder of one user's snapshots, ending in ``/``."""
    return f"{prefix}/sessions/v1/{encode_segment(tenant)}/{encode_segment(user)}/"


def parse_session_key(folder: str, object_key: str) -> str | None:
    """The session id of a snapshot key listed below ``folder``; ``None`` for a key of no snapshot's form.

    A name of a snapshot's form (``<name>.json`` directly in the folder) that no
    session id encodes to (a bad or non-canonical escape, bytes that are no
    UTF-8, an id a :class:`SessionKey` refuses: over 256 characters, a control
    character) is damage: it raises, so a listing never hands out an
    id that no load, erase or next page's ``after`` could take.

    :raises SnapshotCorruptError: such a name (the key is named, nothing is changed).
    """
    if not object_key.startswith(folder):
        return None
    name = object_key[len(folder) :]
    if _SNAPSHOT_FORM.fullmatch(name) is None:
        return None
    match = _SESSION_NAME.fullmatch(name)
    try:
        if match is None:
            raise ValueError("a character outside the encoding's")
        # Checked as a session id (the tenant and user stand in): what a SessionKey takes.
        return SessionKey("-", "-", decode_segment(match.group(1))).session
    except ValueError:  # InvalidIdError is one too
        raise SnapshotCorruptError(
            f"s3 session store: {object_key[:300]!r} in a user's folder of snapshots names no session id "
            "the store could have written; it was put or renamed outside the store (erase the user to "
            "remove it); nothing was changed"
        ) from None


def key_too_long(object_key: str) -> str | None:
    """Why S3 would refuse ``object_key`` (a message part), or ``None`` when it fits.

    Checked before a write, so a session whose encoded ids are too long (an id
    of 256 characters outside ``[A-Za-z0-9_-]`` encodes to up to 2,304) gets a
    clear error before any request, on every server alike (moto has no limit).
    """
    size = len(object_key.encode("utf-8"))
    if size <= MAX_KEY_BYTES:
        return None
    return (
        f"its object key would be {size} bytes, more than S3's {MAX_KEY_BYTES} (the encoded tenant, user "
        "and session ids and the prefix are too long together)"
    )


def upload_key(prefix: str, key: SessionKey, seq: int) -> str:
    """:func:`archive_key`, or :class:`~.errors.S3ArchiveError` (before any request) if S3 cannot hold it."""
    if not 0 <= seq <= MAX_SEQ:
        raise S3ArchiveError(
            f"s3 archive: group {seq} of session {key.key()} has a seq outside [0, {MAX_SEQ}], the seqs a "
            "key holds; nothing of the batch was written",
            code="SeqOutOfRange",
        )
    object_key = archive_key(prefix, key, seq)
    too_long = key_too_long(object_key)
    if too_long is not None:
        raise S3ArchiveError(
            f"s3 archive: group {seq} of session {key.key()} cannot be stored: {too_long}; nothing of the "
            "batch was written",
            code="KeyTooLong",
        )
    return object_key


def probe_key(prefix: str) -> str:
    """A fresh key for one health probe's create-only object."""
    return f"{prefix}/probe/{secrets.token_hex(12)}"


# -- object metadata: the names of the ``x-amz-meta-*`` fields an archived group carries ------

#: Metadata key holding the group's digest (``x-amz-meta-agentium-digest``).
DIGEST_META: Final = "agentium-digest"

#: Metadata key of an erased group's marker (``x-amz-meta-agentium-erased``): an empty object left at
#: the key of a group a groups erasure (retention, a forgotten fact's sources) removed.
ERASED_META: Final = "agentium-erased"

#: Metadata key holding the seq of an archived group this group's writer had seen stored
#: (``x-amz-meta-agentium-after``): a read that reaches that seq without finding it fails closed.
LINK_META: Final = "agentium-after"

#: What a stored digest may look like (anything else is read as no digest).
STORED_DIGEST: Final = re.compile(r"[A-Za-z0-9:+/=_-]{1,128}")
