"""An erased group's marker: exactly what a groups erasure writes, checked wherever an empty object is met.

A groups erasure replaces each group's object with an empty one whose
metadata is ``agentium-erased: 1`` and carries no group digest. Any other
empty object at a group's key (no metadata, another value, or a group's
own digest left on it) is a group truncated or replaced outside the
archive: damage, never an erased group. A read, an append that finds its
key taken, and a groups erasure each check every empty object they meet
with one ``HEAD`` (an ordinary group costs none) and fail closed with
``ArchiveCorruptError``, leaving the object as it is. A read skips the
``HEAD`` of a marker its archive verified before, unchanged since
(:mod:`.marker_cache`).
"""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import attrs

from .keys import DIGEST_META, ERASED_META
from .link import S3Client, unquote_etag

__all__ = ["MarkerHead", "head_marker", "is_erasure_marker"]


@attrs.frozen(slots=True)
class MarkerHead:
    """What one ``HEAD`` of an empty object's key showed.

    ``exact``: it is exactly an erasure's marker. ``etag`` (unquoted) and
    ``modified`` are the object's; ``served`` is the server's clock when it
    answered (the ``Date`` header; ``None`` when absent or unreadable).
    """

    exact: bool
    etag: str
    modified: datetime | None
    served: datetime | None


def head_marker(s3: S3Client, bucket: str, object_key: str, version: str = "") -> MarkerHead:
    """One ``HEAD`` of ``object_key`` (of ``version`` when given), and whether it is an exact marker.

    Worker thread. A missing key or version raises botocore's ``ClientError``
    (404), left to the caller: what a key that vanished means depends on it.
    """
    args: dict[str, Any] = {"Bucket": bucket, "Key": object_key}
    if version:
        args["VersionId"] = version
    reply = s3.head_object(**args)
    meta: dict[str, str] = reply.get("Metadata", {})
    # Exactly what an erasure writes ("1", no group digest): anything else came from outside.
    empty = int(reply.get("ContentLength", 0)) == 0
    exact = empty and meta.get(ERASED_META) == "1" and DIGEST_META not in meta
    modified = reply.get("LastModified")
    return MarkerHead(
        exact,
        unquote_etag(str(reply.get("ETag", ""))),
        modified if isinstance(modified, datetime) else None,
        _served(reply),
    )


def is_erasure_marker(s3: S3Client, bucket: str, object_key: str, version: str = "") -> bool:
    """One ``HEAD`` of ``object_key`` (of ``version`` when given): True only for an exact marker.

    Worker thread; a missing key raises as :func:`head_marker` does.
    """
    return head_marker(s3, bucket, object_key, version).exact


def _served(reply: Any) -> datetime | None:
    """The reply's ``Date`` header as a datetime, or ``None`` (no header, or one that does not parse)."""
    headers = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    value = headers.get("date")
    if not isinstance(value, str):
        return None
    try:
        served = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return served if served.tzinfo is not None else None
