"""Config loads share one cattrs converter, and stay independent of each other.

Each load made two converters, left to the cycle collector (they refer to
themselves through their hook dispatch: ``test_reference_cycles_close``).
Now loads share the one :func:`~agentium_harness._codec.shared_converter`
keeps: a structure rule an adapter registers afterwards still reaches the
next load (the converter is made anew), and what one registry's plugins
structured never decides how another registry's options are read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import cattrs
import pytest

from agentium_harness import ConfigError, parse_config, resolve_config
from agentium_harness._codec import make_converter, register_structure_hook, shared_converter
from agentium_harness._config.load import config_converter
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness.adapters.providers import ScriptedProvider

TEXT = (
    '[provider]\nplugin = "greeter"\n[provider.options]\ngreeting = "hello"\n'
    '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n'
)


class _Greeting:
    """A value only a registered structure rule can read (a bare string in the config)."""

    def __init__(self, words: str) -> None:
        self.words = words


def _greeting_rule(conv: cattrs.Converter) -> Any:
    def hook(value: object, _: object) -> _Greeting:
        if not isinstance(value, str):
            raise TypeError(f"a greeting is a string, got {type(value).__name__}")
        return _Greeting(value.upper())

    return hook


@attrs.frozen
class _RuleConfig:
    greeting: _Greeting


@attrs.frozen
class _TextConfig:
    greeting: str


@attrs.frozen
class _NumberConfig:
    greeting: int


def _registry(config_class: type) -> PluginRegistry:
    """A registry whose provider ``greeter`` takes options of ``config_class``."""

    def factory(config: Any) -> ScriptedProvider:
        return ScriptedProvider(replies=["hi"])

    class Plugin:
        @staticmethod
        @hookimpl
        def agentium_register_providers(register: Callable[[AdapterSpec], None]) -> None:
            register(AdapterSpec("greeter", ScriptedProvider, config_class, factory=factory))

    registry = PluginRegistry.load(autoload=False)
    assert registry.register_plugin("agtest-greeter", Plugin, version="1.0") == ()
    return registry


def _options(registry: PluginRegistry) -> Any:
    resolved = resolve_config(parse_config(TEXT, environ={}), registry)
    assert resolved.provider is not None
    return resolved.provider.options


def test_loads_share_one_converter_until_a_rule_is_registered() -> None:
    first = shared_converter(config_converter)
    assert shared_converter(config_converter) is first  # not one per load
    # A load before _Greeting has a rule cannot read it (cattrs has no hook for a plain class) ...
    with pytest.raises(ConfigError) as refused:
        _options(_registry(_RuleConfig))
    assert [issue.path for issue in refused.value.issues] == ["$.provider.options"]
    # ... and the next load after an adapter registered one does: the shared converter was made anew.
    register_structure_hook(_Greeting, _greeting_rule)
    remade = shared_converter(config_converter)
    assert remade is not first
    assert _options(_registry(_RuleConfig)).greeting.words == "HELLO"
    assert shared_converter(config_converter) is remade
    # Shared converters are kept per build function: the config's is not the stored-data one.
    assert shared_converter(config_converter) is not shared_converter(_strict)


def _strict() -> cattrs.Converter:
    return make_converter(strict=True)


def test_one_registrys_plugins_never_decide_how_anothers_options_are_read() -> None:
    # The same plugin name, three registries, three config classes, loaded in turn on one converter.
    assert _options(_registry(_TextConfig)) == _TextConfig("hello")
    with pytest.raises(ConfigError, match="expected an integer, got string"):
        _options(_registry(_NumberConfig))
    assert _options(_registry(_TextConfig)) == _TextConfig("hello")
