"""agentium-postgres on one real PostgreSQL: per-turn cost against LangGraph's PostgresSaver, recall
discovery at 100k groups, and archive append of 100 groups in one call against one by one.

Everything runs against one PostgreSQL cluster this script starts (Debian's
``initdb`` and ``postgres`` on a free loopback port, ``fsync=on``: every
commit is durable), in one process and one asyncio event loop.

1. **Per turn.** For each history size (default 1,000 and 10,000 prior
   messages, 500 characters each):

   - *Agentium*: ``runtime.run(identity, session, text)`` on the postgres
     archive and session store (one schema: the eviction and the snapshot
     commit in one transaction), the scripted provider (a canned
     500-character reply), connected as an ordinary role under row-level
     security. Seeded like ``benchmarks/peers.py``: a few real turns, then
     the evicted groups appended in batches and one compare-and-set save of
     the long session's snapshot.
   - *LangGraph*: ``graph.invoke({"messages": [HumanMessage(text)]}, thread,
     durability="sync")`` on a one-node ``MessagesState`` graph checkpointed
     by ``PostgresSaver`` (``langgraph-checkpoint-postgres``), on the same
     server, as its superuser. Seeded with one ``update_state`` holding every
     prior message.

   The systems alternate in batches (ABBA: forward in even rounds, backward
   in odd ones), so drift in machine load hits both alike. Medians with
   p10-p90, LangGraph / Agentium at each size, and each system's growth
   (10k ÷ 1k) are printed, with the targets of issue 26.
2. **Recall discovery** at 100,000 archived groups of one session (and at
   1,000, for the growth), indexed through ``index_groups`` and then
   ``ANALYZE``d: the median of a rare-word, a common-word and a mixed query.
3. **Archive append**: 100 groups in one ``append`` against 100 appends of
   one group each (fresh sessions; medians of a few repeats).

LangGraph's part needs ``langgraph`` and ``langgraph-checkpoint-postgres``
(``benchmarks/requirements-peers.txt``); without them it is skipped and the
output says so. It exits 0 whenever the measurement ran: it is a benchmark,
not a test. Run ``python benchmarks/postgres.py --help``.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import attrs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_peer_workers"))
sys.path.insert(0, str(HERE.parent / "plugins" / "postgres" / "tests"))

import common  # noqa: E402  (the peers' message texts: 500 characters each)
from pg_server import APP_USER, PostgresServer  # noqa: E402  (the plugin's test server)

from agentium_harness import (  # noqa: E402
    RecallLimits,
    ResidentLimits,
    Scope,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider  # noqa: E402
from agentium_harness.plugin_api import (  # noqa: E402
    ArchiveReceipt,
    Message,
    MessageGroup,
    OpContext,
    Role,
    seal_snapshot,
)
from agentium_postgres import (  # noqa: E402
    PostgresArchive,
    PostgresConfig,
    PostgresRecallStore,
    PostgresSessionStore,
    migrate,
)

IDENTITY = VerifiedIdentity("bench-tenant", "bench-user", "benchmark")
SCHEMA = "bench"
SEED_BATCH = 1000
TARGET_RATIO_AT_1K = 10.0  # LangGraph PostgresSaver / Agentium, per turn
TARGET_GROWTH = 1.1  # Agentium per turn at 10k / at 1k


def _stats(ns: Sequence[int]) -> tuple[float, float, float]:
    """(median, p10, p90) in milliseconds."""
    ms = sorted(n / 1e6 for n in ns)
    if len(ms) == 1:
        return ms[0], ms[0], ms[0]
    q = statistics.quantiles(ms, n=10, method="inclusive")
    return statistics.median(ms), q[0], q[-1]


def _fmt(ns: Sequence[int]) -> str:
    med, p10, p90 = _stats(ns)
    return f"{med:9.2f} ms  (p10 {p10:.2f}, p90 {p90:.2f}, n={len(ns)})"


# -- Agentium -----------------------------------------------------------------------------------


def _user_text(seq: int) -> str:
    return common.message_text(2 * seq, "user")


def _group_like(template: MessageGroup, seq: int) -> MessageGroup:
    messages = tuple(
        attrs.evolve(m, content=_user_text(seq)) if m.role is Role.USER else m for m in template.messages
    )
    return attrs.evolve(template, seq=seq, messages=messages)


class AgentiumTurns:
    """The runtime on the postgres archive and session store, one session per history size."""

    def __init__(self, config: PostgresConfig) -> None:
        self.archive = PostgresArchive(config)
        self.store = PostgresSessionStore(config)
        self.runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=[common.REPLY], cycle=True),
            archive=self.archive,
            session_store=self.store,
        )
        self.next: dict[str, int] = {}

    async def seed(self, session: str, messages: int) -> None:
        key = SessionKey.of(IDENTITY, session)
        ctx = OpContext.unbounded()
        groups = messages // 2
        real = min(groups, ResidentLimits().max_groups + 2)
        for seq in range(real):
            await self.runtime.run(IDENTITY, session, _user_text(seq))
        stored = await self.store.load(key, ctx)
        assert stored is not None
        snap = stored.snapshot
        template = snap.resident[-1]
        if groups > real:
            boundary = groups - len(snap.resident)
            to_archive = [g for g in snap.resident if g.seq < boundary]
            to_archive += [_group_like(template, s) for s in range(snap.next_seq, boundary)]
            for start in range(0, len(to_archive), SEED_BATCH):
                await self.archive.append(key, to_archive[start : start + SEED_BATCH], ctx)
            resident = tuple(
                next((g for g in snap.resident if g.seq == s), None) or _group_like(template, s)
                for s in range(boundary, groups)
            )
            long = seal_snapshot(attrs.evolve(snap, boundary=boundary, next_seq=groups, resident=resident))
            await self.store.save(key, long, stored.revision, ctx)
        self.next[session] = groups

    async def turns(self, session: str, n: int, max_seconds: float) -> list[int]:
        times: list[int] = []
        deadline = time.perf_counter() + max_seconds
        for k in range(n):
            if k and time.perf_counter() >= deadline:
                break
            seq = self.next[session]
            start = time.perf_counter_ns()
            result = await self.runtime.run(IDENTITY, session, _user_text(seq))
            times.append(time.perf_counter_ns() - start)
            if result.group_seq != seq or not result.committed:
                raise SystemExit(
                    f"turn got seq {result.group_seq} (committed {result.committed}), expected {seq}"
                )
            self.next[session] = seq + 1
        return times

    async def aclose(self) -> None:
        await self.runtime.aclose()
        await self.archive.aclose()
        await self.store.aclose()


# -- LangGraph ----------------------------------------------------------------------------------


class LangGraphTurns:
    """A one-node MessagesState graph checkpointed by PostgresSaver, one thread per history size."""

    def __init__(self, dsn: str) -> None:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
        from psycopg import Connection
        from psycopg.rows import dict_row

        self._human, self._ai = HumanMessage, AIMessage
        # The connection settings LangGraph's docs give for PostgresSaver.
        self._conn = Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(self._conn)
        saver.setup()

        def respond(state: Any) -> dict[str, list[Any]]:
            return {"messages": [AIMessage(content=common.REPLY)]}

        builder = StateGraph(MessagesState)
        builder.add_node("respond", respond)
        builder.add_edge(START, "respond")
        builder.add_edge("respond", END)
        self._graph = builder.compile(checkpointer=saver)
        self.next: dict[str, int] = {}
        self.versions = {
            n: metadata.version(n)
            for n in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "langchain-core")
        }

    def seed(self, thread: str, messages: int) -> None:
        config = {"configurable": {"thread_id": thread}}
        if messages:
            prior = [
                (self._human if common.role_of(i) == "user" else self._ai)(
                    content=common.message_text(i, common.role_of(i)), id=f"seed-{i}"
                )
                for i in range(messages)
            ]
            self._graph.update_state(config, {"messages": prior}, as_node="respond")
        held = len(self._graph.get_state(config).values.get("messages", []))
        if held != messages:
            raise SystemExit(f"LangGraph thread holds {held} messages, expected {messages}")
        self.next[thread] = messages // 2

    def turns(self, thread: str, n: int, max_seconds: float) -> list[int]:
        config = {"configurable": {"thread_id": thread}}
        times: list[int] = []
        deadline = time.perf_counter() + max_seconds
        for k in range(n):
            if k and time.perf_counter() >= deadline:
                break
            text = _user_text(self.next[thread])
            start = time.perf_counter_ns()
            self._graph.invoke({"messages": [self._human(content=text)]}, config, durability="sync")
            times.append(time.perf_counter_ns() - start)
            self.next[thread] += 1
        return times

    def close(self) -> None:
        self._conn.close()


# -- parts --------------------------------------------------------------------------------------


async def per_turn(server: PostgresServer, app: PostgresConfig, args: argparse.Namespace) -> None:
    print("\n== 1. Per turn: Agentium (postgres archive + session store) vs LangGraph PostgresSaver ==")
    agentium = AgentiumTurns(app)
    langgraph: LangGraphTurns | None = None
    if args.no_langgraph:
        print("LangGraph skipped: --no-langgraph")
    else:
        try:
            langgraph = LangGraphTurns(server.admin_dsn())
        except ImportError as exc:
            print(f"LangGraph skipped: {exc} (pip install -r benchmarks/requirements-peers.txt)")
    times: dict[tuple[str, int], list[int]] = {}
    try:
        for size in args.sizes:
            await agentium.seed(f"a{size}", size)
            if langgraph is not None:
                langgraph.seed(f"l{size}", size)
        systems: list[tuple[str, Callable[[int], Awaitable[list[int]]]]] = []
        for size in args.sizes:

            async def run_a(n: int, size: int = size) -> list[int]:
                return await agentium.turns(f"a{size}", n, args.batch_seconds)

            systems.append((f"agentium:{size}", run_a))
            if langgraph is not None:
                lg = langgraph

                async def run_l(n: int, size: int = size, lg: LangGraphTurns = lg) -> list[int]:
                    return lg.turns(f"l{size}", n, args.batch_seconds)

                systems.append((f"langgraph:{size}", run_l))
        for _, run in systems:  # untimed warm-up
            await run(args.warmup)
        for r in range(args.rounds):
            order = systems if r % 2 == 0 else list(reversed(systems))
            for name, run in order:
                system, size = name.split(":")
                times.setdefault((system, int(size)), []).extend(await run(args.turns))
    finally:
        await agentium.aclose()
        if langgraph is not None:
            langgraph.close()
    print(f"{'system':<10} {'messages':>9}  per turn")
    for (system, size), ns in sorted(times.items()):
        print(f"{system:<10} {size:>9}  {_fmt(ns)}")
    med = {k: _stats(v)[0] for k, v in times.items()}
    for size in args.sizes:
        if ("langgraph", size) in med:
            ratio = med[("langgraph", size)] / med[("agentium", size)]
            verdict = ""
            if size == 1000:
                passed = "PASS" if ratio >= TARGET_RATIO_AT_1K else "MISS"
                verdict = f"   target >= {TARGET_RATIO_AT_1K:g}: {passed}"
            print(f"LangGraph / Agentium at {size}: {ratio:.1f}x{verdict}")
    small, large = min(args.sizes), max(args.sizes)
    if small != large:
        for system in ("agentium", "langgraph"):
            if (system, small) in med:
                growth = med[(system, large)] / med[(system, small)]
                verdict = ""
                if system == "agentium" and (small, large) == (1000, 10000):
                    verdict = (
                        f"   target <= {TARGET_GROWTH:g}: {'PASS' if growth <= TARGET_GROWTH else 'MISS'}"
                    )
                print(f"growth {system} {large} / {small}: {growth:.2f}{verdict}")
    if langgraph is not None:
        print("versions:", ", ".join(f"{k} {v}" for k, v in langgraph.versions.items()))


_VOCABULARY = [f"w{i}" for i in range(5000)]


def _recall_group(key: SessionKey, seq: int, rng: random.Random) -> MessageGroup:
    # Word frequencies fall off like natural text: a few words in most groups, most words rare.
    words = [_VOCABULARY[min(len(_VOCABULARY) - 1, int(rng.paretovariate(1.1)) - 1)] for _ in range(40)]
    if seq % 10_000 == 7:
        words.append("zebracrossing")
    text = "the meeting notes say " + " ".join(words)
    return MessageGroup(
        seq=seq,
        messages=(Message(Role.USER, text), Message(Role.ASSISTANT, "noted: " + " ".join(words[:10]))),
    )


async def recall(server: PostgresServer, app: PostgresConfig, args: argparse.Namespace) -> None:
    print("\n== 2. Recall discovery (postgres recall store) ==")
    store = PostgresRecallStore(app)
    rng = random.Random(26)
    queries = {
        "rare word": "what did we say about the zebracrossing",
        "common words": "the meeting notes",
        "mixed": "meeting notes w3 w250 w4000 zebracrossing",
    }
    try:
        for groups in sorted({min(1000, args.groups), args.groups}):
            key = SessionKey(IDENTITY.tenant, IDENTITY.user, f"recall-{groups}")
            started = time.perf_counter()
            for start in range(0, groups, SEED_BATCH):
                batch = [_recall_group(key, s, rng) for s in range(start, min(groups, start + SEED_BATCH))]
                receipts = [ArchiveReceipt(g.seq, g.digest, "seed") for g in batch]
                await store.index_groups(key, batch, receipts, OpContext.unbounded())
            seeded = time.perf_counter() - started
            # The planner needs the table's statistics to send a rare word through the GIN index;
            # autovacuum gathers them in time, a bulk load should not wait for it.
            with __import__("psycopg").connect(server.admin_dsn(), autocommit=True) as conn:
                conn.execute(f'ANALYZE "{SCHEMA}".recall_sources')
            scope = Scope(key.tenant, key.user, key.session)
            session = await store.open(scope, RecallLimits(), OpContext.unbounded())
            try:
                line = []
                for label, query in queries.items():
                    ns = []
                    for _ in range(args.recall_repeats):
                        start_ns = time.perf_counter_ns()
                        found = await session.discover(query, 8, OpContext.with_timeout(30))
                        ns.append(time.perf_counter_ns() - start_ns)
                        if not found:
                            raise SystemExit(f"discovery of {query!r} found nothing")
                    line.append(f"{label}: {_stats(ns)[0]:.2f} ms")
            finally:
                await session.close()
            print(f"{groups:>7} groups (indexed in {seeded:.1f} s): " + "; ".join(line))
    finally:
        await store.aclose()


async def archive_append(app: PostgresConfig, args: argparse.Namespace) -> None:
    print("\n== 3. Archive append: 100 groups in one call vs one by one ==")
    archive = PostgresArchive(app)
    batch_ns: list[int] = []
    single_ns: list[int] = []
    try:
        for r in range(args.append_repeats):
            for mode in ("batch", "single") if r % 2 == 0 else ("single", "batch"):
                key = SessionKey(IDENTITY.tenant, IDENTITY.user, f"append-{mode}-{r}")
                groups = [
                    MessageGroup(
                        seq=s,
                        messages=(
                            Message(Role.USER, _user_text(s)),
                            Message(Role.ASSISTANT, common.REPLY),
                        ),
                    )
                    for s in range(100)
                ]
                start = time.perf_counter_ns()
                if mode == "batch":
                    await archive.append(key, groups, OpContext.unbounded())
                    batch_ns.append(time.perf_counter_ns() - start)
                else:
                    for group in groups:
                        await archive.append(key, [group], OpContext.unbounded())
                    single_ns.append(time.perf_counter_ns() - start)
    finally:
        await archive.aclose()
    b, s = _stats(batch_ns)[0], _stats(single_ns)[0]
    print(f"one append of 100 groups: {_fmt(batch_ns)}")
    print(f"100 appends of one group: {_fmt(single_ns)}")
    print(f"one by one / batched: {s / b:.1f}x")


async def main(args: argparse.Namespace) -> None:
    print(
        f"{platform.system()} {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs, "
        f"Python {platform.python_version()}, psycopg {metadata.version('psycopg')}, "
        f"agentium-postgres {metadata.version('agentium-postgres')}"
    )
    server = PostgresServer(fsync=True)
    try:
        server.start().prepare()
        with __import__("psycopg").connect(server.admin_dsn()) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'} on 127.0.0.1:{server.port}, fsync=on")
        await migrate(PostgresConfig(dsn=server.admin_dsn(), schema=SCHEMA), grant_to=[APP_USER])
        app = PostgresConfig(dsn=server.app_dsn(), schema=SCHEMA)
        if "turns" in args.parts:
            await per_turn(server, app, args)
        if "recall" in args.parts:
            await recall(server, app, args)
        if "append" in args.parts:
            await archive_append(app, args)
    finally:
        server.cleanup()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="prior messages")
    parser.add_argument("--rounds", type=int, default=8, help="ABBA rounds of the per-turn part")
    parser.add_argument("--turns", type=int, default=15, help="most turns per batch")
    parser.add_argument("--warmup", type=int, default=3, help="untimed turns per system and size")
    parser.add_argument("--batch-seconds", type=float, default=1.5, help="a batch stops after this long")
    parser.add_argument("--groups", type=int, default=100_000, help="archived groups for recall discovery")
    parser.add_argument("--recall-repeats", type=int, default=25, help="discoveries per query")
    parser.add_argument("--append-repeats", type=int, default=6, help="repeats of each append mode")
    parser.add_argument("--parts", nargs="+", default=["turns", "recall", "append"], help="what to run")
    parser.add_argument(
        "--no-langgraph",
        action="store_true",
        help="time Agentium alone (no LangGraph turns between its batches)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, figures meaningless")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds, args.turns, args.warmup = [20, 40], 2, 2, 1
        args.groups, args.recall_repeats, args.append_repeats = 300, 2, 2
    args.sizes = sorted(set(args.sizes))
    if any(s < 2 or s % 2 for s in args.sizes):
        parser.error("--sizes must be even numbers of at least 2 (a turn is two messages)")
    return args


if __name__ == "__main__":
    anyio.run(main, parse())
    sys.exit(0)
