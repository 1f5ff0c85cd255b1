"""History under an agent loop: AgentiumSession against the OpenAI Agents SDK's own SQLiteSession.

Issue 22, item 4. Both sessions keep their history in SQLite in WAL mode with
``synchronous=FULL``, each in a database file of its own in one temp dir:
Agentium's built-in archive and session store with their default options
(default ``ResidentLimits``: 8 groups resident, the rest archived) under
``agentium_openai_agents.AgentiumSession``, and the SDK's ``SQLiteSession``
(its connections set to ``synchronous=FULL``, its default in practice).

Both sessions are seeded through their own ``add_items`` with the same
items, two per call (a user message and an assistant answer), to 100 and to
10,000 items. Then, side by side in one process, alternating the two
sessions call by call (so drift in machine load hits both alike), it times:

- ``add_items`` of 2 items at 100 and at 10,000 items (target: no slower, ≤ 1.0×);
- ``get_items(20)`` at 10,000 items (target ≤ 1.5×);
- ``get_items()`` at 10,000 items (target ≤ 2×).

Prints the median of each, wall clock and CPU time (of the whole process, every
thread: both sessions do their SQLite work in worker threads), the ratio
Agentium ÷ SDK of each and PASS or MISS of the wall-clock ratio against the
target. On a loaded machine the CPU ratio is the steadier figure. Exits 0
either way: it is a benchmark, not a test. ``--small`` seeds 100 and 400
items with fewer rounds (a smoke run of a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import SQLiteSession

from agentium_harness import VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_openai_agents import AgentiumSession

IDENTITY = VerifiedIdentity("bench", "user", "benchmark")


class FullSyncSQLiteSession(SQLiteSession):
    """The SDK's SQLiteSession with ``synchronous=FULL`` stated on every connection (WAL is its own)."""

    @staticmethod
    def _configure_connection(conn: sqlite3.Connection) -> None:
        SQLiteSession._configure_connection(conn)
        conn.execute("PRAGMA synchronous=FULL")


def turn(n: int) -> list[dict[str, Any]]:
    """Two items as a runner stores them: the user's message and the assistant's answer."""
    return [
        {"role": "user", "content": f"Question number {n}: what should I pack for a trip to Lisbon in May?"},
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": f"Answer {n}: light layers and a rain jacket.",
                    "annotations": [],
                }
            ],
        },
    ]


async def seed(sessions: list[Any], items: int) -> None:
    for n in range(items // 2):
        for session in sessions:
            await session.add_items(turn(n))


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall-clock and process CPU ms of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    await call()
    return (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000


Medians = tuple[float, float, float, float]


async def side_by_side(
    ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]], rounds: int
) -> Medians:
    """Median wall ms of each, then median CPU ms of each, alternating which goes first (ABBA)."""
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for r in range(rounds):
        if r % 2 == 0:
            a.append(await timed(ours))
            b.append(await timed(theirs))
        else:
            b.append(await timed(theirs))
            a.append(await timed(ours))
    med = statistics.median
    return med(w for w, _ in a), med(w for w, _ in b), med(c for _, c in a), med(c for _, c in b)


def report(label: str, figures: Medians, target: float) -> None:
    ours, theirs, ours_cpu, theirs_cpu = figures
    ratio = ours / theirs
    verdict = "PASS" if ratio <= target else "MISS"
    print(
        f"{label:<24} wall: agentium {ours:8.3f} ms  sdk {theirs:8.3f} ms  ratio {ratio:5.2f}  "
        f"target <= {target:g}  {verdict}   cpu: agentium {ours_cpu:8.3f} ms  sdk {theirs_cpu:8.3f} ms  "
        f"ratio {ours_cpu / theirs_cpu:5.2f}"
    )


async def main(small: bool, rounds: int) -> None:
    low, high = (100, 400) if small else (100, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        config = SQLiteConfig(path=os.path.join(tmp, "agentium.db"), synchronous="FULL")
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["(not called)"]),
            archive=archive,
            session_store=store,
            owned=(archive, store),
        )
        sdk_path = Path(tmp) / "sdk.db"
        async with runtime:
            ours = {n: AgentiumSession(runtime, IDENTITY, f"s{n}") for n in (low, high)}
            theirs = {n: FullSyncSQLiteSession(f"s{n}", sdk_path) for n in (low, high)}
            start = time.perf_counter()
            for n in (low, high):
                await seed([ours[n], theirs[n]], n)
            print(f"seeded {low:,} and {high:,} items in each in {time.perf_counter() - start:.1f} s")
            for n in (low, high):
                assert await ours[n].get_items() == await theirs[n].get_items()

            results = []
            for n in (low, high):
                extra = iter(range(10**6, 2 * 10**6))
                pair = await side_by_side(
                    lambda o=ours[n], e=extra: o.add_items(turn(next(e))),
                    lambda t=theirs[n], e=extra: t.add_items(turn(next(e))),
                    rounds,
                )
                results.append((f"add_items(2) at {n:,}", pair, 1.0))
            pair = await side_by_side(
                lambda: ours[high].get_items(20), lambda: theirs[high].get_items(20), rounds
            )
            results.append((f"get_items(20) at {high:,}", pair, 1.5))
            pair = await side_by_side(
                lambda: ours[high].get_items(), lambda: theirs[high].get_items(), rounds
            )
            results.append((f"get_items() at {high:,}", pair, 2.0))
            for session in theirs.values():
                session.close()

    machine = f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus"
    print(f"{machine}, {rounds} rounds")
    for label, figures, target in results:
        report(label, figures, target)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="100 and 400 items, 9 rounds (smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="timed calls per figure (default 41)")
    args = parser.parse_args()
    asyncio.run(main(args.small, args.rounds or (9 if args.small else 41)))
    sys.exit(0)
