"""``agentium run`` says why a run did not complete, on stderr, and exits with its documented status.

Driven through the command's ``main`` in this process, with configs whose recall
store yields partial or failed evidence (the default policy stops), a
policy that asks a clarification, and a model still calling tools at
``max_steps``. Exit statuses: ``docs/cli.md``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest
from _cli_support import SQLITE_RECALL_CONFIG

from agentium_harness._cli import main

CONFIG = SQLITE_RECALL_CONFIG + "{policy}\n[recall.budget]\n{budget}\n"
IDS = ("--tenant", "acme", "--user", "ana", "--session", "s1")
QUESTION = "When does the VPN certificate expire?"


@attrs.frozen
class Done:
    """What a command printed and its exit status (as ``subprocess.CompletedProcess`` has them)."""

    returncode: int
    stdout: str
    stderr: str


def agentium(*args: str) -> Done:
    """The command run in this process (``main``), with no AGENTIUM_* settings of the test's environment.

    In-process: each of these files' commands spawned an interpreter before (about 1 s of CPU each,
    18 s for a test on a loaded CI worker); the console script itself is tested in test_cli.py.
    """
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("AGENTIUM_")}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(args))
    finally:
        os.environ.update(saved)
    return Done(status, out.getvalue(), err.getvalue())


def recall_config(tmp_path: Path, *, budget: str, policy: str = "") -> Path:
    """A config with SQLite recall holding one indexed document, and the given budget and policy."""
    db = (tmp_path / "a.db").as_posix()
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG.format(db=db, policy=policy, budget=budget), encoding="utf-8")
    doc = tmp_path / "vpn.md"
    doc.write_text("The VPN certificate expires on March 3rd. Renew it a week before.", encoding="utf-8")
    added = agentium("recall", "add", str(path), "--tenant", "acme", str(doc))
    assert added.returncode == 0, added.stderr
    return path


def assert_nothing_committed(config: Path) -> None:
    shown = agentium("session", "inspect", str(config), *IDS, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["exists"] is False


@pytest.mark.parametrize(
    ("budget", "evidence"),
    [
        # The one source does not fit the evidence budget: partial.
        ("max_evidence_tokens = 3", "recall partial: source doc/acme/"),
        # The latency budget is spent before the store is opened: failed.
        ("max_latency_s = 0.000001", "recall failed: "),
    ],
    ids=["partial", "failed"],
)
def test_a_run_the_recall_policy_stopped_says_why_and_exits_4(
    tmp_path: Path, budget: str, evidence: str
) -> None:
    config = recall_config(tmp_path, budget=budget)
    done = agentium("run", str(config), *IDS, QUESTION)
    assert done.returncode == 4, done.stderr
    assert done.stdout == ""  # no reply: not even an empty line
    first = done.stderr.splitlines()[0]
    assert first.startswith("agentium run: the recall policy stopped the run: " + evidence), first
    assert first.endswith("nothing was committed (exit status 4)")
    assert "run stopped" in done.stderr and "Traceback" not in done.stderr
    assert_nothing_committed(config)


def test_json_carries_the_stopped_status(tmp_path: Path) -> None:
    config = recall_config(tmp_path, budget="max_evidence_tokens = 3")
    done = agentium("run", "--json", str(config), *IDS, QUESTION)
    assert done.returncode == 4, done.stderr
    data = json.loads(done.stdout)  # stdout is only the JSON
    assert data["status"] == "stopped" and data["committed"] is False and data["group_seq"] is None
    assert data["recall"]["status"] == "partial" and data["recall"]["decision"] == "stop"
    assert done.stderr.startswith("agentium run: the recall policy stopped the run: recall partial")
    assert_nothing_committed(config)


def test_a_clarification_nobody_can_answer_exits_5(tmp_path: Path) -> None:
    config = recall_config(tmp_path, budget="max_evidence_tokens = 3", policy='on_partial = "clarify"')
    done = agentium("run", str(config), *IDS, QUESTION)
    assert done.returncode == 5, done.stderr
    assert done.stdout == ""  # the question is not an answer
    first = done.stderr.splitlines()[0]
    assert first.startswith("agentium run: the recall policy asks a clarification: '")
    assert first.endswith("nothing was committed; run again with the answer in TEXT (exit status 5)")
    as_json = agentium("run", "--json", str(config), *IDS, QUESTION)
    assert as_json.returncode == 5
    data = json.loads(as_json.stdout)
    assert data["status"] == "needs_clarification" and data["committed"] is False
    assert data["output"] and data["output"] in first  # the question, in both
    assert_nothing_committed(config)


def test_a_completed_run_still_exits_0_with_its_reply(tmp_path: Path) -> None:
    config = recall_config(tmp_path, budget="max_evidence_tokens = 400")
    done = agentium("run", str(config), *IDS, QUESTION)
    assert done.returncode == 0, done.stderr
    assert "March 3rd" in done.stdout
    assert "agentium run:" not in done.stderr and "run completed" in done.stderr


def test_a_run_cut_off_at_max_steps_exits_6_and_was_committed(tmp_path: Path) -> None:
    db = (tmp_path / "a.db").as_posix()
    config = tmp_path / "agentium.toml"
    config.write_text(
        f"""
[runtime]
max_steps = 1
[provider]
plugin = "scripted"
[provider.options]
cycle = true
responses = [{{ content = "", tool_calls = [{{ id = "c1", name = "lookup" }}] }}]
[archive]
plugin = "sqlite"
options = {{ path = "{db}" }}
[session_store]
plugin = "sqlite"
options = {{ path = "{db}" }}
""",
        encoding="utf-8",
    )
    done = agentium("run", str(config), *IDS, "look it up")
    assert done.returncode == 6, done.stderr
    first = done.stderr.splitlines()[0]
    assert first == (
        "agentium run: the model was still calling tools at max_steps; "
        "the turn was committed as it stood (exit status 6)"
    )
    shown = agentium("session", "inspect", str(config), *IDS, "--json")
    assert json.loads(shown.stdout)["exists"] is True


def test_json_of_a_failed_run_is_its_interrupted_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run that raised (here the provider fails) printed only the message on stderr: with
    # --json, stdout stayed empty and a script had nothing to parse.
    from agentium_harness._cli import main

    db = (tmp_path / "a.db").as_posix()
    config = tmp_path / "agentium.toml"
    config.write_text(
        f'[provider]\nplugin = "scripted"\n[archive]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n'
        f'[session_store]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n',
        encoding="utf-8",
    )
    assert main(["run", str(config), *IDS, "hello", "--json"]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "interrupted" and report["commit_state"] == "not_committed"
    assert report["committed"] is False and "ran out of replies" in report["error"]
    assert report["error_type"].endswith("Error")  # the JSON error form's fields, in one document
    assert err.startswith("agentium run: provider failed") and "nothing was committed" in err


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_stopped_run_without_a_reason_lists_each_diagnostic_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    # A recall policy that stops without a reason: the why is the run's diagnostics. Joined with
    # "; " in the one line, a diagnostic holding "; " could not be told from the next one, nor
    # from "nothing was committed".
    import attrs

    from agentium_harness import Diagnostic, HarnessRuntime, Severity
    from agentium_harness._cli import main

    notes = (
        Diagnostic("recall_stopped", "the policy said no; nothing more", Severity.WARNING),
        Diagnostic("usage_estimated", "not a reason", Severity.INFO),
        Diagnostic("source_omitted", "source 'a; b' did not fit", Severity.WARNING),
    )
    real = HarnessRuntime.run

    async def stopped_without_a_reason(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        result = await real(self, *args, **kwargs)  # a real stopped run (partial evidence)
        assert result.recall is not None and result.recall.reason
        return attrs.evolve(result, recall=attrs.evolve(result.recall, reason=""), diagnostics=notes)

    config = recall_config(tmp_path, budget="max_evidence_tokens = 3")
    capsys.readouterr()
    monkeypatch.setattr(HarnessRuntime, "run", stopped_without_a_reason)
    assert main(["run", str(config), *IDS, QUESTION, *(["--json"] if as_json else [])]) == 4
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[:3] == [
        "agentium run: the recall policy stopped the run: 2 reasons, one a line below; "
        "nothing was committed (exit status 4)",
        "  reason: recall_stopped: the policy said no; nothing more",
        "  reason: source_omitted: source 'a; b' did not fit",
    ]
    if as_json:  # --json keeps stdout the one document, diagnostics as they are
        assert [d["message"] for d in json.loads(out)["diagnostics"]] == [d.message for d in notes]
