"""The store works with the oldest redis-py and snowballstemmer its metadata accepts.

pip keeps an installed redis-py that satisfies the declared bound. The link
takes connections with ``ConnectionPool.get_connection()`` (no command name:
optional from redis-py 5.3) and checks them with ``Connection.can_read()``
(from 8.0); ``redis>=5`` once accepted 5.x-7.x, where every call failed with
``TypeError`` or ``AttributeError``. The test installs exactly the declared
lower bounds from PyPI into a folder of its own, puts it in front of the
environment's packages, and runs ``test_round_trips.py`` (every kind of call
against a real server) on them.
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
FLOORED = ("redis", "snowballstemmer")


def _floors() -> dict[str, str]:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text("utf-8"))["project"]
    found = {}
    for line in project["dependencies"]:
        req = Requirement(line)
        (low,) = [s.version for s in req.specifier if s.operator == ">="]
        found[req.name] = low
    return found


def test_the_store_runs_on_its_lowest_client_libraries(tmp_path: Path) -> None:
    floors = _floors()
    pins = [f"{name}=={floors[name]}" for name in FLOORED]
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
            *pins,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install {pins}:\n{proc.stderr}")
    # PYTHONPATH comes before site-packages: the floors shadow the environment's newer copies.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    versions = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, redis, snowballstemmer\n"  # imported from the folder, not only its metadata
            "from importlib.metadata import version\n"
            "print(redis.__file__.startswith(sys.argv[1]), version('redis'), version('snowballstemmer'))",
            str(site),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    assert versions[0] == "True"
    assert [Version(v) for v in versions[1:]] == [Version(floors[name]) for name in FLOORED]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(PLUGIN / "tests" / "test_round_trips.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=PLUGIN,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"on {pins}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
