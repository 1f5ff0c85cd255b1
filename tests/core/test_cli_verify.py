"""``agentium verify`` and ``agentium run --task`` on a config with a ``[verifier]`` (issue 10)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _fakedist import fakedist

from agentium_harness._cli import main


@pytest.fixture
def verifier_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fakedist.forget_modules()
    site = tmp_path / "site"
    site.mkdir()
    fakedist.install(site, "verifier")
    monkeypatch.syspath_prepend(str(site))
    yield
    fakedist.forget_modules()


DONE = '["Done: the report is final."]'


def write_config(tmp_path: Path, *, responses: str = DONE, policy: str = "") -> Path:
    db = tmp_path / "state.db"
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[provider]
plugin = "scripted"
[provider.options]
responses = {responses}
[archive]
plugin = "sqlite"
[archive.options]
path = "{db}"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "{db}"
[verifier]
plugin = "hostfile"
[verifier.options]
path = "report.txt"
expected = "final"
{policy}
""",
        encoding="utf-8",
    )
    return cfg


IDS = ["--tenant", "acme", "--user", "ana", "--session", "task-1"]


def test_verify_passes_on_matching_host_evidence(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    (tmp_path / "report.txt").write_text("final", encoding="utf-8")
    assert main(["verify", str(cfg), *IDS, "--claim", "done"]) == 0
    out = capsys.readouterr().out
    assert "[verification: pass" in out
    assert "evidence artifact report.txt: matches" in out


def test_verify_exits_3_on_fail_and_on_unknown(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    assert main(["verify", str(cfg), *IDS]) == 3
    assert "[verification: unknown: report.txt is missing]" in capsys.readouterr().out
    (tmp_path / "report.txt").write_text("draft", encoding="utf-8")
    assert main(["verify", str(cfg), *IDS, "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "fail"
    assert data["record"]["attempts"][0]["evidence"] == [
        {"kind": "artifact", "ref": "report.txt", "detail": "holds 'draft'"}
    ]


def test_verify_without_a_verifier_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    text = cfg.read_text(encoding="utf-8").split("[verifier]")[0]
    cfg.write_text(text, encoding="utf-8")
    assert main(["verify", str(cfg), *IDS]) == 2
    assert "no verifier" in capsys.readouterr().err


def test_run_task_shows_the_verdict_and_marks_the_run_not_accepted(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    (tmp_path / "report.txt").write_text("draft", encoding="utf-8")
    # Not accepted exits 3, as agentium verify does for the same verdict; the turn was committed.
    assert main(["run", str(cfg), *IDS, "--task", "finish the report"]) == 3
    captured = capsys.readouterr()
    assert captured.out.strip() == "Done: the report is final."
    assert captured.err.startswith(
        "agentium run: the completion was verified and not accepted (verdict fail: content differs); "
        "the turn was committed with the verdict (exit status 3)"
    )
    assert "run not_accepted" in captured.err
    assert "[verification (revision 0): fail: content differs]" in captured.err
    assert "evidence artifact report.txt: holds 'draft'" in captured.err


def test_run_task_json_carries_the_record(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path,
        responses='["done", "done, really"]',
        policy='[verifier.policy]\non_fail = "revise"\nmax_revisions = 1',
    )
    (tmp_path / "report.txt").write_text("final", encoding="utf-8")
    assert main(["run", str(cfg), *IDS, "--task", "--json", "finish"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "completed"
    assert data["verification"]["verdict"] == "pass"
    assert data["retained"]["verification"] == data["verification"]


def test_run_without_task_is_not_verified(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), *IDS, "--json", "hello"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verification"] is None and data["status"] == "completed"


def test_check_reports_a_widened_budget_with_its_path(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, policy="[verifier.budget]\nmax_bytes = 65536")
    assert main(["check", str(cfg)]) == 2
    assert "$.verifier.budget.max_bytes" in capsys.readouterr().err


@pytest.mark.parametrize("since", ["nan", "inf", "-1", "soon"])
def test_since_must_be_a_finite_unix_time(
    verifier_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], since: str
) -> None:
    # nan compared false with every mtime, which turned the staleness check off without a word.
    cfg = write_config(tmp_path)
    assert main(["verify", str(cfg), *IDS, "--since", since]) == 2
    assert "--since" in capsys.readouterr().err
    assert not (tmp_path / "state.db").exists()
