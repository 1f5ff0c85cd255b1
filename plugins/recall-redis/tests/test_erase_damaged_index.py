"""Erasure removes every row of its target on a real Redis and Valkey, even when an index entry is damaged.

An erase found the target's rows through indexes: ``P:rev`` and ``P:ids``
(user, session and tenant targets) or the session's group set ``P:g:<b>``
(groups targets). Two kinds of damage hid a row from it, leaving its row
hash, text, canonical bytes, postings (the words, in key names) and vector
in Redis while the report said complete:

- a ``P:ids`` entry redirected to another owner's row: the erase left that
  row alone (rightly) and dropped the entry, so the target's own row was
  reachable by nothing afterwards, not even by a second erase;
- a group-set member removed: a groups erasure never saw that group.

The erase now ends with a sweep of the tenant's rows by number (every row
the tenant's counter ever allocated, read by its own owner and id fields),
erases what the indexes missed and says so in its report.
"""

from __future__ import annotations

import logging
import tracemalloc
from typing import Final

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_erase_rows import KEY, OTHER, discovered, six_rows
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EmbeddingModel,
    EraseStatus,
    EraseTarget,
    OpContext,
    SeqRange,
    SourceOwner,
    SourceRef,
    SourceVector,
    Vector,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, erase_sweep

pytestmark = pytest.mark.anyio

TARGETS: Final = {
    "session": EraseTarget.session("acme", "ana", "s1"),
    "user": EraseTarget.user("acme", "ana"),
    "tenant": EraseTarget.tenant("acme"),
    "groups": EraseTarget.groups_of(KEY, [SeqRange(0, 3)]),
}


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _traces(admin: aioredis.Redis, tp: str, n: int) -> list[bytes]:
    """Every key that still holds something of row ``n``: its own keys, or a member in a set."""
    members = {str(n).encode(), f"{n}<".encode(), f"{n}>".encode()}
    own = {f"{tp}:{kind}:{n}".encode() for kind in "mtck"}
    found = []
    for key, (kind, value) in (await key_space(admin, tp)).items():
        if key in own or (kind == "zset" and any(member in members for member, _ in value)):
            found.append(key)
    return found


@pytest.mark.parametrize("level", ["session", "groups"])
async def test_a_redirected_ids_entry_leaves_nothing_of_the_targets_own_row(
    server: ServerProcess, admin: aioredis.Redis, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        # Group 0 of s1 (row 1) and s1's document (row 5) now name s2's rows in P:ids.
        await admin.hset(f"{tp}:ids", "group/acme/ana/s1/0", "4")
        await admin.hset(f"{tp}:ids", "doc/acme/ana/s1/~/~/notes", "6")
        target = TARGETS[level]

        planned = await store.erase(target, _ctx(), dry_run=True)
        with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
            report = await store.erase(target, _ctx())

        assert report.status is EraseStatus.COMPLETE
        assert planned.sessions == report.sessions and planned.counts == report.counts
        [session] = report.sessions
        assert session.session == KEY and list(session.groups) == list(enumerate(digests))
        assert report.count("document") == (1 if level == "session" else 0)
        assert "damaged" in report.detail and "damaged" in caplog.text
        erased = [1, 2, 3, 5] if level == "session" else [1, 2, 3]
        for n in erased:
            assert await _traces(admin, tp, n) == [], n
        assert not await discovered(store, KEY, "qword0x")
        # s2's rows, which the redirected entries named, are untouched.
        for n in (4, 6):
            assert await _traces(admin, tp, n) != [], n
        assert await discovered(store, OTHER, "qother0x") and await discovered(store, OTHER, "qdocother")
        # A second erase finds nothing left.
        again = await store.erase(target, _ctx())
        assert again.removed == 0 and "damaged" not in again.detail
    finally:
        await store.aclose()


@pytest.mark.parametrize("level", ["groups", "session", "tenant"])
async def test_a_group_missing_from_its_group_set_is_still_erased_with_its_vector(
    server: ServerProcess, admin: aioredis.Redis, level: str
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    model = EmbeddingModel("test-axes", 4)
    axis = [Vector.normalized(model, [1.0 if j == i else 0.0 for j in range(4)]) for i in range(4)]
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        kept_rev = (await admin.hget(f"{tp}:m:4", "rev")).decode()
        refs = [SourceRef(f"group/acme/ana/s1/{seq}", digest) for seq, digest in enumerate(digests)]
        refs.append(SourceRef("group/acme/ana/s2/0", kept_rev))
        vectors = [SourceVector(ref, axis[i]) for i, ref in enumerate(refs)]
        assert await store.index_vectors(vectors, _ctx()) == 4
        # Group 1 of s1 (row 2) is no longer listed in s1's group set (bucket 1).
        assert await admin.zrem(f"{tp}:g:1", "2") == 1

        planned = await store.erase(TARGETS[level], _ctx(), dry_run=True)
        report = await store.erase(TARGETS[level], _ctx())

        assert report.status is EraseStatus.COMPLETE
        assert planned.sessions == report.sessions and planned.counts == report.counts
        mine = [s for s in report.sessions if s.session == KEY]
        assert [list(s.groups) for s in mine] == [list(enumerate(digests))]
        for n in (1, 2, 3):
            assert await _traces(admin, tp, n) == [], n
        assert not await discovered(store, KEY, "qword1x")
        if level == "groups":
            assert "damaged" in report.detail
            assert await admin.get(f"{tp}:vc") == b"1"  # s2's vector is left, and counted
            assert await _traces(admin, tp, 4) != []
    finally:
        await store.aclose()


# A value the Lua script builds on the server, so the test itself never holds it.
_GROW = "redis.call('HSET', KEYS[1], ARGV[1], string.rep('a', tonumber(ARGV[2]))) return 1"


@pytest.mark.parametrize("dry_run", [True, False])
async def test_an_orphaned_row_with_a_huge_id_is_found_by_its_owner_and_its_id_never_transferred(
    server: ServerProcess, admin: aioredis.Redis, dry_run: bool
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        # Group 0 of s1 (row 1) lost its ids and rev entries, and its id field grew to 64 MiB: only
        # its owner key and seq still say whose it is.
        await admin.hdel(f"{tp}:ids", "group/acme/ana/s1/0")
        await admin.hdel(f"{tp}:rev", "group/acme/ana/s1/0")
        await admin.eval(_GROW, 1, f"{tp}:m:1", "sid", 64 * 1024 * 1024)

        tracemalloc.start()
        try:
            report = await store.erase(TARGETS["session"], _ctx(), dry_run=dry_run)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

        assert peak < 8 * 1024 * 1024, f"the erase pulled {peak} bytes into Python"
        assert report.status is EraseStatus.COMPLETE and "damaged" in report.detail
        [session] = report.sessions
        assert list(session.groups) == list(enumerate(digests))
        assert (await _traces(admin, tp, 1) == []) is not dry_run
    finally:
        await store.aclose()


async def test_the_sweep_pages_through_the_rows_and_a_small_max_items_ends_complete(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", 2)
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        # Rows 1 and 3 (groups 0 and 2) and row 5 (the document) are in no index any more.
        for sid in ("group/acme/ana/s1/0", "group/acme/ana/s1/2", "doc/acme/ana/s1/~/~/notes"):
            await admin.hdel(f"{tp}:ids", sid)
            await admin.hdel(f"{tp}:rev", sid)
        await admin.zrem(f"{tp}:g:1", "1", "3")

        reports = []
        for _ in range(10):
            reports.append(await store.erase(TARGETS["session"], _ctx(), max_items=1))
            if reports[-1].status is EraseStatus.COMPLETE:
                break
        assert [r.status for r in reports] == [EraseStatus.PARTIAL] * 3 + [EraseStatus.COMPLETE]
        assert [r.removed for r in reports] == [1, 1, 1, 1]  # group 1 through P:rev, then 0, 2 and the doc
        groups = sorted(g for r in reports for s in r.sessions for g in s.groups)
        assert groups == list(enumerate(digests))
        assert sum(r.count("document") for r in reports) == 1
        for n in (1, 2, 3, 5):
            assert await _traces(admin, tp, n) == [], n
        assert await _traces(admin, tp, 4) != [] and await _traces(admin, tp, 6) != []
    finally:
        await store.aclose()


async def test_a_write_through_a_redirected_ids_entry_never_removes_another_owners_row(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # Writes found a source's current row through P:ids and removed whatever row it named: with the
    # entry redirected, deleting s1's document deleted s2's, and indexing a new version of s1's group 0
    # deleted s2's group 0. Nothing committed may go but by erasure: the other owner's row stays.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        _, kept = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        await admin.hset(f"{tp}:ids", "doc/acme/ana/s1/~/~/notes", "6")
        await admin.hset(f"{tp}:ids", "group/acme/ana/s1/0", "4")
        other_rows = {n: await admin.hgetall(f"{tp}:m:{n}") for n in (4, 6)}

        assert not await store.delete_document(SourceOwner("acme", "ana", "s1"), "notes", _ctx())
        changed = plain_group(0, " qword0x changed")
        await store.index_groups(KEY, [changed], [ArchiveReceipt(0, changed.digest, "x")], _ctx())

        assert {n: await admin.hgetall(f"{tp}:m:{n}") for n in (4, 6)} == other_rows
        assert [g.digest for g in await store.seek_groups(OTHER, 0, 5, _ctx())] == [kept]
        assert await discovered(store, OTHER, "qdocother")
        # The group's new version is current (its ids entry names it again), and s1's own old rows are
        # still erased by an erasure of s1 (the sweep finds them), s2's rows untouched.
        assert [g.digest for g in await store.seek_groups(KEY, 0, 1, _ctx())] == [changed.digest]
        assert await _traces(admin, tp, 1) == []  # found in s1's group set at seq 0, and replaced
        await store.erase(TARGETS["session"], _ctx())
        for n in (1, 5):
            assert await _traces(admin, tp, n) == [], n
        assert {n: await admin.hgetall(f"{tp}:m:{n}") for n in (4, 6)} == other_rows
    finally:
        await store.aclose()


async def test_a_tenant_erasure_reports_each_group_with_its_own_digest_despite_a_redirected_entry(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # A tenant erasure dropped whatever row an ids entry named, under that entry's id: s1's group 0,
    # pointed at s2's group 0, was reported with s2's digest, s2's group 0 was not reported at all,
    # and s1's own row was left behind.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, kept = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        await admin.hset(f"{tp}:ids", "group/acme/ana/s1/0", "4")

        planned = await store.erase(TARGETS["tenant"], _ctx(), dry_run=True)
        report = await store.erase(TARGETS["tenant"], _ctx())

        assert report.status is EraseStatus.COMPLETE
        assert planned.sessions == report.sessions and planned.counts == report.counts
        assert {s.session: list(s.groups) for s in report.sessions} == {
            KEY: list(enumerate(digests)),
            OTHER: [(0, kept)],
        }
        assert report.count("document") == 2
        left = await key_space(admin, tp)
        assert [k for k in left if b":w:" not in k] == []
    finally:
        await store.aclose()


@pytest.mark.parametrize("level", ["session", "groups"])
async def test_the_sweep_trusts_a_valid_owner_key_over_an_edited_id(
    server: ServerProcess, admin: aioredis.Redis, level: str
) -> None:
    # The row's owner key decides whose it is (it chose the row's bucket); its id decides only when
    # the owner key is not one the store writes. A row of s2 whose id alone was edited to name a
    # group of s1 stays; a row of s1 whose owner key was garbled, and which lost its ids entry, goes.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, kept = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        other_row = await admin.hgetall(f"{tp}:m:4")
        await admin.hset(f"{tp}:m:4", "sid", "group/acme/ana/s1/1")
        await admin.hset(f"{tp}:m:1", "o", "not an owner key")
        await admin.hdel(f"{tp}:ids", "group/acme/ana/s1/0")
        await admin.hdel(f"{tp}:rev", "group/acme/ana/s1/0")

        planned = await store.erase(TARGETS[level], _ctx(), dry_run=True)
        report = await store.erase(TARGETS[level], _ctx())

        assert planned.sessions == report.sessions and planned.counts == report.counts
        [session] = report.sessions
        assert session.session == KEY and list(session.groups) == list(enumerate(digests))
        for n in (1, 2, 3):
            assert await _traces(admin, tp, n) == [], n
        assert await admin.exists(f"{tp}:m:4", f"{tp}:t:4", f"{tp}:c:4") == 3
        # Untouched (discovery leaves it out while its id names another owner, as it always did).
        assert {**other_row, b"sid": b"group/acme/ana/s1/1"} == await admin.hgetall(f"{tp}:m:4")
        assert kept == (await admin.hget(f"{tp}:m:4", "dg")).decode()
    finally:
        await store.aclose()


@pytest.mark.parametrize("level", ["session", "groups"])
async def test_the_sweep_never_takes_another_owners_row_whose_owner_key_alone_was_edited(
    server: ServerProcess, admin: aioredis.Redis, level: str
) -> None:
    # The dual of the edited id: s2's group 0 (row 4) and s2's document (row 6) with only their owner
    # field edited to s1's owner key. Their id, bucket and group set still say s2 (discovery, which
    # needs all three to agree, shows them to nobody, as for an edited id), so one edited field must
    # not let an erasure of s1 remove them. The owner key decides only while the tenant's bucket map
    # files it under the row's bucket; else the row's id decides.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        rows = {n: await admin.hgetall(f"{tp}:m:{n}") for n in (4, 6)}
        await admin.hset(f"{tp}:m:4", "o", "ana/s1/~/~")
        await admin.hset(f"{tp}:m:6", "o", "ana/s1/~/~")

        planned = await store.erase(TARGETS[level], _ctx(), dry_run=True)
        report = await store.erase(TARGETS[level], _ctx())

        assert planned.sessions == report.sessions and planned.counts == report.counts
        [session] = report.sessions
        assert session.session == KEY and list(session.groups) == list(enumerate(digests))
        assert report.count("document") == (1 if level == "session" else 0)
        for n in (4, 6):
            assert await admin.exists(f"{tp}:m:{n}", f"{tp}:t:{n}") == 2, n
            assert {**rows[n], b"o": b"ana/s1/~/~"} == await admin.hgetall(f"{tp}:m:{n}")
        assert await admin.exists(f"{tp}:c:4") == 1
        assert "damaged" not in report.detail
    finally:
        await store.aclose()
