"""The observability overhead benchmark still runs end to end (issue 24; timings are not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "otel_overhead.py"


def test_small_run_prints_each_mode_and_the_ratio_against_its_target() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--small", "--adapters", "memory"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for mode in ("bare", "none", "api", "sdk"):
        assert re.search(rf"^memory\s+{mode}: median\s+\d+\.\d+ us per turn  ratio \d+\.\d+", out, re.M), out
    target = r"^memory\s+api: .* target <= 1\.03  (PASS|MISS)  \| CPU\s+\d+\.\d+ us  ratio \d+\.\d+$"
    assert re.search(target, out, re.M), out
