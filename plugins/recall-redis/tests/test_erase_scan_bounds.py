"""Erasure's ``HSCAN`` of the tenant's revision hash: every reply bounded, an unboundable page refused.

``HSCAN``'s ``COUNT`` is a hint. A page of 1,000 ids of up to 32 KiB each
came back as one reply of tens of MB, and a small-encoded hash (listpack)
comes back whole at any ``COUNT``. The store now checks what a page brought
back against a field and byte bound before sending it (asking again from
the same cursor with a smaller ``COUNT``), and refuses a page it cannot
bound (``RedisRecallError``, nothing erased). Real servers, as everywhere.

A real user or session erase of a tenant not yet indexed now walks the hash
to build the index (:mod:`agentium_recall_redis.erase_build`), which sends
no id back: only the field bound applies to its pages. Dry runs (and tenant
targets) still read the ids themselves, through ``REV_SCAN``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from keyspace import key_space, marked, unmarked
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.erase_scripts import REV_SCAN, SCAN_REPLY_CAP, checked_page
from agentium_recall_redis.store import RedisRecallStore as StoreClass

pytestmark = pytest.mark.anyio

OWNER = SourceOwner("acme", "ana", "s1")
#: Long fields of the revision hash (no owner's id: an erase of ana skips them), each under 32 KiB.
LONG = 30_000
FIELDS = 120


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _size(reply: Any) -> int:
    if isinstance(reply, list):
        return sum(16 + _size(item) for item in reply)
    return len(reply) if isinstance(reply, bytes) else 8


def _record_scan_replies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the ``REV_SCAN`` replies the store receives (what came back over the wire to it)."""
    sizes: list[int] = []
    original = StoreClass._script

    async def script(self: StoreClass, which: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await original(self, which, *args, **kwargs)
        if which.name == REV_SCAN.name:
            sizes.append(_size(reply))
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)
    return sizes


async def _long_fields(admin: aioredis.Redis, prefix: str) -> None:
    # A tenant written before the erasure index (no marker): its session erasures walk the whole hash.
    await admin.delete(f"{prefix}:{{acme}}:ixm")
    rev = f"{prefix}:{{acme}}:rev"
    await admin.hset(rev, mapping={f"{i:04d}".ljust(LONG, "x"): "sha256:junk" for i in range(FIELDS)})


async def test_each_scan_reply_stays_within_its_bound_and_the_erase_completes(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: one page of 120 ids of 30 KB came back as one reply of about 3.6 MB."""
    prefix = new_prefix()
    sizes = _record_scan_replies(monkeypatch)  # before the store takes its bound methods
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await store.index_document(OWNER, "doc", "qscanbound4 text", _ctx())
        await _long_fields(admin, prefix)
        planned = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=True)
        assert planned.count("document") == 1
        assert sizes and max(sizes) <= SCAN_REPLY_CAP, sizes
        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        raw = repr(await key_space(admin, prefix)).encode()
        assert b"qscanbound4" not in raw
        assert await admin.hlen(f"{prefix}:{{acme}}:rev") == FIELDS  # not the target's: left alone
    finally:
        await store.aclose()


async def test_a_page_no_count_can_bound_is_refused_and_nothing_is_erased(
    make_server: Callable[..., ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small-encoded hash comes back whole at any ``COUNT``: past the bound, it is refused, typed."""
    big = make_server("--hash-max-ziplist-entries", "100000", "--hash-max-ziplist-value", "100000")
    prefix = new_prefix()
    admin = aioredis.Redis.from_url(big.url)
    sizes = _record_scan_replies(monkeypatch)
    store = RedisRecallStore(RedisRecallConfig(url=big.url, key_prefix=prefix))
    try:
        await store.index_document(OWNER, "doc", "qscanbound5 text", _ctx())
        await _long_fields(admin, prefix)
        before = await key_space(admin, prefix)
        with pytest.raises(RedisRecallError, match="revision hash") as caught:
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=True)
        # It says why (the server's setting keeps the hash small-encoded), not that the hash is damaged.
        assert "hash-max-listpack-entries" in str(caught.value) and "damaged" not in str(caught.value)
        assert await key_space(admin, prefix) == before  # nothing erased, no fence left behind
        assert all(size <= SCAN_REPLY_CAP for size in sizes), sizes
        # The real erase's walk sends no id back: 121 fields pass its field bound, and it completes.
        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert b"qscanbound5" not in repr(await key_space(admin, prefix)).encode()
    finally:
        await store.aclose()
        await admin.aclose()


async def test_an_index_walk_page_no_count_can_bound_is_refused_and_nothing_is_written(
    make_server: Callable[..., ServerProcess],
) -> None:
    """The real erase's walk (erase_build) refuses a page of more than 4,000 fields at COUNT 1, typed."""
    big = make_server("--hash-max-ziplist-entries", "100000", "--hash-max-ziplist-value", "100000")
    prefix = new_prefix()
    admin = aioredis.Redis.from_url(big.url)
    store = RedisRecallStore(RedisRecallConfig(url=big.url, key_prefix=prefix))
    try:
        await store.index_document(OWNER, "doc", "qscanbound6 text", _ctx())
        await admin.delete(f"{prefix}:{{acme}}:ixm")
        await admin.hset(f"{prefix}:{{acme}}:rev", mapping={f"junk{i}": "sha256:junk" for i in range(4100)})
        before = await key_space(admin, prefix)
        with pytest.raises(RedisRecallError, match="revision hash") as caught:
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        # Nothing erased or listed, no fence left behind (but the fence raise's mark for older writers).
        after = await key_space(admin, prefix)
        assert marked(after) and unmarked(after) == before
        # Not damage: the server's setting kept a hash of 4,101 fields small-encoded. The remedy it names
        # works: lowered, the tenant's next write converts the hash, and the erase then completes.
        assert "4101 fields" in str(caught.value) and "damaged" not in str(caught.value)
        assert await admin.object("encoding", f"{prefix}:{{acme}}:rev") in (b"listpack", b"ziplist")
        await admin.config_set("hash-max-ziplist-entries", "128")  # the name every server here takes
        await store.index_document(SourceOwner("acme", "bob"), "doc", "qscanbobsix text", _ctx())
        assert await admin.object("encoding", f"{prefix}:{{acme}}:rev") == b"hashtable"
        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert b"qscanbound6" not in repr(await key_space(admin, prefix)).encode()
    finally:
        await store.aclose()
        await admin.aclose()


def test_a_reply_past_the_bounds_the_script_keeps_is_not_used() -> None:
    """What came back is checked again in the client: more fields or bytes than the script sends fails."""
    with pytest.raises(RedisRecallError, match="size the store never"):
        checked_page([b"0", *([b"doc/x", b"+"] * 5000)])
    with pytest.raises(RedisRecallError, match="larger"):
        checked_page([b"0", b"x" * SCAN_REPLY_CAP, b"+"])
    with pytest.raises(RedisRecallError, match="damaged"):
        checked_page([b"0", 5, b"+"])
    assert checked_page([b"0", b"doc/x", b"+"]) == [b"0", b"doc/x", b"+"]
