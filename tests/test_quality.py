"""Lint and type checks run as tests, so the README's one test command covers them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_lint_is_clean() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", "core/src", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_src_is_clean() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run(
        sys.executable, "-m", "ruff", "format", "--check", "core/src", "tests", "benchmarks", "examples"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_pickle_and_no_bare_agentium_dependency() -> None:
    offenders = []
    for path in [*ROOT.glob("core/src/**/*.py"), *ROOT.glob("plugins/*/src/**/*.py")]:
        for line in path.read_text("utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(
                ("import pickle", "from pickle", "import agentium\n", "from agentium ")
            ) or (stripped in ("import agentium",) or stripped.startswith("from agentium import")):
                offenders.append(f"{path}: {stripped}")
    assert offenders == []
    for pyproject in [ROOT / "core" / "pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml")]:
        text = pyproject.read_text("utf-8")
        assert '"agentium"' not in text and '"agentium>' not in text and '"agentium=' not in text, pyproject
