"""An append tells an erased group's marker from a group truncated to nothing.

Only an exact marker (empty, ``agentium-erased: 1``, no group digest) is an
erased group: an append whose key holds one is refused as erased
(``ArchiveConflictError``). An append whose key holds any other empty
object reports damage (``ArchiveCorruptError``) instead. Either way nothing
is written: every version in the session's folder stays byte for byte,
metadata included.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Archive, S3Config
from agentium_archive_s3.keys import archive_key, archive_prefix
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    ArchiveCorruptError,
    EraseTarget,
    OpContext,
    SeqRange,
    SessionKey,
)
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "damage")
DAMAGE = pytest.mark.parametrize(
    "metadata",
    [None, {}, {"agentium-erased": "0"}, {"agentium-erased": "1", "agentium-digest": "x"}],
    ids=["truncated-keeping-metadata", "no-metadata", "erased-0", "erased-with-digest"],
)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _state(admin: Any, config: S3Config) -> dict[tuple[str, str], tuple[bytes, dict[str, str]]]:
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


def _damage(admin: Any, config: S3Config, seq: int, metadata: dict[str, str] | None, *, alone: bool) -> None:
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


# -- append -------------------------------------------------------------------------------------


@DAMAGE
@pytest.mark.parametrize("batch", [False, True], ids=["alone", "in-a-batch"])
async def test_an_append_meeting_an_empty_object_that_is_not_a_marker_reports_damage_and_writes_nothing(
    config: S3Config, admin: Any, metadata: dict[str, str] | None, batch: bool
) -> None:
    # Any empty object at the key was reported "was erased" (ArchiveConflictError), so a group
    # truncated out of band passed for an erasure's work.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(1)], _ctx())
        _damage(admin, config, 1, metadata, alone=False)
        before = _state(admin, config)
        # In a batch, group 0 is stored already: every stored group is compared before any is created.
        groups = [plain_group(0), plain_group(1), plain_group(2)] if batch else [plain_group(1)]
        with pytest.raises(ArchiveCorruptError, match=r"group 1 .*not an erased group's marker") as caught:
            await S3Archive(config).append(KEY, groups, _ctx())
        assert "was erased" not in str(caught.value)
        assert _state(admin, config) == before  # nothing written, the damage left as it is
    finally:
        await archive.aclose()


@pytest.mark.parametrize("batch", [False, True], ids=["alone", "in-a-batch"])
async def test_an_append_meeting_an_exact_marker_is_still_refused_as_erased(
    config: S3Config, admin: Any, batch: bool
) -> None:
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(s) for s in range(3)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 2)]), _ctx())
        before = _state(admin, config)
        groups = [plain_group(0), plain_group(1), plain_group(3)] if batch else [plain_group(1)]
        with pytest.raises(ArchiveConflictError, match=r"group 1 .*was erased"):
            await S3Archive(config).append(KEY, groups, _ctx())
        assert _state(admin, config) == before
    finally:
        await archive.aclose()
