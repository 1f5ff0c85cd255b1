"""The engine checks whatever an embedder answers, however hostile, and raises only EmbeddingError.

An embedder's answer is read by iteration, to one past the batch (and one
past the dimension) at most, so a list subclass whose ``__len__`` lies, an
answer that iterates without end or one whose reading raises is refused with
:class:`EmbeddingError`, never a bare ``ValueError`` or a hang of the event
loop.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentium_harness import CapabilityError, EmbeddingError, InvalidArgumentError
from agentium_harness._engine.embedding import Hybrid, embed_query, embed_texts, index_sources, make_hybrid
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    Embedder,
    EmbedderCapabilities,
    EmbeddingModel,
    OpContext,
    SourceRef,
    SourceVector,
    Vector,
)

pytestmark = pytest.mark.anyio


class Answers(Embedder):
    """An embedder that answers whatever ``answer`` makes of the batch."""

    capabilities: ClassVar[EmbedderCapabilities] = EmbedderCapabilities(batch_embedding=True)
    max_batch = 4

    def __init__(self, answer: Callable[[Sequence[str]], object]) -> None:
        self.answer = answer

    @property
    def model(self) -> EmbeddingModel:
        return EmbeddingModel("answers-v1", 3)

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        ctx.raise_if_expired("embed")
        return self.answer(texts)  # type: ignore[return-value]


class ClaimsLength(list[Any]):
    """A list that says it holds ``claimed`` items whatever it holds."""

    def __init__(self, items: Sequence[object], claimed: int) -> None:
        super().__init__(items)
        self.claimed = claimed

    def __len__(self) -> int:
        return self.claimed


class Endless(list[Any]):
    """A list that says it holds ``claimed`` items and yields ``item`` without end."""

    def __init__(self, claimed: int, item: object) -> None:
        super().__init__()
        self.claimed = claimed
        self.item = item

    def __len__(self) -> int:
        return self.claimed

    def __iter__(self) -> Iterator[Any]:
        return itertools.repeat(self.item)


class Unreadable:
    def tolist(self) -> list[float]:
        raise RuntimeError("the backend's buffer is gone")


HOSTILE: dict[str, Callable[[Sequence[str]], object]] = {
    "claims the batch's length, holds nothing": lambda texts: ClaimsLength([], len(texts)),
    "claims a negative length": lambda texts: ClaimsLength([], -1),
    "iterates without end": lambda texts: Endless(len(texts), [1.0, 2.0, 3.0]),
    "a vector that claims 3 values, holds 1": lambda texts: [ClaimsLength([1.0], 3) for _ in texts],
    "a vector that iterates without end": lambda texts: [Endless(3, 1.0) for _ in texts],
    "an int too large for a float": lambda texts: [[10**400, 1, 1] for _ in texts],
    "tolist raises": lambda texts: [Unreadable() for _ in texts],
}


def _hybrid(tmp_path: Path, embedder: Embedder) -> Hybrid:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    return make_hybrid(embedder, None, store)


@pytest.mark.parametrize("fault", sorted(HOSTILE))
async def test_a_hostile_answer_is_an_embedding_error(tmp_path: Path, fault: str) -> None:
    hybrid = _hybrid(tmp_path, Answers(HOSTILE[fault]))
    with pytest.raises(EmbeddingError, match="dropped"):
        await embed_query(Ticket(None, "test", 30.0), hybrid, "where are the sailboats?", 30.0)
    with pytest.raises(EmbeddingError, match="dropped"):
        await embed_texts(Ticket(None, "test", 30.0), hybrid, ["one", "two", "three"])


async def test_a_healthy_answer_still_passes(tmp_path: Path) -> None:
    hybrid = _hybrid(tmp_path, Answers(lambda texts: [[3.0, 0.0, 4.0] for _ in texts]))
    vectors = await embed_texts(Ticket(None, "test", 30.0), hybrid, ["one", "two"])
    assert [v.values for v in vectors] == [(0.6, 0.0, 0.8)] * 2


class BadFloat(float):
    def __float__(self) -> float:
        raise ArithmeticError("no value")


@pytest.mark.parametrize("bad", [[10**400, 1, 1], ["0.6", 0.0, 0.8], [0.6, None, 0.8]])
def test_a_value_that_is_no_finite_float_is_an_invalid_argument(bad: list[float]) -> None:
    model = EmbeddingModel("m", 3)
    with pytest.raises(InvalidArgumentError, match="a vector holds"):
        Vector.normalized(model, bad)
    with pytest.raises(InvalidArgumentError, match="a vector holds"):
        Vector(model, bad)


def test_a_float_subclass_is_read_for_its_value_not_its_float_method() -> None:
    v = Vector.normalized(EmbeddingModel("m", 3), [BadFloat(3.0), 0.0, 4.0])
    assert v.values == (0.6, 0.0, 0.8) and all(type(x) is float for x in v.values)


@pytest.mark.parametrize("scale", [1e-200, 1e-170, 1e170, 1e300])
def test_a_tiny_or_huge_vector_keeps_its_direction(scale: float) -> None:
    v = Vector.normalized(EmbeddingModel("m", 3), [3.0 * scale, 0.0, 4.0 * scale])
    assert v.values == pytest.approx((0.6, 0.0, 0.8))


@pytest.mark.parametrize("changed", ["3", 2.5, 0, None])
async def test_a_max_batch_changed_after_build_is_an_embedding_error(tmp_path: Path, changed: object) -> None:
    embedder = Answers(lambda texts: [[1.0, 2.0, 3.0] for _ in texts])
    hybrid = _hybrid(tmp_path, embedder)  # checked here: 4
    embedder.max_batch = changed  # type: ignore[assignment]
    with pytest.raises(EmbeddingError, match="max_batch"):
        await embed_texts(Ticket(None, "test", 30.0), hybrid, ["one", "two"])
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "other.db")))
    with pytest.raises(EmbeddingError, match="max_batch"):
        await index_sources(Ticket(None, "test", 30.0), hybrid, store, [(SourceRef("doc/a", "r1"), "one")])
    await store.aclose()


async def test_a_source_blank_in_its_embedded_head_is_skipped_not_fatal_to_its_batch(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(texts: Sequence[str]) -> object:
        seen.extend(texts)
        return [[1.0, 2.0, 3.0] for _ in texts]

    hybrid = _hybrid(tmp_path, Answers(answer))
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "other.db")))
    padded = " " * (hybrid.limits.max_input_bytes + 10) + "the words come after the cut"
    sources = [(SourceRef("doc/padded", "r1"), padded), (SourceRef("doc/tea", "r1"), "tea and coffee")]
    await index_sources(Ticket(None, "test", 30.0), hybrid, store, sources)
    assert seen == ["tea and coffee"]
    await store.aclose()


@pytest.mark.parametrize(
    ("texts", "ctx"),
    [
        ([5], OpContext()),
        ("one bare string", OpContext()),
        (None, OpContext()),
        (iter(["a generator"]), OpContext()),
        (["fine"], None),
    ],
)
async def test_the_hashing_embedder_refuses_what_is_not_texts_and_a_context(
    texts: object, ctx: object
) -> None:
    with pytest.raises(InvalidArgumentError):
        await HashingEmbedder().embed(texts, ctx)  # type: ignore[arg-type]


async def test_an_embedder_is_sent_only_valid_unicode(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(texts: Sequence[str]) -> object:
        seen.extend(texts)
        return [[1.0, 2.0, 3.0] for _ in texts]

    hybrid = _hybrid(tmp_path, Answers(answer))
    await embed_texts(Ticket(None, "test", 30.0), hybrid, ["tea \ud800and coffee", "short \udfff"])
    assert seen == ["tea and coffee", "short "]
    assert all(t.encode("utf-8") for t in seen)  # no lone surrogate: they encode strictly


class CountsBadly(SQLiteRecallStore):
    """Stores the vectors, then answers ``count`` instead of how many it stored."""

    count: object = None

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        await super().index_vectors(vectors, ctx)
        return self.count  # type: ignore[return-value]


@pytest.mark.parametrize("count", [None, "1", 10**9, -1, True])
async def test_a_bad_count_from_index_vectors_is_a_warning_not_a_crash(
    tmp_path: Path, count: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = CountsBadly(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    store.count = count
    hybrid = make_hybrid(Answers(lambda texts: [[1.0, 2.0, 3.0] for _ in texts]), None, store)
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        stored = await index_sources(
            Ticket(None, "test", 30.0), hybrid, store, [(SourceRef("doc/a", "r1"), "tea")]
        )
    assert stored == 0
    (record,) = [r for r in caplog.records if "index_vectors returned" in r.getMessage()]
    assert record.levelno == logging.WARNING and "tea" not in record.getMessage()
    await store.aclose()


@pytest.mark.parametrize(
    "values",
    [None, 5, "abc", b"abc", [1.0, 2.0], [1.0] * 4, ClaimsLength([1.0], 3), Endless(3, 1.0)],
    ids=["None", "int", "str", "bytes", "too few", "too many", "lying len", "endless"],
)
def test_values_that_are_not_a_vector_are_an_invalid_argument(values: object) -> None:
    model = EmbeddingModel("m", 3)
    with pytest.raises(InvalidArgumentError, match="values"):
        Vector.normalized(model, values)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="values"):
        Vector(model, values)  # type: ignore[arg-type]


class BatchRaises(Answers):
    @property  # type: ignore[override]
    def max_batch(self) -> int:
        raise RuntimeError("the backend's limits are unknown")


def test_a_max_batch_that_raises_is_refused_at_build(tmp_path: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    with pytest.raises(CapabilityError, match="max_batch"):
        make_hybrid(BatchRaises(lambda texts: []), None, store)
