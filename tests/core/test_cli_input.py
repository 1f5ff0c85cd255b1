"""Where ``agentium`` commands take their input: ``-`` for standard input, and the config file found.

- A text argument given as ``-`` is read from standard input (UTF-8, bounded)
  by every command that takes user text: ``run TEXT``, ``memory remember``
  and ``memory correct TEXT``, ``recall search QUERY``, ``verify --claim``.
- The command completes in a shell when argcomplete is installed, and
  ``python -m agentium_harness`` is the command too.
- Without CONFIG a command reads the file ``$AGENTIUM_CONFIG`` names, else
  ``agentium.toml`` in the working directory; with neither it says so and
  exits 2.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentium_harness._cli import main

CONFIG = """
[provider]
plugin = "scripted"
options.responses = ["Hello, Ana."]
[archive]
plugin = "sqlite"
[session_store]
plugin = "sqlite"
[plugins.sqlite]
path = "state.db"
[memory]
plugin = "sqlite"
[recall]
plugin = "sqlite"
"""
WHO = ["--tenant", "acme", "--user", "ana"]
ANA = [*WHO, "--session", "s1"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    status = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def test_memory_remember_and_correct_read_the_fact_from_stdin(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, "the VPN needs 2FA — always\n".encode())
    ack = _json(capsys, ["memory", "remember", str(config), *WHO, "-"])
    assert isinstance(ack, dict) and ack["status"] == "stored"
    _stdin(monkeypatch, b"the VPN needs a hardware key")
    fixed = _json(capsys, ["memory", "correct", str(config), *WHO, ack["fact_id"], "-"])
    assert isinstance(fixed, dict) and fixed["revision"] == 2
    listed = _json(capsys, ["memory", "list", str(config), *WHO])
    assert isinstance(listed, list) and [f["text"] for f in listed] == ["the VPN needs a hardware key"]


def test_stdin_that_is_not_utf8_is_refused_and_nothing_is_stored(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, "café".encode("latin-1"))
    assert main(["memory", "remember", str(config), *WHO, "-"]) == 2
    err = capsys.readouterr().err
    assert "not valid UTF-8" in err and "Nothing was stored" in err and "Traceback" not in err
    assert _json(capsys, ["memory", "list", str(config), *WHO]) == []


def test_recall_search_reads_the_query_from_stdin(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = config.parent / "docs"
    docs.mkdir()
    (docs / "vpn.md").write_text("The VPN certificate expires on March 3rd.", encoding="utf-8")
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    capsys.readouterr()
    _stdin(monkeypatch, b"When does the VPN certificate expire?\n")
    assert main(["recall", "search", str(config), *ANA, "-"]) == 0
    out = capsys.readouterr().out
    assert "query 'When does the VPN certificate expire?" in out and "March 3rd" in out


def test_an_empty_query_on_stdin_is_refused(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, b"  \n")
    assert main(["recall", "search", str(config), *ANA, "-"]) == 2
    assert "the query is empty" in capsys.readouterr().err


# ------------------------------------------------------------------ config discovery


def test_without_config_the_file_agentium_config_names_is_read(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("AGENTIUM_CONFIG", str(config))
    report = _json(capsys, ["check"])
    assert isinstance(report, dict) and report["config"] == str(config) and report["valid"] is True
    ack = _json(capsys, ["memory", "remember", *WHO, "from the environment"])
    assert isinstance(ack, dict) and ack["status"] == "stored"
    # The store is the one the config names (relative to the config's folder), not one in the cwd.
    assert (config.parent / "state.db").exists() and not (elsewhere / "state.db").exists()


def test_without_config_or_variable_agentium_toml_in_the_working_directory_is_read(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTIUM_CONFIG", raising=False)
    monkeypatch.chdir(config.parent)
    report = _json(capsys, ["check"])
    assert isinstance(report, dict) and report["config"] == "agentium.toml" and report["valid"] is True
    # CONFIG is optional before TEXT too: one positional is the text.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["run", *ANA, "hello"]) == 0
    assert capsys.readouterr().out.strip() == "Hello, Ana."


def test_an_explicit_config_wins_over_the_variable(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIUM_CONFIG", str(tmp_path / "missing.toml"))
    report = _json(capsys, ["check", str(config)])
    assert isinstance(report, dict) and report["config"] == str(config)


def test_no_config_anywhere_says_what_to_do_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTIUM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run", *ANA, "hello"]) == 2
    err = capsys.readouterr().err
    assert "no config file given" in err and "AGENTIUM_CONFIG" in err and "agentium.toml" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_check_json_reports_a_config_it_cannot_find_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/cli.md: with --json the check's report is on stdout in every failing case; a config
    # that could not be found used to print only a message on stderr, and nothing on stdout.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTIUM_CONFIG", raising=False)
    assert main(["check", "--json"]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert err == "" and report["valid"] is False and report["config"] is None
    assert report["components"] == {}
    (error,) = report["errors"]
    assert error["path"] == "$" and "no config file given" in error["message"]
    monkeypatch.setenv("AGENTIUM_CONFIG", "nope.toml")
    assert main(["check", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["config"] == "nope.toml" and "which is not a file" in report["errors"][0]["message"]


def test_a_variable_naming_a_missing_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agentium.toml").write_text(CONFIG, encoding="utf-8")  # not used: the variable is set
    monkeypatch.setenv("AGENTIUM_CONFIG", "nope.toml")
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert "AGENTIUM_CONFIG names 'nope.toml', which is not a file" in err


# ------------------------------------------------------------------ shell completion


def _complete(line: str, tmp_path: Path) -> list[str]:
    """What the installed ``agentium`` script completes for ``line``, as a shell asks it (argcomplete)."""
    out = tmp_path / "completions.txt"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")},
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    script = shutil.which("agentium", path=os.path.dirname(sys.executable)) or "agentium"
    subprocess.run([script], env=env, cwd=tmp_path, timeout=120, check=False, capture_output=True)
    return out.read_text("utf-8").split() if out.exists() else []


def test_the_command_completes_subcommands_and_options(tmp_path: Path) -> None:
    pytest.importorskip("argcomplete")
    assert _complete("agentium se", tmp_path) == ["session"]
    assert _complete("agentium run --te", tmp_path) == ["--tenant"]
    assert set(_complete("agentium memory ", tmp_path)) >= {
        "list",
        "remember",
        "correct",
        "forget",
        "history",
    }


def test_python_m_agentium_harness_is_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentium_harness", "--version"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.startswith("agentium-harness ")
