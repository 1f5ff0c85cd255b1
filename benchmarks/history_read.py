"""History under an agent loop: AgentiumSession against the OpenAI Agents SDK's own SQLiteSession.

Issue 22, item 4. Both sessions keep their history in SQLite in WAL mode with
``synchronous=FULL``, each in a database file of its own in one temp dir:
Agentium's built-in archive and session store with their default options
(``SQLiteConfig(synchronous="FULL")``, default ``ResidentLimits``: 8 groups
resident, the rest archived) under ``agentium_openai_agents.AgentiumSession``,
and the SDK's ``SQLiteSession`` (its connections set to ``synchronous=FULL``,
its default in practice).

Each system runs in a worker process of its own (this script again, with
``--worker agentium`` or ``--worker sdk``; the worker imports only its own
system). Each worker seeds its sessions through its own ``add_items`` with
the same items, two per call (``turn(n)``: a user message and an assistant
answer), to 100 and to 10,000 items, and answers the parent's commands in
JSON lines on stdin and stdout. The parent first checks that both systems'
``get_items()`` return equal items at each size (each worker sends the
sha256 of ``json.dumps(items, sort_keys=True)``), then asks the two workers
for the timed calls in batches of five calls made one after another (an
agent loop calls its session several times a turn; one call per request
would time each right after the worker woke from sleep while the other
ran, which measured doubled the CPU time of a 0.5 ms call), alternating
which worker goes first (ABBA, so drift in machine load hits both alike),
and times:

- ``add_items`` of 2 items at 100 and at 10,000 items (target: no slower, ≤ 1.0×);
- ``get_items(20)`` at 10,000 items (target ≤ 1.5×);
- ``get_items()`` at 10,000 items (target ≤ 2×).

Each call is timed inside its worker: wall clock around the call, and the
worker's own CPU time (``time.process_time``, every thread: both sessions do
their SQLite work in worker threads). Prints the median of each, the ratio
Agentium ÷ SDK of each and PASS or MISS of the wall-clock ratio against the
target, then how many full collections of the cyclic GC ran inside each
system's timed calls. On a loaded machine the CPU ratio is the steadier
figure. Exits 0 either way: it is a benchmark, not a test. ``--small`` seeds
100 and 400 items with fewer rounds (a smoke run of a few seconds).

Why one process per system: a ``get_items()`` of 10,000 items allocates some
30-40 thousand container objects in either system, so every few such calls
the cyclic GC runs a full (generation-2) collection, which walks every
tracked object of the process. When both systems shared one process (until
2026-12-05) that heap held both systems' caches and imports, each full
collection took about 140 ms (median of 22 in one run, 2 cpus, python
3.11), and it landed on whichever system's call happened to cross the
threshold: the same code printed a ``get_items()`` ratio anywhere from
0.96× to 2.7× after tiny changes in allocation (2.47× in that run, against
about 37 ms and 27 ms per call without a collection). In its own process
each system pays only for its own heap: measured once on the seeded
10,000-item session, about 252,000 tracked objects and 135 ms a full
collection for Agentium, 178,000 and 70 ms for the SDK, with 10 and 14 full
collections in 41 ``get_items()`` calls; three runs then gave 1.31×, 1.34×
and 1.36×.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

IDENTITY_PARTS = ("bench", "user", "benchmark")

#: What the parent calls each worker's system, and the worker's ``--worker`` argument.
SYSTEMS = ("agentium", "sdk")


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


async def open_sessions(system: str, path: str, sizes: list[int], stack: Any) -> dict[int, Any]:
    """The worker's sessions, one per size, on a fresh database at ``path`` (importing only this system)."""
    if system == "agentium":
        from agentium_harness import VerifiedIdentity, create_harness_runtime
        from agentium_harness.adapters.providers import ScriptedProvider
        from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
        from agentium_openai_agents import AgentiumSession

        config = SQLiteConfig(path=path, synchronous="FULL")
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["(not called)"]),
            archive=archive,
            session_store=store,
            owned=(archive, store),
        )
        await stack.enter_async_context(runtime)
        identity = VerifiedIdentity(*IDENTITY_PARTS)
        return {n: AgentiumSession(runtime, identity, f"s{n}") for n in sizes}

    from agents import SQLiteSession

    class FullSyncSQLiteSession(SQLiteSession):
        """The SDK's SQLiteSession with ``synchronous=FULL`` stated on every connection (WAL is its own)."""

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=FULL")

    sessions = {n: FullSyncSQLiteSession(f"s{n}", path) for n in sizes}
    for session in sessions.values():
        stack.callback(session.close)
    return sessions


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def full_collections() -> int:
    """Generation-2 (full) collections of this process's cyclic GC so far."""
    return int(gc.get_stats()[2]["collections"])


async def worker(system: str, path: str, sizes: list[int]) -> None:
    """One system in a process of its own: seed each size, then answer the parent's commands in JSON lines.

    - ``digest N``: sha256 of ``get_items()`` of the N-item session (untimed);
    - ``add N COUNT``: time COUNT calls in a row of ``add_items`` of 2 new items on the N-item session;
    - ``get N LIMIT COUNT``: time COUNT calls of ``get_items(LIMIT)`` (``LIMIT`` 0: ``get_items()``);
    - ``quit``.

    A timed reply is ``{"wall": [ms, ...], "cpu": [ms, ...], "full_gc": k}``:
    wall clock around each call, this process's CPU time (every thread) of
    each, and how many full collections of the cyclic GC ran inside them.
    """
    from contextlib import AsyncExitStack

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(system, path, sizes, stack)
        start = time.perf_counter()
        for n in sizes:
            for k in range(n // 2):
                await sessions[n].add_items(turn(k))
        _reply({"ready": True, "seconds": time.perf_counter() - start})
        extra = {n: iter(range(10**6, 2 * 10**6)) for n in sizes}
        while line := (await reader.readline()).decode():
            command, *args = line.split()
            if command == "quit":
                break
            session = sessions[int(args[0])]
            if command == "digest":
                items = await session.get_items()
                text = json.dumps(items, sort_keys=True).encode()
                _reply({"digest": hashlib.sha256(text).hexdigest(), "items": len(items)})
                continue
            if command not in ("add", "get"):
                raise SystemExit(f"unknown command {line!r}")
            walls: list[float] = []
            cpus: list[float] = []
            collections = full_collections()
            for _ in range(int(args[-1])):
                if command == "add":
                    call = session.add_items(turn(next(extra[int(args[0])])))
                else:
                    limit = int(args[1])
                    call = session.get_items(limit) if limit else session.get_items()
                start, cpu = time.perf_counter(), time.process_time()
                await call
                walls.append((time.perf_counter() - start) * 1000)
                cpus.append((time.process_time() - cpu) * 1000)
            _reply({"wall": walls, "cpu": cpus, "full_gc": full_collections() - collections})


class Worker:
    """The parent's end of one system's worker process."""

    def __init__(self, system: str, path: str, sizes: list[int]) -> None:
        self.system = system
        command = [sys.executable, os.path.abspath(__file__), "--worker", system, "--db", path]
        command += ["--sizes", *map(str, sizes)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.full_gc = 0

    def ask(self, command: str | None = None) -> dict[str, Any]:
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None and self.proc.stdout is not None
        if command is not None:
            stdin.write(command + "\n")
            stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.system} worker exited with {self.proc.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def timed(self, command: str, count: int) -> list[tuple[float, float]]:
        reply = self.ask(f"{command} {count}")
        self.full_gc += reply["full_gc"]
        return list(zip(reply["wall"], reply["cpu"], strict=True))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"the {self.system} worker exited with {self.proc.returncode}")


Medians = tuple[float, float, float, float]


#: Calls a worker makes one after another per request: as an agent loop calls its session
#: several times a turn, and so a call is not timed right after the process was woken from
#: sleep while the other worker ran (which, measured, doubled the CPU time of a 0.5 ms call).
BATCH = 5


def side_by_side(ours: Worker, theirs: Worker, command: str, rounds: int) -> Medians:
    """Median wall ms, then median CPU ms, of each: ``rounds`` calls each in batches, alternating (ABBA)."""
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for r, start in enumerate(range(0, rounds, BATCH)):
        count = min(BATCH, rounds - start)
        if r % 2 == 0:
            a += ours.timed(command, count)
            b += theirs.timed(command, count)
        else:
            b += theirs.timed(command, count)
            a += ours.timed(command, count)
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


def main(small: bool, rounds: int) -> None:
    low, high = (100, 400) if small else (100, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        ours, theirs = (Worker(s, os.path.join(tmp, f"{s}.db"), [low, high]) for s in SYSTEMS)
        try:
            seeded = [w.ask()["seconds"] for w in (ours, theirs)]
            print(
                f"seeded {low:,} and {high:,} items in each in {time.perf_counter() - start:.1f} s "
                f"(each in its own process: agentium {seeded[0]:.1f} s, sdk {seeded[1]:.1f} s)"
            )
            for n in (low, high):
                mine, sdk = ours.ask(f"digest {n}"), theirs.ask(f"digest {n}")
                assert mine == sdk and mine["items"] == n, (n, mine, sdk)

            results = []
            for n in (low, high):
                pair = side_by_side(ours, theirs, f"add {n}", rounds)
                results.append((f"add_items(2) at {n:,}", pair, 1.0))
            pair = side_by_side(ours, theirs, f"get {high} 20", rounds)
            results.append((f"get_items(20) at {high:,}", pair, 1.5))
            pair = side_by_side(ours, theirs, f"get {high} 0", rounds)
            results.append((f"get_items() at {high:,}", pair, 2.0))
        finally:
            for w in (ours, theirs):
                w.close()

    machine = f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus"
    print(f"{machine}, {rounds} rounds, one worker process per system")
    for label, figures, target in results:
        report(label, figures, target)
    print(f"full GC collections inside timed calls: agentium {ours.full_gc}, sdk {theirs.full_gc}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="100 and 400 items, 9 rounds (smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="timed calls per figure (default 41)")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.worker, args.db, args.sizes))
    else:
        main(args.small, args.rounds or (9 if args.small else 41))
    sys.exit(0)
