"""The bundled set through ``agentium eval``: recall on scores better on evidence than recall off; reports."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from _eval_support import FACT_CASE, RECALL_OFF, RECALL_ON, write_cases, write_config

from agentium_harness._cli import main
from agentium_harness.eval import REPORT_SCHEMA, installed_graders

EVIDENCE = ("discovered_evidence", "read_evidence", "prompt_inclusion")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("bundled")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["eval", str(RECALL_ON), "bundled", "--compare", str(RECALL_OFF), "--out", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return report, buffer.getvalue(), out


def test_recall_on_scores_better_than_off_on_every_evidence_grader(bundled) -> None:  # type: ignore[no-untyped-def]
    report, _, _ = bundled
    on, off = report["runs"]
    assert (on["label"], on["recall"], off["label"], off["recall"]) == (
        "recall-on",
        True,
        "recall-off",
        False,
    )
    for name in EVIDENCE:
        a, b = on["scores"][name], off["scores"][name]
        assert a["valid"] > 0 and a["valid"] == b["valid"]
        assert a["pass_rate"] > b["pass_rate"] + 0.5, (name, a, b)
        assert report["comparison"]["graders"][name]["delta"] > 0.5
    assert {g["name"] for g in report["graders"] if g["evidence"]} == set(EVIDENCE)


def test_scores_have_valid_denominators_and_absent_is_never_a_pass(bundled) -> None:  # type: ignore[no-untyped-def]
    report, _, _ = bundled
    assert report["schema"] == REPORT_SCHEMA
    assert [g["name"] for g in report["graders"]] == list(installed_graders())
    for run in report["runs"]:
        assert run["totals"]["cases"] >= 60 and run["totals"]["infrastructure_failures"] == 0
        for name, score in run["scores"].items():
            assert score["valid"] == score["pass"] + score["fail"]
            assert score["pass"] + score["fail"] + score["absent"] == run["totals"]["graded"]
            assert score["valid"] > 0, f"{name} has no valid grade in the bundled set"
            assert score["pass_rate"] == round(score["pass"] / score["valid"], 4)
        # A failed grade keeps the generated output (R34).
        for case in run["cases"]:
            if any(g["status"] == "fail" for g in case["grades"].values()):
                assert case["output"] is not None and case["trace"] is not None


def test_docs_eval_md_shows_the_scores_the_bundled_set_gets(bundled) -> None:  # type: ignore[no-untyped-def]
    _, summary, _ = bundled
    doc = (Path(__file__).resolve().parents[2] / "docs" / "eval.md").read_text(encoding="utf-8")
    shown = doc.split("```text\n  grader", 1)[1].split("```", 1)[0]
    lines = {line.rstrip() for line in summary.splitlines()}
    stale = [line for line in ("  grader" + shown).splitlines() if line.rstrip() not in lines]
    assert stale == [], "docs/eval.md shows scores the bundled set no longer gets:\n" + summary


def test_every_report_states_contracts_not_quality(bundled) -> None:  # type: ignore[no-untyped-def]
    report, summary, out = bundled
    statement = "does not prove live-model quality"
    assert statement in report["statement"]
    assert all(statement in run["statement"] for run in report["runs"])
    assert statement in summary
    assert statement in (out / "report.html").read_text(encoding="utf-8")
    assert "discovered_evidence" in summary and "recall-off" in summary
    assert len(summary.splitlines()) <= 30  # one screen


def test_the_html_report_is_self_contained_with_one_chart_per_grader(bundled) -> None:  # type: ignore[no-untyped-def]
    report, _, out = bundled
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count('<svg class="chart"') == len(report["graders"])
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert not re.search(
        r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page.replace("http://www.w3.org/2000/svg", "")
    )
    assert "default-src 'none'" in page
    assert '<table class="failures">' in page  # recall off fails evidence graders


def test_json_flag_prints_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", [FACT_CASE])
    assert main(["eval", str(RECALL_ON), str(cases), "--out", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == REPORT_SCHEMA and report["comparison"] is None
    assert report["runs"][0]["scores"]["supported_answer"]["pass"] == 1


def test_an_unwritable_out_dir_exits_2_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", [FACT_CASE])
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    recording = tmp_path / "rec.jsonl"
    options = f'[provider.options]\npath = "{recording}"\nmode = "record"\nprovider = "extractive"\n'
    config = write_config(tmp_path / "rec.toml", provider="recorded", options=options)
    assert main(["eval", str(config), str(cases), "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot write reports" in err and "nothing was run" in err
    assert not recording.exists()  # no case ran: nothing was recorded
    assert blocker.read_text() == "not a directory"


def test_a_replay_miss_through_the_cli_is_reported_and_exits_0(tmp_path: Path) -> None:
    recording = tmp_path / "rec.jsonl"
    recording.write_text("")
    options = f'[provider.options]\npath = "{recording}"\n'
    config = write_config(tmp_path / "replay.toml", provider="recorded", options=options)
    cases = write_cases(tmp_path / "cases.jsonl", [FACT_CASE])
    out = tmp_path / "out"
    assert main(["eval", str(config), str(cases), "--out", str(out)]) == 0
    assert recording.read_text() == ""  # replay never writes the recording
    (run,) = json.loads((out / "report.json").read_text())["runs"]
    assert run["totals"] == {"cases": 1, "graded": 0, "infrastructure_failures": 1}
    assert "ReplayMissError" in run["infrastructure_failures"][0]["error"]
    assert all(score["valid"] == 0 and score["pass_rate"] is None for score in run["scores"].values())
    assert run["recorded_mode"] == "replay" and "does not prove live-model quality" in run["statement"]
