"""Load the fake-distribution helper (tests/fixtures/plugins/fakedist.py) once, for every test module."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"


def _load() -> types.ModuleType:
    name = "agentium_test_fixture_fakedist"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "fakedist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fakedist = _load()
