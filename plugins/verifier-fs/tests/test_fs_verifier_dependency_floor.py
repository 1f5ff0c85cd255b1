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

from pathlib import Path

from packaging.version import Version

from agentium_harness.testing.floors import declared_floors, install_floors, run_pytest, run_python

PLUGIN = Path(__file__).resolve().parents[1]


def test_the_verifier_runs_on_the_lowest_accepted_defusedxml(tmp_path: Path) -> None:
    floor = declared_floors(PLUGIN / "pyproject.toml")["defusedxml"]
    site = tmp_path / "site"
    env = install_floors(site, f"defusedxml=={floor}")
    shown = run_python(
        "import sys, defusedxml\nprint(defusedxml.__file__.startswith(sys.argv[1]), defusedxml.__version__)",
        str(site),
        env=env,
    ).split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor)
    run_pytest(env, PLUGIN, str(PLUGIN / "tests" / "test_fs_verifier_records.py"), on=f"defusedxml=={floor}")
