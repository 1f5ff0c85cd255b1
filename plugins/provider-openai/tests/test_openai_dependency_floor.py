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

from pathlib import Path

from packaging.version import Version

from agentium_harness.testing.floors import declared_floors, install_floors, run_pytest, run_python

PLUGIN = Path(__file__).resolve().parents[1]
#: The compressed and broken bodies too: httpx (under openai 1.x and 2.x) inflates each read whole,
#: and those releases wrap what the error-answer hook raises in their own APIConnectionError.
TESTS = (
    "test_openai_any_loop.py",
    "test_openai_mapping.py",
    "test_openai_compressed_bodies.py",
    "test_openai_broken_bodies.py",
)


def test_the_provider_runs_on_the_lowest_accepted_client(tmp_path: Path) -> None:
    floor = declared_floors(PLUGIN / "pyproject.toml")["openai"]
    site = tmp_path / "site"
    # The floor shadows the environment's newer client (PYTHONPATH comes before site-packages).
    env = install_floors(site, f"openai=={floor}")
    shown = run_python(
        "import sys, openai; print(openai.__file__.startswith(sys.argv[1]), openai.__version__)",
        str(site),
        env=env,
    ).split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor)
    run_pytest(env, PLUGIN, *(str(PLUGIN / "tests" / t) for t in TESTS), on=f"openai=={floor}")
