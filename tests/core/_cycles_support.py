"""The ``collector`` fixture of the reference-cycle tests: collections run only when the test says.

Everything alive when the test starts (the worker's heap: every module and object earlier tests
left) goes to the permanent generation, which collections skip, so each of the test's
collections walks only what the test made, not the whole heap again (a full-suite worker spent
minutes there). Automatic collections are off: they would free cycles before they are counted.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def collector() -> Iterator[None]:
    """Automatic collections off and the heap frozen for the test; both restored after it."""
    # No collection first: garbage earlier tests left is frozen with the rest, so the test's own
    # collections skip it as well; a full collection of a suite worker's heap here took 2-4 s a
    # test (51 s over test_reference_cycles_close.py alone). It is collected after unfreeze.
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.unfreeze()
        if enabled:
            gc.enable()
