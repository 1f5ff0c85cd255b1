"""Suite-wide: the collector's full (generation 2) collections run between tests, not inside one.

The Quick start's test command runs every test path (core, plugins,
integrations) in one pytest process, whose heap holds about 425,000 tracked
objects after collection and more as the run goes on. Measured over the core
tests (4,981 of them), 180 automatic full collections took over 50 ms each,
the longest 1.0 s. A test that gives an adapter call a deadline of a
fraction of a second cannot tell such a pause from a hung adapter, and one
did fail so in CI: a session load from the in-memory store ran out of its
0.3 s while a full collection ran.

So automatic full collections are held back (young collections, generations
0 and 1, still run as ever and take a few milliseconds at most), and a full
collection runs before a test once the young collections since the last one
reach :data:`FULL_AFTER_YOUNG`, about as often as CPython's defaults run one
over a heap of this size. A single test that allocates far more (a nested
pytest run of a contract suite) still gets automatic full collections past
:data:`AUTOMATIC_FULL_AFTER_YOUNG`, so its garbage stays bounded. Tests that
need a collection at a point (reference-cycle and leak checks) call
``gc.collect()``, which runs whatever the thresholds say. No library code
is affected: this runs only in the test process.

It also roots pytest's temporary folders in RAM where the machine has
``/dev/shm`` (see :func:`_use_ram_for_test_folders`).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

#: Generation-1 collections (about 7,000 surviving allocations each) after which the next test
#: starts with a full collection: ~350,000 allocations, about a quarter of the suite's heap,
#: which is when CPython's own rule (pending survivors over 25% of the old generation) fires.
FULL_AFTER_YOUNG = 50

#: The automatic threshold inside a test: ten times the between-tests one, so only a test that
#: allocates millions of surviving objects on its own triggers a full collection inside it.
AUTOMATIC_FULL_AFTER_YOUNG = 500


def pytest_configure(config: pytest.Config) -> None:
    """Raise the full-collection threshold; the young ones keep CPython's defaults."""
    young0, young1, _ = gc.get_threshold()
    gc.set_threshold(young0, young1, AUTOMATIC_FULL_AFTER_YOUNG)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A full collection before the test when enough young collections ran since the last one."""
    # get_count()[2] counts generation-1 collections since the last full one.
    if gc.isenabled() and gc.get_count()[2] >= FULL_AFTER_YOUNG:
        gc.collect()


#: Where ``tmp_path`` and ``tmp_path_factory`` put their folders when the machine has a RAM file system.
# S108: pytest makes its own pytest-of-<user> folder there (mode 0o700) and refuses one it does not own.
RAM_TEMP_ROOT = Path("/dev/shm")  # noqa: S108


def _use_ram_for_test_folders() -> None:
    """Root pytest's temporary folders in RAM (``/dev/shm``) when it is there and nothing else was chosen.

    Most test fixtures open SQLite files in ``tmp_path``, and the SQLite
    adapters default to ``synchronous = FULL``: every commit waits for an
    fsync, about 2 ms on CI's virtual disk against microseconds on tmpfs.
    The broken-adapter checks alone open tens of thousands of such files in
    their nested pytest runs (which inherit the variable), and spent about a
    third of their time waiting on the disk. No test can tell the two apart:
    none cuts the power, and a SIGKILLed process's writes survive in either.
    ``PYTEST_DEBUG_TEMPROOT`` is pytest's own setting for the root of these
    folders; one set by the caller, or ``--basetemp``, wins.
    """
    if "PYTEST_DEBUG_TEMPROOT" in os.environ:
        return
    if RAM_TEMP_ROOT.is_dir() and os.access(RAM_TEMP_ROOT, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(RAM_TEMP_ROOT)


_use_ram_for_test_folders()


#: Lines the test processes ask to be printed at the end of the run (the OpenAI Agents SDK suite's
#: counts), gathered here from each pytest-xdist worker as it finishes (``workeroutput``).
_WORKER_SUMMARY: list[str] = []
#: The ``workeroutput`` key a test folder's conftest fills in a worker (see
#: integrations/openai-agents/tests/conftest.py).
SUMMARY_KEY = "agentium_summary"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist, in the main process: keep a finished worker's summary lines."""
    output = getattr(node, "workeroutput", None)
    if isinstance(output, dict):
        _WORKER_SUMMARY.extend(str(line) for line in output.get(SUMMARY_KEY, ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the workers' summary lines: a worker's own terminal summary is never shown."""
    for line in _WORKER_SUMMARY:
        terminalreporter.write_line(line)


#: Test files of the most worker time in a full run (2026-12-06, each about 100 s or more with
#: three workers on two cores, as the suite then ran; the disk-heavy ones spread among the others).
#: pytest-xdist's ``--dist loadfile`` hands files out in collection order, so one of these collected last (the
#: postgres and integration folders come last) kept one worker busy for minutes after the others
#: ran out of files.
RUN_FIRST = (
    "tests/core/test_write_encodings.py",
    "plugins/postgres/tests/test_pg_dependency_floor.py",
    "tests/core/test_sqlite_oversize.py",
    "tests/test_quality.py",
    "tests/core/test_memory_sqlite_oversize.py",
    "tests/contracts/test_recall_suite_catches_broken_adapters.py",
    "tests/core/test_reference_cycles.py",
    "tests/core/test_sqlite_recall_oversize.py",
    "tests/contracts/test_erasure_suites_catch_broken_adapters.py",
    "plugins/recall-redis/tests/test_oversize_fields.py",
    "tests/reliability/test_history_state_machine.py",
    "integrations/openai-agents/tests/test_sdk_suite.py",
    "plugins/provider-openai/tests/test_openai_dependency_floor.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the files of :data:`RUN_FIRST` to the front, in its order; the rest keep theirs."""
    root = Path(config.rootpath)
    rank = {name: index for index, name in enumerate(RUN_FIRST)}

    def key(item: pytest.Item) -> int:
        try:
            name = Path(item.path).relative_to(root).as_posix()
        except ValueError:  # a test outside the repository (none today)
            return len(RUN_FIRST)
        return rank.get(name, len(RUN_FIRST))

    items.sort(key=key)  # stable: within a file and among the others, collection order stays
