"""A factory's failure never repeats a value a ``${VAR}`` reference supplied (docs/config.md).

The loader hid such values from every check's message, but a factory that raised was reported
as ``plugin 'x' failed to build: <its message>`` as it was: one naming its token or host (as a
client library's URL error does) printed the secret in ``agentium run``'s error.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness._config.runtime import load_runtime
from agentium_harness._errors import ConfigError
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec

HIDDEN = "<a value from the environment, not shown>"


@attrs.frozen
class _Options:
    token: str = ""
    host: str = ""
    retries: int = 3


def _registry() -> PluginRegistry:
    def factory(config: _Options) -> Any:
        raise ValueError(
            f"cannot connect to {config.host!r} with token {config.token} ({config.retries} tries)"
        )

    memory_spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("leaky", memory_spec.adapter_class, _Options, factory=factory))

    plugin = types.SimpleNamespace(agentium_register_archives=hookimpl(agentium_register_archives))
    return PluginRegistry.load(autoload=False, extra_plugins=[("leaky-dist", plugin)])


@pytest.mark.parametrize("shared", [False, True], ids=["section-options", "shared-table"])
def test_a_factory_failure_does_not_repeat_a_value_from_the_environment(tmp_path: Path, shared: bool) -> None:
    options = 'token = "${TOKEN}"\nhost = "${HOST}"\nretries = "${RETRIES}"\n'
    where = "[plugins.leaky]\n" if shared else "[archive.options]\n"
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n' + where + options,
        encoding="utf-8",
    )
    environ = {"TOKEN": "s3cr3t-token-value", "HOST": "db.internal.example", "RETRIES": "7"}
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(), environ=environ)
    (issue,) = info.value.issues
    assert issue.path == "$.archive"
    assert issue.message == (
        f"plugin 'leaky' failed to build: cannot connect to {HIDDEN} with token {HIDDEN} ({HIDDEN} tries)"
    )
    assert "s3cr3t" not in str(info.value) and "db.internal" not in str(info.value)


def test_a_factory_failure_without_values_from_the_environment_is_reported_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n[archive.options]\ntoken = "written"\nhost = "h"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(), environ={})
    (issue,) = info.value.issues
    assert (
        issue.message == "plugin 'leaky' failed to build: cannot connect to 'h' with token written (3 tries)"
    )
