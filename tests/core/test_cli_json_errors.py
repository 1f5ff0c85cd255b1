"""``--json`` failures print the JSON error form on stdout (docs/cli.md, "Exit status").

session, memory, recall and verify printed only a message on stderr: a script reading stdout
had nothing to parse. Every core command now prints ``{"error", "error_type"}`` there too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentium_harness._cli import main

CONFIG = """
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
"""
IDS = ["--tenant", "acme", "--user", "ana", "--session", "s1"]
WHO = ["--tenant", "acme", "--user", "ana"]


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)


def _failed_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[dict[str, str], str]:
    assert main([*argv, "--json"]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert set(report) == {"error", "error_type"}, report
    # The same message as stderr's line (which escapes it; these messages have nothing to escape).
    assert err.endswith(f": {report['error']}\n"), (err, report)
    return report, err


@pytest.mark.parametrize(
    ("argv", "error_type", "says"),
    [
        (["session", "inspect", "missing.toml", *IDS], "ConfigError", "cannot read config file"),
        (["session", "reconcile", "missing.toml", *IDS], "ConfigError", "cannot read config file"),
        (["session", "migrate", "{config}", *IDS], "InvalidArgumentError", "--attest-legacy-memory-scope"),
        (["memory", "list", "{config}", *WHO], "InvalidArgumentError", "has no [memory] section"),
        (["memory", "remember", "{config}", *WHO, "a fact"], "InvalidArgumentError", "no [memory] section"),
        (["recall", "search", "{config}", *IDS, "vpn"], "InvalidArgumentError", "no [recall] section"),
        (["recall", "search", "{config}", *IDS, "  "], "InvalidArgumentError", "the query is empty"),
        (["recall", "rebuild", "{config}", *IDS], "InvalidArgumentError", "no [recall] section"),
        (["verify", "{config}", *IDS], "InvalidArgumentError", "no verifier"),
        (["run", "missing.toml", *IDS, "hi"], "ConfigError", "cannot read config file"),
        (["erase", "{config}", *WHO, "--dry-run", "--status"], "InvalidArgumentError", "at most one of"),
        (["erase", "{config}", *WHO], "InvalidArgumentError", "--reason is required"),
    ],
)
def test_a_failed_command_prints_the_json_error_form(
    config: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    error_type: str,
    says: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    report, _ = _failed_json(capsys, [a.replace("{config}", config) for a in argv])
    assert report["error_type"] == error_type
    assert says in report["error"]


def test_without_json_stdout_stays_empty(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "list", config, *WHO]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "has no [memory] section" in err


def test_an_erasure_stopped_without_a_record_prints_the_json_error_form(
    config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typing import Any

    from agentium_harness._cli import erase
    from agentium_harness._errors import ErasureIncompleteError

    def stopping(config: str, work: Any, reading: bool = False) -> Any:
        raise ErasureIncompleteError("a store failed before the erasure was recorded", None)

    monkeypatch.setattr(erase, "_run", stopping)
    assert main(["erase", config, *WHO, "--reason", "r", "--json"]) == 7
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "error": "a store failed before the erasure was recorded",
        "error_type": "ErasureIncompleteError",
    }
    assert "before the erasure was recorded" in err
