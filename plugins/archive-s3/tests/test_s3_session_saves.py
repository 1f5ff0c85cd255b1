"""The session store's snapshot object: its revision is inside its digest, and saves report truthfully.

- A bit flipped in the stored revision fails the load closed (it is covered
  by the object's digest); objects of the previous format still load and are
  rewritten in the current one at their next save.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Config, S3SessionStore
from agentium_archive_s3.keys import session_object_key
from agentium_harness.plugin_api import OpContext, SessionKey, SnapshotCorruptError, snapshot_bytes
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "saves")


def _object(admin: Any, config: S3Config) -> bytes:
    return bytes(admin.get_object(Bucket=BUCKET, Key=session_object_key(config.prefix, KEY))["Body"].read())


def _put(admin: Any, config: S3Config, body: bytes) -> None:
    admin.put_object(Bucket=BUCKET, Key=session_object_key(config.prefix, KEY), Body=body)


async def test_a_bit_flipped_in_the_stored_revision_fails_the_load_closed(
    config: S3Config, admin: Any
) -> None:
    store = S3SessionStore(config)
    try:
        first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
        second = await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))
        assert second == 2
        body = _object(admin, config)
        assert b"revision=2" in body
        # "2" (0x32) and "3" (0x33) differ in one bit: revision 3 must not be reported for
        # revision 2's content (a later commit would then claim revision 3 as well).
        flipped = body.replace(b"revision=2", b"revision=3", 1)
        assert sum(bin(a ^ b).count("1") for a, b in zip(body, flipped, strict=True)) == 1
        _put(admin, config, flipped)
        with pytest.raises(SnapshotCorruptError, match="revision"):
            await S3SessionStore(config).load(KEY, OpContext.with_timeout(30))
        with pytest.raises(SnapshotCorruptError):
            await store.load(KEY, OpContext.with_timeout(30))
        # Nothing was changed: the damaged object is left for an operator.
        assert _object(admin, config) == flipped
    finally:
        await store.aclose()


async def test_a_snapshot_of_the_previous_format_loads_and_is_rewritten_at_its_next_save(
    config: S3Config, admin: Any
) -> None:
    snapshot = scoped_snapshot(KEY, " from the first format")
    _put(admin, config, b"agentium-s3-snapshot/1 revision=4\n" + snapshot_bytes(snapshot))
    store = S3SessionStore(config)
    try:
        loaded = await store.load(KEY, OpContext.with_timeout(30))
        assert loaded is not None and loaded.revision == 4 and loaded.snapshot == snapshot
        revision = await store.save(KEY, scoped_snapshot(KEY, " next"), 4, OpContext.with_timeout(30))
        assert revision == 5
        assert _object(admin, config).startswith(b"agentium-s3-snapshot/2 revision=5 ")
        again = await S3SessionStore(config).load(KEY, OpContext.with_timeout(30))
        assert again is not None and again.revision == 5 and again.snapshot == scoped_snapshot(KEY, " next")
    finally:
        await store.aclose()
