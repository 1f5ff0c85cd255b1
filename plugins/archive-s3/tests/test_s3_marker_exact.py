"""An erased group's marker is exactly what an erasure writes: an empty object, ``agentium-erased: 1``.

A read checks every empty object it meets, whether a later group links to
it or not; any other empty object (no metadata, another value, or a
group's own digest left on it) was written outside the archive and fails
the read closed, left as it is.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Archive, S3Config
from agentium_archive_s3.keys import archive_key
from agentium_harness.plugin_api import ArchiveCorruptError, OpContext, SessionKey
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "markers")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _head(admin: Any, key: str) -> tuple[int, dict[str, str], str]:
    reply = admin.head_object(Bucket=BUCKET, Key=key)
    return int(reply["ContentLength"]), dict(reply.get("Metadata", {})), str(reply["ETag"])


@pytest.mark.parametrize(
    "metadata",
    [{"agentium-erased": "0"}, {"agentium-erased": ""}, {"agentium-erased": "1", "agentium-digest": "x"}],
)
async def test_an_empty_object_that_is_not_exactly_an_erasure_marker_fails_the_read_closed(
    config: S3Config, admin: Any, metadata: dict[str, str]
) -> None:
    # Any value of the marker's metadata name was taken for an erasure's marker, so group 1,
    # replaced outside the archive, read as erased and vanished unnoticed.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(1), plain_group(2)], _ctx())  # group 2 links to group 1
        object_key = archive_key(config.prefix, KEY, 1)
        admin.put_object(Bucket=BUCKET, Key=object_key, Body=b"", Metadata=metadata)
        before = _head(admin, object_key)
        with pytest.raises(ArchiveCorruptError, match="not an erased group's marker"):
            await S3Archive(config).read_groups(KEY, 0, 10, _ctx())
        assert _head(admin, object_key) == before
        # Below the damage the session still reads.
        assert list(await S3Archive(config).read_groups(KEY, 0, 1, _ctx())) == [plain_group(0)]
    finally:
        await archive.aclose()


@pytest.mark.parametrize("damaged", [2, 3], ids=["middle", "last"])
@pytest.mark.parametrize(
    "metadata",
    [None, {}, {"agentium-erased": "0"}, {"agentium-erased": "1", "agentium-digest": "x"}],
    ids=["truncated-keeping-metadata", "no-metadata", "erased-0", "erased-with-digest"],
)
async def test_an_empty_object_no_group_links_to_is_checked_too(
    config: S3Config, admin: Any, damaged: int, metadata: dict[str, str] | None
) -> None:
    # Groups 2 and 3 link to group 1 (the batch's lowest), so nothing links to 2 or 3: an empty
    # object there was taken for an erased group's marker unchecked, and the group vanished from
    # the history as if erased.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(s) for s in (1, 2, 3)], _ctx())
        object_key = archive_key(config.prefix, KEY, damaged)
        if metadata is None:  # truncated in place: the group's own metadata (digest, link) kept
            metadata = dict(admin.head_object(Bucket=BUCKET, Key=object_key)["Metadata"])
        admin.put_object(Bucket=BUCKET, Key=object_key, Body=b"", Metadata=metadata)
        before = _head(admin, object_key)
        with pytest.raises(ArchiveCorruptError, match=f"group {damaged} .*not an erased group's marker"):
            await S3Archive(config).read_groups(KEY, 0, 10, _ctx())
        with pytest.raises(ArchiveCorruptError, match="not an erased group's marker"):
            await S3Archive(config).read_groups(KEY, damaged, 10, _ctx())
        assert _head(admin, object_key) == before
        # Below the damage the session still reads.
        below = [plain_group(s) for s in range(damaged)]
        assert list(await S3Archive(config).read_groups(KEY, 0, damaged, _ctx())) == below
    finally:
        await archive.aclose()
