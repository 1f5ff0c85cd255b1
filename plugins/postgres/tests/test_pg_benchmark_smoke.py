"""``benchmarks/postgres.py`` still runs end to end on tiny sizes (timings are not asserted).

LangGraph's part always runs here: the test installs the pinned
``langgraph`` and ``langgraph-checkpoint-postgres`` of
``benchmarks/requirements-peers.txt`` (wheels, from the package index) into a
folder of its own, which the script's interpreter reads *after* its own
site-packages, so only what the environment lacks comes from it (CI's fresh
environment has neither package; the test used to check the line only when
they happened to be installed, so CI never ran that part).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentium_harness.testing.floors import install_floors

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "postgres.py"
PEERS = ROOT / "benchmarks" / "requirements-peers.txt"
#: The packages LangGraph's part imports, as requirements-peers.txt pins them.
LANGGRAPH = ("langgraph", "langgraph-checkpoint-postgres")

# Appended, not prepended (PYTHONPATH would come first): the environment's own anyio, psycopg and
# the rest stay what the script runs on; the folder adds only the LangGraph packages it lacks.
_RUN = (
    "import runpy, sys; site, script = sys.argv[1:3]; sys.path.append(site); "
    "sys.argv = [script, '--quick']; runpy.run_path(script, run_name='__main__')"
)


def _pins() -> list[str]:
    lines = [line.strip() for line in PEERS.read_text(encoding="utf-8").splitlines()]
    pins = [line for line in lines if line.split("==")[0] in LANGGRAPH]
    assert len(pins) == len(LANGGRAPH), f"{PEERS} pins {pins}, expected one line each for {LANGGRAPH}"
    return pins


def test_the_benchmark_runs_on_tiny_sizes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_floors(site, *_pins())
    result = subprocess.run(
        [sys.executable, "-c", _RUN, str(site), str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "== 1. Per turn" in out and "agentium" in out
    assert "groups (indexed in" in out and "rare word:" in out
    assert "one by one / batched:" in out
    assert "LangGraph skipped" not in out, out
    assert "LangGraph / Agentium at 20:" in out, out
