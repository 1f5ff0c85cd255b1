"""What observability costs a turn when nothing records (issue 24, item 4).

Four modes, each in its own worker processes, timed side by side in one run:

- ``bare``: ``opentelemetry`` unimportable and ``run()`` called past its
  observability wrapper (``HarnessRuntime.run.__wrapped__``): what a turn cost
  before the wrapper existed, for scale (the stage helpers are still called;
  each is a shared no-op, measured at about half a microsecond);
- ``none``: ``opentelemetry`` made unimportable (as where it is not installed);
- ``api``: ``opentelemetry-api`` installed, no SDK configured (the global
  providers are the API's proxies): the state of a host that installed the
  extra but exports nothing. Target: median turn time at most 1.03 × ``none``;
- ``sdk``: the SDK configured, every span to an in-memory exporter and every
  metric to an in-memory reader: what recording costs (no target, for scale).

Two adapter sets: the in-memory archive and session store (the engine alone,
the harshest case: nothing else dilutes the instrumentation) and the built-in
SQLite pair with its default options (a realistic turn, fsync included). The
scripted provider answers; no recall, no summaries; default ``ResidentLimits``.

Each mode runs in ``--workers`` processes (default 2), pooled: two processes
running the same code differ by a few per cent on their own (memory layout,
hash seeds), which one process per mode would read as the mode's cost. The
parent drives the workers a batch of turns at a time, rotating the order, so
drift in machine load falls on every mode alike; only one worker runs at a
time. Each turn is one ``runtime.run(...)`` timed inside the event loop with
``perf_counter_ns``, after untimed warm-up turns. Prints
each mode's median and its ratio to ``none`` (the median over rounds of the
ratio of the round's batch medians, so load bursts cancel), against the target
with PASS or MISS; then the median process CPU time per turn and its ratio,
which waiting for a core on a loaded machine does not inflate. Exits 0 either
way: a benchmark on a shared machine is not a test.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

RATIO_TARGET = 1.03
MODES = ("bare", "none", "api", "sdk")
ADAPTERS = ("memory", "sqlite")

_BLOCK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""


# ---------------------------------------------------------------------------
# Worker (imports are local: the parent needs none of them)
# ---------------------------------------------------------------------------


def _configure(mode: str) -> None:
    if mode in ("bare", "none"):
        exec(_BLOCK, {})  # a fixed import blocker, run before anything imports opentelemetry
        return
    if mode == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
        _STATE["exporter"] = exporter


_STATE: dict[str, Any] = {}


def work(mode: str, adapters: str, workdir: str) -> None:
    """Serve ``run N`` commands on stdin: N timed turns, their durations in ns as one JSON line."""
    _configure(mode)
    import time

    import anyio

    from agentium_harness import VerifiedIdentity, create_harness_runtime
    from agentium_harness._observe import spans
    from agentium_harness.adapters.providers import ScriptedProvider

    if adapters == "memory":
        from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore

        archive: Any = InMemoryArchive()
        store: Any = InMemorySessionStore()
    else:
        import os

        from agentium_harness.adapters import sqlite

        os.makedirs(workdir, exist_ok=True)
        path = f"{workdir}/{mode}-{adapters}.db"
        archive = sqlite.SQLiteArchive(sqlite.SQLiteConfig(path=path))
        store = sqlite.SQLiteSessionStore(sqlite.SQLiteConfig(path=path))
    provider = ScriptedProvider(replies=["Noted; carry on."], cycle=True)
    runtime = create_harness_runtime(provider=provider, archive=archive, session_store=store)
    who = VerifiedIdentity("bench-tenant", "bench-user", "bench")
    counter = [0]
    run = type(runtime).run.__wrapped__ if mode == "bare" else type(runtime).run  # type: ignore[attr-defined]

    cpu: list[int] = []

    async def turns(n: int) -> list[int]:
        out = []
        cpu.clear()
        for _ in range(n):
            counter[0] += 1
            start, start_cpu = time.perf_counter_ns(), time.process_time_ns()
            await run(runtime, who, "bench-session", f"turn {counter[0]}: carry on with the plan")
            out.append(time.perf_counter_ns() - start)
            cpu.append(time.process_time_ns() - start_cpu)
        exporter = _STATE.get("exporter")
        if exporter is not None:
            exporter.clear()  # keep memory flat; exporting itself was paid inside the turns
        return out

    async def serve() -> None:
        async with runtime:
            await turns(20)  # warm-up: imports, first SQLite statements, caches
            ok = spans.HAVE_OTEL == (mode not in ("bare", "none"))
            sys.stdout.write(json.dumps({"ready": True, "have_otel": spans.HAVE_OTEL, "ok": ok}) + "\n")
            sys.stdout.flush()
            for line in sys.stdin:
                command = line.split()
                if not command or command[0] == "quit":
                    break
                wall = await turns(int(command[1]))
                sys.stdout.write(json.dumps({"ns": wall, "cpu": cpu}) + "\n")
                sys.stdout.flush()

    anyio.run(serve)


# ---------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------


class Worker:
    """One worker process: one mode on one adapter set."""

    def __init__(self, mode: str, adapters: str, workdir: str) -> None:
        self.mode, self.adapters = mode, adapters
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--work", mode, adapters, workdir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.samples: list[int] = []
        self.cpu: list[int] = []
        #: The median of each batch, in round order: paired with the other modes' batches of that round.
        self.batches: list[float] = []
        ready = self._read()
        if not ready.get("ok"):
            raise SystemExit(f"worker {mode}/{adapters} is not in its mode: {ready}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.mode}/{self.adapters} died (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, n: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {n}\n")
        self.proc.stdin.flush()
        answer = self._read()
        got = answer["ns"]
        self.samples.extend(got)
        self.cpu.extend(answer["cpu"])
        self.batches.append(statistics.median(got))

    def finish(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _paired_ratio(workers: Sequence[Worker], mode: str, rounds: int) -> float:
    """The median over rounds of (this mode's batch medians ÷ ``none``'s) in the same round.

    A round's batches run back to back, so a burst of load from elsewhere on
    the machine falls on one round of every mode; pairing by round cancels
    it where pooling all samples would not.
    """

    def in_round(which: str, r: int) -> float:
        return statistics.mean(w.batches[r] for w in workers if w.mode == which)

    return statistics.median(in_round(mode, r) / in_round("none", r) for r in range(rounds))


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--rounds", type=int, default=40, help="batches per worker (default 40)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per mode (default 2)")
    parser.add_argument("--batch", type=int, default=10, help="turns per batch (default 10)")
    parser.add_argument("--adapters", nargs="+", choices=ADAPTERS, default=list(ADAPTERS))
    parser.add_argument("--small", action="store_true", help="a smoke run: 4 rounds of 5 turns")
    parser.add_argument("--work", nargs=3, metavar=("MODE", "ADAPTERS", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.work:
        work(*args.work)
        return 0
    rounds, batch = (4, 5) if args.small else (args.rounds, args.batch)
    per_mode = 1 if args.small else max(1, args.workers)
    print(
        f"otel_overhead: python {platform.python_version()}, {per_mode} worker(s) per mode, "
        f"{rounds} rounds x {batch} turns per worker"
    )
    with tempfile.TemporaryDirectory(prefix="agentium-otel-bench-") as workdir:
        for adapters in args.adapters:
            workers = [Worker(mode, adapters, f"{workdir}/{i}") for i in range(per_mode) for mode in MODES]
            try:
                for r in range(rounds):
                    shift = r % len(workers)
                    order = workers[shift:] + workers[:shift]
                    for worker in order if r % 2 == 0 else reversed(order):
                        worker.run(batch)
            finally:
                for worker in workers:
                    worker.finish()
            medians = {
                mode: statistics.median(s for w in workers if w.mode == mode for s in w.samples) / 1e3
                for mode in MODES
            }
            cpu = {
                mode: statistics.median(s for w in workers if w.mode == mode for s in w.cpu) / 1e3
                for mode in MODES
            }
            for mode in MODES:
                ratio = _paired_ratio(workers, mode, rounds)
                target = ""
                if mode == "api":
                    target = f"  target <= {RATIO_TARGET}  {'PASS' if ratio <= RATIO_TARGET else 'MISS'}"
                line = f"{adapters:>6} {mode:>4}: median {medians[mode]:9.1f} us per turn  ratio {ratio:.3f}"
                cpu_ratio = cpu[mode] / cpu["none"]
                print(line + target + f"  | CPU {cpu[mode]:8.1f} us  ratio {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
