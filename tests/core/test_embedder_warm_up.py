"""Warming the embedder when the runtime starts (``Embedder.warm_up``, ``HarnessRuntime.start``).

A one-shot process (``agentium run``) used to load the embedder's model on
the first query, inside that query's share of the recall latency budget, so
every turn's recall came back ``partial`` with its evidence missing. Covers:
the first turn after ``async with runtime`` (and ``BlockingRuntime``) is
complete; without a start it is still partial (the model loads in the
query's budget, as before); a warm-up that raises or hangs past
``warmup_timeout_s`` only logs a WARNING, the start succeeds and the next
query still works; an embedder without a warm-up and a runtime without an
embedder start as before; only the first start warms.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from agentium_harness import (
    BlockingRuntime,
    EmbeddingLimits,
    HarnessRuntime,
    OpContext,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import Embedder, EmbedderCapabilities, EmbeddingModel

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
MODEL = EmbeddingModel("concepts-v1", 3)
DRINKS = ("latte", "espresso", "beverage", "coffee")
#: What loading the "model" costs.
LOAD_S = 1.0
#: The query embedding's deadline where a cold model must not fit in it: a tenth of LOAD_S. The recall
#: budget itself stays generous (30 s) everywhere: recall that must succeed is not raced against it.
COLD_QUERY_S = 0.1


def _vector(text: str) -> list[float]:
    words = {w.strip(".,!?").lower() for w in text.split()}
    return [float(sum(w in words for w in DRINKS)), 0.0, 0.2]


class PlainEmbedder(Embedder):
    """Fast, nothing to load, no warm-up of its own (the port's default)."""

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(batch_embedding=True)

    def __init__(self) -> None:
        self.calls = 0

    @property
    def model(self) -> EmbeddingModel:
        return MODEL

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        ctx.raise_if_expired("embed")
        self.calls += 1
        return [_vector(t) for t in texts]


class LazyModel(PlainEmbedder):
    """Loads its model (LOAD_S) on the first call, embed or warm-up, as a model file is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.warm_ups = 0
        self._loaded = False

    async def _load(self) -> None:
        if not self._loaded:
            self.loads += 1
            await anyio.sleep(LOAD_S)
            self._loaded = True

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        ctx.raise_if_expired("embed")
        await self._load()
        return await super().embed(texts, ctx)

    async def warm_up(self, ctx: OpContext) -> None:
        ctx.raise_if_expired("embedder warm-up")
        self.warm_ups += 1
        await self._load()


class WarmUpFails(LazyModel):
    """The warm-up raises (a bad model file, say); embed itself is fast and works."""

    async def warm_up(self, ctx: OpContext) -> None:
        self.warm_ups += 1
        raise RuntimeError("the model file is damaged")

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        return await PlainEmbedder.embed(self, texts, ctx)


class WarmUpHangs(WarmUpFails):
    """The warm-up blocks a worker thread and ignores cancellation: the runtime must walk away."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def warm_up(self, ctx: OpContext) -> None:
        self.warm_ups += 1
        await anyio.to_thread.run_sync(self.release.wait, 30.0)  # far past warmup_timeout_s


def _store(tmp_path: Path) -> SQLiteRecallStore:
    return SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db"), min_similarity=0.5))


def _runtime(store: SQLiteRecallStore, embedder: Embedder, **kwargs: object) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"] * 20),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        embedder=embedder,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        recall_limits=RecallLimits(max_latency_s=30.0),
        **kwargs,  # type: ignore[arg-type]
    )


async def _seeded(tmp_path: Path) -> SQLiteRecallStore:
    """A recall index an earlier process built: the latte turn, archived and embedded."""
    store = _store(tmp_path)
    earlier = _runtime(
        store, PlainEmbedder(), recall_policy=current_session_recall_policy(on_partial="continue")
    )
    for turn in ("I ordered a latte and an espresso this morning.", "filler one", "filler two"):
        await earlier.run(ANA, "s1", turn)
    await earlier.aclose()
    return store


async def test_the_first_turn_after_start_has_complete_recall(tmp_path: Path) -> None:
    store = await _seeded(tmp_path)
    embedder = LazyModel()
    async with _runtime(store, embedder) as runtime:  # the one-shot process: `agentium run`
        assert (embedder.warm_ups, embedder.loads) == (1, 1)
        result = await runtime.run(ANA, "s1", "Which beverage did I have?")
    assert result.recall.status is RecallStatus.COMPLETE
    assert [ref.source_id for ref in result.recall.included] == ["group/acme/ana/s1/0"]
    assert not [d for d in result.diagnostics if d.code == "recall_embed_failed"]
    assert embedder.loads == 1  # the query did not load it again
    await store.aclose()


async def test_without_a_start_the_first_query_loads_the_model_inside_its_budget(tmp_path: Path) -> None:
    # What every `agentium run` did before: the load does not fit the query's embedding deadline.
    store = await _seeded(tmp_path)
    runtime = _runtime(store, LazyModel(), embedding_limits=EmbeddingLimits(timeout_s=COLD_QUERY_S))
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")
    assert result.recall.status is RecallStatus.PARTIAL
    assert [d for d in result.diagnostics if d.code == "recall_embed_failed"]
    await runtime.aclose()
    await store.aclose()


def test_a_blocking_runtime_warms_the_embedder_when_it_starts(tmp_path: Path) -> None:
    store = anyio.run(_seeded, tmp_path)
    embedder = LazyModel()
    with BlockingRuntime(_runtime(store, embedder)) as blocking:
        assert embedder.loads == 1
        result = blocking.run(ANA, "s1", "Which beverage did I have?")
    assert result.recall.status is RecallStatus.COMPLETE
    anyio.run(store.aclose)


@pytest.mark.parametrize("embedder_class", [WarmUpFails, WarmUpHangs])
async def test_a_failed_warm_up_logs_a_warning_and_the_start_and_next_query_work(
    tmp_path: Path, embedder_class: type[WarmUpFails], caplog: pytest.LogCaptureFixture
) -> None:
    store = await _seeded(tmp_path)
    embedder = embedder_class()
    runtime = _runtime(store, embedder, embedding_limits=EmbeddingLimits(warmup_timeout_s=0.3))
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        diagnostics = await runtime.start()
    assert time.monotonic() - began < 10  # bounded by warmup_timeout_s, not by the 30 s hang
    assert [d.code for d in diagnostics] == ["embedder_warm_up_failed"]
    (record,) = [r for r in caplog.records if "warm-up failed" in r.getMessage()]
    assert record.levelno == logging.WARNING
    result = await runtime.run(ANA, "s1", "Which beverage did I have?")
    assert result.recall.status is RecallStatus.COMPLETE
    assert await runtime.start() == ()  # only the first start warms
    assert embedder.warm_ups == 1
    if isinstance(embedder, WarmUpHangs):
        embedder.release.set()  # before the loop ends: trio's run waits for the abandoned thread
    await runtime.aclose()
    await store.aclose()


async def test_an_embedder_without_a_warm_up_and_a_runtime_without_one_start_as_before(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    embedder = PlainEmbedder()
    async with _runtime(store, embedder) as runtime:
        assert await runtime.start() == ()
    assert embedder.calls == 0  # the port's default warm-up is not even called
    plain = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    async with plain:
        assert await plain.start() == ()
    await store.aclose()
