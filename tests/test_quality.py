"""Lint and type checks run as tests, so the README's one test command covers them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_lint_is_clean() -> None:
    result = _run(
        sys.executable,
        "-m",
        "ruff",
        "check",
        "core/src",
        "plugins",
        "integrations",
        "tests",
        "benchmarks",
        "examples",
    )
    assert result.returncode == 0, result.stdout + result.stderr


#: Every plugin and integration distribution's src, checked like the core's (their stubs are in
#: requirements-dev.txt; an agent framework's package is typed and installed with it).
PLUGIN_SRCS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("plugins/*/src"))
INTEGRATION_SRCS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("integrations/*/src"))


def test_mypy_strict_on_every_src_is_clean() -> None:
    # One run over the core and every distribution: the three separate runs it replaces each loaded
    # what the others share (the standard library's stubs, the core, openai's types), about twice the time.
    assert PLUGIN_SRCS and INTEGRATION_SRCS, "no plugin or integration src folders found"
    result = _run(sys.executable, "-m", "mypy", "--strict", "core/src", *PLUGIN_SRCS, *INTEGRATION_SRCS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run(
        sys.executable,
        "-m",
        "ruff",
        "format",
        "--check",
        "core/src",
        "plugins",
        "integrations",
        "tests",
        "benchmarks",
        "examples",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_pickle_and_no_bare_agentium_dependency() -> None:
    # "agentium" alone is an unrelated PyPI project; only agentium_harness and plugins are ours.
    forbidden = re.compile(r"^\s*(import|from)\s+(pickle|dill|cloudpickle|agentium)(\s|\.|$)")
    offenders = [
        f"{path}:{n}: {line.strip()}"
        for path in [
            *ROOT.glob("core/src/**/*.py"),
            *ROOT.glob("plugins/*/src/**/*.py"),
            *ROOT.glob("integrations/*/src/**/*.py"),
        ]
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if forbidden.match(line)
    ]
    assert offenders == []
    requirement = re.compile(r"""["']agentium\s*([<>=!~;\[]|["'])""")
    pyprojects = [
        ROOT / "core" / "pyproject.toml",
        *ROOT.glob("plugins/*/pyproject.toml"),
        *ROOT.glob("integrations/*/pyproject.toml"),
    ]
    for pyproject in pyprojects:
        assert not requirement.search(pyproject.read_text("utf-8")), pyproject
