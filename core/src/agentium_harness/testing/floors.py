"""Dependency floors: run a distribution's code and tests on the oldest releases its metadata accepts.

``pip install`` keeps an installed dependency that satisfies the declared
bound, so a lower bound below what the code works with is a broken install
for every user who already has that older release, and no test run on the
newest releases shows it. A floor test installs exactly the declared lower
bound (``name==version``, wheels only) from the package index into a folder
of its own, puts that folder in front of the environment's packages, and
runs the distribution's own code or tests there. These helpers are that
procedure, shared by the core's and every plugin's floor tests:

- :func:`declared_floors` reads the lower bounds from a ``pyproject.toml``;
- :func:`install_floors` installs pins into a folder and returns the
  environment in which they shadow the installed copies;
- :func:`run_python` runs a check in a subprocess (on that environment, or
  ``isolated`` on the folder alone, without site-packages);
- :func:`run_pytest` runs test modules on that environment.

They need pytest (and ``packaging``, which pytest depends on) and access to
the package index; a failed install or run fails the calling test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

__all__ = ["declared_floors", "install_floors", "run_pytest", "run_python"]

#: Specifier operators that set a lower bound (``==`` and ``~=`` pin or start at one).
_LOWER = (">=", "==", "~=")
#: Whole ``pip install`` runs :func:`install_floors` makes before it fails the test. The package
#: index is a network service: pip retries a request whose connection failed, but not a download
#: cut off midway (a read timeout, a truncated wheel), which is a chance failure, not a broken floor.
_INSTALL_ATTEMPTS = 3


def _fail(message: str) -> NoReturn:
    import pytest  # needed only when a floor test runs: importing this module does not need pytest

    pytest.fail(message)


def declared_floors(pyproject: Path) -> dict[str, str]:
    """Each ``[project]`` dependency of ``pyproject`` that states a lower bound: ``{name: version}``.

    A dependency stating none is left out (a floor test that needs it fails
    on the missing key); one stating two fails the calling test.
    """
    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    found: dict[str, str] = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        lows = [s.version for s in requirement.specifier if s.operator in _LOWER]
        if len(lows) > 1:
            _fail(f"{pyproject}: {line!r} states more than one lower bound")
        if lows:
            found[requirement.name] = lows[0]
    return found


def install_floors(site: Path, *pins: str, no_deps: bool = False) -> dict[str, str]:
    """Install ``pins`` (wheels only) into the folder ``site``; the environment in which they come first.

    The answer is ``os.environ`` with ``site`` first on ``PYTHONPATH``, so a
    Python subprocess imports the pinned releases ahead of the environment's
    own, newer copies. ``no_deps`` installs only the pins (what they need
    stays the environment's); otherwise pip resolves their dependencies into
    ``site`` too. The index is a network service: a failed install is run
    again, three runs in all, before the calling test fails with pip's output.
    """
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command += ["--no-input", "--only-binary", ":all:", "--target", str(site)]
    # More and longer tries per request than pip's defaults (5 retries, 15 s): a loaded CI machine
    # and a busy index are slow, not wrong.
    command += ["--retries", "10", "--timeout", "60"]
    if no_deps:
        command.append("--no-deps")
    shadowed = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    failures: list[str] = []
    for _ in range(_INSTALL_ATTEMPTS):
        # S603: this interpreter's own pip, with pins the calling test wrote (no shell, no outside input).
        proc = subprocess.run([*command, *pins], capture_output=True, text=True, check=False, timeout=600)  # noqa: S603
        if proc.returncode == 0:
            return shadowed
        failures.append(f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    _fail(f"pip could not install {' '.join(pins)} in {len(failures)} runs; the last said:\n{failures[-1]}")


def run_python(
    code: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    isolated: Path | None = None,
    timeout: float = 300.0,
) -> str:
    """Run ``code`` (with ``args`` as ``sys.argv[1:]``) in a Python subprocess; what it printed.

    On ``env`` (from :func:`install_floors`), or ``isolated`` on the folder
    given alone: ``python -S`` with that folder first on ``sys.path`` and no
    site-packages at all, so nothing but the floors and the standard library
    can be imported. A non-zero exit fails the calling test with its output.
    """
    command = [sys.executable]
    if isolated is not None:
        command.append("-S")
        code = f"import sys; sys.path[:0] = [{str(isolated)!r}]\n" + code
    proc = subprocess.run(  # noqa: S603 - this interpreter, running the calling test's own code
        [*command, "-c", code, *args],
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else dict(env),
        timeout=timeout,
    )
    if proc.returncode != 0:
        _fail(f"the check exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_pytest(env: Mapping[str, str], cwd: Path, *args: str, on: str) -> None:
    """Run pytest with ``args`` in ``cwd`` on ``env``; unless every test passes, fail naming ``on``."""
    proc = subprocess.run(  # noqa: S603 - this interpreter's pytest, on the calling test's modules
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=dict(env),
        timeout=600,
    )
    if proc.returncode != 0:
        _fail(f"on {on}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
