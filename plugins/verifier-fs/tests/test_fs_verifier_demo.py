"""``agentium demo`` ends with a task the fs verifier checks: fail on the draft, a revision, then pass."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path


def test_demo_shows_each_verdict_with_its_evidence(tmp_path: Path) -> None:
    # The installed console script, as a user runs it: the plugin is found through its entry point.
    found = Path(sys.executable).with_name("agentium")
    command = str(found) if found.exists() else shutil.which("agentium")
    assert command, "the agentium command is not installed beside the interpreter or on PATH"
    done = subprocess.run(
        [command, "demo", "--dir", str(tmp_path), "--turns", "9"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    task = out.split("task: ", 1)[1]
    first, second = task.split("verdict fail (revision 0):", 1)[1].split("verdict pass (revision 1):", 1)
    assert "evidence artifact report.txt: fail: sha256" in first
    assert "evidence test_record results.xml: pass: 3 tests ran" in first
    assert "evidence artifact report.txt: pass: sha256" in second
    assert "completion accepted after 1 revision(s)" in second
    # The verdicts rest on real files in the demo directory.
    report = (tmp_path / "task" / "report.txt").read_bytes()
    assert hashlib.sha256(report).hexdigest() in second
    assert (tmp_path / "task" / "results.xml").stat().st_size > 0
