"""The recall benchmark still runs end to end in its quick form (timings are not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "recall.py"


def test_quick_benchmark_prints_medians_and_the_ratio_against_its_target() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repetitions", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # Both sizes were indexed and measured...
    for size in (200, 2000):
        assert re.search(rf"^\s+indexed\s+{size} groups in\s+\d+\.\d s", out, re.M), out
        assert re.search(
            rf"^\s+size=\s*{size}: median discover\+read\s+\d+\.\d+ ms \(\d+\.\d excerpts per query\)$",
            out,
            re.M,
        ), out
    # ...the engine's own assembly is reported next to the adapter's time...
    assert re.search(
        r"^\s+size=\s*2000: engine assembly\s+\d+\.\d+ ms \(\d+\.\d% of the adapter's time\); "
        r"whole engine round\s+\d+\.\d+ ms$",
        out,
        re.M,
    ), out
    # ...queries found evidence at the larger size (the relevance floor may leave weak ones out), and
    # the ratio is compared with its target.
    found = re.search(r"size=\s*2000: .*\((\d+\.\d) excerpts per query\)", out)
    assert found is not None and float(found.group(1)) >= 1.0, out
    assert re.search(r"^ratio 2k/200: \d+\.\d+\s+target <= 3\s+(PASS|MISS)$", out, re.M), out
