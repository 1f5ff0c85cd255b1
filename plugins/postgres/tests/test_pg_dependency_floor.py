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
``open=``); the second test runs the fault and any-loop tests on it, and the contract tests
that take and give back the pool's connections in each way the link does.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from agentium_harness.testing.floors import declared_floors, install_floors, run_pytest, run_python

PLUGIN = Path(__file__).resolve().parents[1]
TESTS = PLUGIN / "tests"


def test_a_deadline_on_a_stalled_server_is_kept_on_the_lowest_psycopg(tmp_path: Path) -> None:
    floor = declared_floors(PLUGIN / "pyproject.toml")["psycopg"]
    site = tmp_path / "site"
    # psycopg with its binary libpq of the same release; the floor shadows the environment's copy.
    env = install_floors(site, f"psycopg=={floor}", f"psycopg-binary=={floor}", no_deps=True)
    shown = run_python(
        "import sys, psycopg\n"
        "print(psycopg.__file__.startswith(sys.argv[1]), psycopg.__version__, psycopg.pq.__impl__)",
        str(site),
        env=env,
    ).split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor) and shown[2] == "binary"
    run_pytest(env, PLUGIN, str(TESTS / "test_pg_faults.py"), "-k", "stalled_server", on=f"psycopg=={floor}")


def test_the_adapters_run_on_the_lowest_psycopg_pool(tmp_path: Path) -> None:
    # The pool's floor on its own (psycopg stays the environment's): psycopg-pool 3.0 has no open=
    # in the pool's constructor nor wait= in open(), both of which the link uses.
    floor = declared_floors(PLUGIN / "pyproject.toml")["psycopg-pool"]
    site = tmp_path / "site"
    env = install_floors(site, f"psycopg-pool=={floor}", no_deps=True)
    shown = run_python(
        "import sys, psycopg_pool\n"
        "print(psycopg_pool.__file__.startswith(sys.argv[1]), psycopg_pool.__version__)",
        str(site),
        env=env,
    ).split()
    assert shown[0] == "True" and Version(shown[1]) == Version(floor)
    # The fault and any-loop tests whole (the pool's connect, reconnect, per-loop and closing paths),
    # and of the contract suite the tests that take and give back connections in every way the link
    # does, for each store: round trips, concurrent and cancelled calls, deadlines, threads with loops
    # of their own, erasure, health. The rest of the suite adds nothing the pool touches, and ran
    # for a minute or more.
    modules = ("test_pg_contract.py", "test_pg_faults.py", "test_pg_any_loop.py")
    run_pytest(
        env, PLUGIN, *(str(TESTS / m) for m in modules), "-k", _POOL_PATHS, on=f"psycopg-pool=={floor}"
    )


#: The contract tests run on the lowest pool (every fault and any-loop test matches it too).
_POOL_PATHS = " or ".join(
    (
        "not TestPostgres",  # the fault and any-loop modules' own tests
        "round_trip",
        "concurrent",
        "cancelled",
        "deadline",
        "threads_each_with_its_own_event_loop",
        "durable",
        "erase_removes",
        "remember_acknowledges",
        "health_probe",
        "close_after",
    )
)
