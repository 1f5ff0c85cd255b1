"""Config files: phase (a) schema validation with paths, env substitution, phase (b) plugin resolution.

Plugin-dependent tests use the real fixture distributions from
``tests/fixtures/plugins`` installed into a temporary site directory.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from _fakedist import fakedist

from agentium_harness._config import (
    DEFAULT_INSTRUCTIONS,
    HarnessConfig,
    ResolvedConfig,
    load_config,
    parse_config,
    resolve_config,
    substitute_env,
)
from agentium_harness._config.runtime import build_runtime, load_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._errors import ConfigError, ConfigIssue, InvalidArgumentError
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry, operator_plugin_lists
from agentium_harness._plugins.spec import PATH_OPTION, AdapterSpec, path_option_names, resolve_path_options
from agentium_harness._ports.recall import RecallLimits


def _registry_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *keys: str) -> PluginRegistry:
    fakedist.forget_modules()
    site = tmp_path / "site"
    site.mkdir()
    fakedist.install(site, *keys)
    monkeypatch.syspath_prepend(str(site))
    allow = ",".join(fakedist.DISTRIBUTIONS[k].distribution for k in keys)
    return PluginRegistry.load(environ={"AGENTIUM_PLUGINS": allow})


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginRegistry]:
    """Built-ins plus the fixture distributions good, importfail (broken) and invalid (rejections)."""
    yield _registry_with(tmp_path, monkeypatch, "good", "importfail", "invalid")
    fakedist.forget_modules()


@pytest.fixture
def conflicted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginRegistry]:
    """Built-ins plus good and dup, which both register the archive name ``tgood``."""
    yield _registry_with(tmp_path, monkeypatch, "good", "dup", "invalid")
    fakedist.forget_modules()


BASE = """
[provider]
plugin = "tprovider"

[archive]
plugin = "memory"

[session_store]
plugin = "memory"
"""

MINIMAL_BUILTIN = """
[provider]
plugin = "scripted"

[archive]
plugin = "memory"

[session_store]
plugin = "memory"
"""


def _issues(exc: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    found: dict[str, str] = {}
    for issue in exc.value.issues:
        assert issue.path not in found, f"two issues at {issue.path}: {exc.value.issues}"
        found[issue.path] = issue.message
    return found


def _parse_errors(text: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(textwrap.dedent(text), environ=environ or {})
    return _issues(info)


def _write(tmp_path: Path, text: str, name: str = "agentium.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ------------------------------------------------------------------ phase (a)


def test_minimal_config_gets_defaults() -> None:
    config = parse_config(BASE, environ={})
    assert config.provider.plugin == "tprovider"
    assert config.provider.options == {}
    assert config.runtime.instructions == DEFAULT_INSTRUCTIONS == "You are a helpful assistant."
    assert config.runtime.resident == ResidentLimits()
    assert config.recall is None and config.summarizer is None
    assert config.verifier is None and config.memory is None


def test_full_schema_structures_every_section() -> None:
    config = parse_config(
        BASE
        + """
[runtime]
instructions = "Be brief."
[runtime.resident]
max_groups = 3
max_tokens = 100
max_bytes = 5000
[recall]
plugin = "norecall"
[recall.budget]
max_candidates = 4
max_latency_s = 1
[recall.options]
index = "main"
[summarizer]
plugin = "tsum"
[verifier]
plugin = "tverify"
[memory]
plugin = "tmemory"
""",
        environ={},
    )
    assert config.runtime.instructions == "Be brief."
    assert config.runtime.resident == ResidentLimits(max_groups=3, max_tokens=100, max_bytes=5000)
    assert config.recall is not None
    assert config.recall.budget == RecallLimits(max_candidates=4, max_latency_s=1.0)
    assert isinstance(config.recall.budget.max_latency_s, float)
    assert config.recall.options == {"index": "main"}
    assert config.summarizer is not None and config.summarizer.plugin == "tsum"
    assert config.component("verifier") is config.verifier


def test_unknown_keys_are_rejected_at_top_level_and_nested() -> None:
    errors = _parse_errors(
        'colour = "blue"\n'
        + BASE
        + """
[runtime]
instruction = "typo"
[runtime.resident]
max_group = 3
[recall]
plugin = "x"
[recall.budget]
max_candidate = 2
"""
    )
    assert errors["$.colour"].startswith("unknown key; allowed keys: provider, archive, session_store")
    assert errors["$.runtime.instruction"] == (
        "unknown key; did you mean 'instructions'?; allowed keys: instructions, resident, max_steps, "
        "source_tokens, settle_timeout_s, op_timeout_s, tool_timeout_s, close_timeout_s, model_timeout_s"
    )
    assert "did you mean 'max_groups'?" in errors["$.runtime.resident.max_group"]
    assert "did you mean 'max_candidates'?" in errors["$.recall.budget.max_candidate"]
    assert len(errors) == 4


def test_unknown_key_with_odd_characters_gets_a_quoted_path() -> None:
    errors = _parse_errors(BASE + '\n[runtime.resident]\n"max groups" = 1\n')
    assert list(errors) == ['$.runtime.resident["max groups"]']


def test_a_key_with_terminal_controls_is_shown_escaped_in_its_path() -> None:
    # JSON quoting escaped only C0 controls: a C1 control (U+009B, a terminal's CSI), DEL or a
    # bidi override in an unknown key reached the terminal raw through agentium check.
    errors = _parse_errors(BASE + '\n[runtime.resident]\n"a\\u009b2J\\u007f\\u202eb\\u001b" = 1\n')
    assert list(errors) == ['$.runtime.resident["a\\u009b2J\\u007f\\u202eb\\u001b"]']


def test_wrong_types_are_errors_not_conversions() -> None:
    errors = _parse_errors(
        """
        [provider]
        plugin = 7
        [archive]
        plugin = "memory"
        options = "none"
        [session_store]
        plugin = "memory"
        [runtime]
        instructions = ["a"]
        resident = 5
        [recall]
        plugin = "x"
        [recall.budget]
        max_candidates = "8"
        max_queries = true
        max_latency_s = "fast"
        """
    )
    assert errors == {
        "$.provider.plugin": "expected a string, got integer",
        "$.archive.options": "expected a table, got string",
        "$.runtime.instructions": "expected a string, got array",
        "$.runtime.resident": "expected a table, got integer",
        "$.recall.budget.max_candidates": "expected an integer, got string",
        "$.recall.budget.max_queries": "expected an integer, got boolean",
        "$.recall.budget.max_latency_s": "expected a number, got string",
    }


def test_missing_required_sections_and_keys() -> None:
    errors = _parse_errors(
        """
        [provider]
        options = {}
        [recall]
        """
    )
    assert errors == {
        "$.provider.plugin": "missing required key",
        "$.archive": "missing required table [archive]",
        "$.session_store": "missing required table [session_store]",
        "$.recall.plugin": "missing required key",
    }


def test_validator_errors_point_at_the_field() -> None:
    errors = _parse_errors(BASE + "\n[runtime.resident]\nmax_bytes = 0\n")
    assert errors == {
        "$.runtime.resident.max_bytes": "max_bytes must be an integer from 1 to 1000000000000, got 0"
    }


def test_invalid_toml_is_one_issue_with_the_location() -> None:
    errors = _parse_errors("[provider\nplugin = 1\n")
    assert list(errors) == ["$"]
    assert errors["$"].startswith("invalid TOML: ") and "line 1" in errors["$"]


def test_a_file_name_given_as_text_gets_a_hint() -> None:
    errors = _parse_errors("agentium.toml")
    assert "pass a pathlib.Path or use load_config" in errors["$"]


def test_parse_config_reads_a_path_and_reports_unreadable_files(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE)
    assert parse_config(path, environ={}).archive.plugin == "memory"
    with pytest.raises(ConfigError) as info:
        parse_config(tmp_path / "missing.toml", environ={})
    assert info.value.source == str(tmp_path / "missing.toml")
    assert _issues(info) == {"$": "cannot read config file: No such file or directory"}
    (tmp_path / "latin1.toml").write_bytes(b'[provider]\nplugin = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        parse_config(tmp_path / "latin1.toml", environ={})


# ---------------------------------------------------------- env substitution


def test_env_substitution_fills_string_values() -> None:
    config = parse_config(
        BASE
        + """
[runtime]
instructions = "Hi ${WHO}, ${MISSING:-friend}, ${EMPTY:-fallback}; literal $${WHO} and $5"
[archive.options]
paths = ["${WHO}/a", "b"]
""",
        environ={"WHO": "Ada", "EMPTY": ""},
    )
    assert config.runtime.instructions == "Hi Ada, friend, fallback; literal ${WHO} and $5"
    assert config.archive.options == {"paths": ["Ada/a", "b"]}


def test_set_but_empty_variable_without_default_is_empty() -> None:
    config = parse_config(BASE + '\n[runtime]\ninstructions = "[${EMPTY}]"\n', environ={"EMPTY": ""})
    assert config.runtime.instructions == "[]"


def test_missing_env_var_is_an_error_naming_variable_and_path() -> None:
    errors = _parse_errors(
        BASE + '\n[archive.options]\ntoken = "${API_TOKEN}"\n[runtime]\ninstructions = "${X"\n',
        environ={},
    )
    assert errors["$.archive.options.token"] == (
        "environment variable API_TOKEN is not set (write ${API_TOKEN:-default} to give a default)"
    )
    assert errors["$.runtime.instructions"].startswith("invalid ${...} reference")


def test_a_default_holding_a_reference_is_an_error_not_literal_text() -> None:
    # ${A:-${HOME}} left the text "${HOME}" and a stray "}" as the value, without a word.
    errors = _parse_errors(BASE + '\n[runtime]\ninstructions = "${A:-${HOME}}"\n', environ={"HOME": "/h"})
    assert (
        errors["$.runtime.instructions"] == "a ${NAME:-default} default cannot hold another ${...} reference"
    )


def test_env_value_with_toml_syntax_stays_a_literal_string() -> None:
    evil = 'x"\n[evil]\nk = 1\n[archive]\nplugin = "s3'
    config = parse_config(BASE + '\n[runtime]\ninstructions = "${EVIL}"\n', environ={"EVIL": evil})
    assert config.runtime.instructions == evil
    assert config.archive.plugin == "memory"
    assert not hasattr(config, "evil")


def test_env_value_with_toml_syntax_in_an_int_field_is_a_type_error_at_its_path() -> None:
    errors = _parse_errors(
        BASE + '\n[runtime.resident]\nmax_groups = "${EVIL}"\n',
        environ={"EVIL": "3\n[evil]\nk = 1"},
    )
    # Read as a number because it held a reference, and refused: the text is not a decimal integer.
    assert errors == {
        "$.runtime.resident.max_groups": "expected an integer, got string: the text of its ${...} "
        "reference is not a decimal integer (such as 30)"
    }


def test_substitute_env_leaves_keys_and_non_strings_alone() -> None:
    data = {"${K}": 1, "s": "${K}", "n": [1, "${K}", {"x": True}]}
    result, issues = substitute_env(data, {"K": "v"})
    assert result == {"${K}": 1, "s": "v", "n": [1, "v", {"x": True}]}
    assert issues == []
    _, issues = substitute_env({"a": [{"b": "${NOPE}"}]}, {})
    assert [i.path for i in issues] == ["$.a[0].b"]


# ------------------------------------------------------------------ phase (b)


def test_load_config_resolves_builtins_and_records_the_directory(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL_BUILTIN)
    resolved = load_config(path, PluginRegistry.load(autoload=False), environ={})
    assert isinstance(resolved, ResolvedConfig)
    assert resolved.base_dir == tmp_path.resolve()
    assert resolved.source == str(path)
    assert resolved.archive.spec.name == "memory"
    assert resolved.archive.kind == "archive"
    assert resolved.archive.distribution == "agentium-harness"
    assert resolved.archive.options == resolved.archive.spec.config_class()
    assert list(resolved.components()) == ["provider", "archive", "session_store"]
    assert resolved.instructions == DEFAULT_INSTRUCTIONS
    assert resolved.recall_limits is None
    assert resolved.resident == ResidentLimits()


def test_plugin_options_are_structured_into_its_config_class(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    path = _write(
        tmp_path,
        """
        [provider]
        plugin = "tprovider"
        [archive]
        plugin = "tgood"
        [archive.options]
        label = "main"
        max_items = 5
        [session_store]
        plugin = "memory"
        [recall]
        plugin = "seekrecall"
        [recall.budget]
        max_candidates = 3
        [recall.options]
        weights = [1, 0.5]
        [summarizer]
        plugin = "tsum"
        """,
    )
    resolved = load_config(path, registry, environ={})
    good = sys.modules["agtest_good"]
    assert resolved.archive.options == good.GoodArchiveConfig(label="main", max_items=5)
    assert resolved.archive.distribution == "agentium-test-good"
    assert resolved.archive.version == "1.2.0"
    assert resolved.recall is not None and resolved.summarizer is not None
    assert resolved.recall.options == good.RecallOptions(weights=[1.0, 0.5])
    assert resolved.recall_limits == RecallLimits(max_candidates=3)
    assert resolved.summarizer.kind == "summarizer"


def test_bad_plugin_options_have_paths_under_options(tmp_path: Path, registry: PluginRegistry) -> None:
    path = _write(
        tmp_path,
        """
        [provider]
        plugin = "tprovider"
        [provider.options]
        temperature = 0.2
        [archive]
        plugin = "tgood"
        [archive.options]
        max_items = "5"
        colour = "red"
        [session_store]
        plugin = "memory"
        [recall]
        plugin = "norecall"
        [recall.options]
        weights = "heavy"
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, registry, environ={})
    assert _issues(info) == {
        "$.provider.options.temperature": "unknown key; this table takes no keys",
        "$.archive.options.max_items": "expected an integer, got string",
        "$.archive.options.colour": "unknown key; allowed keys: label, max_items, journal",
        "$.recall.options.weights": "expected an array, got string",
    }


def test_unknown_plugin_lists_installed_names_suggests_and_gives_pip_hint(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        [provider]
        plugin = "scriptd"
        [archive]
        plugin = "s3"
        [session_store]
        plugin = "memory"
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, PluginRegistry.load(autoload=False), environ={})
    errors = _issues(info)
    assert set(errors) == {"$.provider.plugin", "$.archive.plugin"}
    assert "no archive adapter named 's3'" in errors["$.archive.plugin"]
    assert "installed archive adapters: " in errors["$.archive.plugin"]
    assert "memory" in errors["$.archive.plugin"]
    assert "provided by agentium-archive-s3" in errors["$.archive.plugin"]
    assert "pip install ./plugins/archive-s3" in errors["$.archive.plugin"]
    assert "did you mean 'scripted'?" in errors["$.provider.plugin"]


def test_unknown_plugin_mentions_plugins_that_failed_to_load(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    path = _write(tmp_path, BASE.replace('plugin = "memory"', 'plugin = "fromthebrokenone"', 1))
    with pytest.raises(ConfigError) as info:
        load_config(path, registry, environ={})
    message = _issues(info)["$.archive.plugin"]
    assert "agentium-test-importfail 0.3.1" in message
    assert "RuntimeError" in message


def test_selecting_a_conflicted_or_rejected_name_is_an_error(
    tmp_path: Path, conflicted: PluginRegistry
) -> None:
    path = _write(
        tmp_path,
        """
        [provider]
        plugin = "tprovider"
        [archive]
        plugin = "tgood"
        [session_store]
        plugin = "memory"
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, conflicted, environ={})
    message = _issues(info)["$.archive.plugin"]
    assert "ambiguous" in message
    assert "agentium-test-good" in message and "agentium-test-dup" in message

    path.write_text(path.read_text().replace('"tgood"', '"nobounded"'))
    with pytest.raises(ConfigError) as info:
        load_config(path, conflicted, environ={})
    message = _issues(info)["$.archive.plugin"]
    assert "rejected at load time" in message and "read_groups" in message


def test_broken_plugins_are_harmless_when_not_selected(tmp_path: Path, registry: PluginRegistry) -> None:
    assert registry.problems  # importfail and the invalid registrations are present
    resolved = load_config(_write(tmp_path, BASE), registry, environ={})
    assert resolved.provider.plugin == "tprovider"


def test_recall_with_summary_needs_canonical_archive_reads(tmp_path: Path, registry: PluginRegistry) -> None:
    text = BASE + '\n[recall]\nplugin = "norecall"\n[summarizer]\nplugin = "tsum"\n'
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), registry, environ={})
    errors = _issues(info)
    assert list(errors) == ["$.recall.plugin"]
    assert "'norecall'" in errors["$.recall.plugin"]
    assert "canonical_archive_reads" in errors["$.recall.plugin"]
    # Without summaries the same store is fine; with a store that seeks, so is the pair.
    load_config(_write(tmp_path, BASE + '\n[recall]\nplugin = "norecall"\n', "a.toml"), registry, environ={})
    load_config(_write(tmp_path, text.replace('"norecall"', '"seekrecall"'), "b.toml"), registry, environ={})


def test_every_error_of_both_phases_is_reported_together(tmp_path: Path, registry: PluginRegistry) -> None:
    path = _write(
        tmp_path,
        """
        typo = 1
        [provider]
        plugin = "tprovidr"
        [archive]
        plugin = "tgood"
        [archive.options]
        max_items = -1.5
        [session_store]
        plugin = "memory"
        [runtime.resident]
        max_tokens = "many"
        [recall]
        plugin = "norecall"
        [recall.options]
        index = "${INDEX_NAME}"
        [summarizer]
        plugin = "tsum"
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, registry, environ={})
    errors = _issues(info)
    assert set(errors) == {
        "$.typo",
        "$.provider.plugin",
        "$.archive.options.max_items",
        "$.runtime.resident.max_tokens",
        "$.recall.options.index",
        "$.recall.plugin",
    }
    assert "did you mean 'tprovider'" in errors["$.provider.plugin"]
    assert errors["$.archive.options.max_items"] == "expected an integer, got float"
    assert "INDEX_NAME" in errors["$.recall.options.index"]
    assert "canonical_archive_reads" in errors["$.recall.plugin"]
    assert str(info.value).startswith(f"6 config error(s) in {path}:")


def test_every_value_a_table_refuses_is_reported_not_only_the_first() -> None:
    # A class's validators stop at the first field they refuse: each other bad value of the same
    # table must still be reported (docs/config.md: both phases report every problem).
    errors = _parse_errors(
        MINIMAL_BUILTIN
        + """
        [runtime]
        max_steps = 0
        op_timeout_s = 0
        close_timeout_s = 5
        [verifier]
        plugin = "x"
        [verifier.budget]
        max_entries = 33
        max_bytes = 8193
        """
    )
    assert set(errors) == {
        "$.runtime.max_steps",
        "$.runtime.op_timeout_s",
        "$.verifier.budget.max_entries",
        "$.verifier.budget.max_bytes",
    }
    assert errors["$.runtime.op_timeout_s"].startswith("op_timeout_s must be a finite number of seconds")
    # Dropping a refused key must not make up a problem of its own: the lone bound of a retention
    # policy is refused for its value, never reported as "needs a bound" besides.
    errors = _parse_errors(MINIMAL_BUILTIN + "\n[retention]\nmax_age_days = 99999\n")
    assert list(errors) == ["$.retention.max_age_days"]
    errors = _parse_errors(MINIMAL_BUILTIN + "\n[retention]\nmax_age_days = 99999\nmax_archived_groups = 0\n")
    assert set(errors) == {"$.retention.max_age_days", "$.retention.max_archived_groups"}


class _BytesPath:
    """A path-like object naming its file with bytes, which the config functions do not take."""

    def __fspath__(self) -> bytes:
        return b"agentium.toml"


@pytest.mark.parametrize(
    "call",
    [
        lambda: parse_config(b"[provider]"),  # type: ignore[arg-type]
        lambda: parse_config(5),  # type: ignore[arg-type]
        lambda: parse_config(_BytesPath()),  # type: ignore[arg-type]
        lambda: parse_config(MINIMAL_BUILTIN, environ={"A": 5}),  # type: ignore[dict-item]
        lambda: parse_config(MINIMAL_BUILTIN, environ=[("A", "b")]),  # type: ignore[arg-type]
        lambda: load_config(5),  # type: ignore[arg-type]
        lambda: load_config(None, environ={"AGENTIUM_CONFIG": 5}),  # type: ignore[dict-item]
        lambda: load_config("agentium.toml", registry="sqlite"),  # type: ignore[arg-type]
        lambda: load_runtime(3.0),  # type: ignore[arg-type]
        lambda: resolve_config({}, PluginRegistry.load(autoload=False)),  # type: ignore[arg-type]
        lambda: resolve_config(parse_config(MINIMAL_BUILTIN, environ={}), "registry"),  # type: ignore[arg-type]
    ],
)
def test_the_config_functions_refuse_arguments_of_the_wrong_type_with_a_typed_error(
    call: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host's wrong argument is InvalidArgumentError, never a bare TypeError or AttributeError
    # from inside the read or the substitution (${A} with A = 5 failed on len()).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agentium.toml").write_text(MINIMAL_BUILTIN + '\n[runtime]\ninstructions = "${A:-x}"\n')
    with pytest.raises(InvalidArgumentError):
        call()


def test_load_config_default_registry_honours_the_given_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakedist.forget_modules()
    site = tmp_path / "site"
    site.mkdir()
    fakedist.install(site, "good")
    monkeypatch.syspath_prepend(str(site))
    try:
        path = _write(tmp_path, BASE)
        assert load_config(path, environ={}).provider.distribution == "agentium-test-good"
        with pytest.raises(ConfigError, match="no provider adapter named 'tprovider'"):
            load_config(path, environ={"AGENTIUM_PLUGINS": ""})
        assert "agtest_good" in sys.modules  # from the first call only
    finally:
        fakedist.forget_modules()


def test_resolve_config_builds_nothing() -> None:
    built: list[Any] = []

    @attrs.frozen
    class Options:
        pass

    def factory(config: Any) -> Any:
        built.append(config)
        raise AssertionError("resolution must not build adapters")

    memory_spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("counting", memory_spec.adapter_class, Options, factory=factory))

    plugin = types.SimpleNamespace(agentium_register_archives=hookimpl(agentium_register_archives))
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("counting-dist", plugin)])
    config = parse_config(MINIMAL_BUILTIN.replace('plugin = "memory"', 'plugin = "counting"', 1), environ={})
    resolved = resolve_config(config, registry)
    assert resolved.archive.plugin == "counting"
    assert resolved.archive.options == Options()
    assert resolved.base_dir is None
    assert built == []


def test_a_factory_exception_whose_text_cannot_be_read_is_still_a_config_error() -> None:
    # build_runtime formatted the factory's exception with f"{exc}": an exception whose __str__
    # raises escaped as that error (a traceback from agentium run), not as the ConfigError.
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("__str__ exploded")

    @attrs.frozen
    class Options:
        pass

    def factory(config: Any) -> Any:
        raise Unreadable()

    memory_spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("unreadable", memory_spec.adapter_class, Options, factory=factory))

    plugin = types.SimpleNamespace(agentium_register_archives=hookimpl(agentium_register_archives))
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("unreadable-dist", plugin)])
    config = parse_config(
        MINIMAL_BUILTIN.replace('plugin = "memory"', 'plugin = "unreadable"', 1), environ={}
    )
    with pytest.raises(ConfigError) as info:
        build_runtime(resolve_config(config, registry))
    (issue,) = info.value.issues
    assert issue.path == "$.archive"
    assert issue.message == "plugin 'unreadable' failed to build: (its message could not be read)"


def test_resolve_config_reports_issues_for_programmatic_configs() -> None:
    config = parse_config(MINIMAL_BUILTIN, environ={})
    bad = attrs.evolve(config, archive=attrs.evolve(config.archive, plugin="nope", options={"x": 1}))
    with pytest.raises(ConfigError) as info:
        resolve_config(bad, PluginRegistry.load(autoload=False))
    assert [i.path for i in info.value.issues] == ["$.archive.plugin"]


def test_config_error_lists_issues_in_a_stable_order() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("z = 1\na = 2\n", environ={})
    paths = [i.path for i in info.value.issues]
    assert paths == sorted(paths)
    assert ConfigIssue("$.a", info.value.issues[0].message) == info.value.issues[0]


def test_harness_config_is_frozen() -> None:
    config: HarnessConfig = parse_config(BASE, environ={})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.archive = config.provider  # type: ignore[misc]


# ------------------------------------------------------- bounded input (item 5)


@pytest.mark.parametrize(
    "value",
    [
        "[" * 500 + "]" * 500,  # tomllib recursed into RecursionError here
        "[" * 33 + "]" * 33,
        "{a = " * 40 + "1" + "}" * 40,
    ],
    ids=["arrays-500", "arrays-33", "inline-tables-40"],
)
def test_deep_nesting_is_a_config_error_not_a_recursion_error(tmp_path: Path, value: str) -> None:
    text = BASE + f"\n[archive.options]\nx = {value}\n"
    assert len(text) < 1200  # about a kilobyte is enough
    for source in (text, _write(tmp_path, text)):
        with pytest.raises(ConfigError) as info:
            parse_config(source, environ={})
        (issue,) = info.value.issues
        assert issue.path == "$"
        assert "nested more than 32 levels deep (line 12)" in issue.message
    with pytest.raises(ConfigError, match="nested more than 32"):
        load_config(_write(tmp_path, text), PluginRegistry.load(autoload=False), environ={})


def test_deep_dotted_keys_are_refused_with_the_path() -> None:
    text = BASE + "\n[archive.options]\n" + ".".join(["k"] * 40) + " = 1\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    (issue,) = info.value.issues
    assert "nested more than 32 levels deep (at $.archive.options.k.k" in issue.message


def test_brackets_in_strings_and_comments_do_not_count_as_nesting() -> None:
    deep = "[" * 100 + "{" * 100
    text = (
        BASE
        + f'\n[runtime]\n# {deep}\ninstructions = "{deep}\\"{deep}"\n'
        + f"[provider.options]\nlit = '{deep}'\n"
        + f"multi = '''\n{deep}\n'''\n"
        + f'basic = """{deep}\\"""{deep}"""\n'
        + "nested = [[[1]], {a = [2]}]\n"
    )
    config = parse_config(text, environ={})
    assert config.runtime.instructions == f'{deep}"{deep}'
    assert config.provider.options["multi"] == deep + "\n"
    assert config.provider.options["nested"] == [[[1]], {"a": [2]}]


def test_references_cannot_expand_a_small_file_past_the_input_bound() -> None:
    # 8 KB of "${X}" with a 100 KB variable made a 200 MB instructions string (and a 1 MiB file
    # tens of gigabytes): the bounded read bounded nothing.
    text = BASE + '\n[runtime]\ninstructions = "' + "${X}" * 2000 + '"\n'
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={"X": "x" * 100_000})
    (issue,) = info.value.issues
    assert issue.path == "$.runtime.instructions"
    assert "expand to more than 1048576 characters" in issue.message
    # Within the bound, substitution is unchanged.
    config = parse_config(BASE + '\n[runtime]\ninstructions = "${X}${X}"\n', environ={"X": "x" * 500_000})
    assert len(config.runtime.instructions) == 1_000_000


def test_a_file_over_one_mebibyte_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_bytes(b"# " + b"x" * (1024 * 1024))
    with pytest.raises(ConfigError) as info:
        parse_config(path, environ={})
    assert [i.message for i in info.value.issues] == ["config file larger than 1048576 bytes (1024 KiB)"]
    assert info.value.source == str(path)
    with pytest.raises(ConfigError, match="larger than"):
        parse_config("# " + "x" * (1024 * 1024), environ={})


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused_not_read_forever() -> None:
    with pytest.raises(ConfigError, match="larger than"):
        load_config("/dev/zero", PluginRegistry.load(autoload=False), environ={})


def test_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        parse_config(tmp_path, environ={})


@pytest.mark.parametrize("name", ["a\x00b.toml", "\ud800.toml"], ids=["nul", "lone-surrogate"])
def test_a_path_no_file_can_have_is_a_config_error(tmp_path: Path, name: str) -> None:
    # open() refuses these with ValueError / UnicodeEncodeError, not OSError: they escaped untyped.
    for path in (str(tmp_path / name), tmp_path / name):
        with pytest.raises(ConfigError, match="cannot read config file") as info:
            load_config(path, PluginRegistry.load(autoload=False), environ={})
        assert info.value.source == str(path)
    with pytest.raises(ConfigError, match="cannot read config file"):
        parse_config(tmp_path / name, environ={})  # parse_config reads a Path, a str is TOML text
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------- the operator's plugin lists (item 6)


@pytest.fixture
def good_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The good fixture distribution installed, with no plugin list set in the process environment."""
    fakedist.forget_modules()
    site = tmp_path / "site"
    site.mkdir()
    fakedist.install(site, "good")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("AGENTIUM_PLUGINS", raising=False)
    monkeypatch.delenv("AGENTIUM_DISABLE_PLUGINS", raising=False)
    yield site
    fakedist.forget_modules()


def test_environ_does_not_drop_the_process_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, good_installed: Path
) -> None:
    monkeypatch.setenv("AGENTIUM_PLUGINS", "")  # the operator allows no external plugin
    path = _write(tmp_path, BASE)
    for environ in ({}, {"AGENTIUM_PLUGINS": "agentium-test-good"}):
        with pytest.raises(ConfigError, match="no provider adapter named 'tprovider'"):
            load_config(path, environ=environ)
        with pytest.raises(ConfigError, match="no provider adapter named 'tprovider'"):
            load_runtime(path, environ=environ)
    assert "agtest_good" not in sys.modules  # never imported


def test_environ_does_not_drop_the_process_block_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, good_installed: Path
) -> None:
    monkeypatch.setenv("AGENTIUM_DISABLE_PLUGINS", "agentium-test-good")
    path = _write(tmp_path, BASE)
    with pytest.raises(ConfigError, match="no provider adapter named 'tprovider'"):
        load_config(path, environ={"AGENTIUM_PLUGINS": "agentium-test-good"})
    assert "agtest_good" not in sys.modules


def test_environ_lists_can_only_narrow(tmp_path: Path, good_installed: Path) -> None:
    path = _write(tmp_path, BASE)
    assert load_config(path, environ={}).provider.distribution == "agentium-test-good"
    with pytest.raises(ConfigError, match="no provider adapter named 'tprovider'"):
        load_config(path, environ={"AGENTIUM_DISABLE_PLUGINS": "agentium-test-good"})


def test_operator_plugin_lists_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTIUM_PLUGINS", "a,B_c")
    monkeypatch.setenv("AGENTIUM_DISABLE_PLUGINS", "x")
    assert operator_plugin_lists() == (frozenset({"a", "b-c"}), frozenset({"x"}))
    assert operator_plugin_lists({"AGENTIUM_PLUGINS": "b.c,d", "AGENTIUM_DISABLE_PLUGINS": "y"}) == (
        frozenset({"b-c"}),
        frozenset({"x", "y"}),
    )
    monkeypatch.delenv("AGENTIUM_PLUGINS")
    assert operator_plugin_lists({"AGENTIUM_PLUGINS": "d"})[0] == frozenset({"d"})
    assert operator_plugin_lists({})[0] is None


# ------------------------------------------ paths resolve against the file (item 6)


def test_relative_path_options_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: PluginRegistry
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    text = BASE.replace('[archive]\nplugin = "memory"', '[archive]\nplugin = "tgood"')
    path = _write(folder, text + '\n[archive.options]\njournal = "${SUB:-logs}/j.log"\n')
    resolved = load_config(path, registry, environ={})
    assert resolved.base_dir == folder.resolve()
    assert resolved.archive.options.journal == str(folder.resolve() / "logs" / "j.log")
    assert resolved.archive.options.label == "good"  # unmarked options are left alone
    # An absolute path is kept as written.
    absolute = str(tmp_path / "abs.log")
    path = _write(folder, text + f'\n[archive.options]\njournal = "{absolute}"\n', "abs.toml")
    assert load_config(path, registry, environ={}).archive.options.journal == absolute
    # The built adapter gets the resolved path, whatever the working directory.
    adapter = resolved.archive.spec.build(resolved.archive.options)
    assert adapter.config.journal == str(folder.resolve() / "logs" / "j.log")


def test_text_configs_keep_relative_paths(registry: PluginRegistry) -> None:
    text = BASE.replace('[archive]\nplugin = "memory"', '[archive]\nplugin = "tgood"')
    resolved = resolve_config(
        parse_config(text + '[archive.options]\njournal = "j.log"\n', environ={}), registry
    )
    assert resolved.base_dir is None and resolved.archive.options.journal == "j.log"


def test_a_resolved_path_the_options_refuse_is_reported_at_its_key(
    tmp_path: Path, registry: PluginRegistry
) -> None:
    folder = tmp_path / "forbidden"
    folder.mkdir()
    text = BASE.replace('[archive]\nplugin = "memory"', '[archive]\nplugin = "tgood"')
    path = _write(folder, text + '\n[archive.options]\njournal = "j.log"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, registry, environ={})
    errors = _issues(info)
    assert list(errors) == ["$.archive.options.journal"]
    assert "forbidden folder" in errors["$.archive.options.journal"]


def test_a_resolved_path_whose_validator_raises_any_exception_is_a_config_error(tmp_path: Path) -> None:
    # Only ValueError and TypeError were caught: a plugin validator that stats its path (an
    # OSError) escaped load_config, and agentium check ended in a traceback.
    def must_exist(instance: Any, attribute: Any, value: str) -> None:
        if Path(value).is_absolute():
            Path(value).stat()

    @attrs.frozen
    class Options:
        model: str = attrs.field(default="model.bin", validator=must_exist, metadata={PATH_OPTION: True})

    memory_spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("statting", memory_spec.adapter_class, Options))

    plugin = types.SimpleNamespace(agentium_register_archives=hookimpl(agentium_register_archives))
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("statting-dist", plugin)])
    text = MINIMAL_BUILTIN.replace('plugin = "memory"', 'plugin = "statting"', 1)
    path = _write(tmp_path, text + '\n[archive.options]\nmodel = "missing.bin"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, registry, environ={})
    errors = _issues(info)
    assert list(errors) == ["$.archive.options.model"]  # its one path option
    assert "No such file or directory" in errors["$.archive.options.model"]
    (tmp_path / "missing.bin").write_bytes(b"")
    assert load_config(path, registry, environ={}).archive.options.model == str(tmp_path / "missing.bin")


def test_resolve_path_options_and_build_with_base_dir(tmp_path: Path) -> None:
    @attrs.frozen
    class Options:
        a: str = attrs.field(default="x.db", metadata={PATH_OPTION: True})
        b: Path = attrs.field(default=Path("y"), metadata={PATH_OPTION: True})
        c: str | None = attrs.field(default=None, metadata={PATH_OPTION: True})
        d: str = "plain"

    assert path_option_names(Options) == ("a", "b", "c")
    resolved = resolve_path_options(Options(), tmp_path)
    assert resolved == Options(a=str(tmp_path / "x.db"), b=tmp_path / "y", c=None, d="plain")
    assert resolve_path_options(resolved, tmp_path / "other") == resolved  # idempotent
    built: list[Any] = []
    spec = AdapterSpec("x", object, Options, factory=built.append)
    spec.build(Options(), base_dir=tmp_path)
    spec.build(Options())
    assert built == [resolved, Options()]


# ----------------------------------------------- [runtime] holds RuntimeLimits (item 9)


def test_runtime_section_structures_into_runtime_limits() -> None:
    config = parse_config(
        BASE
        + "\n[runtime]\nmax_steps = 3\nop_timeout_s = 2\ntool_timeout_s = 1.5\nclose_timeout_s = 4\n"
        + "[runtime.resident]\nmax_groups = 5\n",
        environ={},
    )
    assert config.runtime.limits == RuntimeLimits(
        resident=ResidentLimits(max_groups=5),
        max_steps=3,
        op_timeout_s=2.0,
        tool_timeout_s=1.5,
        close_timeout_s=4.0,
    )
    assert isinstance(config.runtime.limits.op_timeout_s, float)
    assert config.runtime.resident is config.runtime.limits.resident
    assert parse_config(BASE, environ={}).runtime.limits == RuntimeLimits()


def test_runtime_limit_errors_point_at_their_keys() -> None:
    errors = _parse_errors(BASE + '\n[runtime]\nop_timeout_s = "soon"\n[runtime.resident]\nmax_groups = 0\n')
    assert errors == {
        "$.runtime.op_timeout_s": "expected a number, got string",
        "$.runtime.resident.max_groups": "max_groups must be an integer from 1 to 1000000000000, got 0",
    }
    # Range checks of the limits themselves run once every value has its type.
    errors = _parse_errors(BASE + "\n[runtime]\ntool_timeout_s = -1\n")
    assert list(errors) == ["$.runtime.tool_timeout_s"]
    assert "tool_timeout_s" in errors["$.runtime.tool_timeout_s"]


def test_load_runtime_uses_the_configured_limits(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL_BUILTIN + "\n[runtime]\nmax_steps = 2\ntool_timeout_s = 3\n")
    runtime = load_runtime(path, registry=PluginRegistry.load(autoload=False), environ={})
    assert runtime.limits == RuntimeLimits(max_steps=2, tool_timeout_s=3.0)


def test_an_integer_literal_past_pythons_digit_limit_is_a_config_error() -> None:
    # tomllib raises a plain ValueError for it (int() of more than 4,300 digits): a traceback.
    errors = _parse_errors("[limits]\nmax_steps = " + "9" * 5000 + "\n")
    assert "invalid TOML" in errors["$"]


def test_a_value_from_the_environment_is_never_repeated_in_an_error(tmp_path: Path) -> None:
    # A plugin's validator said "got 's3cr3t-VALUE'" for a value a variable had supplied.
    secret = "s3cr3t-VALUE"
    path = _write(
        tmp_path,
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "memory"\n'
        '[plugins.sqlite]\nsynchronous = "${SECRETVAR}"\n'
        '[session_store]\nplugin = "sqlite"\n[runtime]\ninstructions = 3\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"SECRETVAR": secret})
    found = _issues(caught)
    assert (
        "synchronous" in found["$.plugins.sqlite.synchronous"]
        and "instructions" not in found["$.plugins.sqlite.synchronous"]
    )
    assert secret not in str(caught.value) and "not shown" in str(caught.value)


def test_a_value_from_the_environment_is_not_repeated_unquoted_either(tmp_path: Path) -> None:
    # Only the quoted value was hidden: a relative path option came back resolved
    # ('/etc/app/<value>') and a number as the number it was read as (got 99999999999, 1e+308).
    folder = tmp_path / "conf"
    folder.mkdir()
    path = _write(
        folder,
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n'
        '[runtime]\nop_timeout_s = "${TIMEOUT}"\n'
        '[plugins.sqlite]\nbusy_timeout_ms = "${BUSY}"\n[recall]\nplugin = "sqlite"\n'
        '[verifier]\nplugin = "fs"\n[verifier.options]\nroot = "${ROOT}"\ntest_records = ["r.xml"]\n',
    )
    secrets = {"TIMEOUT": "1e308", "BUSY": "99999999999", "ROOT": "s3cr3t-folder"}
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=secrets)
    found = _issues(caught)
    assert {"$.runtime.op_timeout_s", "$.plugins.sqlite.busy_timeout_ms"} <= set(found)
    text = str(caught.value)
    for shown in ("1e308", "1e+308", "99999999999", "s3cr3t-folder"):
        assert shown not in text, shown
    assert found["$.runtime.op_timeout_s"].endswith("got <a value from the environment, not shown>")
    if "$.verifier.options.root" in found:  # agentium-verifier-fs installed: its resolved root
        assert "not shown" in found["$.verifier.options.root"]


def test_a_leading_byte_order_mark_is_ignored_and_a_stray_one_still_refused(tmp_path: Path) -> None:
    # Notepad and PowerShell save UTF-8 with a BOM; tomllib refused it as "Invalid statement
    # (line 1, column 1)", an error pointing at nothing a user could see.
    text = BASE + '\n[runtime]\ninstructions = "Be brief."\n'
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert parse_config(path, environ={}).runtime.instructions == "Be brief."
    assert parse_config("\ufeff" + text, environ={}).runtime.instructions == "Be brief."
    # Only one, only at the very start: anything else is still invalid TOML, reported at $.
    for bad in ("\ufeff\ufeff" + text, text + "\ufeff", BASE + '\n[runtime]\ninstructions = "x"\ufeff\n'):
        errors = _parse_errors(bad)
        assert list(errors) == ["$"] and errors["$"].startswith("invalid TOML: "), errors


@pytest.mark.parametrize(
    ("written", "char"),
    [("a\\u0000b", "U+0000"), ("\\u001b[2J", "U+001B"), ("a\\rb", "U+000D"), ("x\\u0007", "U+0007")],
)
def test_instructions_with_a_control_character_are_refused_at_their_key(written: str, char: str) -> None:
    # A NUL (or another C0 control) in the instructions was accepted and went to the provider.
    errors = _parse_errors(BASE + f'\n[runtime]\ninstructions = "{written}"\n')
    assert list(errors) == ["$.runtime.instructions"], errors
    assert f"control character {char}" in errors["$.runtime.instructions"]


def test_instructions_from_a_variable_are_checked_without_showing_the_value() -> None:
    text = BASE + '\n[runtime]\ninstructions = "${WHO}"\n'
    errors = _parse_errors(text, environ={"WHO": "secret\x00value"})
    assert "control character U+0000" in errors["$.runtime.instructions"]
    assert "secret" not in errors["$.runtime.instructions"]
    errors = _parse_errors(text, environ={"WHO": "caf\udce9"})  # argv/environ bytes that were not UTF-8
    assert "lone surrogate" in errors["$.runtime.instructions"]
    # Tab and newline are prose; so is every printable character.
    ok = parse_config(BASE + '\n[runtime]\ninstructions = "a\\tb\\nc \u00e9 \u202e"\n', environ={})
    assert ok.runtime.instructions == "a\tb\nc \u00e9 \u202e"


def test_runtime_config_built_directly_refuses_a_control_character() -> None:
    from agentium_harness._config.load import RuntimeConfig
    from agentium_harness._errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"instructions holds control character U\+0000"):
        RuntimeConfig(instructions="a\x00b")


def test_a_runtime_is_not_built_from_instructions_with_a_nul(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    path = _write(
        tmp_path,
        f"""
        [runtime]
        instructions = "Be brief.\\u0000"
        [provider]
        plugin = "scripted"
        [archive]
        plugin = "sqlite"
        options = {{ path = "{db.as_posix()}" }}
        [session_store]
        plugin = "memory"
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_runtime(path, environ={})
    assert [i.path for i in info.value.issues] == ["$.runtime.instructions"]
    assert not db.exists()
