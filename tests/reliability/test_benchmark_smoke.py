"""The turn-overhead benchmark still runs end to end (timings are not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agentium_harness.adapters.sqlite", reason="the benchmark needs the SQLite adapters")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "turn_overhead.py"


def test_small_benchmark_prints_ratio_and_rss_lines() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--small"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # Both scenarios were measured with the small sizes...
    assert re.search(r"^\s+prior=\s*10: median\s+\d+\.\d+ ms/turn .* peak RSS\s+\d+\.\d+ MB$", out, re.M), out
    assert re.search(r"^\s+prior=\s*100: median\s+\d+\.\d+ ms/turn", out, re.M), out
    # ...and the figures are compared with their targets.
    assert re.search(r"^ratio 100/10: \d+\.\d+\s+target <= 1\.2\s+(PASS|MISS)$", out, re.M), out
    assert re.search(r"^peak RSS difference: [+-]\d+\.\d+ MB\s+target < 10 MB\s+(PASS|MISS)$", out, re.M), out


def test_summary_benchmark_prints_its_ratio() -> None:
    script = SCRIPT.parent / "summary.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=120, check=False
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"^\s+archived=\s+20: median\s+\d+\.\d+ ms/update$", out, re.M), out
    assert re.search(r"^ratio 400/20: \d+\.\d+\s+target <= 1\.2\s+(PASS|MISS)$", out, re.M), out
