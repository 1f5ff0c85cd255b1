"""The provider works with the oldest ``openai`` its metadata accepts, on asyncio and on trio.

pip keeps an installed ``openai`` that satisfies the declared bound. Before
1.63, the client's first request ran ``asyncio.to_thread`` whatever the event
loop, so under trio every call failed with "no running event loop";
``openai>=1.55.3`` once accepted those releases. The test installs exactly the
declared lower bound from PyPI (with what pip resolves for it) in front of the
environment's packages and runs the tests that call the provider from trio and
from several loops.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PLUGIN = Path(__file__).resolve().parents[1]
TESTS = ("test_openai_any_loop.py", "test_openai_mapping.py")


def _openai_floor() -> str:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text("utf-8"))["project"]
    (req,) = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "openai"]
    (low,) = [s.version for s in req.specifier if s.operator == ">="]
    return low


def test_the_provider_runs_on_the_lowest_accepted_client(tmp_path: Path) -> None:
    floor = _openai_floor()
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary",
            ":all:",
            "--target",
            str(site),
            f"openai=={floor}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install openai=={floor}:\n{proc.stderr}")
    # PYTHONPATH comes before site-packages: the floor shadows the environment's newer client.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, openai; print(openai.__file__.startswith(sys.argv[1]), openai.__version__)",
            str(site),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(str(PLUGIN / "tests" / t) for t in TESTS),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=PLUGIN,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"on openai=={floor}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
