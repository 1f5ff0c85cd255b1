"""The hybrid cost benchmark (issue 25 item 5) runs end to end in its quick form; timings not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hybrid_cost.py"


def test_quick_run_prints_throughput_latencies_and_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repetitions", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for size in (200, 2000):
        assert re.search(
            rf"^\s+indexed\s+{size} groups: words [\d,]+/s; vectors stored [\d,]+/s", out, re.M
        ), out
    for mode in ("numpy", "plain Python"):
        assert f"discovery, vector scoring in {mode}:" in out, out
    assert re.search(
        r"^\s+size=\s*2000: lexical\s+\d+\.\d+ ms, hybrid\s+\d+\.\d+ ms, ratio \d+\.\d+"
        r"\s+target <= 3\s+(PASS|MISS)$",
        out,
        re.M,
    ), out
    assert re.search(r"^minilm: ", out, re.M), out
