"""Reading the S3 archive's objects: one folder listing, one group's bytes, its link (worker threads).

:meth:`~agentium_archive_s3.archive.S3Archive.read_groups` lists a session's
folder with :func:`list_groups` (markers widen the page instead of costing a
request each), fetches each group with :func:`get_group` (a ranged GET
bounded by ``max_object_bytes``) and checks each link with
:func:`parse_link`. Appends use the same two reads to find stored groups.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, NamedTuple

import botocore.exceptions

from agentium_harness.plugin_api import ArchiveCorruptError, SessionKey

from .config import S3Config
from .errors import S3ObjectTooLargeError
from .keys import DIGEST_META, LINK_META, archive_key, archive_prefix, parse_archive_key
from .link import S3Client, continuation, error_code, error_status

__all__ = ["ListedGroup", "get_group", "list_groups", "parse_link", "where"]

_LIST_PAGE: Final = 1000
_LINK: Final = re.compile(r"0|[1-9][0-9]{0,18}")


class ListedGroup(NamedTuple):
    """One key of a session's folder as the listing showed it.

    ``erased``: an empty object (an erased group's marker, until its ``HEAD``
    says otherwise); ``etag`` and ``modified`` are the listing's, which tell
    a marker verified earlier from an object put at its key since
    (:mod:`.marker_cache`).
    """

    seq: int
    key: str
    erased: bool
    etag: str
    modified: datetime | None


def where(key: SessionKey, seq: int, object_key: str) -> str:
    """The group named in a message: session, seq and object key."""
    return f"s3 archive: group {seq} of session {key.key()} at {object_key!r}"


def get_group(s3: S3Client, config: S3Config, object_key: str) -> tuple[bytes, str | None, str | None]:
    """At most ``max_object_bytes`` of one object, its stored digest and link (worker thread)."""
    limit = config.max_object_bytes
    try:
        reply = s3.get_object(Bucket=config.bucket, Key=object_key, Range=f"bytes=0-{limit}")
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


def list_groups(
    s3: S3Client, config: S3Config, key: SessionKey, start_seq: int, limit: int
) -> list[ListedGroup]:
    """Up to ``limit`` groups of the session from ``start_seq``, ascending, with markers (worker thread).

    An erased group's marker (an empty object) is listed, so links to it
    hold, and checked, but not counted in ``limit`` and never fetched.
    Markers past the ``limit``-th group are left to a later read.
    """
    folder = archive_prefix(config.prefix, key)
    found: list[ListedGroup] = []
    groups = markers = 0
    args: dict[str, Any] = {"Bucket": config.bucket, "Prefix": folder}
    if start_seq > 0:
        args["StartAfter"] = archive_key(config.prefix, key, start_seq - 1)
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
            if item.get("Size", 0) > config.max_object_bytes:
                raise S3ObjectTooLargeError(
                    f"s3 archive: {item['Key']!r} is larger than max_object_bytes="
                    f"{config.max_object_bytes}; refusing to read it",
                    code="TooLarge",
                )
            if groups == limit:
                return found
            erased = item.get("Size", 0) == 0
            groups += not erased
            markers += erased
            modified = item.get("LastModified")
            found.append(ListedGroup(seq, item["Key"], erased, str(item.get("ETag", "")), modified))
        token = continuation(page, "NextContinuationToken", f"s3 archive: the listing of session {key.key()}")
        if token is None:
            break
        args["ContinuationToken"] = token
    return found


def parse_link(key: SessionKey, seq: int, object_key: str, link: str | None) -> int | None:
    """The archived group a group was linked to when it was written (``None``: no link)."""
    if link is None:
        return None
    if _LINK.fullmatch(link) is None or int(link) >= seq:
        raise ArchiveCorruptError(
            f"{where(key, seq, object_key)} carries an invalid link {link[:40]!r}; it was changed "
            "outside the archive, and is not returned"
        )
    return int(link)
