"""``benchmarks/postgres.py`` still runs end to end on tiny sizes (timings are not asserted).

LangGraph's part runs when ``langgraph-checkpoint-postgres`` is installed here
and is skipped, saying so, otherwise.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "postgres.py"


def _langgraph_saver_installed() -> bool:
    # find_spec of a submodule imports its parents: without langgraph at all (CI's fresh
    # environment) it raises ModuleNotFoundError rather than answering None.
    try:
        return importlib.util.find_spec("langgraph.checkpoint.postgres") is not None
    except ModuleNotFoundError:
        return False


def test_the_benchmark_runs_on_tiny_sizes() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "== 1. Per turn" in out and "agentium" in out
    assert "groups (indexed in" in out and "rare word:" in out
    assert "one by one / batched:" in out
    if _langgraph_saver_installed():
        assert "LangGraph / Agentium at 20:" in out
    else:
        assert "LangGraph skipped" in out
