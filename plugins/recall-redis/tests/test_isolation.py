"""Scope isolation with glob and delimiter injection ids; no KEYS or SCAN; injective keys (R13, D4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import OpContext, RecallLimits, Scope, SourceOwner, SourceRef, ValidationStatus
from agentium_harness.plugin_api import decode_segment
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.erase import ERASE_SCRIPTS, REV_SCAN
from agentium_recall_redis.erase_build import BUILD_IDS
from agentium_recall_redis.erase_scripts import FENCE
from agentium_recall_redis.erase_stagings import PEND_SCAN
from agentium_recall_redis.scripts import SCRIPTS

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[1] / "src" / "agentium_recall_redis"

# Ids that a naive store would turn into patterns or key delimiters: each must stay its own tenant.
INJECTION = [
    "*",
    "?",
    "[a-z]",
    "\\",
    ":",
    "a",
    "b",
    "a:b",
    "a*",
    "{a}",
    "}{",
    "a}b",
    "*:*",
    "[",
    "\\*",
    "%2A",
]


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _discover(store: RedisRecallStore, scope: Scope, query: str) -> list[str]:
    session = await store.open(scope, RecallLimits(), ctx())
    try:
        return [c.ref.source_id for c in await session.discover(query, 64, ctx())]
    finally:
        await session.close()


async def test_injection_ids_never_match_another_scope(store: RedisRecallStore) -> None:
    refs: dict[str, SourceRef] = {}
    for tenant in INJECTION:
        refs[tenant] = await store.index_document(SourceOwner(tenant), "doc", "shared zebra words", ctx())
        # The same ids as user, project and repository of one tenant, too.
        await store.index_document(SourceOwner("t", user=tenant), "doc", "shared zebra words", ctx())
        await store.index_document(SourceOwner("t", project=tenant), "doc", "shared zebra words", ctx())
    for tenant in INJECTION:
        scope = Scope(tenant, "u", "s")
        assert await _discover(store, scope, "zebra") == [refs[tenant].source_id]
        session = await store.open(scope, RecallLimits(), ctx())
        foreign = [r for t, r in refs.items() if t != tenant]
        assert list(await session.read(foreign, 4096, ctx())) == []
        checked = await session.validate(foreign, ctx())
        assert {v.status for v in checked} == {ValidationStatus.FORBIDDEN}
        await session.close()
        # Within tenant "t": a user/project id seen only by the scope that names it (and no "~" confusion).
        mine = await _discover(store, Scope("t", tenant, "s", project=tenant), "zebra")
        assert len(mine) == 2, (tenant, mine)
        others = await _discover(store, Scope("t", tenant + "x", "s"), "zebra")
        assert not set(mine) & set(others)


async def test_every_key_is_under_its_tenants_hash_tag(server: ServerProcess, admin: aioredis.Redis) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        for tenant in INJECTION:
            await store.index_document(SourceOwner(tenant, user=tenant), "d", "zebra quartz", ctx())
    finally:
        await store.aclose()
    # A test may look with SCAN (the prefix is ours and plain); the store itself never does.
    keys = [k.decode() async for k in admin.scan_iter(match=f"{prefix}:*", count=1000)]
    tags = set()
    for key in keys:
        match = re.fullmatch(rf"{re.escape(prefix)}:\{{([A-Za-z0-9_%-]+)\}}:[A-Za-z0-9_%:~/-]+", key)
        assert match, key  # no raw glob, brace, backslash or space in any key
        tags.add(decode_segment(match.group(1)))
    assert tags == set(INJECTION)


def test_the_store_never_uses_keys_or_scan_and_imports_only_public_core_modules() -> None:
    for path in SRC.glob("*.py"):
        text = path.read_text("utf-8")
        code = re.sub(r'"""[\s\S]*?"""', "", text)  # docstrings may name what the store does not do
        for command in ("KEYS", "SCAN", "SSCAN", "HSCAN", "ZSCAN", "FLUSHDB", "FLUSHALL"):
            found = re.findall(rf"""['"]{command}['"].*""", code, re.IGNORECASE)
            assert not found, (path.name, command)
        private = re.findall(r"^\s*(?:from|import)\s+agentium_harness\.(\S*)", text, re.MULTILINE)
        assert all(not part.startswith("_") and "._" not in part for part in private), (path.name, private)


def test_no_script_uses_keys_or_scan_but_erasures_walk_of_one_hash() -> None:
    # The scripts' Lua is in strings the scan above leaves out with the docstrings: read it here.
    for script in (*SCRIPTS, *ERASE_SCRIPTS):
        for command in ("KEYS", "SCAN", "SSCAN", "HSCAN", "ZSCAN", "FLUSHDB", "FLUSHALL"):
            found = re.findall(rf"""redis\.p?call\(\s*['"]{command}['"][^)]*""", script.source, re.IGNORECASE)
            if command == "HSCAN" and script is REV_SCAN:
                # Erasure walks one hash of the erased tenant (its source ids), never a key pattern.
                assert found == ["redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]"], found
                continue
            if command == "HSCAN" and script is BUILD_IDS:
                # So does the walk indexing a tenant written before the erasure index (erase_build).
                assert found == ["redis.call('HSCAN', KEYS[1], c, 'COUNT', count"], found
                continue
            if command == "HSCAN" and script is FENCE:
                # And the drop of ended erasure-fence holders, only when they reach their cap (erase_fence).
                assert found == ["redis.call('HSCAN', KEYS[2], cursor, 'COUNT', 100"], found
                continue
            if command == "HSCAN" and script is PEND_SCAN:
                # And the one walk of the tenant's bucket map for buckets made before their reverse entries.
                assert found == ["redis.call('HSCAN', P .. ':bk', ARGV[3], 'COUNT', tonumber(ARGV[4]"], found
                continue
            assert not found, (script.name, command)


async def test_commandstats_show_no_keys_or_scan_from_the_store(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    await admin.config_resetstat()
    owner = SourceOwner("*", user="?")
    await store.index_document(owner, "d", "zebra", ctx())
    await _discover(store, Scope("*", "?", "s"), "zebra")
    await store.delete_document(owner, "d", ctx())
    stats = await admin.info("commandstats")
    assert not {name for name in stats if name.split("_", 1)[1] in {"keys", "scan"}}, stats


async def test_a_row_claiming_another_owner_is_never_a_candidate(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    # Discovery trusted the row's owner field: a row of user u2 rewritten (outside the store) to
    # name u1, with its posting added to u1's bucket, was offered to u1 with u2's id and title.
    from agentium_recall_redis.keys import tenant_prefix

    mine = await store.index_document(SourceOwner("tA", user="u1"), "mine", "alpha zebra notes", ctx())
    theirs = await store.index_document(SourceOwner("tA", user="u2"), "theirs", "charlie zebra secret", ctx())
    tp = tenant_prefix(store.config.key_prefix, "tA")
    n_mine = (await admin.hget(f"{tp}:ids", mine.source_id)).decode()
    n_theirs = (await admin.hget(f"{tp}:ids", theirs.source_id)).decode()
    row_mine = await admin.hgetall(f"{tp}:m:{n_mine}")
    row_theirs = await admin.hgetall(f"{tp}:m:{n_theirs}")
    await admin.hset(f"{tp}:m:{n_theirs}", b"o", row_mine[b"o"])
    bucket_mine, bucket_theirs = row_mine[b"b"].decode(), row_theirs[b"b"].decode()
    for member, score in await admin.zrange(f"{tp}:p:{bucket_theirs}:zebra", 0, -1, withscores=True):
        await admin.zadd(f"{tp}:p:{bucket_mine}:zebra", {member: score})
    u1 = Scope("tA", "u1", "s")
    assert await _discover(store, u1, "zebra") == [mine.source_id]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"size", b"abc"),
        (b"size", b"-5"),
        (b"size", b"1e9"),
        (b"sid", b"\xff\xfe"),
        (b"rev", b"\xff"),
        (b"o", b"u1/\xff/~/~"),
    ],
)
async def test_a_row_with_a_damaged_field_is_skipped_not_a_crash(
    store: RedisRecallStore, admin: aioredis.Redis, field: bytes, value: bytes
) -> None:
    # A row field rewritten outside the store into something it never writes (a size that is not a
    # canonical decimal, an id or revision that is not UTF-8) raised a bare ValueError or
    # UnicodeDecodeError out of discover and discover_hybrid. Such a row is never offered; the
    # others still are.
    from agentium_harness.plugin_api import EmbeddingModel, SourceVector, Vector
    from agentium_recall_redis.keys import tenant_prefix

    owner = SourceOwner("tD", user="u1")
    damaged = await store.index_document(owner, "damaged", "zebra damaged notes", ctx())
    intact = await store.index_document(owner, "intact", "zebra intact notes", ctx())
    model = EmbeddingModel("axes", 2)
    vectors = [Vector.normalized(model, [1.0, 0.0]), Vector.normalized(model, [0.9, 0.1])]
    assert (
        await store.index_vectors(
            [SourceVector(damaged, vectors[0]), SourceVector(intact, vectors[1])], ctx()
        )
        == 2
    )
    tp = tenant_prefix(store.config.key_prefix, "tD")
    n = (await admin.hget(f"{tp}:ids", damaged.source_id)).decode()
    await admin.hset(f"{tp}:m:{n}", field, value)
    session = await store.open(Scope("tD", "u1", "s"), RecallLimits(), ctx())
    try:
        lexical = await session.discover("zebra notes", 16, ctx())
        hybrid = await session.discover_hybrid("zebra notes", vectors[0], 16, ctx())
    finally:
        await session.close()
    assert [c.ref.source_id for c in lexical] == [intact.source_id]
    assert [c.ref.source_id for c in hybrid] == [intact.source_id]


async def test_a_damaged_title_is_shown_with_replacement_characters(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    # Undecodable bytes (or UTF-8-encoded surrogates) in a title changed outside the store: shown
    # as U+FFFD, never as a surrogate a host cannot encode.
    from agentium_harness.plugin_api import EmbeddingModel, SourceVector, Vector
    from agentium_recall_redis.keys import tenant_prefix

    owner = SourceOwner("tT", user="u1")
    ref = await store.index_document(owner, "d", "zebra notes", ctx(), title="zebra")
    vector = Vector.normalized(EmbeddingModel("axes", 2), [1.0, 0.0])
    assert await store.index_vectors([SourceVector(ref, vector)], ctx()) == 1
    tp = tenant_prefix(store.config.key_prefix, "tT")
    n = (await admin.hget(f"{tp}:ids", ref.source_id)).decode()
    session = await store.open(Scope("tT", "u1", "s"), RecallLimits(), ctx())
    try:
        for title in (b"a\xffb", b"a\xed\xa0\x80b"):
            await admin.hset(f"{tp}:m:{n}", b"title", title)
            for found in (
                await session.discover("zebra notes", 16, ctx()),
                await session.discover_hybrid("zebra notes", vector, 16, ctx()),
            ):
                assert [c.ref.source_id for c in found] == [ref.source_id]
                found[0].title.encode("utf-8")  # no surrogate
    finally:
        await session.close()
