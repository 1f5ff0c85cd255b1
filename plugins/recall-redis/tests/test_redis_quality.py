"""Ranking that earns its place, and hybrid recall, in the Redis store (issue 25, items 2 and 3).

Words are stemmed and folded as in the SQLite store, stop words are dropped
from queries, a relevance floor keeps weak matches out before the limit,
and vectors beside the postings are fused with the words by reciprocal
rank. Every test runs on Redis and on Valkey (the ``server`` fixture).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    EmbeddingModelMismatchError,
    Message,
    MessageGroup,
    OpContext,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    Role,
    RuntimeLimits,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ArchiveReceipt, EmbeddingModel, RecallStore, SourceVector, Vector
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

OWNER, SCOPE = SourceOwner("q"), Scope("q", "u", "s")
MODEL = EmbeddingModel("axes", 4)


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


def axis(i: int, other: float = 0.0) -> Vector:
    values = [0.0] * 4
    values[i] = 1.0
    values[(i + 1) % 4] = other
    return Vector.normalized(MODEL, values)


@pytest.fixture
async def make_store(server: ServerProcess) -> AsyncIterator[Any]:
    """Stores of given options on the shared server, each its own key prefix; closed after the test."""
    made: list[RedisRecallStore] = []

    def make(**options: Any) -> RedisRecallStore:
        store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), **options))
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()


async def discover(store: RecallStore, query: str, n: int = 8) -> list[str]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        return [c.ref.source_id.rsplit("/", 1)[-1] for c in await session.discover(query, n, ctx())]
    finally:
        await session.close()


async def hybrid(store: RecallStore, query: str, vector: Vector, n: int = 8) -> list[str]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        found = await session.discover_hybrid(query, vector, n, ctx())
        return [c.ref.source_id.rsplit("/", 1)[-1] for c in found]
    finally:
        await session.close()


async def add(store: RecallStore, docs: dict[str, str]) -> dict[str, SourceRef]:
    return {doc: await store.index_document(OWNER, doc, text, ctx()) for doc, text in docs.items()}


# -- words -----------------------------------------------------------------------------------------


async def test_words_are_stemmed_and_folded_as_in_the_sqlite_store(make_store: Any) -> None:
    """``living`` finds ``lives``, ``cafe`` finds ``Café``, ``_`` separates words; excerpts stay whole.

    Before stemming, a question worded in another form of a word found nothing.
    """
    store = make_store(min_relevance=0.0)
    await add(store, {"a": "She lives by the sea.", "b": "Café au lait at noon.", "c": "the snake_case name"})
    assert await discover(store, "living") == ["a"]
    assert await discover(store, "LIVED") == ["a"]
    assert await discover(store, "cafe") == ["b"]
    assert await discover(store, "case") == ["c"]


async def test_stop_words_are_dropped_from_queries_unless_configured(make_store: Any, admin: Any) -> None:
    """A question of stop words only names no topic: nothing found, and no script call made.

    With ``stopwords = "none"`` they are words like any other (the index keeps every word).
    """
    english, none = make_store(), make_store(stopwords="none", min_relevance=0.0)
    for store in (english, none):
        await add(store, {"a": "What did they do about it?", "b": "Tulips in April."})
    before = english.round_trips
    assert await discover(english, "what did they do") == []
    assert english.round_trips == before
    assert await discover(english, "what about tulips") == ["b"]
    assert await discover(none, "what did they do") == ["a"]


async def test_the_relevance_floor_keeps_weak_matches_out_before_the_limit(make_store: Any) -> None:
    """A source sharing only a common word with the question is not evidence; with the floor at 0 it is.

    The floor is applied in the ranking script before the limit, so weak
    matches never take a place: with many of them and a limit of 20, only
    the source holding the question's rare words is returned.
    """
    docs = {f"w{i}": f"Caroline went shopping, round {i}." for i in range(30)}
    docs["strong"] = "Caroline adopted a greyhound named Biscuit."
    floored, open_ = make_store(), make_store(min_relevance=0.0)
    for store in (floored, open_):
        await add(store, docs)
    assert await discover(floored, "Which greyhound did Caroline adopt?", n=20) == ["strong"]
    assert (await discover(open_, "Which greyhound did Caroline adopt?", n=20))[0] == "strong"
    assert len(await discover(open_, "Which greyhound did Caroline adopt?", n=20)) == 20
    # A question about something never mentioned, sharing only the speaker's name: nothing at all.
    assert await discover(floored, "What does Caroline prefer to drink?") == []
    assert await discover(open_, "What does Caroline prefer to drink?")


async def test_config_refuses_bad_quality_options() -> None:
    for bad in (
        {"stopwords": "french"},
        {"min_relevance": 1.5},
        {"min_similarity": -2},
        {"vector_weight": 2},
    ):
        with pytest.raises(ValueError):
            RedisRecallConfig(**bad)


# -- vectors ---------------------------------------------------------------------------------------


async def vector_keys(admin: aioredis.Redis, store: RedisRecallStore) -> tuple[int, bytes | None]:
    """(members of the bucket's vector set, the tenant's vector count) behind the store's back."""
    tp = tenant_prefix(store.config.key_prefix, OWNER.tenant)
    return await admin.zcard(f"{tp}:vs:1"), await admin.get(f"{tp}:vc")


async def test_vectors_leave_with_their_row_on_replace_delete_and_staging(
    make_store: Any, admin: aioredis.Redis
) -> None:
    """A replaced, deleted or re-staged source loses its vector in the script that removes its row.

    A vector left behind would let old text be found by meaning, and keep the
    tenant's model count above zero forever.
    """
    store = make_store(max_terms_per_call=64)
    refs = await add(store, {"a": "alpha", "b": "beta", "big": " ".join(f"w{i}" for i in range(200))})
    stored = await store.index_vectors(
        [SourceVector(r, axis(i % 4)) for i, r in enumerate(refs.values())], ctx()
    )
    assert stored == 3 and await vector_keys(admin, store) == (3, b"3")
    await store.index_document(OWNER, "a", "alpha again", ctx())  # replaced: one call
    await store.delete_document(OWNER, "b", ctx())
    await store.index_document(
        OWNER, "big", " ".join(f"v{i}" for i in range(200)), ctx()
    )  # staged, committed
    assert await vector_keys(admin, store) == (0, b"0")
    assert await hybrid(store, "zzz", axis(0)) == []
    # With no vector left, the tenant takes another model.
    other = Vector.normalized(EmbeddingModel("other", 2), [1.0, 0.0])
    new = await store.index_document(OWNER, "c", "gamma", ctx())
    assert await store.index_vectors([SourceVector(new, other)], ctx()) == 1


async def test_a_model_mismatch_writes_nothing(make_store: Any, admin: aioredis.Redis) -> None:
    store = make_store()
    refs = await add(store, {"a": "alpha", "b": "beta"})
    await store.index_vectors([SourceVector(refs["a"], axis(0))], ctx())
    other = Vector.normalized(EmbeddingModel("axes", 3), [1.0, 0.0, 0.0])
    tp = tenant_prefix(store.config.key_prefix, OWNER.tenant)
    before = await admin.hgetall(f"{tp}:m:2")
    with pytest.raises(EmbeddingModelMismatchError, match="axes/4"):
        await store.index_vectors([SourceVector(refs["b"], other)], ctx())
    with pytest.raises(EmbeddingModelMismatchError):
        await store.index_vectors([SourceVector(refs["b"], axis(1)), SourceVector(refs["a"], other)], ctx())
    assert await admin.hgetall(f"{tp}:m:2") == before and await vector_keys(admin, store) == (1, b"1")


async def test_hybrid_discovery_is_one_round_trip_and_bounded_by_its_scan(make_store: Any) -> None:
    """One script call; an old source sharing no word is found by its vector only within the scan."""
    store = make_store(max_vector_scan=3)
    refs = await add(store, {f"d{i}": f"filler {i}" for i in range(6)})
    await store.index_vectors([SourceVector(r, axis(1)) for r in refs.values()], ctx())
    old = (await add(store, {"old": "sailboats"}))["old"]
    await store.index_vectors([SourceVector(old, axis(0))], ctx())
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        before = store.round_trips
        found = await session.discover_hybrid("nautical", axis(0), 8, ctx())
        assert store.round_trips - before == 1
        assert [c.ref for c in found][:1] == [old]
    finally:
        await session.close()
    newer = await add(store, {f"n{i}": f"filler {i}" for i in range(3)})
    await store.index_vectors([SourceVector(r, axis(1)) for r in newer.values()], ctx())
    assert "old" not in await hybrid(store, "nautical", axis(0))  # past the newest 3: not scanned
    assert "old" in await hybrid(store, "sailboats", axis(0))  # its words still find it


async def test_a_long_title_is_read_for_winners_only(make_store: Any) -> None:
    store = make_store()
    title = "T" * 5000
    ref = await store.index_document(OWNER, "titled", "kestrel", ctx(), title=title)
    await store.index_vectors([SourceVector(ref, axis(2))], ctx())
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        [found] = await session.discover_hybrid("kestrel", axis(2), 8, ctx())
        assert found.title == title
        tight = OpContext.with_timeout(30, remaining_bytes=len(ref.source_id) + len(ref.revision) + 10)
        assert await session.discover_hybrid("kestrel", axis(2), 8, tight) == []
    finally:
        await session.close()


def _group(seq: int, text: str) -> MessageGroup:
    return MessageGroup(seq, (Message(Role.USER, text), Message(Role.ASSISTANT, "")))


async def test_hybrid_recall_through_the_runtime_finds_a_turn_by_meaning(server: ServerProcess) -> None:
    """The docs' example on Redis: "sailing boat" shares no word nor stem with "sailboats"."""
    recall = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), min_similarity=0.15))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["Noted."] * 5),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        embedder=HashingEmbedder(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
    try:
        for turn in (
            "I bought two sailboats last summer.",
            "My cat is named Felix.",
            "The weather was awful.",
        ):
            await runtime.run(ana, "s1", turn)
        result = await runtime.run(ana, "s1", "Tell me about the sailing boat")
        assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
        assert [ref.source_id for ref in result.recall.included] == ["group/acme/ana/s1/0"]
    finally:
        await recall.aclose()


async def test_group_vectors_follow_index_groups(make_store: Any) -> None:
    """Archived groups take vectors as documents do (the engine's path after an eviction)."""
    store = make_store()
    key = SessionKey("q", "u", "s")
    groups = [_group(0, "harbour lights"), _group(1, "mountain trail")]
    receipts = [ArchiveReceipt(g.seq, g.digest, "test") for g in groups]
    assert await store.index_groups(key, groups, receipts, ctx()) == 2
    refs: Sequence[SourceRef] = [SourceRef(f"group/q/u/s/{g.seq}", g.digest) for g in groups]
    assert (
        await store.index_vectors([SourceVector(refs[0], axis(3)), SourceVector(refs[1], axis(0))], ctx())
        == 2
    )
    assert await hybrid(store, "nothing shared", axis(3)) == ["0"]


# -- the same answers as the SQLite store ----------------------------------------------------------

CONVERSATION = {
    "t0": "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "t1": "Melanie: That's wonderful! I've been painting a lot lately, landscapes mostly.",
    "t2": "Caroline: I'm researching adoption agencies; I'd love to give a child a home.",
    "t3": "Melanie: We camped by the lake with the kids last weekend.",
    "t4": "Caroline: My grandmother gave me a necklace from Sweden when I was young.",
    "t5": "Melanie: I ran a charity race for mental health on Saturday.",
    "t6": "Caroline: Counseling is the career I want to pursue, helping trans people.",
    "t7": "Melanie: The kids loved the dinosaur exhibit at the museum.",
}

QUESTIONS = (
    "When did Caroline go to the LGBTQ support group?",  # one source holds every word
    "What did Melanie paint?",  # "painting" is stemmed to "paint"
    "What career path has Caroline decided to pursue?",
    "Where did Melanie camp?",  # "camped"
    "What did Caroline research?",  # "researching"
    "Which museum exhibits did the kids love?",  # "exhibit", "loved"
    "What is Caroline's favourite pizza topping?",  # never mentioned: shares only the name
    "What did they do?",  # stop words only
    "What did Melanie do with the kids?",  # two sources
    "Caroline adoption counseling career",  # two sources, one word each
)


async def test_a_conversation_finds_what_the_sqlite_store_finds(make_store: Any, tmp_path: Any) -> None:
    """On one small conversation, the Redis store returns the SQLite store's sources for each question.

    Same words (stemmed, folded, stop words dropped), same idf, same floor:
    the same sources pass the floor, and the best one is the same. A question
    about something never mentioned finds nothing in either.
    """
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

    redis_store = make_store()
    sqlite_store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    try:
        await add(redis_store, CONVERSATION)
        for doc, text in CONVERSATION.items():
            await sqlite_store.index_document(OWNER, doc, text, ctx())
        for question in QUESTIONS:
            found = await discover(redis_store, question)
            expected = await discover(sqlite_store, question)
            assert sorted(found) == sorted(expected), question
            assert found[:1] == expected[:1], question
        assert await discover(redis_store, "What did Melanie paint?") == ["t1"]
        assert await discover(redis_store, "What is Caroline's favourite pizza topping?") == []
    finally:
        await sqlite_store.aclose()


async def test_hybrid_discovery_ranks_a_conversation_as_the_sqlite_store_does(
    make_store: Any, tmp_path: Any
) -> None:
    """With the same vectors, both stores fuse the same two rankings into the same order.

    The vectors come from the built-in hashing embedder; one question shares
    no word with the conversation ("sailing boat" against "sailboats"), so
    only its vector finds anything, and one is found by both its words and
    its vector.
    """
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

    embedder = HashingEmbedder()
    texts = {**CONVERSATION, "t8": "Melanie: We bought two sailboats for the summer."}
    options = {"min_similarity": 0.15}
    redis_store = make_store(**options)
    sqlite_store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db"), **options))
    try:
        for store in (redis_store, sqlite_store):
            refs = await add(store, texts)
            vectors = [
                SourceVector(refs[doc], Vector.normalized(embedder.model, embedder.vector(text)))
                for doc, text in texts.items()
            ]
            assert await store.index_vectors(vectors, ctx()) == len(texts)
        for question in ("Tell me about the sailing boat", "What did Melanie paint?"):
            query = Vector.normalized(embedder.model, embedder.vector(question))
            found = await hybrid(redis_store, question, query)
            assert found == await hybrid(sqlite_store, question, query), question
            assert found[0] == ("t8" if "boat" in question else "t1"), question
    finally:
        await sqlite_store.aclose()


# -- neighbouring context ---------------------------------------------------------------------------

TURNS = (
    "Caroline: Where did you and the kids go on holiday last summer?",
    "Melanie: We drove down to Lisbon and stayed by the sea for two weeks.",
    "Caroline: My grandmother gave me a necklace from Sweden.",
    "Melanie: Yesterday I finished a painting of the harbour.",
)


def _turn(seq: int) -> MessageGroup:
    return MessageGroup(seq, (Message(Role.USER, TURNS[seq]),))


async def _index_turns(store: RecallStore, seqs: Sequence[int]) -> None:
    key = SessionKey("q", "u", "s")
    groups = [_turn(seq) for seq in seqs]
    receipts = [ArchiveReceipt(g.seq, g.digest, "test") for g in groups]
    assert await store.index_groups(key, groups, receipts, ctx()) == len(groups)


async def test_a_turn_is_found_through_its_neighbours_words_as_in_the_sqlite_store(
    make_store: Any, tmp_path: Any
) -> None:
    """The answer "We drove down to Lisbon" shares no word with its question; its neighbour's words find it.

    Each archived group is indexed with the last line of the group before it
    and the first of the group after it, at half weight, as the SQLite store
    does: the question's words find the question's turn first and its answer
    next, whichever was indexed first (here the answer, as a catch-up would),
    and a turn two away is not found through it. Before, the answer was not
    found at all.
    """
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

    redis_store = make_store()
    sqlite_store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    try:
        for store in (redis_store, sqlite_store):
            await _index_turns(store, [1, 3])  # the answer first, its question later
            await _index_turns(store, [0, 2])
        question = "Where did the family go on holiday last summer?"
        found = await discover(redis_store, question)
        assert found == ["0", "1"]
        assert found == await discover(sqlite_store, question)
        # Context weighs half: a turn holding the words itself ranks above those holding them as context,
        # and the last turn (no group after it) lends its words to the one before only.
        necklace = await discover(redis_store, "necklace Sweden")
        assert necklace[0] == "2" and sorted(necklace[1:]) == ["1", "3"]
        assert await discover(redis_store, "harbour painting") == ["3", "2"]
        for query in ("necklace Sweden", "harbour painting"):
            expected = await discover(sqlite_store, query)
            found = await discover(redis_store, query)
            assert (found[0], sorted(found)) == (expected[0], sorted(expected)), query
    finally:
        await sqlite_store.aclose()
