"""Every adapter a plugin of this repository registers has an install hint naming its distribution.

When a config selects such an adapter and its plugin is not installed, the
error names the distribution and, until a release is on PyPI, how to install
it from a checkout. The repository's own plugins are read from the installed
entry points (CI installs them all), so a new adapter kind or plugin cannot
be left without a hint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentium_harness import PluginNotFoundError
from agentium_harness.plugin_api import PluginRegistry

ROOT = Path(__file__).resolve().parents[2]
IN_REPOSITORY = {
    f"agentium-{p.name}" for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()
}

REGISTERED = sorted(
    (a.kind, a.name, a.distribution)
    for a in PluginRegistry.load().adapters()
    if a.distribution in IN_REPOSITORY
)


def test_the_repositorys_plugins_are_installed_here() -> None:
    assert {d for _, _, d in REGISTERED} == IN_REPOSITORY


@pytest.mark.parametrize(("kind", "name", "distribution"), REGISTERED, ids=lambda v: str(v))
def test_a_missing_plugin_names_its_distribution_and_checkout_folder(
    kind: str, name: str, distribution: str
) -> None:
    registry = PluginRegistry.load(autoload=False)  # as if no plugin were installed
    with pytest.raises(PluginNotFoundError) as info:
        registry.adapter(kind, name)
    message = str(info.value)
    assert f"it is provided by {distribution}" in message
    assert f"pip install ./plugins/{distribution.removeprefix('agentium-')}" in message
