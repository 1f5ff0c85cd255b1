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

from pathlib import Path

from packaging.version import Version

from agentium_harness.testing.floors import declared_floors, install_floors, run_pytest, run_python

PLUGIN = Path(__file__).resolve().parents[1]
FLOORED = ("redis", "snowballstemmer")


def test_the_store_runs_on_its_lowest_client_libraries(tmp_path: Path) -> None:
    floors = declared_floors(PLUGIN / "pyproject.toml")
    pins = [f"{name}=={floors[name]}" for name in FLOORED]
    site = tmp_path / "site"
    # The floors shadow the environment's newer copies (PYTHONPATH comes before site-packages).
    env = install_floors(site, *pins)
    versions = run_python(
        "import sys, redis, snowballstemmer\n"  # imported from the folder, not only its metadata
        "from importlib.metadata import version\n"
        "print(redis.__file__.startswith(sys.argv[1]), version('redis'), version('snowballstemmer'))",
        str(site),
        env=env,
    ).split()
    assert versions[0] == "True"
    assert [Version(v) for v in versions[1:]] == [Version(floors[name]) for name in FLOORED]
    run_pytest(env, PLUGIN, str(PLUGIN / "tests" / "test_round_trips.py"), on=" ".join(pins))
