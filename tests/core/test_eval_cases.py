"""The case format: every bad input is refused with file, line and path, and nothing runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _eval_support import FACT_CASE, RECALL_ON, write_cases

from agentium_harness._cli import main
from agentium_harness.eval import (
    EvalCaseError,
    UnknownGraderError,
    bundled_cases_path,
    installed_graders,
    load_cases,
    parse_cases,
)

GRADERS = list(installed_graders())


def _issues(exc: EvalCaseError) -> list[tuple[int | None, str, str]]:
    return [(i.line, i.path, i.message) for i in exc.issues]


def test_a_good_case_parses_with_its_line() -> None:
    text = "\n" + json.dumps(FACT_CASE) + "\n"
    (c,) = parse_cases(text, file="x.jsonl", graders=GRADERS)
    assert c.id == "fact" and c.line == 2
    assert [s.kind for s in c.setup] == ["say", "say", "say"]
    assert c.expect.labels_for("read") == ("locker",)
    assert (c.tenant, c.user, c.session) == ("acme", "ana", "main")


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(FACT_CASE) + "\n" + '{"id": "broken", "probe": \n', encoding="utf-8")
    with pytest.raises(EvalCaseError) as info:
        load_cases(path)
    (issue,) = info.value.issues
    assert (issue.file, issue.line, issue.path) == (str(path), 2, "$")
    assert "not valid JSON" in issue.message
    assert f"{path}:2: $: not valid JSON" in str(info.value)


@pytest.mark.parametrize("inside", ["\u2028", "\u2029", "\u0085"])
def test_line_separators_inside_json_strings_stay_in_their_line(tmp_path: Path, inside: str) -> None:
    # JSON allows these unescaped inside a string; str.splitlines() would break the line at them.
    first = dict(FACT_CASE, id="first", probe=f"When{inside}is it?")
    second = dict(FACT_CASE, id="second")
    path = tmp_path / "cases.jsonl"
    text = json.dumps(first, ensure_ascii=False) + "\r\n" + json.dumps(second) + "\n"
    path.write_bytes(text.encode("utf-8"))
    one, two = load_cases(path, graders=GRADERS)
    assert (one.id, one.line, one.probe) == ("first", 1, f"When{inside}is it?")
    assert (two.id, two.line) == ("second", 2)


def test_a_json_error_says_not_valid_json_once() -> None:
    with pytest.raises(EvalCaseError) as info:
        parse_cases("\n" + '{"id": "broken", "probe": ', file="x.jsonl")
    (issue,) = info.value.issues
    assert issue.line == 2
    assert issue.message.startswith("not valid JSON: ")
    assert issue.message.count("not valid JSON") == 1


def test_every_problem_is_reported_with_its_path() -> None:
    lines = [
        {"id": "a", "probe": "q", "setup": [{"say": 3}], "expect": {"evidence": ["nope"], "abstain": "yes"}},
        {"id": "b", "probe": "q", "colour": "blue", "setup": [{"document": "t", "label": "x"}]},
        {"probe": "q", "recall_budget": {"max_candidates": 0, "max_evidence_tokenz": 3}},
        ["not", "an", "object"],
        {"id": "a", "probe": "q"},
        {"id": "a", "probe": "q"},
    ]
    text = "\n".join(json.dumps(x) for x in lines)
    with pytest.raises(EvalCaseError) as info:
        parse_cases(text, file="f.jsonl")
    found = _issues(info.value)
    assert (1, "$.setup[0].say", "expected a string, got number") in found
    assert any(
        line == 1 and path == "$.expect.evidence[0]" and "no setup step defines label 'nope'" in m
        for line, path, m in found
    )
    assert (1, "$.expect.abstain", "expected true, false or null, got string") in found
    assert any(line == 2 and path == "$.colour" and "unknown key" in m for line, path, m in found)
    assert (2, "$.setup[0].id", "a document step needs an id") in found
    assert (3, "$.id", "missing required key") in found
    assert any(line == 3 and "did you mean 'max_evidence_tokens'" in m for line, _, m in found)
    assert any(line == 3 and path == "$.recall_budget" for line, path, _ in found)
    assert (4, "$", "each line must be a JSON object, got array") in found
    assert (6, "$.id", "case id 'a' is also used on line 5") in found


def test_unknown_grader_is_refused_before_anything_runs() -> None:
    line = json.dumps({**FACT_CASE, "graders": ["scope", "scpoe"]})
    with pytest.raises(UnknownGraderError) as info:
        parse_cases(line, file="g.jsonl", graders=GRADERS)
    (issue,) = info.value.issues
    assert (issue.line, issue.path) == (1, "$.graders[1]")
    assert "no grader named 'scpoe'" in issue.message and "did you mean 'scope'" in issue.message


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_case_file_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(EvalCaseError, match="holds no cases"):
        load_cases(path)


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(EvalCaseError, match="cannot read the case file"):
        load_cases(tmp_path / "missing.jsonl")
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(json.dumps(FACT_CASE).encode() + b"\n\xff\n")
    with pytest.raises(EvalCaseError) as info:
        load_cases(bad)
    assert info.value.issues[0].line == 2 and "UTF-8" in info.value.issues[0].message


def test_the_bundled_set_is_valid_and_covers_every_grader_and_kind() -> None:
    cases = load_cases("bundled", graders=GRADERS)
    assert bundled_cases_path().is_file() and len(cases) >= 60
    tags = {t for c in cases for t in c.tags}
    for kind in (
        "stated",
        "evicted",
        "corrected",
        "forgotten",
        "distractor",
        "no_evidence",
        "cross_tenant",
        "budget_starved",
    ):
        assert kind in tags, kind
    e = [c.expect for c in cases]
    assert any(x.labels_for("discovered") for x in e) and any(x.labels_for("read") for x in e)
    assert any(x.labels_for("in_prompt") for x in e) and any(x.excluded for x in e)
    assert any(x.answer for x in e) and any(x.stale for x in e)
    assert any(x.abstain for x in e) and any(x.foreign_text for x in e)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "holds no cases"),
        ('{"id": "x", "probe": \n', "not valid JSON"),
        (json.dumps({**FACT_CASE, "graders": ["nope"]}) + "\n", "no grader named 'nope'"),
    ],
)
def test_cli_exits_2_on_bad_cases_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(content, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["eval", str(RECALL_ON), str(cases), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "nothing was run" in err
    assert not out.exists()


def test_cli_exits_2_on_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        '[provider]\nplugin = "extractve"\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n'
    )
    cases = write_cases(tmp_path / "cases.jsonl", [FACT_CASE])
    out = tmp_path / "out"
    assert main(["eval", str(config), str(cases), "--out", str(out)]) == 2
    assert "did you mean 'extractive'" in capsys.readouterr().err
    assert not out.exists()
