"""Erasure on a real Redis and Valkey: every key of the scope goes, no other tenant's key changes.

The contract suite's erasure tests (test_contract.py, with a byte-level
``raw_storage`` over every key) check the port's behaviour; here the keys
themselves: another tenant's key space is byte-identical after the erase,
the store sent no ``KEYS`` or ``SCAN`` (the server's command statistics
say so), a staged source's postings, deletion tombstones and emptied
buckets go, a tenant erasure leaves no key of the tenant but settlement
tokens, and a runtime erasing a session leaves none of its words in Redis.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from net_proxy import BlackHoleProxy
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EmbeddingModel,
    EraseReport,
    EraseStatus,
    OpContext,
    PhysicalErasure,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
    SourceVector,
    Vector,
)
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, RedisRecallTimeoutError

pytestmark = pytest.mark.anyio

ERASED = SessionKey("acme", "ana", "s1")
SIBLING = SessionKey("acme", "ana", "s10")
OTHER_TENANT = SessionKey("acme2", "ana", "s1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


async def erase_fully(
    store: RedisRecallStore, target: EraseTarget, max_items: int = 1000
) -> list[EraseReport]:
    """Call ``erase`` until it reports ``complete``; every report."""
    reports: list[EraseReport] = []
    for _ in range(1000):
        reports.append(await store.erase(target, _ctx(), max_items=max_items))
        if reports[-1].status is EraseStatus.COMPLETE:
            return reports
        assert reports[-1].removed > 0, "partial without progress"
    raise AssertionError("erase never completed")


async def _index(store: RedisRecallStore, key: SessionKey, texts: list[str]) -> None:
    groups = [plain_group(seq, f" {text}") for seq, text in enumerate(texts)]
    receipts = [ArchiveReceipt(g.seq, g.digest, f"test://{g.seq}") for g in groups]
    await store.index_groups(key, groups, receipts, _ctx())


async def _found(store: RedisRecallStore, key: SessionKey, word: str) -> list[str]:
    session = await store.open(Scope(key.tenant, key.user, key.session), RecallLimits(), _ctx())
    try:
        return [c.ref.source_id for c in await session.discover(word, 8, _ctx())]
    finally:
        await session.close()


def _dump(space: dict[bytes, Any]) -> bytes:
    return b"\n".join(key + b"=" + repr(value).encode() for key, value in sorted(space.items()))


async def _stat(admin: aioredis.Redis, command: str) -> int:
    stats = await admin.info("commandstats")
    entry = stats.get(f"cmdstat_{command}")
    return int(entry["calls"]) if isinstance(entry, dict) else 0


async def test_erasing_a_session_removes_its_keys_and_no_other_tenants_key_changes(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _index(store, ERASED, ["qzebra01erased alpha", "qzebra02erased beta"])
        await _index(store, SIBLING, ["qkept01sibling gamma"])
        await _index(store, OTHER_TENANT, ["qkept02tenant delta"])
        await store.index_document(SourceOwner("acme", "ana", "s1"), "n", "qzebra03doc notes", _ctx())
        await store.index_document(SourceOwner("acme", "ana"), "p", "qkept03user profile", _ctx())
        other_before = _dump(await key_space(admin, f"{prefix}:{{acme2}}"))
        acme_before = await key_space(admin, f"{prefix}:{{acme}}")
        keys, scans = await _stat(admin, "keys"), await _stat(admin, "scan")

        reports = await erase_fully(store, EraseTarget.session("acme", "ana", "s1"))

        assert await _stat(admin, "keys") == keys and await _stat(admin, "scan") == scans
        # Within the tenant, every key left is byte-identical to what it was, but the shared hashes and
        # the row set, which only lost the erased sources' fields and rows; nothing new appeared but
        # settlement tokens.
        for key, (kind, value) in (await key_space(admin, f"{prefix}:{{acme}}")).items():
            if b":w:" in key:
                continue
            assert key in acme_before, key
            before_kind, before_value = acme_before[key]
            if kind == "hash" and key.rsplit(b":", 1)[1] in (b"ids", b"rev", b"bk", b"kb", b"bn"):
                assert value.items() <= before_value.items(), key
            elif kind == "zset" and key.endswith(b":rows"):  # the tenant's row set lost the erased rows
                assert set(value) < set(before_value), key
            elif kind == "zset" and key.rsplit(b":", 2)[1] in (b"is", b"ir"):  # the user's erasure index
                assert set(value) <= set(before_value), key
            elif key.endswith(b":v"):  # layout 4, marked erased by this version: older writers refuse it
                assert (before_kind, before_value, kind, value) == ("string", b"4", "string", b"5"), key
            else:
                assert (kind, value) == (before_kind, before_value), key

        assert sum(r.count("group") for r in reports) == 2 and sum(r.count("document") for r in reports) == 1
        assert reports[-1].physical is PhysicalErasure.UNREFERENCED and "BGREWRITEAOF" in reports[-1].detail
        assert _dump(await key_space(admin, f"{prefix}:{{acme2}}")) == other_before
        everything = _dump(await key_space(admin, prefix))
        for word in (b"qzebra01erased", b"qzebra02erased", b"qzebra03doc", b"alpha", b"beta", b"notes"):
            assert word not in everything, word
        for word in (b"qkept01sibling", b"qkept02tenant", b"qkept03user"):
            assert word in everything, word
        # The erased session's bucket went with its owner key; the sibling's is still there.
        acme = _dump(await key_space(admin, f"{prefix}:{{acme}}"))
        assert b"ana/s1/~/~" not in acme and b"ana/s10/~/~" in acme
        assert await _found(store, SIBLING, "qkept01sibling")
        assert await _found(store, ERASED, "qkept03user")
        assert not await _found(store, ERASED, "qzebra01erased")
    finally:
        await store.aclose()


@pytest.mark.parametrize(("field", "value"), [(b"seq", b"abc"), (b"kind", b"zz"), (b"seq", b"7")])
async def test_a_rows_damaged_kind_or_seq_neither_stops_nor_falsifies_the_erasure(
    server: ServerProcess, admin: aioredis.Redis, field: bytes, value: bytes
) -> None:
    # The report took a removed row's kind and seq from its row hash: a seq changed outside the store
    # raised a bare ValueError (after the real erase had removed the rows, so no report was ever
    # given), and a changed kind reported the group as a document and left it in the session's group
    # set. Both now come from the source id the store wrote.
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _index(store, ERASED, ["qzebra01erased alpha", "qzebra02erased beta"])
        tp = f"{prefix}:{{acme}}"
        group0 = plain_group(0, " qzebra01erased alpha")
        await admin.hset(f"{tp}:m:1", field, value)
        target = EraseTarget.session("acme", "ana", "s1")
        for dry_run in (True, False):
            report = await store.erase(target, _ctx(), dry_run=dry_run)
            assert report.count("group") == 2 and report.count("document") == 0
            assert [s.groups[0] for s in report.sessions] == [(0, group0.digest)]
        left = await key_space(admin, tp)
        assert [
            k for k in left if b":w:" not in k and not k.endswith((b":n", b":nb", b":v", b":ixm", b":rb"))
        ] == []
        assert await store.unindexed_groups(ERASED, 2, 8, _ctx()) == [0, 1]
    finally:
        await store.aclose()


async def test_a_staged_source_a_tombstone_and_queued_garbage_all_leave(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    """A source with more words than one call takes, and a deleted one's tombstone, leave no key."""
    prefix = new_prefix()
    config = RedisRecallConfig(url=server.url, key_prefix=prefix, max_terms_per_call=64)
    store = RedisRecallStore(config)
    try:
        many = " ".join(f"qword{i}x" for i in range(300))  # staged over several calls
        await store.index_document(SourceOwner("acme", "ana", "s1"), "big", many, _ctx())
        await store.index_document(SourceOwner("acme", "ana", "s1"), "big2", many + " more", _ctx())
        # Replacing it queues the old row's 300 postings as garbage (more than a call removes).
        await store.index_document(SourceOwner("acme", "ana", "s1"), "big", "short now", _ctx())
        await store.index_document(SourceOwner("acme", "ana", "s1"), "gone", "qdeleted7 text", _ctx())
        assert await store.delete_document(SourceOwner("acme", "ana", "s1"), "gone", _ctx())
        await store.index_document(SourceOwner("acme", "bob"), "b", "qbob9 stays", _ctx())

        reports = await erase_fully(store, EraseTarget.user("acme", "ana"), max_items=1)

        assert [r.status for r in reports][-1] is EraseStatus.COMPLETE
        assert sum(r.count("document") for r in reports) == 2
        everything = _dump(await key_space(admin, prefix))
        assert b"qword" not in everything and b"qdeleted7" not in everything
        assert b"doc/acme/ana/" not in everything, "a source id (a revision or its tombstone) was left"
        assert b"qbob9" in everything
    finally:
        await store.aclose()


async def test_a_tenant_erasure_leaves_no_key_of_the_tenant_but_settlement_tokens(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _index(store, ERASED, ["one", "two", "three"])
        await _index(store, SessionKey("acme", "bob", "x"), ["four"])
        await store.index_document(SourceOwner("acme"), "t", "tenant wide", _ctx())
        await _index(store, OTHER_TENANT, ["kept"])
        other_before = _dump(await key_space(admin, f"{prefix}:{{acme2}}"))

        await erase_fully(store, EraseTarget.tenant("acme"), max_items=2)

        left = sorted(await key_space(admin, f"{prefix}:{{acme}}"))
        assert all(b":w:" in key for key in left), left
        for key in left:  # a token holds the outcome of a write, never an id or a word
            assert (await admin.get(key) or b"").startswith((b"done:", b"fenced"))
        assert _dump(await key_space(admin, f"{prefix}:{{acme2}}")) == other_before
        # The tenant starts afresh: indexing and recall work again.
        await _index(store, ERASED, ["qagain7x"])
        assert await _found(store, ERASED, "qagain7x")
    finally:
        await store.aclose()


async def test_a_runtime_erasing_a_session_leaves_none_of_its_words_in_redis(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    ana = VerifiedIdentity("acme", "ana", "test-auth")
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), statement="DSR-9")
    try:
        for i in range(4):
            assert (await runtime.run(ana, "s1", f"my code is qsecret{i}zz")).committed
            assert (await runtime.run(ana, "s2", f"my code is qkeep{i}zz")).committed
        assert b"qsecret0zz" in _dump(await key_space(admin, prefix))

        result = await runtime.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=operator
        )

        tombstone = result.tombstone
        assert tombstone is not None and tombstone.state is ErasureState.COMPLETE
        recall = tombstone.store("recall")
        assert recall is not None and recall.physical is PhysicalErasure.UNREFERENCED
        assert recall.counts and tombstone.groups_removed >= 3
        everything = _dump(await key_space(admin, prefix))
        assert b"qsecret" not in everything
        assert b"qkeep0zz" in everything
    finally:
        await runtime.aclose()


async def test_an_erased_sources_vector_goes_and_the_vector_count_follows(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    model = EmbeddingModel("test-axes", 4)
    axis = [Vector.normalized(model, [1.0 if j == i else 0.0 for j in range(4)]) for i in range(2)]
    try:
        gone = await store.index_document(SourceOwner("acme", "ana", "s1"), "d", "qerased5 text", _ctx())
        kept = await store.index_document(SourceOwner("acme", "ana", "s2"), "d", "qkept5 text", _ctx())
        assert (
            await store.index_vectors([SourceVector(gone, axis[0]), SourceVector(kept, axis[1])], _ctx()) == 2
        )
        await erase_fully(store, EraseTarget.session("acme", "ana", "s1"))
        space = await key_space(admin, f"{prefix}:{{acme}}")
        assert space[f"{prefix}:{{acme}}:vc".encode()] == ("string", b"1")
        vector_sets = [v for k, v in space.items() if b":vs:" in k]
        assert len(vector_sets) == 1 and len(vector_sets[0][1]) == 1
        blobs = [v[1].get(b"vec") for k, v in space.items() if b":m:" in k]
        assert blobs == [axis[1].to_bytes()]
    finally:
        await store.aclose()


async def test_a_write_cut_off_in_a_black_hole_cannot_bring_an_erased_source_back(
    proxy: BlackHoleProxy, admin: aioredis.Redis
) -> None:
    """A write the store cut off, still held in a black hole, never lands after an erase of its scope.

    The write's copy waits in the hole while new connections flow; the erase
    first waits for the write's settlement (which fences it), then erases.
    When the network heals the held copy reaches the server and does nothing.
    """
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=prefix, settle_timeout_s=30.0))
    owner = SourceOwner("acme", "ana", "s1")
    try:
        await store.health(_ctx())
        await store.index_document(owner, "kept", "qearlier3 text", _ctx())
        proxy.black_hole()
        with pytest.raises(RedisRecallTimeoutError, match="settling goes on in the background"):
            await store.index_document(owner, "late", "qlatecopy7 text", OpContext.with_timeout(0.5))
        proxy.freeze_existing()  # the write's copy stays in the hole; new connections flow
        await erase_fully(store, EraseTarget.session("acme", "ana", "s1"))
        proxy.heal()
        await anyio.sleep(0.5)  # the held copy has reached the server by now
        raw = _dump(await key_space(admin, prefix))
        assert b"qlatecopy7" not in raw and b"qearlier3" not in raw
        assert not await _found(store, SessionKey("acme", "ana", "s1"), "qlatecopy7")
    finally:
        await store.aclose()


async def _crashed_staging(admin: aioredis.Redis, tenant: str, bucket: str, row: int, word: str) -> None:
    """What a writer that began staging a large source and died leaves: a lease, a term list, postings."""
    far = int(time.time() * 1000) + 600_000  # its lease has not run out
    await admin.zadd(f"{tenant}:pend", {f"{bucket} {row}": far})
    await admin.rpush(f"{tenant}:k:{row}", word)
    await admin.zadd(f"{tenant}:p:{bucket}:{word}", {str(row): row * 1024 + 1})


async def test_a_stagings_postings_of_the_erased_owner_go_and_another_owners_stay(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    tenant = f"{prefix}:{{acme}}"
    try:
        await store.index_document(SourceOwner("acme", "ana", "s1"), "a", "qana1 text", _ctx())
        await store.index_document(SourceOwner("acme", "bob", "s1"), "b", "qbob1 text", _ctx())
        buckets = {k.decode(): v.decode() for k, v in (await admin.hgetall(f"{tenant}:bk")).items()}
        await _crashed_staging(admin, tenant, buckets["ana/s1/~/~"], 900, "qstagedana7")
        await _crashed_staging(admin, tenant, buckets["bob/s1/~/~"], 901, "qstagedbob7")

        await erase_fully(store, EraseTarget.session("acme", "ana", "s1"))

        raw = _dump(await key_space(admin, prefix))
        assert b"qstagedana7" not in raw and b"qana1" not in raw
        assert b"qstagedbob7" in raw and b"qbob1" in raw
        assert [m.decode() for m in await admin.zrange(f"{tenant}:pend", 0, -1)] == [
            f"{buckets['bob/s1/~/~']} 901"
        ]
    finally:
        await store.aclose()
