"""The adapters work on the oldest psycopg and psycopg-pool their metadata accepts.

pip keeps an installed psycopg that satisfies the declared bound. Before
psycopg 3.3.9, a read cut off at its deadline on a stalled server left the
connection unable to leave pipeline mode ("cannot exit pipeline mode while
busy"), so the call ended with ``PostgresUnavailableError`` (the connection
failed) instead of ``OperationCancelledError`` (stopped at its deadline);
``psycopg>=3.2`` once accepted those releases. The test installs exactly the
declared lower bound (with its binary libpq) from PyPI in front of the
environment's packages and runs the stalled-server test on it. The pool is
imported directly, so it has a floor of its own (3.1: 3.0's pool takes no
``open=``); the second test runs the contract, fault and any-loop tests on it.
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


def _floor(name: str = "psycopg") -> str:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text("utf-8"))["project"]
    reqs = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == name]
    assert len(reqs) == 1, f"the plugin imports {name} directly, so it must declare it (with a floor)"
    (low,) = [s.version for s in reqs[0].specifier if s.operator == ">="]
    return low


def test_a_deadline_on_a_stalled_server_is_kept_on_the_lowest_psycopg(tmp_path: Path) -> None:
    floor = _floor()
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
            "--no-deps",
            "--only-binary",
            ":all:",
            "--target",
            str(site),
            f"psycopg=={floor}",
            f"psycopg-binary=={floor}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install psycopg=={floor}:\n{proc.stderr}")
    # PYTHONPATH comes before site-packages: the floor shadows the environment's newer copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, psycopg\n"
            "print(psycopg.__file__.startswith(sys.argv[1]), psycopg.__version__, psycopg.pq.__impl__)",
            str(site),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor) and shown[2] == "binary"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(PLUGIN / "tests" / "test_pg_faults.py"),
            "-k",
            "stalled_server",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=PLUGIN,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"on psycopg=={floor}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"


def test_the_adapters_run_on_the_lowest_psycopg_pool(tmp_path: Path) -> None:
    # The pool's floor on its own (psycopg stays the environment's): psycopg-pool 3.0 has no open=
    # in the pool's constructor nor wait= in open(), both of which the link uses.
    floor = _floor("psycopg-pool")
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
            "--no-deps",
            "--only-binary",
            ":all:",
            "--target",
            str(site),
            f"psycopg-pool=={floor}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install psycopg-pool=={floor}:\n{proc.stderr}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, psycopg_pool\n"
            "print(psycopg_pool.__file__.startswith(sys.argv[1]), psycopg_pool.__version__)",
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
            str(PLUGIN / "tests" / "test_pg_contract.py"),
            str(PLUGIN / "tests" / "test_pg_faults.py"),
            str(PLUGIN / "tests" / "test_pg_any_loop.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=PLUGIN,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"on psycopg-pool=={floor}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
