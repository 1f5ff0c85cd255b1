"""Make one module the only installed plugin, as the CLI's registry finds it (an entry point).

For tests of what the CLI and the loaders do with a plugin whose code hangs:
the registry reads ``agentium`` entry points through
``registry.entry_points_of``, which this replaces for the test, and the
bound on plugin code comes from ``AGENTIUM_HOOK_TIMEOUT``.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from agentium_harness._plugins import registry as registry_module


def install_only_plugin(
    monkeypatch: pytest.MonkeyPatch, module: Any, *, dist: str, value: str, hook_timeout_s: float
) -> None:
    """Until the test ends, ``module`` (distribution ``dist``, entry point ``value``) is the one plugin."""
    entry = types.SimpleNamespace(
        name="main",
        value=value,
        dist=types.SimpleNamespace(name=dist, version="1.0"),
        load=lambda: module,
    )
    monkeypatch.setattr(registry_module, "entry_points_of", lambda group: ([entry], []))
    monkeypatch.setenv("AGENTIUM_HOOK_TIMEOUT", str(hook_timeout_s))
    monkeypatch.delenv("AGENTIUM_PLUGINS", raising=False)
    monkeypatch.delenv("AGENTIUM_DISABLE_PLUGINS", raising=False)
