"""Out-of-band damage to a session's folder, for the erased-marker tests (append and erasure).

``KEY`` is the session the tests damage; :data:`DAMAGE` parametrizes a test over the empty
objects that are not an exact erasure marker (``metadata`` ``None`` keeps the group's own
metadata); :func:`folder_state` is every version in the folder, to check nothing changed.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Config
from agentium_archive_s3.keys import archive_key, archive_prefix
from agentium_harness.plugin_api import SessionKey

KEY = SessionKey("acme", "ana", "damage")
DAMAGE = pytest.mark.parametrize(
    "metadata",
    [None, {}, {"agentium-erased": "0"}, {"agentium-erased": "1", "agentium-digest": "x"}],
    ids=["truncated-keeping-metadata", "no-metadata", "erased-0", "erased-with-digest"],
)


def folder_state(admin: Any, config: S3Config) -> dict[tuple[str, str], tuple[bytes, dict[str, str]]]:
    """Every version of every object in the session's folder: its bytes and its metadata."""
    out: dict[tuple[str, str], tuple[bytes, dict[str, str]]] = {}
    folder = archive_prefix(config.prefix, KEY)
    for page in admin.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=folder):
        assert not page.get("DeleteMarkers")
        for item in page.get("Versions", []):
            version = str(item.get("VersionId") or "null")
            args: dict[str, Any] = {"Bucket": BUCKET, "Key": item["Key"]}
            if version != "null":
                args["VersionId"] = version
            try:
                reply = admin.get_object(**args)
                body = reply["Body"].read()
            except admin.exceptions.ClientError:  # a GET of an empty object may answer 416
                reply, body = admin.head_object(**args), b""
            out[item["Key"], version] = (body, dict(reply.get("Metadata", {})))
    return out


def truncate(admin: Any, config: S3Config, seq: int, metadata: dict[str, str] | None, *, alone: bool) -> None:
    """Truncate group ``seq`` to nothing out of band; ``alone``: keep no earlier version of it."""
    object_key = archive_key(config.prefix, KEY, seq)
    if metadata is None:  # truncated in place: the group's own metadata (digest, link) kept
        metadata = dict(admin.head_object(Bucket=BUCKET, Key=object_key)["Metadata"])
    admin.put_object(Bucket=BUCKET, Key=object_key, Body=b"", Metadata=metadata)
    if not alone:
        return
    versions = admin.list_object_versions(Bucket=BUCKET, Prefix=object_key).get("Versions", [])
    for item in versions:
        if not item.get("IsLatest") and item.get("VersionId") not in (None, "null"):
            admin.delete_object(Bucket=BUCKET, Key=object_key, VersionId=item["VersionId"])
