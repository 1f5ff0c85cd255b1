"""``install_floors`` runs a failed ``pip install`` again before it fails the floor test.

The floor tests of the core and of every plugin install from the package
index while the suite runs. pip retries a request whose connection failed,
but a download cut off midway (a read timeout, a truncated wheel) failed the
whole install, and with it a floor test that found no broken floor.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentium_harness.testing import floors


class FakePip:
    """``subprocess.run`` for pip: fails the first ``failures`` runs (as a cut-off download does)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        if len(self.commands) <= self.failures:
            return subprocess.CompletedProcess(command, 2, "", f"ReadTimeoutError: run {len(self.commands)}")
        return subprocess.CompletedProcess(command, 0, "", "")


def test_a_failed_install_is_run_again_and_then_succeeds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pip = FakePip(failures=2)
    monkeypatch.setattr(floors.subprocess, "run", pip)
    env = floors.install_floors(tmp_path, "cattrs==24.1")
    assert len(pip.commands) == 3 and all(c == pip.commands[0] for c in pip.commands)
    assert pip.commands[0][-1] == "cattrs==24.1" and "--target" in pip.commands[0]
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)


def test_an_install_failing_every_run_fails_the_test_with_the_last_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pip = FakePip(failures=10)
    monkeypatch.setattr(floors.subprocess, "run", pip)
    with pytest.raises(pytest.fail.Exception, match=r"cattrs==24\.1 in 3 runs") as failed:
        floors.install_floors(tmp_path, "cattrs==24.1")
    assert "ReadTimeoutError: run 3" in str(failed.value)
    assert len(pip.commands) == 3
