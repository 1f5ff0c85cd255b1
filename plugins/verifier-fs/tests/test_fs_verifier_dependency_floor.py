"""The verifier works with the oldest ``defusedxml`` its metadata accepts.

pip keeps an installed ``defusedxml`` that satisfies the declared bound. In
0.7.0 the parser raised a ``ParseError`` of its own pure-Python copy of
ElementTree, not ``xml.etree.ElementTree.ParseError`` (0.7.1 made them one
again), so a malformed test record escaped ``verify()`` as a bare error
instead of making the record ``unknown``; ``defusedxml>=0.7`` once accepted
0.7.0. The test installs exactly the declared lower bound from PyPI in front
of the environment's packages and runs the record tests on it.
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


def _defusedxml_floor() -> str:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text("utf-8"))["project"]
    (req,) = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "defusedxml"]
    (low,) = [s.version for s in req.specifier if s.operator == ">="]
    return low


def test_the_verifier_runs_on_the_lowest_accepted_defusedxml(tmp_path: Path) -> None:
    floor = _defusedxml_floor()
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
            "--target",
            str(site),
            f"defusedxml=={floor}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install defusedxml=={floor}:\n{proc.stderr}")
    # PYTHONPATH comes before site-packages: the floor shadows the environment's newer copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, defusedxml\n"
            "print(defusedxml.__file__.startswith(sys.argv[1]), defusedxml.__version__)",
            str(site),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor)
    records = PLUGIN / "tests" / "test_fs_verifier_records.py"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(records)],
        capture_output=True,
        text=True,
        check=False,
        cwd=PLUGIN,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"on defusedxml=={floor}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
