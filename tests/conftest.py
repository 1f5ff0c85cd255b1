"""Shared test configuration. Keep this small: fixtures belong next to the tests that use them."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# "default" keeps the suite fast and free of timing flakes on slow machines;
# "ci" runs more examples. Select with HYPOTHESIS_PROFILE=ci.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
