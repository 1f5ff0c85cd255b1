"""The OpenAI Agents SDK's own session tests, run against AgentiumSession (see sdk_suite.py).

The pinned sdist is fetched with pip at test time (or taken from
``AGENTIUM_OPENAI_AGENTS_SDIST``); the counts are printed in the terminal
summary: passed, failed, skipped, not applicable (listed with the reason in
``sdk_not_applicable.txt``). Every test not listed must pass.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import sdk_suite


def test_the_sdks_own_session_tests_pass_against_agentium_session(tmp_path: Path) -> None:
    (tmp_path / "dl").mkdir()
    workdir = sdk_suite.prepare(sdk_suite.fetch_sdist(tmp_path / "dl"), tmp_path / "suite")
    data = sdk_suite.run(workdir)
    counts = data["counts"]
    listed = sdk_suite.not_applicable()
    line = (
        f"openai-agents {sdk_suite.PINNED} session tests against AgentiumSession: "
        f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('not_applicable', 0)} not applicable "
        f"({len(listed)} test functions listed in sdk_not_applicable.txt)"
    )
    sdk_suite.SUMMARY.append(line)
    print(line)
    failed = [t["id"] for t in data["tests"] if t["outcome"] not in ("passed", "not_applicable")]
    assert not failed, "SDK tests that did not pass:\n" + "\n".join(failed) + "\n" + data["output"][-8000:]
    assert not data["unmatched_not_applicable"], (
        f"sdk_not_applicable.txt lists tests the SDK no longer has: {data['unmatched_not_applicable']}"
    )
    # Every listed function was found (above) and every test of it was marked, nothing else was.
    marked = {t["id"].split("[", 1)[0] for t in data["tests"] if t["outcome"] == "not_applicable"}
    assert marked == set(listed)
    assert counts.get("passed", 0) >= 70, counts
    assert data["exitstatus"] == 0 and data["returncode"] == 0, data["output"][-4000:]


def test_a_failed_sdist_download_is_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip retries a failed connection, not a download cut off midway: the whole download runs again."""
    monkeypatch.delenv("AGENTIUM_OPENAI_AGENTS_SDIST", raising=False)
    runs: list[list[str]] = []

    def pip(command: list[str], *, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
        runs.append(command)
        if len(runs) < sdk_suite.FETCH_ATTEMPTS:  # a cut-off download: pip exits 2, writes nothing
            assert not check, "only the last run may fail the test"
            return subprocess.CompletedProcess(command, 2)
        (tmp_path / f"openai_agents-{sdk_suite.PINNED}.tar.gz").write_bytes(b"")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(sdk_suite.subprocess, "run", pip)
    assert sdk_suite.fetch_sdist(tmp_path) == tmp_path / f"openai_agents-{sdk_suite.PINNED}.tar.gz"
    assert len(runs) == sdk_suite.FETCH_ATTEMPTS and runs[0][-1] == f"openai-agents=={sdk_suite.PINNED}"
