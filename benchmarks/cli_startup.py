"""How long does an ``agentium`` command take to start, and what does it import?

Runs ``agentium --version``, ``agentium plugins --json`` and ``agentium check
CONFIG`` (default: ``examples/agentium.toml``) N times each as fresh
subprocesses (``python -m agentium_harness``, what the console script runs),
and prints the median wall time and the median CPU time of the child (user +
system, which waiting for a core does not inflate). With ``--compare-src DIR``
(another checkout's ``core/src``, e.g. one exported with ``git archive``) the
same commands run on that source too, alternating run by run, so both columns
see the same machine load. It also prints how many ``agentium_harness``
modules each command imported and whether the demo, eval, testing and
engine modules were among them.

    python benchmarks/cli_startup.py                         # this checkout, 20 runs per command
    python benchmarks/cli_startup.py --runs 5                # quicker
    mkdir -p /tmp/before && git archive BEFORE core/src | tar -x -C /tmp/before
    python benchmarks/cli_startup.py --compare-src /tmp/before/core/src

Always exits 0: a benchmark on a shared machine is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE_SRC = ROOT / "core" / "src"

#: Module families a command that does not need them should not import.
HEAVY = {
    "demo": "agentium_harness._demo",
    "eval": "agentium_harness.eval",
    "testing": "agentium_harness.testing",
    "blocking": "agentium_harness._blocking",
    "engine": "agentium_harness._engine",
}

#: Runs the command in-process, then reports the modules it imported (on fd 3, not stdout).
MODULES_SCRIPT = """
import os, sys
from agentium_harness._cli import console
try:
    console(sys.argv[1:])
except SystemExit:
    pass
names = sorted(m for m in sys.modules if m.startswith("agentium_harness"))
os.write(int(os.environ["CLI_STARTUP_FD"]), "\\n".join(names).encode())
"""


def _env(src: Path) -> dict[str, str]:
    """The environment with ``src`` first on ``PYTHONPATH`` (plugins and integrations stay as given)."""
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != HERE_SRC]
    env["PYTHONPATH"] = os.pathsep.join([str(src), *rest])
    return env


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run of ``agentium argv``: (wall s, child CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "agentium_harness", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _modules(argv: list[str], env: dict[str, str]) -> list[str]:
    """The ``agentium_harness`` modules loaded once ``agentium argv`` has run."""
    read, write = os.pipe()
    child_env = {**env, "CLI_STARTUP_FD": str(write)}
    proc = subprocess.Popen(
        [sys.executable, "-c", MODULES_SCRIPT, *argv],
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write,),
    )
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read().decode()
    proc.wait()
    return [line for line in data.splitlines() if line]


def main() -> None:
    """Parse the arguments, run the commands alternately, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per command and source (default 20)")
    parser.add_argument("--config", default=str(ROOT / "examples" / "agentium.toml"))
    parser.add_argument("--compare-src", type=Path, default=None, help="another checkout's core/src")
    args = parser.parse_args()

    sources = {"this": HERE_SRC}
    if args.compare_src is not None:
        sources = {"compare": args.compare_src.resolve(), **sources}
    commands = {
        "--version": ["--version"],
        "plugins --json": ["plugins", "--json"],
        "check CONFIG": ["check", args.config],
    }
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for label, src in sources.items():
        print(f"  {label:8} {src}")
    for src in sources.values():  # untimed: byte-compiles a fresh source, warms the page cache
        for argv in commands.values():
            _timed(argv, _env(src))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in range(args.runs):
        order = list(sources.items()) if run % 2 == 0 else list(reversed(sources.items()))
        for command, argv in commands.items():
            for label, src in order:
                results.setdefault((command, label), []).append(_timed(argv, _env(src)))

    print(f"\nmedians of {args.runs} runs (wall / child CPU, seconds)")
    header = f"{'command':16}" + "".join(f"{label:>22}" for label in sources)
    print(header + ("    this / compare" if len(sources) == 2 else ""))
    for command in commands:
        row = f"{command:16}"
        medians = {}
        for label in sources:
            runs = results[(command, label)]
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            medians[label] = (wall, cpu)
            row += f"{wall:>13.3f} / {cpu:6.3f}"
        if len(sources) == 2:
            (w0, c0), (w1, c1) = medians["compare"], medians["this"]
            row += f"    {w1 / w0:.2f} / {c1 / c0:.2f}"
        print(row)

    print("\nagentium_harness modules imported (count; heavy families present)")
    for command, argv in commands.items():
        for label, src in sources.items():
            names = _modules(argv, _env(src))
            heavy = [family for family, prefix in HEAVY.items() if any(n.startswith(prefix) for n in names)]
            print(f"  {command:16} {label:8} {len(names):4d}  {json.dumps(heavy)}")


if __name__ == "__main__":
    main()
