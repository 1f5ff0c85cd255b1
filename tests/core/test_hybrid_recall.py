"""Hybrid recall (issue 25 item 3): an embedder beside a vector-keeping recall store, under the same bounds.

Covers: build-time refusals (an embedder without a recall store, or beside a
store without vectors, in code and in ``agentium check``); a source found by
its vector alone, end to end through ``runtime.run``; every bad embedder the
issue lists (wrong dimension, NaN, too many or too few vectors, one that
hangs), on the query path (discovery falls back to words, status
``partial``, the reason recorded) and on the indexing path (nothing stored,
``recall_embed_failed``); the query embedding's share (half) of the recall
latency budget; a 1 MB query; an index built with one model
queried with another; an empty conversation; and the fusion helper.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from agentium_harness import (
    CapabilityError,
    ConfigError,
    EmbeddingLimits,
    EmbeddingModelMismatchError,
    OpContext,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    Scope,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    Embedder,
    EmbedderCapabilities,
    EmbeddingModel,
    PluginRegistry,
    SourceRef,
    SourceVector,
    Vector,
    document_source_id,
    load_config,
    reciprocal_rank_fusion,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")

#: Concepts the planted embedder knows: words of one concept share a direction, so a
#: question and a turn that share no word still meet.
CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("tea", "coffee", "beverage", "drink", "drinks", "latte", "espresso"),
    ("boat", "sailing", "sailboats", "yacht", "harbour"),
    ("cat", "kitten", "felix", "pet"),
    ("weather", "rain", "storm", "sunny"),
)


class ConceptEmbedder(Embedder):
    """A planted embedder: one dimension per concept, plus one per text for what no concept covers."""

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(batch_embedding=True)
    max_batch = 8

    def __init__(self, model_id: str = "concepts-v1") -> None:
        self._model = EmbeddingModel(model_id, len(CONCEPTS) + 1)
        self.seen: list[str] = []
        self.calls = 0

    @property
    def model(self) -> EmbeddingModel:
        return self._model

    def vector(self, text: str) -> list[float]:
        words = {w.strip(".,!?:;'\"").lower() for w in text.split()}
        out = [float(sum(w in words for w in concept)) for concept in CONCEPTS]
        return [*out, 0.2]  # a little of a shared direction: no text is all zeros

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        ctx.raise_if_expired("embed")
        self.calls += 1
        self.seen.extend(texts)
        return [self.vector(t) for t in texts]


class WrongDimension(ConceptEmbedder):
    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return [[*v, 0.0] for v in await super().embed(texts, ctx)]


class ReturnsNaN(ConceptEmbedder):
    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return [[math.nan, *v[1:]] for v in await super().embed(texts, ctx)]


class TooMany(ConceptEmbedder):
    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        out = list(await super().embed(texts, ctx))
        return [*out, out[0]]


class TooFew(ConceptEmbedder):
    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return list(await super().embed(texts, ctx))[:-1]


class Hangs(ConceptEmbedder):
    #: Set at the end of a test (and by ``_release_hangs``): the worker threads still blocked return.
    release = threading.Event()

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        self.seen.extend(texts)
        # Blocks a worker thread (30 s, far past any deadline here) and ignores cancellation: the
        # engine must walk away.
        await anyio.to_thread.run_sync(Hangs.release.wait, 30.0)
        return [self.vector(t) for t in texts]


@pytest.fixture(autouse=True)
def _release_hangs() -> Iterator[None]:
    Hangs.release = threading.Event()
    yield
    Hangs.release.set()


class Deadlines(ConceptEmbedder):
    """Records the time each embedding call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[float] = []

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        left = ctx.time_left()
        assert left is not None
        self.given.append(left)
        return await super().embed(texts, ctx)


BAD_EMBEDDERS = {
    "wrong dimension": WrongDimension,
    "NaN": ReturnsNaN,
    "too many vectors": TooMany,
    "too few vectors": TooFew,
    "hangs": Hangs,
}

TURNS = ("I ordered a latte and an espresso this morning.", "Our sailboats are in the harbour.", "filler")


def _store(tmp_path: Path, name: str = "recall.db") -> SQLiteRecallStore:
    return SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / name), min_similarity=0.5))


def _runtime(store: object, embedder: Embedder | None, **kwargs: object) -> object:
    kwargs.setdefault("limits", RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    # Recall that must succeed is not raced against the 2 s default budget (a stalled machine would
    # make it partial); what times out here has a deadline of its own.
    kwargs.setdefault("recall_limits", RecallLimits(max_latency_s=30.0))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"] * 20),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,  # type: ignore[arg-type]
        embedder=embedder,
        **kwargs,  # type: ignore[arg-type]
    )


async def _seed(runtime: object, turns: Sequence[str] = TURNS) -> list[object]:
    results = []
    for turn in turns:
        results.append(await runtime.run(ANA, "s1", turn))  # type: ignore[attr-defined]
    return results


async def _vector_count(store: SQLiteRecallStore, query: str, embedder: ConceptEmbedder) -> int:
    """How many sources the vector side alone can reach (a query sharing no word with them)."""
    session = await store.open(Scope.of(ANA, "s1"), RecallLimits(), OpContext.with_timeout(30.0))
    try:
        found = await session.discover_hybrid(
            query, Vector.normalized(embedder.model, embedder.vector(query)), 8, OpContext.with_timeout(30.0)
        )
    finally:
        await session.close()
    return len(found)


# ---------------------------------------------------------------- build time


def test_an_embedder_beside_a_store_without_vectors_is_refused_at_build() -> None:
    with pytest.raises(CapabilityError, match="vector_indexing and hybrid_discovery"):
        create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=InMemoryRecallStore(),
            embedder=HashingEmbedder(),
        )


def test_an_embedder_without_a_recall_store_is_refused_at_build() -> None:
    with pytest.raises(CapabilityError, match="only serves hybrid recall"):
        create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            embedder=HashingEmbedder(),
        )


def test_an_embedder_that_declares_no_model_is_refused_at_build(tmp_path: Path) -> None:
    class NoModel(ConceptEmbedder):
        @property
        def model(self) -> EmbeddingModel:
            return "concepts"  # type: ignore[return-value]

    with pytest.raises(CapabilityError, match="must be an EmbeddingModel"):
        _runtime(_store(tmp_path), NoModel())


CONFIG = """
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
{recall}
[embedder]
plugin = "hashing"
[embedder.budget]
max_batch = 4
timeout_s = 2.5
"""


def test_check_says_a_store_without_vectors_cannot_serve_an_embedder(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG.format(recall='[recall]\nplugin = "memory"'), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, PluginRegistry.load())
    (issue,) = info.value.issues
    assert issue.path == "$.embedder"
    assert "does not declare vector_indexing and hybrid_discovery" in issue.message

    path.write_text(CONFIG.format(recall=""), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, PluginRegistry.load())
    assert [i.path for i in info.value.issues] == ["$.embedder"]
    assert "there is no [recall] section" in info.value.issues[0].message


def test_agentium_check_reports_the_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentium_harness._cli import main

    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG.format(recall='[recall]\nplugin = "memory"'), encoding="utf-8")
    status = main(["check", str(path)])
    out = capsys.readouterr()
    assert status != 0
    assert "$.embedder" in out.out + out.err
    assert "vector_indexing and hybrid_discovery" in out.out + out.err


async def test_a_config_with_an_embedder_builds_a_hybrid_runtime(tmp_path: Path) -> None:
    from agentium_harness import load_runtime

    db = tmp_path / "agentium.db"
    path = tmp_path / "agentium.toml"
    path.write_text(
        CONFIG.format(recall=f'[recall]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}'), encoding="utf-8"
    )
    runtime = load_runtime(path)
    async with runtime:
        assert runtime.hybrid is not None
        assert runtime.hybrid.limits == EmbeddingLimits(max_batch=4, timeout_s=2.5)
        assert runtime.hybrid.model.model == "agentium-hashing-v1"
        # `agentium check --probe` shows the embedder's health with the other adapters'.
        probed = dict(await runtime.probe())
        assert probed["embedder"] == "ok: hashing embedder ok: agentium-hashing-v1/256"


# ---------------------------------------------------------------- end to end


async def test_a_source_is_found_by_its_vector_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    embedder = ConceptEmbedder()
    runtime = _runtime(store, embedder)
    seeded = await _seed(runtime)
    assert all(not any(d.code.startswith("recall_") for d in r.diagnostics) for r in seeded)  # type: ignore[attr-defined]
    # "beverage" shares no word (nor stem) with the latte turn: only its vector finds it.
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")  # type: ignore[attr-defined]
    assert result.recall.status is RecallStatus.COMPLETE
    assert [ref.source_id for ref in result.recall.included] == ["group/acme/ana/s1/0"]
    # The same question without an embedder finds nothing: the words never meet.
    lexical = _runtime(_store(tmp_path, "lexical.db"), None)
    await _seed(lexical)
    plain = await lexical.run(ANA, "s1", "Which beverage did I have?")  # type: ignore[attr-defined]
    assert plain.recall.status is RecallStatus.NO_ACCESSIBLE_EVIDENCE
    await store.aclose()


async def test_a_question_about_nothing_in_history_still_finds_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    runtime = _runtime(store, ConceptEmbedder())
    await _seed(runtime)
    result = await runtime.run(ANA, "s1", "What is the capital of Peru?")  # type: ignore[attr-defined]
    assert result.recall.status is RecallStatus.NO_ACCESSIBLE_EVIDENCE
    await store.aclose()


async def test_an_empty_conversation_has_no_evidence_and_no_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    runtime = _runtime(store, ConceptEmbedder())
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")  # type: ignore[attr-defined]
    assert result.committed
    assert result.recall.status is RecallStatus.NO_ACCESSIBLE_EVIDENCE
    assert not [d for d in result.diagnostics if d.code.startswith("recall_") and d.code != "recall_note"]
    await store.aclose()


# ---------------------------------------------------------------- bad embedders


@pytest.mark.parametrize("fault", sorted(BAD_EMBEDDERS))
async def test_a_bad_embedder_on_the_query_path_leaves_lexical_recall_and_says_why(
    tmp_path: Path, fault: str
) -> None:
    store = _store(tmp_path)
    await _seed(_runtime(store, ConceptEmbedder()))  # a healthy index, vectors included
    bad = BAD_EMBEDDERS[fault]()
    # The hanging embedder is cut by its call deadline. The recall budget stays generous (``_runtime``):
    # lexical discovery must succeed after it. That the query's embedding gets only half of that
    # budget is test_a_query_embedding_gets_half_of_the_recall_latency_budget_left.
    limits = EmbeddingLimits(timeout_s=0.5) if fault == "hangs" else EmbeddingLimits()
    runtime = _runtime(
        store,
        bad,
        embedding_limits=limits,
        recall_policy=current_session_recall_policy(on_partial="continue"),
    )
    started = time.monotonic()
    result = await runtime.run(ANA, "s1", "Our sailboats: where are they?")  # type: ignore[attr-defined]
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"the run took {elapsed:.1f}s; the embedding's deadline is 0.5s, it hangs 30s"
    recall = result.recall
    assert recall.status is RecallStatus.PARTIAL
    assert any("query embedding failed" in u for u in recall.uncertainty), recall.uncertainty
    (warning,) = [d for d in result.diagnostics if d.code == "recall_embed_failed"]
    assert "discovery was lexical only" in warning.message
    # Discovery still ran, by words: the sailboats turn is the first evidence (its neighbour may follow,
    # by the context it indexes).
    assert next(ref.source_id for ref in recall.included) == "group/acme/ana/s1/1"
    # The default policy stops on partial: the truthful status reaches the host's decision.
    strict = _runtime(store, BAD_EMBEDDERS[fault](), embedding_limits=limits)
    stopped = await strict.run(ANA, "s1", "Our sailboats: where are they?")  # type: ignore[attr-defined]
    assert stopped.recall.status is RecallStatus.PARTIAL and not stopped.committed
    Hangs.release.set()  # before the loop ends: trio's run waits for the abandoned calls' threads
    await store.aclose()


async def test_a_query_embedding_gets_half_of_the_recall_latency_budget_left(tmp_path: Path) -> None:
    """So an embedder that hangs still leaves lexical discovery the other half."""
    store = _store(tmp_path)
    await _seed(_runtime(store, ConceptEmbedder()))
    embedder = Deadlines()
    runtime = _runtime(store, embedder, embedding_limits=EmbeddingLimits(timeout_s=600.0))
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")  # type: ignore[attr-defined]
    assert result.recall.status is RecallStatus.COMPLETE
    # The first call is the query's: half of the 30 s budget (the whole would be 30 s, the call's
    # own deadline 600 s); a stalled machine may have spent some of it before the call.
    assert 7.5 < embedder.given[0] <= 15.0, embedder.given
    await store.aclose()


@pytest.mark.parametrize("fault", sorted(BAD_EMBEDDERS))
async def test_a_bad_embedder_on_the_index_path_stores_nothing_and_reports_it(
    tmp_path: Path, fault: str
) -> None:
    store = _store(tmp_path)
    bad = BAD_EMBEDDERS[fault]()
    runtime = _runtime(
        store,
        bad,
        embedding_limits=EmbeddingLimits(timeout_s=0.5),
        # The query embedding fails too (partial): continue, so the turns commit and evict.
        recall_policy=current_session_recall_policy(on_partial="continue"),
    )
    started = time.monotonic()
    results = await _seed(runtime)
    assert time.monotonic() - started < 3 * (2.0 + 0.5 + 2.0), "each embedding call is bounded"
    codes = [d.code for r in results for d in r.diagnostics]  # type: ignore[attr-defined]
    assert "recall_embed_failed" in codes
    assert "recall_index_failed" not in codes  # the words were indexed
    assert all(r.committed for r in results)  # type: ignore[attr-defined]
    assert await _vector_count(store, "Which beverage did I have?", ConceptEmbedder()) == 0
    Hangs.release.set()  # before the loop ends: trio's run waits for the abandoned calls' threads
    await store.aclose()


async def test_a_one_megabyte_query_is_cut_before_it_reaches_the_embedder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await _seed(_runtime(store, ConceptEmbedder()))
    embedder = ConceptEmbedder()
    runtime = _runtime(store, embedder, embedding_limits=EmbeddingLimits(max_input_bytes=512))
    huge = "Which beverage did I have? " + "padding " * 130_000
    assert len(huge.encode()) > 1_000_000
    result = await runtime.run(ANA, "s1", huge)  # type: ignore[attr-defined]
    assert result.recall.status is RecallStatus.COMPLETE
    (sent,) = embedder.seen
    assert len(sent.encode()) <= 512
    assert sent.startswith("Which beverage")
    await store.aclose()


# ---------------------------------------------------------------- models


async def test_an_index_of_one_model_refuses_vectors_and_queries_of_another(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = ConceptEmbedder("concepts-v1")
    await _seed(_runtime(store, first))
    assert await _vector_count(store, "Which beverage did I have?", first) == 1
    other = ConceptEmbedder("concepts-v2")  # same dimension, another model
    ref = SourceRef("group/acme/ana/s1/0", "x")
    with pytest.raises(EmbeddingModelMismatchError, match="concepts-v1"):
        await store.index_vectors(
            [SourceVector(ref, Vector.normalized(other.model, other.vector("tea")))],
            OpContext.with_timeout(30.0),
        )
    # A query of the other model: recall fails, saying which model the index holds.
    runtime = _runtime(store, other)
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")  # type: ignore[attr-defined]
    assert result.recall.status is RecallStatus.FAILED
    (failed,) = [d for d in result.diagnostics if d.code == "recall_failed"]
    assert "EmbeddingModelMismatchError" in failed.message and "concepts-v1" in failed.message
    # Nothing was mixed in: the first model's vectors still answer.
    assert await _vector_count(store, "Which beverage did I have?", first) == 1
    await store.aclose()


async def test_a_stale_vector_is_never_stored_and_a_changed_document_loses_its_vector(tmp_path: Path) -> None:
    store = _store(tmp_path)
    embedder = ConceptEmbedder()
    owner = SourceOwner("acme")
    ctx = OpContext.with_timeout(30.0)
    ref = await store.index_document(owner, "menu", "We serve espresso.", ctx)
    stale = SourceRef(ref.source_id, "not-the-revision")
    assert (
        await store.index_vectors(
            [SourceVector(stale, Vector.normalized(embedder.model, embedder.vector("espresso")))], ctx
        )
        == 0
    )
    assert (
        await store.index_vectors(
            [SourceVector(ref, Vector.normalized(embedder.model, embedder.vector("espresso")))], ctx
        )
        == 1
    )
    assert await _vector_count(store, "Which beverage did I have?", embedder) == 1
    await store.index_document(owner, "menu", "We serve only water now.", ctx)
    assert await _vector_count(store, "Which beverage did I have?", embedder) == 0
    await store.aclose()


# ---------------------------------------------------------------- records and fusion


def test_vectors_refuse_nan_zero_and_the_wrong_dimension() -> None:
    model = EmbeddingModel("m", 3)
    for bad in ([math.nan, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0], [True, 0.0, 1.0], [math.inf, 0.0, 0.0]):
        with pytest.raises(ValueError):
            Vector.normalized(model, bad)
    v = Vector.normalized(model, [3.0, 0.0, 4.0])
    assert v.values == (0.6, 0.0, 0.8)
    assert Vector.from_bytes(model, v.to_bytes()).dot(v) == pytest.approx(1.0, abs=1e-6)


def test_reciprocal_rank_fusion_rewards_agreement_and_keeps_order_on_ties() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "d", "a"]])
    assert [sid for sid, _ in fused] == ["a", "c", "b", "d"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 63)
    assert [sid for sid, _ in reciprocal_rank_fusion([["x", "x", "y"]])] == ["x", "y"]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


# ---------------------------------------------------------------- the CLI


def _cli_config(tmp_path: Path, embedder: bool) -> Path:
    db = tmp_path / "agentium.db"
    text = (
        '[provider]\nplugin = "scripted"\noptions = { responses = ["noted"], cycle = true }\n'
        f'[archive]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n'
        f'[session_store]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n'
        f'[recall]\nplugin = "sqlite"\noptions = {{ path = "{db}", min_similarity = 0.15 }}\n'
        "[runtime.resident]\nmax_groups = 1\n"
    )
    if embedder:
        text += '[embedder]\nplugin = "hashing"\n'
    path = tmp_path / ("hybrid.toml" if embedder else "lexical.toml")
    path.write_text(text, encoding="utf-8")
    return path


async def _hashing_hits(tmp_path: Path, scope: Scope, query: str) -> list[str]:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "agentium.db"), min_similarity=0.15))
    embedder = HashingEmbedder()
    session = await store.open(scope, RecallLimits(), OpContext.with_timeout(30.0))
    try:
        vector = Vector.normalized(embedder.model, embedder.vector(query))
        # A query of no indexed word: only vectors can answer.
        found = await session.discover_hybrid("zzqx", vector, 8, OpContext.with_timeout(30.0))
    finally:
        await session.close()
        await store.aclose()
    return [c.ref.source_id for c in found]


async def test_recall_rebuild_and_add_store_vectors_with_an_embedder(tmp_path: Path) -> None:
    from agentium_harness import load_runtime
    from agentium_harness._cli import main

    lexical = load_runtime(_cli_config(tmp_path, embedder=False))
    async with lexical:
        for turn in ("I bought two sailboats last summer.", "filler one", "filler two"):
            await lexical.run(ANA, "s1", turn)
    scope = Scope.of(ANA, "s1")
    assert await _hashing_hits(tmp_path, scope, "sailing boat sailboats") == []  # indexed, not embedded
    hybrid = str(_cli_config(tmp_path, embedder=True))
    args = ["recall", "rebuild", hybrid, "--tenant", "acme", "--user", "ana", "--session", "s1"]
    assert await anyio.to_thread.run_sync(main, args) == 0
    assert "group/acme/ana/s1/0" in await _hashing_hits(tmp_path, scope, "sailing boat sailboats")
    doc = tmp_path / "harbour.txt"
    doc.write_text("The harbour master keeps the moorings list.", encoding="utf-8")
    assert await anyio.to_thread.run_sync(main, ["recall", "add", hybrid, "--tenant", "acme", str(doc)]) == 0
    expected = document_source_id(SourceOwner("acme"), "harbour.txt")
    assert expected in await _hashing_hits(tmp_path, scope, "harbour moorings master")
