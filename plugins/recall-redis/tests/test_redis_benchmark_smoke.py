"""benchmarks/redis_recall.py still runs end to end and prints its figures (timings are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "redis_recall.py"


def test_quick_benchmark_prints_round_trips_and_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--groups", "400", "--repetitions", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"^round trips per discovery: 1\s+target <= 3\s+PASS$", out, re.M), out
    assert re.search(r"^ratio plugin/raw: \d+\.\d+\s+target <= 1\.3\s+(PASS|MISS)$", out, re.M), out
    assert re.search(r"^ratio redis/sqlite: \d+\.\d+", out, re.M), out
    calls = re.search(r"server EVALSHA calls: (\d+) for 12 rounds of plugin \+ raw \((\d+) expected", out)
    assert calls and calls.group(1) == calls.group(2), out
    big = r"^large document: 20,000 distinct words .* longest script call \d+\.\d ms; longest concurrent PING"
    assert re.search(big, out, re.M), out
