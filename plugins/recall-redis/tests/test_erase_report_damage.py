"""Erasure reports on a real Redis and Valkey when a row's digest was edited behind the store's back.

Every group digest a report holds goes into the erasure's tombstone; the
engine refuses any that is not ``""`` or ``sha256:`` and 64 lowercase hex
digits, and the erasure then never completes. So a digest the store cannot
vouch for is reported as ``""`` and the group is erased all the same; a
huge one is never transferred (nor written into the write's settlement
token); and a digest, seq or kind holding a space or a line break cannot
shift the report onto another group.
"""

from __future__ import annotations

import re
import tracemalloc
from typing import Final

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EraseStatus,
    EraseTarget,
    OpContext,
    SeqRange,
    SessionKey,
    SourceOwner,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

KEY: Final = SessionKey("acme", "ana", "s1")
#: Far over any digest the store writes: a read that fetched it would show in the peak.
HUGE: Final = 64 * 1024 * 1024
PEAK: Final = 8 * 1024 * 1024
_FORM: Final = re.compile(r"sha256:[0-9a-f]{64}")

# A value the Lua script builds on the server, so the test itself never holds it.
_GROW = "redis.call('HSET', KEYS[1], ARGV[1], string.rep('a', tonumber(ARGV[2]))) return 1"


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _indexed(store: RedisRecallStore) -> list[str]:
    groups = [plain_group(seq, f" qword{seq}x text") for seq in range(3)]
    await store.index_groups(KEY, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], _ctx())
    return [g.digest for g in groups]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"dg", b"sha256:" + b"A" * 64),  # upper case: not the form
        (b"dg", b"md5:abc"),
        (b"dg", b"sha256:x y"),  # a space split the report's line: the group was left out
        (b"dg", b"x\ng 1 sha256:" + b"0" * 64),  # a line break shifted the next group's report
        (b"seq", b"1\ng"),
        (b"kind", b"g x\ny"),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
async def test_a_damaged_digest_is_reported_empty_and_the_group_erased(
    server: ServerProcess, admin: aioredis.Redis, field: bytes, value: bytes, dry_run: bool
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests = await _indexed(store)
        tp = f"{prefix}:{{acme}}"
        await admin.hset(f"{tp}:m:1", field, value)  # row 1 is group 0
        expected = [(0, "" if field == b"dg" else digests[0]), (1, digests[1]), (2, digests[2])]

        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=dry_run)

        assert report.count("group") == 3 and report.count("document") == 0
        [session] = report.sessions
        assert list(session.groups) == expected
        assert all(d == "" or _FORM.fullmatch(d) for _, d in session.groups)
        if not dry_run:
            left = await key_space(admin, tp)
            assert [
                k for k in left if b":w:" not in k and not k.endswith((b":n", b":nb", b":v", b":ixm", b":rb"))
            ] == []
    finally:
        await store.aclose()


@pytest.mark.parametrize(("row", "field"), [(1, b"dg"), (1, b"seq"), (1, b"kind"), (4, b"rev")])
@pytest.mark.parametrize("dry_run", [True, False])
async def test_a_huge_row_field_is_never_transferred_by_an_erase(
    server: ServerProcess, admin: aioredis.Redis, row: int, field: bytes, dry_run: bool
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests = await _indexed(store)
        await store.index_document(SourceOwner("acme", "ana", "s1"), "notes", "qnotes text", _ctx())  # row 4
        tp = f"{prefix}:{{acme}}"
        await admin.eval(_GROW, 1, f"{tp}:m:{row}", field, HUGE)
        target = EraseTarget.session("acme", "ana", "s1")

        tracemalloc.start()
        try:
            report = await store.erase(target, _ctx(), dry_run=dry_run)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

        assert peak < PEAK, f"the erase pulled {peak} bytes into Python"
        assert report.count("group") == 3 and report.count("document") == 1
        [session] = report.sessions
        assert list(session.groups) == [
            (0, "" if field == b"dg" else digests[0]),
            (1, digests[1]),
            (2, digests[2]),
        ]
        if not dry_run:
            # The settlement token keeps the script's result for 10 minutes: never the huge value.
            for key, (kind, stored) in (await key_space(admin, tp)).items():
                if key.endswith((b":n", b":nb", b":v", b":ixm", b":rb")):
                    continue
                assert b":w:" in key and kind == "string" and len(stored) < 4096, key
    finally:
        await store.aclose()


@pytest.mark.parametrize("sid", ["group/acme/ana/s2/0", "x", "huge"])
async def test_a_groups_erasure_erases_its_own_groups_whatever_their_rows_sid_says(
    server: ServerProcess, admin: aioredis.Redis, sid: str
) -> None:
    # A groups target found its rows in the session's group set and erased them by the id their row
    # hash held: a row whose id was edited to another session's group erased that group instead (and
    # the report named it, outside the target), one edited to anything else erased nothing while the
    # report said complete, and a huge one was transferred whole.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    other = SessionKey("acme", "ana", "s2")
    try:
        digests = await _indexed(store)  # rows 1 to 3
        kept = plain_group(0, " qother0x text")
        await store.index_groups(other, [kept], [ArchiveReceipt(0, kept.digest, "x")], _ctx())  # row 4
        tp = f"{prefix}:{{acme}}"
        if sid == "huge":
            await admin.eval(_GROW, 1, f"{tp}:m:1", "sid", HUGE)
        else:
            await admin.hset(f"{tp}:m:1", "sid", sid)
        target = EraseTarget.groups_of(KEY, [SeqRange(0, 2)])

        tracemalloc.start()
        try:
            report = await store.erase(target, _ctx())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

        assert peak < PEAK, f"the erase pulled {peak} bytes into Python"
        assert report.status is EraseStatus.COMPLETE and report.count("group") == 2
        [session] = report.sessions
        assert session.session == KEY and list(session.groups) == [(0, digests[0]), (1, digests[1])]
        assert await admin.exists(f"{tp}:m:1", f"{tp}:t:1", f"{tp}:c:1", f"{tp}:m:2") == 0
        assert await admin.exists(f"{tp}:m:3", f"{tp}:m:4", f"{tp}:c:4") == 3  # seq 2 and s2's group stay
        assert list(await store.seek_groups(other, 0, 5, _ctx())) == [kept]
    finally:
        await store.aclose()


@pytest.mark.parametrize("level", ["session", "groups"])
async def test_an_id_pointed_at_another_sessions_row_never_erases_that_row(
    server: ServerProcess, admin: aioredis.Redis, level: str
) -> None:
    # The erase found a source's row through P:ids and dropped whatever row it named: an entry edited
    # to name another session's row erased that session's group (and left the target's own row).
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    other = SessionKey("acme", "ana", "s2")
    try:
        await _indexed(store)  # rows 1 to 3
        kept = plain_group(0, " qother0x text")
        await store.index_groups(other, [kept], [ArchiveReceipt(0, kept.digest, "x")], _ctx())  # row 4
        tp = f"{prefix}:{{acme}}"
        await admin.hset(f"{tp}:ids", "group/acme/ana/s1/0", "4")
        target = (
            EraseTarget.session("acme", "ana", "s1")
            if level == "session"
            else EraseTarget.groups_of(KEY, [SeqRange(0, 3)])
        )

        planned = await store.erase(target, _ctx(), dry_run=True)
        report = await store.erase(target, _ctx())

        assert all(s.session == KEY for s in report.sessions)
        # The dry run plans what the erase does: never the other session's group under seq 0.
        assert planned.sessions == report.sessions and planned.counts == report.counts
        assert all(d != kept.digest for s in planned.sessions for _, d in s.groups)
        assert list(await store.seek_groups(other, 0, 5, _ctx())) == [kept]
        assert await admin.exists(f"{tp}:m:4", f"{tp}:c:4", f"{tp}:t:4") == 3
    finally:
        await store.aclose()


@pytest.mark.parametrize(("level", "field"), [("session", "o"), ("session", "sid"), ("tenant", "o")])
async def test_a_row_with_one_owner_field_edited_is_still_erased(
    server: ServerProcess, admin: aioredis.Redis, level: str, field: str
) -> None:
    # A row is dropped when either its owner field or its id vouches for it: one field edited behind
    # the store's back must not leave the row's content behind after an erasure said complete.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        digests = await _indexed(store)
        tp = f"{prefix}:{{acme}}"
        await admin.hset(f"{tp}:m:1", field, "zz/zz/~/~" if field == "o" else "group/acme/zz/zz/0")
        target = EraseTarget.tenant("acme") if level == "tenant" else EraseTarget.session("acme", "ana", "s1")
        planned = await store.erase(target, _ctx(), dry_run=True)
        report = await store.erase(target, _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("group") == 3
        assert planned.sessions == report.sessions
        assert list(report.sessions[0].groups) == list(enumerate(digests))
        assert await admin.exists(f"{tp}:m:1", f"{tp}:t:1", f"{tp}:c:1") == 0
    finally:
        await store.aclose()
