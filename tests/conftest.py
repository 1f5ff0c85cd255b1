"""Shared test configuration. Keep this small: fixtures belong next to the tests that use them."""

from __future__ import annotations

import importlib
import os

from hypothesis import HealthCheck, settings

# "default" keeps the suite fast and free of timing flakes on slow machines;
# "ci" runs more examples. Select with HYPOTHESIS_PROFILE=ci.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# pytester's in-process runs (the contract-suite tests) restore sys.modules
# afterwards, dropping every module first imported inside them. NumPy 2 refuses
# to initialise its C extensions twice in one process, so a NumPy first
# imported by hybrid recall inside such a run made every later user (the MiniLM
# embedder's tests) fail with "cannot load module more than once per process".
# Importing it here puts it in every snapshot.
try:
    importlib.import_module("numpy")
except ImportError:  # NumPy is optional: plain-Python scoring is used without it
    pass
