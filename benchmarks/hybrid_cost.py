"""What hybrid recall costs: indexing throughput and discovery latency, 1k to 100k groups, lexical vs hybrid.

Usage::

    python benchmarks/hybrid_cost.py               # 1k, 10k, 100k groups (a few minutes)
    python benchmarks/hybrid_cost.py --quick       # 200 and 2,000 groups, the model on 32 texts (a smoke run)

Setup: the same seeded Zipf-like text as ``benchmarks/recall.py`` (one
session, user question and assistant answer per group), one SQLite recall
store per size. Each size is indexed twice over: the words (``index_groups``,
batches of 5,000) and the vectors (``index_vectors``), measured apart.

The vectors come from the built-in ``hashing`` embedder at 384 dimensions,
the dimension of all-MiniLM-L6-v2: the store's storage and scoring cost
depends only on the dimension, and a model embedder at 100k groups would
take an hour. The model's own cost is measured apart, on a sample, when the
``agentium-embedder-minilm`` plugin is installed: texts per second indexed,
and the time to embed one query.

Discovery: each repetition runs every query, on every size, as lexical
``discover`` and as hybrid ``discover_hybrid`` (the query vector computed
beforehand, so only the store's work is timed), rotating the order. Printed:
medians per size, hybrid ÷ lexical per size (target at 100k: <= 3), and the
same with the vector scoring in plain Python (no NumPy) for comparison.
Always exits 0: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from recall import SEED, TextGenerator, _groups, queries

from agentium_harness import OpContext, RecallLimits, Scope
from agentium_harness.adapters import _vectors as vectors_module
from agentium_harness.adapters.embedders import HashingEmbedder, HashingEmbedderConfig
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    SessionKey,
    SourceRef,
    SourceVector,
    Vector,
    group_source_id,
)

RATIO_TARGET = 3.0
FULL_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (200, 2_000)
BATCH = 5_000
DIMENSION = 384
TENANT, USER, SESSION = "bench-tenant", "bench-user", "bench-session"


def _text(group: Any) -> str:
    return "\n".join(m.content for m in group.messages)


async def build(
    path: str, size: int, embedder: HashingEmbedder
) -> tuple[SQLiteRecallStore, float, float, float]:
    """A store of ``size`` groups with their vectors; seconds indexing words, embedding, storing vectors."""
    store = SQLiteRecallStore(SQLiteRecallConfig(path=path, synchronous="NORMAL"))
    key = SessionKey(TENANT, USER, SESSION)
    generator = TextGenerator(SEED)
    words = embed = stored = 0.0
    for start in range(0, size, BATCH):
        groups = _groups(generator, start, min(BATCH, size - start))
        receipts = [ArchiveReceipt(g.seq, g.digest, f"bench/{g.seq}") for g in groups]
        began = time.perf_counter()
        await store.index_groups(key, groups, receipts, OpContext())
        words += time.perf_counter() - began
        began = time.perf_counter()
        raw = await embedder.embed([_text(g) for g in groups], OpContext())
        entries = [
            SourceVector(
                SourceRef(group_source_id(key, g.seq), g.digest), Vector.normalized(embedder.model, v)
            )
            for g, v in zip(groups, raw, strict=True)
        ]
        embed += time.perf_counter() - began
        began = time.perf_counter()
        await store.index_vectors(entries, OpContext())
        stored += time.perf_counter() - began
    return store, words, embed, stored


async def timed_discovery(
    store: SQLiteRecallStore, scope: Scope, query_set: Sequence[str], query_vectors: Sequence[Vector]
) -> tuple[float, float]:
    """Median ms of one lexical discover and of one hybrid discover over the queries."""
    limits = RecallLimits()
    lexical: list[float] = []
    hybrid: list[float] = []
    session = await store.open(scope, limits, OpContext())
    try:
        for query, vector in zip(query_set, query_vectors, strict=True):
            began = time.perf_counter_ns()
            await session.discover(query, limits.max_candidates, OpContext())
            lexical.append((time.perf_counter_ns() - began) / 1e6)
            began = time.perf_counter_ns()
            await session.discover_hybrid(query, vector, limits.max_candidates, OpContext())
            hybrid.append((time.perf_counter_ns() - began) / 1e6)
    finally:
        await session.close()
    return statistics.median(lexical), statistics.median(hybrid)


#: Texts the MiniLM model embeds to measure its cost: the full run's sample, and ``--quick``'s
#: (one batch of 32; the model takes a few seconds per batch on two shared cores).
MODEL_SAMPLE = 256
QUICK_MODEL_SAMPLE = 32


async def model_cost(sample: int = MODEL_SAMPLE) -> str:
    """The MiniLM embedder's own cost on ``sample`` texts, or why it was not measured."""
    try:
        from agentium_embedder_minilm import MiniLMConfig, MiniLMEmbedder
    except ImportError:
        return "minilm: not installed (pip install ./plugins/embedder-minilm), model cost not measured"
    # Batches of 32, as the engine sends with [embedder.budget] max_batch = 32 and this max_batch.
    embedder = MiniLMEmbedder(MiniLMConfig(max_batch=32))
    generator = TextGenerator(SEED)
    texts = [_text(g) for g in _groups(generator, 0, sample)]
    await embedder.embed(texts[:4], OpContext())  # load the model
    began = time.perf_counter()
    for start in range(0, len(texts), 32):
        await embedder.embed(texts[start : start + 32], OpContext())
    batch_rate = len(texts) / (time.perf_counter() - began)
    one: list[float] = []
    for query in queries(generator):
        began = time.perf_counter_ns()
        await embedder.embed([query], OpContext())
        one.append((time.perf_counter_ns() - began) / 1e6)
    return (
        f"minilm: {batch_rate:,.0f} texts/s embedded in batches of 32 (so indexing is bound by the model: "
        f"100k groups take about {100_000 / batch_rate / 60:.0f} min); one query embedded in "
        f"{statistics.median(one):.1f} ms (median), which hybrid discovery adds to each run"
    )


async def main_async(sizes: Sequence[int], repetitions: int, model_sample: int = MODEL_SAMPLE) -> None:
    scope = Scope(TENANT, USER, SESSION)
    embedder = HashingEmbedder(HashingEmbedderConfig(dimension=DIMENSION))
    query_set = queries(TextGenerator(SEED))
    query_vectors = [Vector.normalized(embedder.model, embedder.vector(q)) for q in query_set]
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.platform()}")
    print(
        f"{len(query_set)} queries x {repetitions} repetitions per size, one scope, {DIMENSION}-value vectors"
    )
    with tempfile.TemporaryDirectory(prefix="agentium-hybrid-bench-") as folder:
        stores: dict[int, SQLiteRecallStore] = {}
        try:
            for size in sizes:
                store, words, embed, stored = await build(os.path.join(folder, f"r{size}.db"), size, embedder)
                stores[size] = store
                print(
                    f"  indexed {size:>7} groups: words {size / words:,.0f}/s; vectors stored "
                    f"{size / stored:,.0f}/s (hashing embedder {size / embed:,.0f}/s); hybrid indexing "
                    f"takes {(words + stored) / words:.2f}x the lexical time before the model's own"
                )
            results: dict[str, dict[int, list[tuple[float, float]]]] = {"numpy": {}, "plain Python": {}}
            scorer = vectors_module._numpy
            for mode in results:
                vectors_module._numpy = scorer if mode == "numpy" else (lambda: None)  # type: ignore[assignment]
                if mode == "numpy" and scorer() is None:
                    print("  numpy is not installed: the numpy rows below use plain Python too")
                for store in stores.values():  # warm caches
                    await timed_discovery(store, scope, query_set, query_vectors)
                for rep in range(repetitions):
                    order = list(sizes[rep % len(sizes) :]) + list(sizes[: rep % len(sizes)])
                    for size in order:
                        pair = await timed_discovery(stores[size], scope, query_set, query_vectors)
                        results[mode].setdefault(size, []).append(pair)
            vectors_module._numpy = scorer  # type: ignore[assignment]
        finally:
            for store in stores.values():
                await store.aclose()
    for mode, by_size in results.items():
        print(f"discovery, vector scoring in {mode}:")
        for size in sizes:
            lexical = statistics.median(p[0] for p in by_size[size])
            hybrid = statistics.median(p[1] for p in by_size[size])
            ratio = hybrid / max(lexical, 1e-9)
            line = f"  size={size:>7}: lexical {lexical:7.2f} ms, hybrid {hybrid:7.2f} ms, ratio {ratio:.2f}"
            if size == sizes[-1] and mode == "numpy":
                line += f"  target <= {RATIO_TARGET:g}  {'PASS' if ratio <= RATIO_TARGET else 'MISS'}"
            print(line)
        base = sizes[0]
        growth = statistics.median(p[1] for p in by_size[sizes[-1]]) / statistics.median(
            p[1] for p in by_size[base]
        )
        print(f"  hybrid {sizes[-1]} / {base}: {growth:.2f}")
    print(await model_cost(model_sample))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"200 and 2,000 groups, the model on {QUICK_MODEL_SAMPLE} texts (a smoke run)",
    )
    parser.add_argument("--repetitions", type=int, default=None, help="timed rounds per size")
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    repetitions = args.repetitions or (3 if args.quick else 7)
    import anyio

    anyio.run(main_async, sizes, repetitions, QUICK_MODEL_SAMPLE if args.quick else MODEL_SAMPLE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
