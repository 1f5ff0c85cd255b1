"""benchmarks/s3_archive.py still runs end to end and prints its figures (timings are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "s3_archive.py"


def test_quick_benchmark_prints_the_three_ratios_side_by_side() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--rounds",
            "8",
            "--page",
            "3",
            "--evict",
            "8",
            "--evict-rounds",
            "1",
            "--latency-ms",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for name, target in (("append plugin/raw", "1.2"), ("read plugin/raw", "1.2")):
        found = re.findall(
            rf"^ratio {name}: \d+\.\d+\s+target <= {re.escape(target)}\s+(PASS|MISS)$", out, re.M
        )
        assert len(found) == 2, out  # direct, then through the latency proxy
    assert (
        len(
            re.findall(
                r"^ratio eviction concurrent/sequential: \d+\.\d+\s+target <= 0\.3\s+(PASS|MISS)$", out, re.M
            )
        )
        == 2
    ), out
    assert "evict 8 groups" in out
