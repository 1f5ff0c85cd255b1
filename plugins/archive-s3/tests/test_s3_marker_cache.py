"""A read does not HEAD again a marker its archive verified before, unchanged since (marker_cache.py).

A session behind many erased groups cost one ``HEAD`` per marker on every
read. The first read still checks each one; a second read through the same
archive sends none. An empty object put at a verified marker's key later
(same ETag: every empty object has the MD5 of nothing) is still checked and
fails the read closed, even when it lands in the marker's own second.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import pytest
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Archive, S3Config
from agentium_archive_s3.keys import archive_key
from agentium_archive_s3.marker_cache import SETTLED, VerifiedMarkers
from agentium_archive_s3.markers import MarkerHead
from agentium_harness.plugin_api import ArchiveCorruptError, EraseTarget, OpContext, SeqRange, SessionKey
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "cached-markers")
MARKER = {"agentium-erased": "1"}
DAMAGE = pytest.mark.parametrize(
    "metadata",
    [{}, {"agentium-erased": "0"}, {"agentium-erased": "1", "agentium-digest": "x"}],
    ids=["no-metadata", "erased-0", "erased-with-digest"],
)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@contextmanager
def _counting(admin: Any) -> Iterator[list[str]]:
    """The S3 operations ``admin`` sends inside the block, by name."""
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(str(model.name))

    admin.meta.events.register("before-call.s3", count)
    try:
        yield calls
    finally:
        admin.meta.events.unregister("before-call.s3", count)


async def _settle(admin: Any, object_key: str) -> None:
    """Wait (at most 30 s) until the server's clock is SETTLED past the object's ``LastModified``.

    Only then does a read keep the marker as verified (marker_cache.py); a test that reads
    sooner would see every read HEAD it, which is the cache failing safe, not what is tested.
    """
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = admin.head_object(Bucket=BUCKET, Key=object_key)
        served = parsedate_to_datetime(reply["ResponseMetadata"]["HTTPHeaders"]["date"])
        modified: datetime = reply["LastModified"]
        if served >= modified.replace(microsecond=0) + SETTLED:
            return
        await anyio.sleep(0.25)
    pytest.fail(f"the server's clock did not pass {object_key}'s LastModified by {SETTLED}")


def _modified_second(admin: Any, object_key: str) -> int:
    """The object's ``LastModified`` in whole seconds, as the archive's listing shows it."""
    items = admin.list_objects_v2(Bucket=BUCKET, Prefix=object_key)["Contents"]
    return int(items[0]["LastModified"].timestamp())


async def test_a_second_read_behind_erased_groups_sends_no_head_and_a_fresh_archive_checks_again(
    config: S3Config, admin: Any
) -> None:
    archive = S3Archive(config, client=admin)
    try:
        await archive.append(KEY, [plain_group(s) for s in range(21)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, (SeqRange(0, 20),)), _ctx())
        await _settle(admin, archive_key(config.prefix, KEY, 19))
        with _counting(admin) as calls:
            first = await archive.read_groups(KEY, 0, 10, _ctx())
        assert [g.seq for g in first] == [20]
        assert calls.count("HeadObject") == 20  # the first read checks every marker, as before
        with _counting(admin) as calls:
            second = await archive.read_groups(KEY, 0, 10, _ctx())
        assert second == first
        assert calls.count("HeadObject") == 0, calls  # verified, unchanged: not checked again
        # The cache is the archive's own: another archive (another process) checks them itself.
        fresh = S3Archive(config, client=admin)
        with _counting(admin) as calls:
            assert await fresh.read_groups(KEY, 0, 10, _ctx()) == first
        assert calls.count("HeadObject") == 20
    finally:
        await archive.aclose()


@DAMAGE
async def test_an_empty_object_put_at_a_verified_marker_s_key_later_still_fails_the_read_closed(
    config: S3Config, admin: Any, metadata: dict[str, str]
) -> None:
    archive = S3Archive(config, client=admin)
    try:
        await archive.append(KEY, [plain_group(s) for s in range(6)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, (SeqRange(1, 5),)), _ctx())
        damaged = archive_key(config.prefix, KEY, 3)
        await _settle(admin, archive_key(config.prefix, KEY, 4))
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, _ctx())] == [0, 5]
        with _counting(admin) as calls:
            await archive.read_groups(KEY, 0, 10, _ctx())
        assert calls.count("HeadObject") == 0  # the cache holds all four markers
        admin.put_object(Bucket=BUCKET, Key=damaged, Body=b"", Metadata=metadata)
        with _counting(admin) as calls:
            with pytest.raises(ArchiveCorruptError, match=r"group 3 .*not an erased group's marker"):
                await archive.read_groups(KEY, 0, 10, _ctx())
        assert calls.count("HeadObject") == 1  # only the rewritten key is checked again
        with pytest.raises(ArchiveCorruptError, match=r"group 3 .*not an erased group's marker"):
            await archive.read_groups(KEY, 0, 10, _ctx())  # and it is never taken into the cache
    finally:
        await archive.aclose()


@DAMAGE
async def test_damage_put_in_the_same_second_as_the_marker_it_replaces_is_still_caught(
    config: S3Config, admin: Any, metadata: dict[str, str]
) -> None:
    # Every empty object has the same ETag, and LastModified counts seconds: had a read kept a
    # marker it verified in the second the marker was written, an empty object put at its key
    # in that same second would list exactly like it, and every later read would pass it.
    archive = S3Archive(config, client=admin)
    object_key = archive_key(config.prefix, KEY, 1)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        for _ in range(20):  # until the marker and the damage share a second (most tries do)
            admin.put_object(Bucket=BUCKET, Key=object_key, Body=b"", Metadata=MARKER)
            marker_second = _modified_second(admin, object_key)
            assert [g.seq for g in await archive.read_groups(KEY, 0, 10, _ctx())] == [0]  # verified
            admin.put_object(Bucket=BUCKET, Key=object_key, Body=b"", Metadata=metadata)
            if _modified_second(admin, object_key) == marker_second:
                break
            await anyio.sleep(0.1)  # into the next second, for a fresh try
        else:
            pytest.fail("no marker and damage were written in the same second in 20 tries")
        with pytest.raises(ArchiveCorruptError, match=r"group 1 .*not an erased group's marker"):
            await archive.read_groups(KEY, 0, 10, _ctx())
    finally:
        await archive.aclose()


def test_the_cache_is_bounded_and_keeps_only_settled_exact_markers_it_was_shown() -> None:
    """Pure bookkeeping (no server involved): the bound, and what a HEAD must show to be kept."""
    at = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    late = at + timedelta(seconds=5)
    etag = '"d41d8cd98f00b204e9800998ecf8427e"'
    cache = VerifiedMarkers(bound=2)
    cache.note("k", etag, at, MarkerHead(False, etag.strip('"'), at, late))  # damage
    cache.note("k", etag, at, MarkerHead(True, etag.strip('"'), at, at))  # not settled yet
    cache.note("k", etag, at, MarkerHead(True, etag.strip('"'), at + timedelta(seconds=1), late))  # replaced
    cache.note("k", etag, at, MarkerHead(True, etag.strip('"'), at, None))  # no Date header
    assert len(cache) == 0 and not cache.known("k", etag, at)
    for name in ("a", "b", "c"):
        cache.note(name, etag, at, MarkerHead(True, etag.strip('"'), at, late))
    assert len(cache) == 2 and not cache.known("a", etag, at)  # the least recently used went
    assert cache.known("b", etag, at + timedelta(milliseconds=400))  # the same second
    assert not cache.known("b", etag, at + timedelta(seconds=1))  # rewritten later
