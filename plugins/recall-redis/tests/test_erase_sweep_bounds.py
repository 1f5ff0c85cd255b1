"""The erase sweep finds every row of its target whatever the tenant's row counter says, in bounded replies.

The sweep (``erase_sweep``) read row numbers ``1`` to the tenant's counter
``P:n``: a counter lowered or deleted behind the store's back hid every row
past it, so an erase whose indexes were damaged too left those rows (their
text, postings and canonical bytes) in Redis and reported ``complete``.
Rows are now also listed in ``P:rows`` (written with the row, in the same
script), and the sweep reads the rows that set holds past the counter.

One sweep call also sent back every matching row of 1,024 row numbers, up
to about 64 MiB with the longest fields: each reply is now capped at
``SWEEP_REPLY_CAP`` (1 MiB), the sweep resuming where a reply stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import attrs
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_erase_rows import KEY, OTHER, discovered, six_rows
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import (
    EraseStatus,
    EraseTarget,
    OpContext,
    SourceOwner,
)
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, erase, erase_sweep

pytestmark = pytest.mark.anyio

#: The cap the README documents for one sweep reply (RESP bytes on the wire).
REPLY_CAP: Final = 1024 * 1024


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _value_parts(kind: str, value: Any) -> list[bytes]:
    if kind == "string":
        return [value]
    if kind == "hash":
        return [part for pair in value.items() for part in pair]
    if kind == "zset":
        return [member for member, _ in value]
    return list(value or ())


async def _holding(admin: aioredis.Redis, tp: str, needle: bytes) -> list[bytes]:
    """Every key under ``tp`` whose name or value holds ``needle`` (a word of an erased text)."""
    found = []
    for key, (kind, value) in (await key_space(admin, tp)).items():
        if needle in key or any(needle in part for part in _value_parts(kind, value)):
            found.append(key)
    return found


@pytest.mark.parametrize("damage", ["lowered", "deleted"])
@pytest.mark.parametrize("level", ["session", "tenant"])
async def test_a_damaged_row_counter_hides_no_row_from_the_sweep(
    server: ServerProcess, admin: aioredis.Redis, damage: str, level: str
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.tenant("acme")
    try:
        digests, _ = await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        # Group 2 of s1 (row 3) and s1's document (row 5) are in no index any more, and the row
        # counter no longer reaches them: lowered to 2, or gone.
        for sid in ("group/acme/ana/s1/2", "doc/acme/ana/s1/~/~/notes"):
            await admin.hdel(f"{tp}:ids", sid)
            await admin.hdel(f"{tp}:rev", sid)
        await admin.zrem(f"{tp}:g:1", "3")
        if damage == "lowered":
            await admin.set(f"{tp}:n", "2")
        else:
            await admin.delete(f"{tp}:n")
        assert await _holding(admin, tp, b"qword2x") and await _holding(admin, tp, b"qdocmin")

        planned = await store.erase(target, _ctx(), dry_run=True)
        report = await store.erase(target, _ctx())

        assert report.status is EraseStatus.COMPLETE
        assert planned.sessions == report.sessions and planned.counts == report.counts
        mine = [list(s.groups) for s in report.sessions if s.session == KEY]
        assert mine == [list(enumerate(digests))]
        assert report.count("document") == (1 if level == "session" else 2)
        assert "damaged" in report.detail
        for needle in (b"qword2x", b"qdocmin"):
            assert await _holding(admin, tp, needle) == [], needle
        assert not await discovered(store, KEY, "qword2x") and not await discovered(store, KEY, "qdocmine")
        if level == "session":  # s2's rows stay
            assert await discovered(store, OTHER, "qother0x") and await discovered(store, OTHER, "qdocother")
        again = await store.erase(target, _ctx())
        assert again.removed == 0 and "damaged" not in again.detail
    finally:
        await store.aclose()


def _resp_size(reply: Any) -> int:
    """How many bytes ``reply`` takes in RESP2 (what the server sends for a script's reply)."""
    if isinstance(reply, list | tuple):
        return len(f"*{len(reply)}\r\n") + sum(_resp_size(part) for part in reply)
    if isinstance(reply, int):
        return len(f":{reply}\r\n")
    data = reply.encode() if isinstance(reply, str) else bytes(reply)
    return len(f"${len(data)}\r\n") + len(data) + 2


def _measuring(sizes: list[int]) -> Callable[..., Awaitable[Any]]:
    """``sweep_rows`` with its store's script calls wrapped: the size of each ``SWEEP`` reply is noted."""
    real = erase_sweep.sweep_rows

    async def sweep_rows(ops: erase.EraseOps, *args: Any, **kwargs: Any) -> Any:
        async def script(s: Any, keys: Sequence[str], argv: Sequence[Any], ctx: OpContext, op: str) -> Any:
            reply = await ops.script(s, keys, argv, ctx, op)
            if s is erase_sweep.SWEEP:
                sizes.append(_resp_size(reply))
            return reply

        return await real(attrs.evolve(ops, script=script), *args, **kwargs)

    return sweep_rows


@pytest.mark.parametrize(("dry_run", "counter"), [(True, "kept"), (False, "kept"), (False, "deleted")])
async def test_each_sweep_reply_stays_under_its_cap_with_the_longest_ids(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, dry_run: bool, counter: str
) -> None:
    # The longest ids the store writes: 256 characters, each escaped to 12 bytes ("%F0%9F%98%80"),
    # so a document's id is about 18.5 KB and its owner key about 12 KB. 48 documents of one
    # session, none reachable through an index, so the sweep finds every one.
    user, session, project, repo = (
        "\U0001f600" * 256,
        "\U0001f642" * 256,
        "\U0001f680" * 256,
        "\U0001f4a1" * 256,
    )
    owner = SourceOwner("acme", user, session, project, repo)
    names = [f"{i:03d}" + "\U0001f4c4" * 253 for i in range(48)]
    sizes: list[int] = []
    monkeypatch.setattr(erase, "sweep_rows", _measuring(sizes))
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.session("acme", user, session)
    try:
        for name in names:
            await store.index_document(owner, name, f"qlongdoc text of {name[:3]}", _ctx())
        tp = f"{prefix}:{{acme}}"
        await admin.delete(f"{tp}:ids", f"{tp}:rev")
        if counter == "deleted":  # every row is then found through the row set, in capped replies too
            await admin.delete(f"{tp}:n")

        report = await store.erase(target, _ctx(), dry_run=dry_run)

        assert report.status is EraseStatus.COMPLETE and "damaged" in report.detail
        assert report.count("document") == len(names)
        assert len(sizes) >= 2 and max(sizes) <= REPLY_CAP, sizes
        assert (await _holding(admin, tp, b"qlongdoc") == []) is not dry_run
    finally:
        await store.aclose()


def _counting(calls: list[int], limit: int) -> Callable[..., Awaitable[Any]]:
    """``sweep_rows`` with its ``SWEEP`` calls counted, failing past ``limit`` (a walk that would not end)."""
    real = erase_sweep.sweep_rows

    async def sweep_rows(ops: erase.EraseOps, *args: Any, **kwargs: Any) -> Any:
        async def script(s: Any, keys: Sequence[str], argv: Sequence[Any], ctx: OpContext, op: str) -> Any:
            if s is erase_sweep.SWEEP:
                calls.append(int(argv[1]))
                assert len(calls) <= limit, f"the sweep went on past {limit} calls: {calls[-4:]}"
            return await ops.script(s, keys, argv, ctx, op)

        return await real(attrs.evolve(ops, script=script), *args, **kwargs)

    return sweep_rows


@pytest.mark.parametrize(
    ("member", "score"),
    [("99999999999999", 99999999999999), ("junk", 99999999999999), ("4", 99999999999999)],
)
async def test_a_junk_member_of_the_row_set_never_makes_writes_push_the_counter_out(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, member: str, score: int
) -> None:
    # A new row went past the row set's highest score, whatever member held it: one junk entry there
    # (a number no row has, a non-number, a row's number with another score) made the next write take
    # row 10^14 and set the counter to it, and every erase of the tenant after that walked 10^14 row
    # numbers, 1,024 per call (about 10^11 calls: it never ended). The store wrote that counter itself.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    calls: list[int] = []
    monkeypatch.setattr(erase, "sweep_rows", _counting(calls, 8))
    try:
        await six_rows(store)
        tp = f"{prefix}:{{acme}}"
        await admin.zadd(f"{tp}:rows", {member: score})
        await store.index_document(SourceOwner("acme", "ana", "s1"), "later", "qlater text", _ctx())
        assert await discovered(store, KEY, "qlater") == ["doc/acme/ana/s1/~/~/later"]

        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())

        assert report.status is EraseStatus.COMPLETE and report.count("document") == 2
        assert await _holding(admin, tp, b"qlater") == [] and await _holding(admin, tp, b"qword0x") == []
        assert await discovered(store, OTHER, "qother0x") and await discovered(store, OTHER, "qdocother")
    finally:
        await store.aclose()
