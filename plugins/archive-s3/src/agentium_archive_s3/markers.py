"""An erased group's marker: exactly what a groups erasure writes, checked wherever an empty object is met.

A groups erasure replaces each group's object with an empty one whose
metadata is ``agentium-erased: 1`` and carries no group digest. Any other
empty object at a group's key (no metadata, another value, or a group's
own digest left on it) is a group truncated or replaced outside the
archive: damage, never an erased group. A read, an append that finds its
key taken, and a groups erasure each check every empty object they meet
with one ``HEAD`` (an ordinary group costs none) and fail closed with
``ArchiveCorruptError``, leaving the object as it is.
"""

from __future__ import annotations

from typing import Any

from .keys import DIGEST_META, ERASED_META
from .link import S3Client

__all__ = ["is_erasure_marker"]


def is_erasure_marker(s3: S3Client, bucket: str, object_key: str, version: str = "") -> bool:
    """One ``HEAD`` of ``object_key`` (of ``version`` when given): True only for an exact marker.

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
    return empty and meta.get(ERASED_META) == "1" and DIGEST_META not in meta
