"""A plugin's config class is plugin code: structuring options into it is bounded like its factory.

``load_config`` (and so ``load_runtime`` and every ``agentium`` command given
a config) and ``agentium demo`` structured a plugin's options into its attrs
config class on the caller's thread: a validator that blocked (a network
check, a lock) hung them for good. Now the structuring runs in a daemon
thread abandoned at the registry's ``hook_timeout_s`` (``AGENTIUM_HOOK_TIMEOUT``),
as an adapter factory is: ``load_config`` raises a ``ConfigError`` whose issue,
at the section's options, names the plugin and the bound, and returns nothing;
the demo stops with the ``HookTimeoutError`` naming it. The validators here block
on a ``threading.Event`` each test releases afterwards.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import attrs
import pytest
from _only_plugin import install_only_plugin

from agentium_harness import ConfigError, load_config
from agentium_harness._cli import main
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness.adapters.providers import ScriptedProvider, ScriptedProviderConfig

BOUND_S = 0.3
#: How long a bounded call may take in all, on a busy machine (the bound plus thread start-up).
WITHIN_S = 5.0
#: How long a blocked validator waits at most (each test releases it sooner).
BLOCK_S = 30.0
DIST = "agtest-hang-config"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What the blocking validator waits on; released after the test so its thread ends."""
    event = threading.Event()
    yield event
    event.set()


def _hanging_config_plugin(gate: threading.Event, entered: threading.Event) -> types.ModuleType:
    """A plugin registering provider ``hang``, whose config class's validator blocks until ``gate``."""

    def blocks(instance: Any, attribute: Any, value: Any) -> None:
        entered.set()
        gate.wait(BLOCK_S)

    @attrs.frozen
    class HangingConfig:
        responses: list[str] = attrs.field(factory=list, validator=blocks)

    def factory(config: HangingConfig) -> ScriptedProvider:
        return ScriptedProvider(ScriptedProviderConfig(responses=list(config.responses)))

    @hookimpl
    def agentium_register_providers(register: Callable[[AdapterSpec], None]) -> None:
        register(AdapterSpec("hang", ScriptedProvider, HangingConfig, factory=factory))

    module = types.ModuleType("agtest_hang_config")
    module.agentium_register_providers = agentium_register_providers  # type: ignore[attr-defined]
    return module


def _config_file(tmp_path: Path) -> Path:
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        '[provider]\nplugin = "hang"\n[provider.options]\nresponses = ["hi"]\n'
        '[archive]\nplugin = "memory"\n[archive.options]\nnot_a_key = 1\n'
        '[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    return cfg


NAMED = f"the config class of provider adapter 'hang' (plugin {DIST}) did not return within {BOUND_S}s"


def test_load_config_abandons_a_blocking_config_class_and_reports_it_with_the_rest(
    gate: threading.Event, tmp_path: Path
) -> None:
    entered = threading.Event()
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[(DIST, _hanging_config_plugin(gate, entered))], hook_timeout_s=BOUND_S
    )
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(_config_file(tmp_path), registry=registry)
    assert time.monotonic() - started < WITHIN_S
    assert entered.is_set()
    issues = {issue.path: issue.message for issue in caught.value.issues}
    # The hung class is one issue at its section's options, naming the plugin and the bound ...
    assert NAMED in issues["$.provider.options"], issues
    assert "AGENTIUM_HOOK_TIMEOUT" in issues["$.provider.options"]
    # ... and the other sections were still checked (nothing returned, everything reported).
    assert any(path.startswith("$.archive.options") for path in issues), issues


def test_a_config_class_that_answers_in_time_is_used(tmp_path: Path) -> None:
    done = threading.Event()
    done.set()  # the validator returns at once
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[(DIST, _hanging_config_plugin(done, threading.Event()))]
    )
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        '[provider]\nplugin = "hang"\n[provider.options]\nresponses = ["hi"]\n'
        '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    resolved = load_config(cfg, registry=registry)
    assert list(resolved.provider.options.responses) == ["hi"]


def test_the_cli_reports_a_blocking_config_class_within_the_bound(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = _hanging_config_plugin(gate, threading.Event())
    install_only_plugin(
        monkeypatch, module, dist=DIST, value="agtest_hang_config:main", hook_timeout_s=BOUND_S
    )
    out, err = StringIO(), StringIO()
    started = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["check", str(_config_file(tmp_path))])
    assert time.monotonic() - started < WITHIN_S
    assert code == 2, (out.getvalue(), err.getvalue())
    assert NAMED in out.getvalue() + err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_the_demo_stops_with_a_typed_error_when_the_verifiers_config_class_blocks(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo structured the ``fs`` verifier's options on the event loop: a blocking validator hung it."""
    from agentium_verifier_fs.config import FsVerifierConfig
    from agentium_verifier_fs.verifier import FsVerifier

    entered = threading.Event()

    @attrs.frozen(slots=True)
    class HangingFsConfig(FsVerifierConfig):
        def __attrs_post_init__(self) -> None:
            entered.set()
            gate.wait(BLOCK_S)

    @hookimpl
    def agentium_register_verifiers(register: Any) -> None:
        register(AdapterSpec("fs", FsVerifier, HangingFsConfig))

    module = types.SimpleNamespace(agentium_register_verifiers=agentium_register_verifiers)
    install_only_plugin(
        monkeypatch,
        module,
        dist="agtest-hang-fs-config",
        value="agtest_hang_fs_config:main",
        hook_timeout_s=BOUND_S,
    )
    started = time.monotonic()
    code = main(["demo", "--dir", str(tmp_path), "--turns", "2"])
    assert time.monotonic() - started < 2 * WITHIN_S  # the demo's own turns run first
    assert entered.is_set()
    err = capsys.readouterr().err
    assert code == 2, err
    named = "the config class of verifier adapter 'fs' (plugin agtest-hang-fs-config)"
    assert err.startswith(f"agentium demo: {named} did not return within {BOUND_S}s"), err
    assert "Traceback" not in err


def test_a_wrapped_providers_blocking_config_class_is_abandoned_too(
    gate: threading.Event, tmp_path: Path
) -> None:
    # The recorded provider's wrapped provider had its options structured into its config class on
    # the caller's thread, unbounded: `agentium check` of a config recording `hang` hung for good.
    entered = threading.Event()
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[(DIST, _hanging_config_plugin(gate, entered))], hook_timeout_s=BOUND_S
    )
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        '[provider]\nplugin = "recorded"\n[provider.options]\npath = "rec.jsonl"\nmode = "record"\n'
        'provider = "hang"\nprovider_options = { responses = ["hi"] }\n'
        '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    started = time.monotonic()
    done: list[BaseException] = []

    def check() -> None:
        try:
            load_config(cfg, registry=registry)
        except BaseException as exc:  # handed to the test's thread
            done.append(exc)

    worker = threading.Thread(target=check, daemon=True)  # a hang must fail the test, not stall it
    worker.start()
    worker.join(WITHIN_S)
    assert not worker.is_alive(), "load_config waited on the wrapped provider's config class"
    assert time.monotonic() - started < WITHIN_S
    assert entered.is_set()
    (error,) = done
    assert isinstance(error, ConfigError)
    issues = {issue.path: issue.message for issue in error.issues}
    wrapped = f"the config class of provider adapter 'hang' (plugin {DIST}) did not return within {BOUND_S}s"
    assert wrapped in issues["$.provider.options.provider_options"], issues
    assert not (tmp_path / "rec.jsonl").exists()
