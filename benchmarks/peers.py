"""Per-turn cost of Agentium against LangGraph and the OpenAI Agents SDK, with the disk's limit.

Every system stores one conversation in its own SQLite file, in WAL mode with
``synchronous=FULL``, with the same 500-character messages, and no model is
called: each turn adds the user's message and a canned 500-character reply.

- **agentium**: ``runtime.run`` on the built-in SQLite archive and session
  store (one file), scripted provider;
- **langgraph**: ``graph.invoke`` on a one-node ``MessagesState`` graph whose
  node returns the canned ``AIMessage``, checkpointed by ``SqliteSaver``;
- **openai-agents**: ``SQLiteSession.get_items`` + ``add_items`` of the
  turn's user and assistant items;
- **disk limit**: a plain ``sqlite3`` loop doing N small fsynced commits per
  turn, N = Agentium's commits per turn (counted in the same run).

Two shapes of history, each measured at every size: ``growing`` (every timed
turn adds its two messages, as in a real session, so a worker that starts at
N ends a few hundred messages past it) and ``held`` (after each timed turn,
untimed, the system is put back to its N messages, so every timed turn sees
exactly N). A peer that reads the whole history every turn costs more in the
first shape; the figures differ by as much as 2-3x at 100 messages.

Method: each system's histories are preloaded by one seeder process through
the system's own API in big batches; each (system, history size, shape) is
timed in its own worker process in the system's own environment
(``benchmarks/_peer_workers/``), which opens its database only after the
seeding, so seeding never counts in its peak RSS.
After untimed warm-up turns, the parent asks each worker for a batch of
turns in turn, forward then backward (ABBA), so drift in machine load hits
all systems alike. Each worker also counts the write system calls and bytes
of each timed turn (``/proc/self/io`` ``syscw`` and ``wchar``). It reports,
per shape, medians with p10-p90, writes and KB per turn, Agentium's ratio to
each peer at each size, each system's growth with history, peak RSS per
worker (``ru_maxrss``) and Agentium's median over one durable commit, then
the targets of issue 28. Always exits 0 when the measurement ran: it is a
benchmark, not a test.

Peers run in a venv each under ``benchmarks/.venvs/<peer>/``, created on
first use from ``benchmarks/requirements-peers.txt``, or in this interpreter
when the packages are installed here; ``--peer-env`` picks. A peer that is
not available (``--no-install``) is skipped and the output says so.
Run ``python benchmarks/peers.py --help``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "_peer_workers"
REQUIREMENTS = HERE / "requirements-peers.txt"
DEFAULT_VENVS = HERE / ".venvs"

# Targets of issue 28, for each shape, printed with PASS or MISS when the sizes they name were measured.
TARGET_VS_OPENAI_AT_100 = 1.0  # Agentium / openai-agents
TARGET_LANGGRAPH_X_AT_1K = 30.0  # langgraph / Agentium
TARGET_GROWTH = 1.1  # Agentium median at 10k / at 1k
TARGET_DISK = 4.0  # Agentium median / one durable commit (worst size)
TARGET_WRITES = 8.0  # Agentium write system calls per turn (worst size)

SHAPES = ("growing", "held")


@dataclass(frozen=True)
class Peer:
    """A peer system: its worker script and the distributions it needs."""

    name: str
    worker: str
    distributions: tuple[str, ...]


PEERS = {
    "langgraph": Peer("langgraph", "langgraph_worker.py", ("langgraph", "langgraph-checkpoint-sqlite")),
    "openai-agents": Peer("openai-agents", "openai_agents_worker.py", ("openai-agents",)),
}


# ---------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def peer_requirements(peer: Peer, path: Path = REQUIREMENTS) -> list[str]:
    """The lines of ``requirements-peers.txt`` that name one of ``peer``'s distributions."""
    wanted = {_normalize(d) for d in peer.distributions}
    lines, found = [], set()
    for raw in path.read_text("utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if match and _normalize(match.group(0)) in wanted:
            lines.append(line)
            found.add(_normalize(match.group(0)))
    missing = wanted - found
    if missing:
        raise SystemExit(f"{path} names no requirement for {sorted(missing)} (peer {peer.name})")
    return lines


def installed_here(peer: Peer) -> bool:
    """Whether every distribution of ``peer`` is installed in this interpreter."""
    try:
        for name in peer.distributions:
            metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def venv_python(venv: Path) -> Path:
    """The interpreter of a venv."""
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


STAMP = "peers-requirements.txt"


def venv_ready(venv: Path, requirements: Sequence[str]) -> bool:
    """A venv made by this script with exactly these requirement lines installed."""
    stamp = venv / STAMP
    return (
        venv_python(venv).exists()
        and stamp.exists()
        and stamp.read_text("utf-8").splitlines() == list(requirements)
    )


def make_venv(venv: Path, requirements: Sequence[str]) -> str | None:
    """Create (or update) ``venv`` and install ``requirements``; an error message or ``None``."""
    print(f"  creating {venv} and installing {' '.join(requirements)} (once; reused afterwards)", flush=True)
    started = time.perf_counter()
    steps = [[sys.executable, "-m", "venv", str(venv)]]
    steps.append([str(venv_python(venv)), "-m", "pip", "install", "--quiet", *requirements])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            return f"{' '.join(step[:4])} ... failed ({done.returncode}): {tail}"
    (venv / STAMP).write_text("\n".join(requirements) + "\n", "utf-8")
    print(f"  installed in {time.perf_counter() - started:.0f}s", flush=True)
    return None


@dataclass(frozen=True)
class Env:
    """Where a system runs: an interpreter, and how it was chosen (for the report)."""

    python: str
    where: str


def resolve_env(peer: Peer, mode: str, install: bool, venvs: Path) -> Env | str:
    """The environment of ``peer`` under ``--peer-env mode``, or why it is unavailable."""
    if mode in ("auto", "current") and installed_here(peer):
        return Env(sys.executable, "current interpreter")
    if mode == "current":
        return f"{', '.join(peer.distributions)} not installed in this interpreter ({sys.executable})"
    venv = venvs / peer.name
    requirements = peer_requirements(peer)
    if not venv_ready(venv, requirements):
        if not install:
            return f"no peer venv at {venv} with {' '.join(requirements)}, and --no-install"
        error = make_venv(venv, requirements)
        if error is not None:
            return error
    return Env(str(venv_python(venv)), f"venv {_shown(venv)}")


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------


@dataclass
class Scenario:
    """One system at one history size, with its worker process once started."""

    system: str
    messages: int
    env: Env
    script: str
    db: str
    shape: str = "growing"
    commits: int = 2
    proc: subprocess.Popen[str] | None = None
    times_ns: list[int] = field(default_factory=list)
    syscw: list[int] = field(default_factory=list)
    wchar: list[int] = field(default_factory=list)
    batch_medians_ns: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    commits_per_turn: float | None = None
    peak_rss_mb: float = 0.0

    @property
    def label(self) -> str:
        return "disk limit" if self.system == "disk" else f"{self.system} @ {self.messages} ({self.shape})"

    def command(self) -> list[str]:
        args = ["--db", self.db, "--messages", str(self.messages), "--commits", str(self.commits)]
        return [self.env.python, str(WORKERS / self.script), *args, "--shape", self.shape]

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, command: str | None) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker for {self.label} exited with {self.proc.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, turns: int, seconds: float, *, keep: bool = True) -> None:
        reply = self.ask(f"run {turns} {seconds}")
        if keep:
            self.times_ns.extend(reply["ns"])
            self.syscw.extend(reply["syscw"])
            self.wchar.extend(reply["wchar"])
            self.batch_medians_ns.append(statistics.median(reply["ns"]))

    def writes(self) -> tuple[float, float] | None:
        """Mean write system calls and KB written per timed turn; ``None`` without ``/proc/self/io``."""
        if not self.syscw:
            return None
        return statistics.fmean(self.syscw), statistics.fmean(self.wchar) / 1024

    def finish(self) -> None:
        self.peak_rss_mb = float(self.ask("rss")["peak_rss_mb"])
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stats_ms(self) -> tuple[float, float, float]:
        """Median, p10 and p90 of the timed turns, in ms."""
        ms = [t / 1e6 for t in self.times_ns]
        if len(ms) < 2:
            return ms[0], ms[0], ms[0]
        q = statistics.quantiles(ms, n=10, method="inclusive")
        return statistics.median(ms), q[0], q[8]


def seed(group: Sequence[Scenario]) -> list[dict[str, Any]]:
    """Preload every scenario of one system in one seeder process; its per-database reports."""
    first = group[0]
    for s in group:
        os.makedirs(os.path.dirname(s.db), exist_ok=True)
    pairs = [f"{s.db}={s.messages}" for s in group]
    command = [first.env.python, str(WORKERS / first.script), "--seed", *pairs]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"seeding {first.system} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(replies) != len(group):
        raise SystemExit(f"seeding {first.system} reported {len(replies)} of {len(group)} histories")
    return [{"system": first.system, **r} for r in replies]


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _paired(a: Scenario, b: Scenario) -> tuple[float, float, float] | None:
    """Quartiles of per-round ratios a/b (same round, back to back), or ``None`` with too few rounds."""
    pairs = [x / y for x, y in zip(a.batch_medians_ns, b.batch_medians_ns, strict=False)]
    if len(pairs) < 4:
        return None
    q = statistics.quantiles(pairs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def _writes(s: Scenario) -> tuple[str, str]:
    found = s.writes()
    return ("?", "?") if found is None else (f"{found[0]:.1f}", f"{found[1]:.1f}")


def report(
    scenarios: list[Scenario], sizes: Sequence[int], systems: Sequence[str], disk: Scenario, shape: str
) -> dict[str, tuple[float, float, bool]]:
    """Print one shape's table, median pivot, ratios, growth and disk limit; return its targets.

    The targets come back as ``{name: (value, target, met)}`` for the summary.
    """
    by = {(s.system, s.messages): s for s in scenarios if s.shape == shape}
    median = {key: s.stats_ms()[0] for key, s in by.items()}
    disk_median = disk.stats_ms()[0]
    commit_ms = disk_median / max(1, disk.commits)

    how_held = (
        "each timed turn adds its two messages"
        if shape == "growing"
        else "held at N: each turn's messages removed after it, untimed"
    )
    print(f"\n## history {shape} ({how_held})")
    print(
        "\n| system | prior messages | median ms | p10 ms | p90 ms | turns | commits/turn | writes/turn "
        "| KB/turn | peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in [*by.values(), disk]:
        med, p10, p90 = s.stats_ms()
        commits = "?" if s.commits_per_turn is None else f"{s.commits_per_turn:.2f}"
        size = "-" if s.system == "disk" else f"{s.messages:,}"
        name = f"disk limit ({disk.commits} commits)" if s.system == "disk" else s.system
        writes, kb = _writes(s)
        print(
            f"| {name} | {size} | {_ms(med)} | {_ms(p10)} | {_ms(p90)} | {len(s.times_ns)} | {commits} "
            f"| {writes} | {kb} | {s.peak_rss_mb:.1f} |"
        )

    print("\nmedian ms per turn:\n")
    print("| system | " + " | ".join(f"{n:,} msgs" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for system in systems:
        print(f"| {system} | " + " | ".join(_ms(median[(system, n)]) for n in sizes) + " |")
    print(f"| disk limit ({disk.commits} commits) | " + " | ".join(_ms(disk_median) for _ in sizes) + " |")

    peers = [p for p in systems if p != "agentium"]
    if peers:
        print(
            "\nratios, Agentium median / peer median (< 1: Agentium faster), [quartiles of per-round ratios]:"
        )
        for peer in peers:
            parts = []
            for n in sizes:
                ratio = median[("agentium", n)] / median[(peer, n)]
                q = _paired(by[("agentium", n)], by[(peer, n)])
                spread = f" [{q[0]:.3f}..{q[2]:.3f}]" if q else ""
                who = f"Agentium {1 / ratio:.1f}x faster" if ratio <= 1 else f"{peer} {ratio:.1f}x faster"
                parts.append(f"{n:,}: {ratio:.3f} ({who}){spread}")
            print(f"  vs {peer}:\n    " + "\n    ".join(parts))

    if len(sizes) > 1:
        # Every step between consecutive sizes; the growth target below uses 10,000 / 1,000.
        steps = list(itertools.pairwise(sizes))
        print("\ngrowth, median at the larger size / median at the smaller:")
        for system in systems:
            parts = [f"{b:,}/{a:,}: {median[(system, b)] / median[(system, a)]:.3f}" for a, b in steps]
            print(f"  {system:<14} " + "   ".join(parts))

    how = disk.info.get("commits_how", "default")
    _, d10, d90 = disk.stats_ms()
    print(
        f"\ndisk limit: {disk.commits} fsynced commits per turn ({how}): median {_ms(disk_median)} ms "
        f"(p10 {_ms(d10)}, p90 {_ms(d90)}); one durable commit {_ms(commit_ms)} ms"
    )
    print(
        "  Agentium median / one durable commit: "
        + "   ".join(f"{n:,}: {median[('agentium', n)] / commit_ms:.2f}" for n in sizes)
    )

    targets: dict[str, tuple[float, float, bool]] = {}
    if "openai-agents" in systems and 100 in sizes:
        r = median[("agentium", 100)] / median[("openai-agents", 100)]
        targets["Agentium / openai-agents at 100 <="] = (
            r,
            TARGET_VS_OPENAI_AT_100,
            r <= TARGET_VS_OPENAI_AT_100,
        )
    if "langgraph" in systems and 1000 in sizes:
        x = median[("langgraph", 1000)] / median[("agentium", 1000)]
        targets["langgraph / Agentium at 1,000 >="] = (
            x,
            TARGET_LANGGRAPH_X_AT_1K,
            x >= TARGET_LANGGRAPH_X_AT_1K,
        )
    if 1000 in sizes and 10_000 in sizes:
        g = median[("agentium", 10_000)] / median[("agentium", 1000)]
        targets["Agentium growth 10,000 / 1,000 <="] = (g, TARGET_GROWTH, g <= TARGET_GROWTH)
    worst = max(median[("agentium", n)] for n in sizes) / commit_ms
    targets["Agentium / one durable commit (worst size) <="] = (worst, TARGET_DISK, worst <= TARGET_DISK)
    counted = [by[("agentium", n)].writes() for n in sizes]
    if all(c is not None for c in counted):
        most = max(c[0] for c in counted if c is not None)
        targets["Agentium writes per turn (worst size) <="] = (most, TARGET_WRITES, most <= TARGET_WRITES)
    return targets


def print_targets(found: dict[str, dict[str, tuple[float, float, bool]]]) -> None:
    """Every target of issue 28 in each shape, with PASS or MISS."""
    print("\ntargets (issue 28), each shape measured in this run:")
    names = list(dict.fromkeys(name for shape in found.values() for name in shape))
    for name in names:
        parts = []
        for shape, targets in found.items():
            if name in targets:
                value, _, met = targets[name]
                parts.append(f"{shape} {value:.3g} {_verdict(met)}")
        target = next(t[name][1] for t in found.values() if name in t)
        print(f"  {name} {target:g}: " + "   ".join(parts))


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help="prior messages (default 100 1000 10000; with --quick 10 100)",
    )
    parser.add_argument(
        "--turns", type=int, default=20, help="max timed turns per worker per round (default 20)"
    )
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds (default 10)")
    parser.add_argument(
        "--batch-seconds",
        type=float,
        default=1.0,
        help="a worker's batch also stops once it has run this long, after at least one turn (default 1.0); "
        "keeps slow peers at large sizes to a few turns per round",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed turns per worker first (default 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 rounds of up to 3 turns, sizes 10 100 unless --sizes",
    )
    parser.add_argument(
        "--peer-env",
        choices=("auto", "current", "venv"),
        default="auto",
        help="where peers run: 'current' = this interpreter (peers must be installed here), 'venv' = "
        "benchmarks/.venvs/<peer> created from requirements-peers.txt, 'auto' (default) = this interpreter "
        "when the peer's packages are installed here, else its venv",
    )
    parser.add_argument(
        "--no-install", action="store_true", help="never create a venv or install; skip peers not available"
    )
    parser.add_argument("--venv-dir", type=Path, default=DEFAULT_VENVS, help="where peer venvs live")
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=sorted(PEERS),
        default=sorted(PEERS),
        help="peers to measure (default all)",
    )
    parser.add_argument(
        "--commits", type=int, help="disk limit: commits per turn (default: Agentium's, counted in this run)"
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=SHAPES,
        default=list(SHAPES),
        help="history growing (each turn adds two messages) and/or held at N (default both)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.turns, args.warmup, args.batch_seconds = 2, 3, 1, 0.25
    if args.sizes is None:
        args.sizes = [10, 100] if args.quick else [100, 1000, 10_000]
    sizes = sorted(set(args.sizes))
    if any(n < 2 or n % 2 for n in sizes):
        parser.error(
            f"--sizes must be even numbers >= 2 (a turn is a user and an assistant message): {sizes}"
        )
    if args.turns < 1 or args.rounds < 1 or args.warmup < 0 or args.batch_seconds <= 0:
        parser.error("--turns and --rounds must be >= 1, --warmup >= 0, --batch-seconds > 0")

    wall = time.perf_counter()
    print("peers: per-turn cost, 500-character messages, SQLite WAL + synchronous=FULL for all, no model")
    print(
        f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPU(s); {args.rounds} ABBA rounds of up to {args.turns} timed turns or "
        f"{args.batch_seconds:g} s per worker, {args.warmup} warm-up turns"
    )
    envs: dict[str, Env] = {"agentium": Env(sys.executable, "current interpreter")}
    for name in args.peers:
        env = resolve_env(PEERS[name], args.peer_env, not args.no_install, args.venv_dir)
        if isinstance(env, str):
            print(f"PEER NOT INSTALLED: {name}: {env}; skipped")
        else:
            envs[name] = env
    systems = [s for s in ("agentium", *sorted(PEERS)) if s in envs]
    scripts = {"agentium": "agentium_worker.py", **{p.name: p.worker for p in PEERS.values()}}

    shapes = [shape for shape in SHAPES if shape in args.shapes]
    with tempfile.TemporaryDirectory(prefix="agentium-peers-") as workdir:
        scenarios = [
            Scenario(s, n, envs[s], scripts[s], os.path.join(workdir, f"{s}-{n}-{shape}", "bench.db"), shape)
            for shape in shapes
            for n in sizes
            for s in systems
        ]
        by_key = {(s.system, s.messages, s.shape): s for s in scenarios}
        disk = Scenario("disk", 0, Env(sys.executable, "current interpreter"), "disk_worker.py", "")
        disk.db = os.path.join(workdir, "disk", "bench.db")
        try:
            # Timing workers start first, so their imports (seconds for the peers) overlap the
            # seeding; each opens its database only when told to, after seeding.
            for s in scenarios:
                s.start()
            started = time.perf_counter()
            # One seeder process per system, all sizes; the systems' seeders run side by side.
            with ThreadPoolExecutor(max_workers=len(systems)) as pool:
                groups = [[s for s in scenarios if s.system == x] for x in systems]
                seeded = [r for rs in pool.map(seed, groups) for r in rs]
            slowest = max(seeded, key=lambda r: float(r["seconds"]))
            print(
                f"seeded {len(seeded)} histories in {time.perf_counter() - started:.1f}s wall (slowest: "
                f"{slowest['system']} @ {slowest['messages']}, {slowest['seconds']:.1f}s)"
            )
            for s in scenarios:
                s.ask(None)  # loaded
            for s in scenarios:
                s.ask("open")  # ready
            for s in scenarios:
                if args.warmup:
                    s.run(args.warmup, 1e9, keep=False)
                s.info = s.ask("info")
                # Counted in untimed turns: the statement trace slows SQLite.
                s.commits_per_turn = s.ask("count 2")["commits_per_turn"]
            # At the largest size every turn evicts a group, the steady state of a long session.
            counted = by_key[("agentium", sizes[-1], shapes[0])].commits_per_turn
            if args.commits is not None:
                disk.commits = args.commits
                disk.info["commits_how"] = "given by --commits"
            elif counted is not None:
                disk.commits = max(1, round(counted))
                disk.info["commits_how"] = (
                    f"Agentium's {counted:.2f} commits per turn at {sizes[-1]:,} messages"
                )
            else:
                disk.info["commits_how"] = "Agentium's commits could not be counted (no connection found)"
            os.makedirs(os.path.dirname(disk.db))
            disk.start()
            disk.ask(None)
            disk.ask("open")
            disk.run(max(args.warmup, 1), 1e9, keep=False)
            disk.info = {**disk.info, **disk.ask("info")}
            disk.commits_per_turn = disk.ask("count 2")["commits_per_turn"]

            order = [*scenarios, disk]
            for r in range(args.rounds):
                for s in order if r % 2 == 0 else order[::-1]:
                    s.run(args.turns, args.batch_seconds)
            for s in order:
                s.finish()
        finally:
            for s in [*scenarios, disk]:
                s.kill()

    print("\nwhat a timed turn includes (and where it ran):")
    firsts = {system: next(s for s in scenarios if s.system == system) for system in systems}
    for system, s in [*firsts.items(), ("disk", disk)]:
        versions = ", ".join(f"{k} {v}" for k, v in s.info["versions"].items())
        name = f"disk limit, N={disk.commits}" if system == "disk" else system
        print(f"  {name} ({versions}; {s.env.where}): {s.info['includes']}")
    odd = [
        f"{s.label}: {p}"
        for s in [*scenarios, disk]
        for p in s.info["pragmas"]
        if p != {"journal_mode": "wal", "synchronous": "FULL"}
    ]
    # A worker that exposes no connection (an adapter refactor can hide them) is named, not passed over.
    unseen = [s.label for s in [*scenarios, disk] if not s.info["pragmas"]]
    if odd:
        print("WARNING: connections not in WAL + synchronous=FULL: " + "; ".join(odd))
    if unseen:
        print("WARNING: no connection found to check (and count commits on) for: " + ", ".join(unseen))
    if not odd and not unseen:
        print("  every connection checked after warm-up: journal_mode=wal, synchronous=FULL")

    found = {shape: report(scenarios, sizes, systems, disk, shape) for shape in shapes}
    print_targets(found)
    print(f"\nwall time {time.perf_counter() - wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
