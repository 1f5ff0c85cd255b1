"""The core works with the oldest version of each dependency its metadata accepts.

``pip install agentium-harness`` into an environment that already holds an old
``cattrs`` (or pluggy, attrs, anyio, sniffio) keeps that version whenever it
satisfies the declared lower bound. A bound below what the code needs is
therefore a broken install that no test run on the newest versions shows: the
core once declared ``cattrs>=24.1`` while importing names ``cattrs.cols`` only
has from 25.2, so ``import agentium_harness`` failed with ``ImportError``.

The test installs exactly each lower bound (``name==floor``, pip resolving
what those need) from PyPI into a folder of its own, then imports the core
from the checkout on top of that folder alone (``python -S``: no
site-packages) and runs ``agentium demo``, which goes through the config
codec, the plugin registry, the SQLite adapters, the engine and recall; then
it runs the worker-thread adapter and blocking-runtime tests with the floors in
front of the environment (``anyio>=4.3`` once passed the demo but broke both:
no ``start_blocking_portal(name=)``, and trio's ``WouldBlock`` unconverted).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from agentium_harness.testing.floors import install_floors, run_pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
#: Specifier operators that set a lower bound (``==`` and ``~=`` pin or start at one).
LOWER = (">=", "==", "~=")


def floors(pyproject: Path) -> dict[str, str]:
    """Each required dependency's lowest accepted version: ``{name: version}``.

    Every dependency must state exactly one lower bound; one without any accepts
    every release ever published, which nobody has tested.
    """
    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    found: dict[str, str] = {}
    for line in project["dependencies"]:
        req = Requirement(line)
        lows = [s.version for s in req.specifier if s.operator in LOWER]
        assert len(lows) == 1, f"{pyproject.relative_to(ROOT)}: {line!r} needs exactly one lower bound"
        found[req.name] = lows[0]
    return found


def test_every_core_dependency_has_a_lower_bound() -> None:
    assert set(floors(CORE / "pyproject.toml")) >= {"pluggy", "attrs", "cattrs", "anyio"}


@pytest.fixture(scope="module")
def floor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the core's dependencies at their declared lower bounds (from PyPI)."""
    site = tmp_path_factory.mktemp("floors")
    install_floors(site, *(f"{name}=={version}" for name, version in floors(CORE / "pyproject.toml").items()))
    return site


def test_the_core_runs_on_its_lowest_dependencies(floor_site: Path, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(floor_site)!r}, {str(CORE / 'src')!r}]\n"
        "import agentium_harness, agentium_harness.plugin_api\n"
        "import cattrs, pluggy, anyio\n"
        "for mod in (agentium_harness, cattrs, pluggy, anyio):\n"
        f"    assert mod.__file__.startswith(({str(floor_site)!r}, {str(CORE)!r})), mod.__file__\n"
        "from agentium_harness._cli import main\n"
        "sys.exit(main(['demo']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "every archived digest matches its receipt: yes" in proc.stdout


#: Test modules run on the floors too: the worker-thread adapters and the blocking runtime, on
#: asyncio and trio, lean on anyio's CapacityLimiter and blocking portal.
FLOOR_MODULES = ("tests/core/test_threaded_adapter.py", "tests/core/test_blocking_runtime.py")


def test_threads_and_the_blocking_runtime_work_on_the_lowest_dependencies(floor_site: Path) -> None:
    # The floors shadow the environment's newer copies (pytest, hypothesis and trio are the environment's).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(floor_site), os.environ.get("PYTHONPATH", "")])}
    run_pytest(env, ROOT, *FLOOR_MODULES, on="the core's lowest dependencies")
