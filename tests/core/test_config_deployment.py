"""Config for deployments (issue 27, item 3): settings from the environment, written once, found by name.

- Numbers and booleans may come from the environment: a value that held a
  ``${...}`` reference is read as the type the schema takes there, strictly
  (TOML's spelling), and never becomes a table or an array.
- ``${env:NAME}`` (OpenTelemetry's spelling) is the same as ``${NAME}``.
- ``[plugins.<name>]`` holds options once for every section selecting that
  plugin; a section's own options override them; mistakes are reported at
  the key where they are written.
- ``load_config()`` without a path reads ``$AGENTIUM_CONFIG``, else
  ``./agentium.toml``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentium_harness import ConfigError, load_config, parse_config
from agentium_harness._cli import main

BASE = """
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
"""


def _issues(text: str, environ: dict[str, str], tmp_path: Path | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        if tmp_path is None:
            parse_config(text, environ=environ)
        else:
            path = tmp_path / "agentium.toml"
            path.write_text(text, encoding="utf-8")
            load_config(path, environ=environ)
    return {issue.path: issue.message for issue in info.value.issues}


# ------------------------------------------------------------- numbers and booleans


def test_a_number_from_the_environment_with_a_default() -> None:
    text = BASE + '[runtime]\nop_timeout_s = "${T:-30}"\nmax_steps = "${STEPS}"\n'
    config = parse_config(text, environ={"STEPS": "7"})
    assert config.runtime.limits.op_timeout_s == 30.0 and config.runtime.limits.max_steps == 7
    config = parse_config(text, environ={"T": "12.5", "STEPS": "1_000"})
    assert config.runtime.limits.op_timeout_s == 12.5 and config.runtime.limits.max_steps == 1000


def test_a_boolean_and_plugin_options_from_the_environment(tmp_path: Path) -> None:
    text = (
        '[provider]\nplugin = "scripted"\noptions.responses = ["hi"]\noptions.cycle = "${CYCLE}"\n'
        '[archive]\nplugin = "sqlite"\noptions.busy_timeout_ms = "${env:BUSY_MS:-250}"\n'
        '[session_store]\nplugin = "memory"\n'
    )
    path = tmp_path / "agentium.toml"
    path.write_text(text, encoding="utf-8")
    resolved = load_config(path, environ={"CYCLE": "true"})
    assert resolved.provider.options.cycle is True
    assert resolved.archive.options.busy_timeout_ms == 250


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("max_steps", "7.5", "expected an integer"),
        ("max_steps", "0x10", "expected an integer"),
        ("max_steps", "true", "expected an integer"),
        ("max_steps", " 7", "expected an integer"),
        ("op_timeout_s", "thirty", "expected a number"),
        ("op_timeout_s", "inf", "expected a number"),
        ("max_steps", "3\n[evil]\nk = 1", "expected an integer"),  # never structure
    ],
)
def test_a_bad_value_from_the_environment_is_refused_at_its_key(key: str, value: str, expected: str) -> None:
    issues = _issues(BASE + f'[runtime]\n{key} = "${{V}}"\n', {"V": value})
    assert list(issues) == [f"$.runtime.{key}"]
    message = issues[f"$.runtime.{key}"]
    assert message.startswith(expected) and "${...} reference" in message
    assert value.strip() not in message  # the variable's value is not echoed (it may be a secret)


def test_a_bad_boolean_from_the_environment_is_refused(tmp_path: Path) -> None:
    text = '[provider]\nplugin = "scripted"\noptions.cycle = "${C}"\n[archive]\nplugin = "memory"\n'
    text += '[session_store]\nplugin = "memory"\n'
    issues = _issues(text, {"C": "yes"}, tmp_path)
    assert issues["$.provider.options.cycle"].startswith("expected true or false")


def test_a_number_too_large_from_the_environment_meets_the_same_bound_as_one_written() -> None:
    issues = _issues(BASE + '[runtime]\nop_timeout_s = "${T}"\n', {"T": "1e308"})
    assert list(issues) == ["$.runtime.op_timeout_s"]


def test_a_string_written_without_a_reference_is_still_not_a_number() -> None:
    issues = _issues(BASE + '[runtime]\nop_timeout_s = "30"\n', {})
    assert issues == {"$.runtime.op_timeout_s": "expected a number, got string"}


def test_a_reference_in_a_string_field_stays_a_plain_string() -> None:
    config = parse_config(BASE + '[runtime]\ninstructions = "Be ${TONE:-brief}."\n', environ={})
    assert config.runtime.instructions == "Be brief." and type(config.runtime.instructions) is str


def test_the_opentelemetry_spelling_is_accepted_and_a_bad_one_refused() -> None:
    config = parse_config(
        BASE + '[runtime]\ninstructions = "${env:WHO} ${env:MOOD:-calm}"\n', environ={"WHO": "Ana"}
    )
    assert config.runtime.instructions == "Ana calm"
    issues = _issues(BASE + '[runtime]\ninstructions = "${env:}"\n', {})
    assert "${env:NAME}" in issues["$.runtime.instructions"]
    issues = _issues(BASE + '[runtime]\ninstructions = "${env:NOPE}"\n', {})
    assert issues == {
        "$.runtime.instructions": "environment variable NOPE is not set "
        "(write ${NOPE:-default} to give a default)"
    }


# ------------------------------------------------------------ [plugins.<name>]

SHARED = """
[provider]
plugin = "scripted"
[plugins.sqlite]
path = "state.db"
busy_timeout_ms = 750
{extra}
[archive]
plugin = "sqlite"
[session_store]
plugin = "sqlite"
{session_options}
[recall]
plugin = "sqlite"
{recall_options}
"""


def _shared(tmp_path: Path, extra: str = "", session_options: str = "", recall_options: str = "") -> Path:
    path = tmp_path / "agentium.toml"
    path.write_text(
        SHARED.format(extra=extra, session_options=session_options, recall_options=recall_options),
        encoding="utf-8",
    )
    return path


def test_a_shared_table_gives_every_selecting_section_its_options(tmp_path: Path) -> None:
    resolved = load_config(_shared(tmp_path), environ={})
    db = str((tmp_path / "state.db").resolve())
    for component in (resolved.archive, resolved.session_store, resolved.recall):
        assert component is not None
        assert str(component.options.path) == db and component.options.busy_timeout_ms == 750


def test_a_sections_own_options_override_the_shared_ones(tmp_path: Path) -> None:
    resolved = load_config(
        _shared(tmp_path, session_options='options.busy_timeout_ms = 100\noptions.synchronous = "NORMAL"'),
        environ={},
    )
    assert resolved.session_store.options.busy_timeout_ms == 100
    assert resolved.session_store.options.synchronous == "NORMAL"
    assert resolved.archive.options.busy_timeout_ms == 750 and resolved.archive.options.synchronous == "FULL"


def test_a_shared_key_only_some_sections_take_goes_to_those(tmp_path: Path) -> None:
    resolved = load_config(_shared(tmp_path, extra="fusion_k = 30"), environ={})
    assert resolved.recall is not None and resolved.recall.options.fusion_k == 30
    assert not hasattr(resolved.archive.options, "fusion_k")


def test_a_bad_shared_value_is_reported_once_where_it_is_written(tmp_path: Path) -> None:
    path = _shared(tmp_path).read_text("utf-8").replace("busy_timeout_ms = 750", 'busy_timeout_ms = "slow"')
    issues = _issues(path, {}, tmp_path)
    assert list(issues) == ["$.plugins.sqlite.busy_timeout_ms"]
    assert issues["$.plugins.sqlite.busy_timeout_ms"].startswith("expected an integer")


def test_a_shared_key_no_selecting_section_takes_is_an_error(tmp_path: Path) -> None:
    text = _shared(tmp_path, extra="bucket = 'agentium'").read_text("utf-8")
    issues = _issues(text, {}, tmp_path)
    assert list(issues) == ["$.plugins.sqlite.bucket"]
    assert "[archive], [session_store], [recall]" in issues["$.plugins.sqlite.bucket"]


def test_a_shared_table_no_section_selects_is_an_error(tmp_path: Path) -> None:
    text = _shared(tmp_path).read_text("utf-8") + '\n[plugins.s3]\nbucket = "agentium"\n'
    issues = _issues(text, {}, tmp_path)
    assert list(issues) == ["$.plugins.s3"] and "no section selects plugin 's3'" in issues["$.plugins.s3"]


def test_shared_values_take_environment_numbers_too(tmp_path: Path) -> None:
    text = _shared(tmp_path).read_text("utf-8").replace("busy_timeout_ms = 750", 'busy_timeout_ms = "${MS}"')
    (tmp_path / "agentium.toml").write_text(text, encoding="utf-8")
    resolved = load_config(tmp_path / "agentium.toml", environ={"MS": "900"})
    assert resolved.archive.options.busy_timeout_ms == 900 == resolved.session_store.options.busy_timeout_ms


def test_a_shared_table_must_be_a_table() -> None:
    issues = _issues(BASE + '[plugins]\nmemory = "x"\n', {})
    assert list(issues) == ["$.plugins.memory"]


# ------------------------------------------------------------------ which file


def test_load_config_without_a_path_reads_the_file_agentium_config_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _shared(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    assert load_config(environ={"AGENTIUM_CONFIG": str(path)}).source == str(path)


def test_load_config_without_a_path_or_variable_reads_agentium_toml_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shared(tmp_path)
    monkeypatch.chdir(tmp_path)
    resolved = load_config(environ={})
    assert resolved.source == "agentium.toml" and resolved.base_dir == tmp_path.resolve()


def test_load_config_with_nothing_to_read_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    issues = _issues_of(lambda: load_config(environ={}))
    assert (
        "AGENTIUM_CONFIG" in issues["$"] and "agentium.toml" in issues["$"] and str(tmp_path) in issues["$"]
    )
    issues = _issues_of(lambda: load_config(environ={"AGENTIUM_CONFIG": "missing.toml"}))
    assert issues["$"].startswith("AGENTIUM_CONFIG names 'missing.toml', which is not a file")


def _issues_of(call: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    return {issue.path: issue.message for issue in info.value.issues}


def test_a_variable_naming_a_path_too_long_for_the_system_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Path.is_file() lets ENAMETOOLONG (and EACCES) through: a traceback instead of the error.
    named = str(tmp_path / ("x" * 5000))
    issues = _issues_of(lambda: load_config(environ={"AGENTIUM_CONFIG": named}))
    assert issues["$"].startswith("AGENTIUM_CONFIG names '")
    assert "which cannot be read (File name too long); fix or unset it" in issues["$"]
    monkeypatch.setenv("AGENTIUM_CONFIG", named)
    assert main(["check"]) == 2
    out, err = capsys.readouterr()
    assert (out, err.count("\n")) == ("", 2) and "File name too long" in err and "Traceback" not in err


def test_a_working_directory_that_no_longer_exists_is_said_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    issues = _issues_of(lambda: load_config(environ={}))
    assert issues["$"].startswith("no config file given: pass its path, set AGENTIUM_CONFIG, or create")
    assert "(the working directory no longer exists)" in issues["$"]
    monkeypatch.delenv("AGENTIUM_CONFIG", raising=False)
    assert main(["session", "inspect", "--tenant", "t", "--user", "u", "--session", "s"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "working directory no longer exists" in err and "Traceback" not in err
