"""Per-turn runtime overhead with a short and a long session history.

Does the cost of a turn stay flat as a session's history grows? Resident
history is bounded (R2) and evicted groups live in the archive (R3), so a turn
on a session with 10,000 prior turns should cost about what a turn with 100
prior turns costs, in time and in memory.

Setup: the built-in SQLite archive and session store with their default
options on one database file in a temp dir, the scripted provider, no recall,
default ``ResidentLimits``. For each scenario:

1. a seeder subprocess runs the prior turns through the runtime itself (so the
   stored state is exactly what the runtime produces) and checks the result;
2. a fresh worker subprocess opens the database and waits for commands;
3. the parent alternates the two workers, a batch of turns at a time (ABBA
   order), so drift in machine load hits both scenarios alike;
4. each worker reports its peak RSS (``ru_maxrss``) at the end.

Prints the median per-turn time of each scenario, their ratio and the peak RSS
difference, each against its target with PASS or MISS. Exits 0 either way: it
is a benchmark, not a test. Run ``python benchmarks/turn_overhead.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import IO, Any

RATIO_TARGET = 1.2
RSS_TARGET_MB = 10.0
SESSION_ID = "bench-session"


# ---------------------------------------------------------------------------
# Shared by seeder and worker (imports are local: the parent needs none of them)
# ---------------------------------------------------------------------------


def _build(db_path: str) -> tuple[Any, Any, Any]:
    """A runtime over SQLite adapters with default options on ``db_path``."""
    from agentium_harness import create_harness_runtime
    from agentium_harness.adapters.providers import ScriptedProvider
    from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteSessionStore

    archive, store = _sqlite_adapters(db_path, SQLiteArchive, SQLiteSessionStore)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["Noted; carry on."], cycle=True),
        archive=archive,
        session_store=store,
    )
    return runtime, archive, store


def _sqlite_adapters(db_path: str, archive_cls: Any, store_cls: Any) -> tuple[Any, Any]:
    from agentium_harness.adapters import sqlite as mod

    shared = getattr(mod, "SQLiteConfig", None)
    archive_cfg = getattr(mod, "SQLiteArchiveConfig", shared)
    store_cfg = getattr(mod, "SQLiteSessionStoreConfig", shared)
    return archive_cls(archive_cfg(path=db_path)), store_cls(store_cfg(path=db_path))


def _identity() -> Any:
    from agentium_harness._scope import VerifiedIdentity

    return VerifiedIdentity("bench-tenant", "bench-user", "benchmark")


def _turn_text(i: int) -> str:
    return f"Turn {i}: please keep track of item {i} and its status for later."


# ---------------------------------------------------------------------------
# Seeder: run the prior turns through the runtime
# ---------------------------------------------------------------------------


def seed(db_path: str, turns: int) -> None:
    import anyio

    from agentium_harness._engine.limits import ResidentLimits

    async def main() -> None:
        runtime, archive, store = _build(db_path)
        identity = _identity()
        try:
            for i in range(turns):
                await runtime.run(identity, SESSION_ID, _turn_text(i))
            view = await runtime.inspect_session(identity, SESSION_ID)
        finally:
            await archive.aclose()
            await store.aclose()
        resident = min(turns, ResidentLimits().max_groups)
        expected = (turns, turns - resident, tuple(range(turns - resident, turns)))
        got = (view.next_seq, view.boundary, view.resident_seqs)
        if got != expected:
            raise SystemExit(f"seeded state {got} is not the expected {expected}")

    anyio.run(main)


# ---------------------------------------------------------------------------
# Worker: time turns on command, report peak RSS
# ---------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def work(db_path: str, first_turn: int) -> None:
    from anyio.from_thread import start_blocking_portal

    identity = _identity()
    counter = first_turn

    async def turns(n: int) -> list[int]:
        nonlocal counter
        times = []
        for _ in range(n):
            text = _turn_text(counter)
            counter += 1
            start = time.perf_counter_ns()
            await runtime.run(identity, SESSION_ID, text)
            times.append(time.perf_counter_ns() - start)
        return times

    with start_blocking_portal() as portal:
        runtime, archive, store = portal.call(_async_build, db_path)
        _reply(sys.stdout, {"ready": True})
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            if command == "run":
                _reply(sys.stdout, {"ns": portal.call(turns, int(arg))})
            elif command == "rss":
                _reply(sys.stdout, {"peak_rss_mb": _peak_rss_mb()})
            elif command == "quit":
                break
        portal.call(archive.aclose)
        portal.call(store.aclose)


async def _async_build(db_path: str) -> tuple[Any, Any, Any]:
    return _build(db_path)


def _reply(stream: IO[str], payload: dict[str, Any]) -> None:
    stream.write(json.dumps(payload) + "\n")
    stream.flush()


# ---------------------------------------------------------------------------
# Parent: seed, alternate, report
# ---------------------------------------------------------------------------


class Worker:
    """A worker subprocess for one scenario, driven line by line."""

    def __init__(self, prior: int, db_path: str) -> None:
        self.prior = prior
        self.times_ns: list[int] = []
        self.batch_medians_ns: list[float] = []
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", db_path, "--first-turn", str(prior)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ask_raw(None)  # wait for "ready"

    def ask_raw(self, command: str | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker for prior={self.prior} exited with {self.proc.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, n: int, *, keep: bool = True) -> None:
        times = self.ask_raw(f"run {n}")["ns"]
        if keep:
            self.times_ns.extend(times)
            self.batch_medians_ns.append(statistics.median(times))

    def finish(self) -> float:
        peak = float(self.ask_raw("rss")["peak_rss_mb"])
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        return peak


def _seed_all(priors: Sequence[int], workdir: str) -> list[str]:
    """Seed one database per scenario, in parallel subprocesses."""
    paths = [os.path.join(workdir, f"prior-{p}", "agentium.db") for p in priors]
    procs = []
    for prior, path in zip(priors, paths, strict=True):
        os.makedirs(os.path.dirname(path))
        procs.append(subprocess.Popen([sys.executable, __file__, "--seed", path, "--turns", str(prior)]))
    for prior, proc in zip(priors, procs, strict=True):
        if proc.wait() != 0:
            raise SystemExit(f"seeding {prior} prior turns failed")
    return paths


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--prior", type=int, nargs=2, default=(100, 10_000), metavar=("SHORT", "LONG"), help="prior turns"
    )
    parser.add_argument("--rounds", type=int, default=100, help="alternating rounds (default 100)")
    parser.add_argument("--batch", type=int, default=5, help="timed turns per worker per round (default 5)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed turns per worker first (default 10)")
    parser.add_argument(
        "--small", action="store_true", help="smoke run: 10 and 100 prior turns, 3 rounds of 3"
    )
    parser.add_argument("--seed", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--first-turn", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.seed:
        seed(args.seed, args.turns)
        return 0
    if args.worker:
        work(args.worker, args.first_turn)
        return 0

    if args.small:
        args.prior, args.rounds, args.batch, args.warmup = (10, 100), 3, 3, 2
    short, long_ = args.prior
    print(
        f"turn overhead: SQLite defaults on one file, scripted provider, no recall, default ResidentLimits\n"
        f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPU(s); {args.rounds} rounds x {args.batch} timed turns per scenario"
    )
    with tempfile.TemporaryDirectory(prefix="agentium-bench-") as workdir:
        started = time.perf_counter()
        paths = _seed_all((short, long_), workdir)
        seconds = time.perf_counter() - started
        print(f"seeded {short} and {long_} prior turns through the runtime in {seconds:.1f}s")
        workers = [Worker(short, paths[0]), Worker(long_, paths[1])]
        try:
            for w in workers:
                w.run(args.warmup, keep=False)
            for r in range(args.rounds):
                for w in workers if r % 2 == 0 else workers[::-1]:
                    w.run(args.batch)
            peaks = [w.finish() for w in workers]
        finally:
            for w in workers:
                if w.proc.poll() is None:
                    w.proc.kill()

    medians = []
    for w, peak in zip(workers, peaks, strict=True):
        ms = [t / 1e6 for t in w.times_ns]
        q = statistics.quantiles(ms, n=10) if len(ms) >= 2 else [ms[0]] * 9
        medians.append(statistics.median(ms))
        print(
            f"  prior={w.prior:>6}: median {medians[-1]:7.3f} ms/turn  (p10 {q[0]:.3f}, p90 {q[8]:.3f}, "
            f"n={len(ms)})  peak RSS {peak:7.1f} MB"
        )
    ratio = medians[1] / medians[0]
    # Each round times both scenarios back to back, so a per-round ratio cancels slow drift in
    # machine load (fsync latency above all); its spread shows how noisy the headline ratio is.
    paired = [b / a for a, b in zip(workers[0].batch_medians_ns, workers[1].batch_medians_ns, strict=True)]
    pq = statistics.quantiles(paired, n=4) if len(paired) >= 2 else [paired[0]] * 3
    print(f"per-round ratios: median {pq[1]:.3f}, quartiles {pq[0]:.3f}..{pq[2]:.3f} ({len(paired)} rounds)")
    rss_diff = peaks[1] - peaks[0]
    print(f"ratio {long_}/{short}: {ratio:.3f}  target <= {RATIO_TARGET}  {_verdict(ratio <= RATIO_TARGET)}")
    print(
        f"peak RSS difference: {rss_diff:+.1f} MB  target < {RSS_TARGET_MB:.0f} MB  "
        f"{_verdict(rss_diff < RSS_TARGET_MB)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
