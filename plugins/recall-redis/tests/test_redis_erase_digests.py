"""An indexed group whose stored digest was damaged is erased and reported with digest "" (real servers).

A row's ``dg`` (or ``rev``) field changed behind the store's back was sent
back by the erase scripts and put into the report as stored: ``garbage`` or
upper-case hex, which the engine refuses (``ContractViolationError``: the
digest goes into the tombstone), so that erasure could never complete; an
8 MiB one was transferred whole. And the ``ERASE`` script's reply lines held
each row's ``kind`` and ``seq`` too, split on spaces and newlines: a kind
changed to hold a newline shifted the lines, so the groups after it were
reported with their neighbour's digest, or left out of the report while
erased. Now the scripts send only the digest, checked on the server, ``""``
when it is not ``sha256:`` and 64 lowercase hex digits.
"""

from __future__ import annotations

import re

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import ArchiveReceipt, EraseReport, EraseTarget, OpContext, SessionKey
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
DIGEST_FORM = re.compile(r"sha256:[0-9a-f]{64}")
HUGE = 8 * 1024 * 1024
GROUPS = [plain_group(seq, f" qword{seq}x") for seq in range(4)]

#: (field, value) written into group 1's row hash; value ``None``: the digest, upper-cased.
DAMAGE = {
    "garbage": ("dg", "garbage"),
    "upper-case hex": ("dg", None),
    "huge": ("dg", "x" * HUGE),
    "no dg, a garbage rev": ("rev", "garbage"),
}


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _digests(report: EraseReport) -> dict[int, str]:
    return {seq: digest for entry in report.sessions for seq, digest in entry.groups}


async def _row_of(admin: aioredis.Redis, tp: str, seq: int) -> str:
    """The row hash of group ``seq`` (found by its ``seq`` field, as the store wrote it)."""
    for n in range(1, 16):
        if await admin.hget(f"{tp}:m:{n}", "seq") == str(seq).encode():
            return f"{tp}:m:{n}"
    raise AssertionError(f"no row of group {seq}")


async def _indexed(server: ServerProcess) -> tuple[RedisRecallStore, str]:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    receipts = [ArchiveReceipt(g.seq, g.digest, f"test://{g.seq}") for g in GROUPS]
    await store.index_groups(KEY, GROUPS, receipts, _ctx())
    return store, prefix


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_a_group_with_a_damaged_digest_is_erased_and_reported_as_unvouched(
    server: ServerProcess, admin: aioredis.Redis, damage: str
) -> None:
    store, prefix = await _indexed(server)
    try:
        tp = f"{prefix}:{{acme}}"
        row = await _row_of(admin, tp, 1)
        field, value = DAMAGE[damage]
        if field == "rev":
            await admin.hdel(row, "dg")
        await admin.hset(row, field, GROUPS[1].digest.upper() if value is None else value)
        expected = {g.seq: g.digest for g in GROUPS} | {1: ""}
        for dry_run in (True, False):
            report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=dry_run)
            assert _digests(report) == expected, dry_run
            assert report.count("group") == len(GROUPS)
            assert all(d == "" or DIGEST_FORM.fullmatch(d) for d in _digests(report).values())
        left = await key_space(admin, tp)
        assert [
            k for k in left if b":w:" not in k and not k.endswith((b":n", b":nb", b":v", b":ixm", b":rb"))
        ] == []
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["group\nx", "a b"])
async def test_a_kind_holding_a_newline_or_a_space_shifts_no_digest_and_drops_no_group(
    server: ServerProcess, admin: aioredis.Redis, kind: str
) -> None:
    store, prefix = await _indexed(server)
    try:
        await admin.hset(await _row_of(admin, f"{prefix}:{{acme}}", 1), "kind", kind)
        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert _digests(report) == {g.seq: g.digest for g in GROUPS}
        assert report.count("group") == len(GROUPS)
    finally:
        await store.aclose()
