"""Recall latency against index size: discover + read at 1k, 10k and 100k indexed groups.

Does recall stay fast as a session's archive grows? The SQLite recall store
ranks at most ``max_ranked_matches`` matches per query (see
``agentium_harness.adapters.sqlite_recall``), so a discover + read on 100,000
indexed groups should cost at most about three times what it costs on 1,000.

Setup: for each size, one SQLite recall store on its own file in a temp dir,
default options, holding that many archived groups of ONE session (one
scope). Each group is a user question and an assistant answer drawn from a
seeded generator over a Zipf-like vocabulary (a few very common words, a long
tail of rare ones), indexed through ``index_groups`` in large batches (one
transaction per batch). A fixed set of queries mixes common, mid-frequency
and rare words. The stores are then timed side by side: each repetition runs
every query on every size, rotating which size goes first, so drift in
machine load hits all sizes alike. One timing is one ``discover`` (default
``RecallLimits``: 8 candidates) plus one ``read`` of what it found.

Prints each size's median and the ratios to the smallest size, the largest
against its target with PASS or MISS. Exits 0 either way: it is a benchmark,
not a test. ``--quick`` uses 200 and 2,000 groups for a smoke run.

For the engine's own assembly time next to the adapter's, extend
:func:`measure` (it returns a dict of named medians).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

RATIO_TARGET = 3.0
FULL_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (200, 2_000)
BATCH = 5_000
SEED = 20240611

TENANT, USER, SESSION = "bench-tenant", "bench-user", "bench-session"


# ---------------------------------------------------------------------------
# Seeded, Zipf-like text
# ---------------------------------------------------------------------------


class TextGenerator:
    """Sentences over a synthetic vocabulary whose word frequencies follow a Zipf-like law."""

    COMMON = (
        "the of and to a in is it you that he was for on are with as i his they be at one have this "
        "from or had by not but what some we can out other were all there when up use your how said an "
        "each she which do their time if will way about many then them would write like so these her"
    ).split()

    def __init__(self, seed: int, vocabulary: int = 20_000, exponent: float = 1.07) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
        words: list[str] = list(self.COMMON)
        seen = set(words)
        while len(words) < vocabulary:
            word = "".join(self.rng.choice(syllables) for _ in range(self.rng.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        weights = [1.0 / (rank + 1) ** exponent for rank in range(len(words))]
        total = 0.0
        self.cumulative: list[float] = []
        for w in weights:
            total += w
            self.cumulative.append(total)

    def sentence(self, low: int, high: int, end: str = ".") -> str:
        n = self.rng.randint(low, high)
        words = self.rng.choices(self.words, cum_weights=self.cumulative, k=n)
        if self.rng.random() < 0.2:
            words.insert(self.rng.randrange(len(words)), str(self.rng.randint(2, 9999)))
        return " ".join(words).capitalize() + end

    def exchange(self) -> tuple[str, str]:
        question = self.sentence(6, 18, "?")
        answer = " ".join(self.sentence(8, 16) for _ in range(self.rng.randint(2, 4)))
        return question, answer


def queries(generator: TextGenerator, count: int = 12) -> list[str]:
    """A fixed query set: common words, mid-frequency words and rare words, mixed as users mix them."""
    rng = random.Random(SEED + 1)
    words = generator.words
    common, mid, rare = words[:50], words[50:2_000], words[2_000:]
    out = []
    for i in range(count):
        shape = i % 3
        if shape == 0:  # a question in everyday words around one topical word
            parts = [*rng.sample(common, 4), rng.choice(mid)]
        elif shape == 1:  # a few topical words
            parts = [rng.choice(mid), rng.choice(mid), rng.choice(rare)]
        else:  # one rare name with common words
            parts = [*rng.sample(common, 2), rng.choice(rare)]
        out.append(" ".join(parts))
    return out


# ---------------------------------------------------------------------------
# Building and measuring
# ---------------------------------------------------------------------------


def _groups(generator: TextGenerator, start: int, count: int) -> list[Any]:
    from agentium_harness._history import Message, MessageGroup, Role

    groups = []
    for seq in range(start, start + count):
        question, answer = generator.exchange()
        groups.append(
            MessageGroup(seq=seq, messages=(Message(Role.USER, question), Message(Role.ASSISTANT, answer)))
        )
    return groups


async def build(path: str, size: int) -> tuple[Any, float]:
    """A recall store on ``path`` holding ``size`` archived groups of one session; and indexing seconds."""
    from agentium_harness._ports import OpContext
    from agentium_harness._ports.archive import ArchiveReceipt
    from agentium_harness._scope import SessionKey
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore

    store = SQLiteRecallStore(SQLiteRecallConfig(path=path, synchronous="NORMAL"))
    key = SessionKey(TENANT, USER, SESSION)
    generator = TextGenerator(SEED)  # the same text at every size: the small index is a prefix
    elapsed = 0.0
    for start in range(0, size, BATCH):
        groups = _groups(generator, start, min(BATCH, size - start))
        receipts = [ArchiveReceipt(g.seq, g.digest, f"bench/{g.seq}") for g in groups]
        began = time.perf_counter()
        await store.index_groups(key, groups, receipts, OpContext())
        elapsed += time.perf_counter() - began
    return store, elapsed


async def measure(store: Any, scope: Any, query_set: Sequence[str]) -> dict[str, float]:
    """Time one discover + read per query on ``store``; returns named per-query times in ms.

    ``adapter_ms`` is the adapter's own time (a session's discover, then read
    of every candidate found). The engine owner extends this with the engine's
    assembly time (say ``assembly_ms``) measured on the same excerpts.
    """
    from agentium_harness._engine.lifecycle import Ticket
    from agentium_harness._engine.recall import _block, gather_evidence
    from agentium_harness._engine.recall_policy import QueryInput, current_session_recall_policy
    from agentium_harness._engine.sources import assemble_sources
    from agentium_harness._ports import OpContext
    from agentium_harness._ports.recall import RecallLimits

    limits = RecallLimits()
    policy = current_session_recall_policy()
    times: list[float] = []
    assembly: list[float] = []
    rounds: list[float] = []
    found = 0
    for query in query_set:
        began = time.perf_counter_ns()
        session = await store.open(scope, limits, OpContext())
        try:
            candidates = await session.discover(query, limits.max_candidates, OpContext())
            excerpts = await session.read([c.ref for c in candidates], limits.max_excerpt_bytes, OpContext())
        finally:
            await session.close()
        times.append((time.perf_counter_ns() - began) / 1e6)
        found += len(excerpts)
        # The engine's own work on the same excerpts: labeled blocks and whole assembly.
        began = time.perf_counter_ns()
        blocks = [_block(e, e.text, rank) for rank, e in enumerate(excerpts, start=1)]
        assemble_sources(blocks, limits.max_evidence_tokens)
        assembly.append((time.perf_counter_ns() - began) / 1e6)
        # A whole engine round as a run makes it: every item checked, the fence validation included.
        began = time.perf_counter_ns()
        await gather_evidence(Ticket(None, "bench", 30.0), store, scope, limits, policy, QueryInput(query))
        rounds.append((time.perf_counter_ns() - began) / 1e6)
    return {
        "adapter_ms": statistics.median(times),
        "assembly_ms": statistics.median(assembly),
        "engine_round_ms": statistics.median(rounds),
        "excerpts": found / max(1, len(query_set)),
    }


def _label(size: int) -> str:
    return f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size)


async def main_async(sizes: Sequence[int], repetitions: int) -> None:
    from agentium_harness._scope import Scope

    scope = Scope(TENANT, USER, SESSION)
    query_set = queries(TextGenerator(SEED))
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.platform()}")
    print(f"{len(query_set)} queries x {repetitions} repetitions per size, one scope")
    with tempfile.TemporaryDirectory(prefix="agentium-recall-bench-") as folder:
        stores: dict[int, Any] = {}
        try:
            for size in sizes:
                store, seconds = await build(os.path.join(folder, f"recall-{size}.db"), size)
                stores[size] = store
                print(f"  indexed {size:>7} groups in {seconds:6.1f} s ({size / max(seconds, 1e-9):,.0f}/s)")
            for store in stores.values():  # warm the page cache and the statement cache
                await measure(store, scope, query_set)
            samples: dict[int, list[float]] = {size: [] for size in sizes}
            engine: dict[int, list[tuple[float, float]]] = {size: [] for size in sizes}
            found: dict[int, float] = {}
            for rep in range(repetitions):
                order = list(sizes[rep % len(sizes) :]) + list(sizes[: rep % len(sizes)])
                for size in order:
                    result = await measure(stores[size], scope, query_set)
                    samples[size].append(result["adapter_ms"])
                    engine[size].append((result["assembly_ms"], result["engine_round_ms"]))
                    found[size] = result["excerpts"]
        finally:
            for store in stores.values():
                await store.aclose()
    medians = {size: statistics.median(samples[size]) for size in sizes}
    for size in sizes:
        print(
            f"  size={size:>7}: median discover+read {medians[size]:8.3f} ms "
            f"({found[size]:.1f} excerpts per query)"
        )
    for size in sizes:
        assembly = statistics.median(a for a, _ in engine[size])
        full = statistics.median(r for _, r in engine[size])
        print(
            f"  size={size:>7}: engine assembly {assembly:8.3f} ms "
            f"({100 * assembly / max(medians[size], 1e-9):.1f}% of the adapter's time); "
            f"whole engine round {full:8.3f} ms"
        )
    base = sizes[0]
    for size in sizes[1:]:
        ratio = medians[size] / medians[base]
        line = f"ratio {_label(size)}/{_label(base)}: {ratio:.2f}"
        if size == sizes[-1]:
            verdict = "PASS" if ratio <= RATIO_TARGET else "MISS"
            line += f"  target <= {RATIO_TARGET:g}  {verdict}"
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 and 2,000 groups (a smoke run)")
    parser.add_argument("--repetitions", type=int, default=None, help="timed rounds per size")
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    repetitions = args.repetitions or (5 if args.quick else 15)
    import anyio

    anyio.run(main_async, sizes, repetitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
