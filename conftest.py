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
"""

from __future__ import annotations

import gc

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
