"""``MiniLMEmbedder.warm_up``: the model loads when the runtime starts, not inside the first query's budget.

A one-shot ``agentium run`` used to load the model file (about 0.7 s) on the
first query, inside its share of the recall latency budget (about 1 s), so
recall came back partial. Covers: warm-up loads the model with all its
checks, the first embed after it does not load again, a bad model file at
warm-up only logs a WARNING (the start succeeds, and embed still refuses the
file, typed), and the first turn after ``async with runtime`` is complete
without loading the model (counted, not timed: a loaded machine can stall
longer than any budget shorter than a load).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentium_embedder_minilm import MiniLMConfig, MiniLMEmbedder, MiniLMUnavailableError
from agentium_embedder_minilm import embedder as embedder_module
from agentium_harness import (
    LifecycleState,
    OpContext,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import Embedder

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
#: Builds the index an earlier process left (loaded once: the model takes a second to load).
SHARED = MiniLMEmbedder()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts model loads (each a ``_Model`` built: file read, digest checked, session made)."""
    counted: list[int] = []
    real = embedder_module._Model

    def counting(config: MiniLMConfig) -> object:
        counted.append(1)
        return real(config)

    monkeypatch.setattr(embedder_module, "_Model", counting)
    return counted


def _runtime(
    store: SQLiteRecallStore, embedder: Embedder, recall_limits: RecallLimits | None = None
) -> object:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["Noted."] * 10),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        embedder=embedder,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        recall_limits=recall_limits,
    )


async def test_warm_up_loads_the_model_and_the_first_embed_does_not_load_it_again(loads: list[int]) -> None:
    embedder = MiniLMEmbedder()
    assert embedder._loaded is None  # building it does no I/O
    await embedder.warm_up(OpContext.with_timeout(60.0))
    assert embedder._loaded is not None and loads == [1]
    loaded = embedder._loaded
    (vector,) = await embedder.embed(["a cup of tea"], OpContext.with_timeout(60.0))
    assert len(vector) == 384
    assert loads == [1] and embedder._loaded is loaded
    await embedder.warm_up(OpContext.with_timeout(60.0))  # again: nothing to load
    assert loads == [1]


async def test_a_bad_model_file_at_warm_up_logs_a_warning_and_the_start_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    embedder = MiniLMEmbedder(MiniLMConfig(model_path=str(fake)))
    with pytest.raises(MiniLMUnavailableError, match=r"no model file|bytes, not the"):
        await embedder.warm_up(OpContext.with_timeout(30.0))
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    runtime = _runtime(store, MiniLMEmbedder(MiniLMConfig(model_path=str(fake))))
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        async with runtime:  # type: ignore[attr-defined]
            assert runtime.state is LifecycleState.OPEN  # type: ignore[attr-defined]
            # The run goes on: the query's embedding is refused again (typed, reported), words remain.
            result = await runtime.run(ANA, "s1", "hello")  # type: ignore[attr-defined]
            assert result.recall.status is RecallStatus.PARTIAL
            (failed,) = [d for d in result.diagnostics if d.code == "recall_embed_failed"]
            assert "MiniLMUnavailableError" in failed.message
    (record,) = [r for r in caplog.records if "warm-up failed" in r.getMessage()]
    assert record.levelno == logging.WARNING and "MiniLMEmbedder" in record.getMessage()
    await store.aclose()


async def test_the_first_turn_after_start_is_complete_within_a_short_budget(
    tmp_path: Path, loads: list[int]
) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db"), min_similarity=0.1))
    # An earlier process indexed the conversation with this model.
    earlier = _runtime(store, SHARED)
    for turn in ("I ordered a latte at 8am.", "My cat is named Felix.", "The weather was awful."):
        await earlier.run(ANA, "s1", turn)  # type: ignore[attr-defined]
    await earlier.aclose()  # type: ignore[attr-defined]
    before = len(loads)
    # This process: a fresh embedder. The query's share of the budget (half of it, 2 s) is room for
    # one inference on a stalled machine; what the test is about is counted, not timed: the model is
    # loaded once, at the start, and never inside the turn's budget (a load there took about 0.7 s
    # of a 0.3 s share and more on a loaded machine).
    embedder = MiniLMEmbedder()
    async with _runtime(store, embedder, RecallLimits(max_latency_s=4.0)) as runtime:  # type: ignore[attr-defined]
        assert embedder._loaded is not None and len(loads) == before + 1
        result = await runtime.run(ANA, "s1", "Which beverage did I have this morning?")
    assert len(loads) == before + 1, "the turn loaded the model again"
    assert not [d for d in result.diagnostics if d.code == "recall_embed_failed"]
    assert result.recall.status is RecallStatus.COMPLETE
    assert "group/acme/ana/s1/0" in [ref.source_id for ref in result.recall.included]
    await store.aclose()
