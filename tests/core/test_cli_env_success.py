"""What a command prints when it succeeds shows no value a ``${VAR}`` reference supplied.

The error a command ends with was hidden already (test_cli_probe.py); these are the adapters'
text a command prints on success, in its text form and with ``--json``: a run's recall
violations and uncertainty and its verification's evidence, ``agentium verify``'s evidence,
``erase`` and ``retention apply``'s records and notes, and the reports ``agentium eval`` writes.
Each config takes its SQLite path from the environment, and the adapters' text names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness._cli import main
from agentium_harness._engine.erasure_status import ErasureStatusPage
from agentium_harness._engine.runtime import HarnessRuntime
from agentium_harness._verdicts import EvidenceEntry, Verdict, VerificationAttempt, VerificationRecord

HIDDEN = "<a value from the environment, not shown>"
ANA = ["--tenant", "acme", "--user", "ana", "--session", "s1"]
SCOPE = ["--tenant", "acme", "--user", "ana"]
CONFIG = """
[provider]
plugin = "scripted"
options.responses = ["Noted."]
[plugins.sqlite]
path = "${AGT_TEST_DB}"
[archive]
plugin = "sqlite"
[session_store]
plugin = "sqlite"
[recall]
plugin = "sqlite"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose SQLite path (in an existing folder) comes from the environment."""
    (tmp_path / "s3cret-folder").mkdir()
    monkeypatch.setenv("AGT_TEST_DB", "s3cret-folder/state.db")
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def _named(config: Path) -> str:
    """The database path as an adapter names it: the config's folder joined to the value."""
    return f"{config.parent}/s3cret-folder/state.db"


def _verification(named: str) -> VerificationRecord:
    evidence = (EvidenceEntry("test-run", f"{named}.log", f"read from {named}"),)
    attempt = VerificationAttempt(revision=0, verdict=Verdict.PASS, reason="checked", evidence=evidence)
    return VerificationRecord(Verdict.PASS, 0, "on-demand", (attempt,))


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_a_runs_recall_notes_and_verification_evidence_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # A completed run printed the recall outcome's violations and uncertainty (--json) and each
    # verification's evidence (both forms, and again in the retained record) as the adapters wrote them.
    named = _named(config)
    real = HarnessRuntime.run

    async def noted(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        result = await real(self, *args, **kwargs)  # type: ignore[arg-type]
        assert result.recall is not None
        recall = attrs.evolve(
            result.recall, violations=(f"discover: {named} dropped",), uncertainty=(f"stale index {named}",)
        )
        verification = _verification(named)
        retained = attrs.evolve(
            result.retained, uncertainty=(f"stale index {named}",), verification=verification
        )
        return attrs.evolve(result, recall=recall, verification=verification, retained=retained)

    monkeypatch.setattr(HarnessRuntime, "run", noted)
    assert main(["run", *(["--json"] if json_form else []), str(config), *ANA, "hello"]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    shown = f"{config.parent}/{HIDDEN}"
    if json_form:
        result = json.loads(out)
        assert result["recall"]["violations"] == [f"discover: {shown} dropped"]
        assert (
            result["recall"]["uncertainty"] == result["retained"]["uncertainty"] == [f"stale index {shown}"]
        )
        for record in (result["verification"], result["retained"]["verification"]):
            assert record["attempts"][0]["evidence"] == [
                {"kind": "test-run", "ref": f"{shown}.log", "detail": f"read from {shown}"}
            ]
    else:
        assert f"  evidence test-run {shown}.log: read from {shown}\n" in err, err


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_verifys_evidence_hides_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # agentium verify hid the verifier's reason, not the evidence it printed after it.
    named = _named(config)

    async def verify(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        return _verification(named), ()

    monkeypatch.setattr(HarnessRuntime, "verify", verify)
    assert main(["verify", *(["--json"] if json_form else []), str(config), *ANA, "--claim", "done"]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    shown = f"{config.parent}/{HIDDEN}"
    if json_form:
        (entry,) = json.loads(out)["record"]["attempts"][0]["evidence"]
        assert (entry["ref"], entry["detail"]) == (f"{shown}.log", f"read from {shown}")
    else:
        assert f"  evidence test-run {shown}.log: read from {shown}\n" in out, out


def _detailed(record: Any, named: str) -> Any:
    """``record`` with a store's detail and a note naming ``named``, as an adapter may write them."""
    stores = tuple(attrs.evolve(s, detail=f"vacuumed {named}") for s in record.stores)
    return attrs.evolve(record, stores=stores, notes=(*record.notes, f"compacted {named}"))


@pytest.mark.parametrize("mode", [[], ["--status"], ["--dry-run"]], ids=["erase", "status", "dry-run"])
@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_an_erasures_record_hides_values_from_the_environment(
    config: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: list[str],
    json_form: bool,
) -> None:
    # The tombstone's per-store detail and notes are the stores' text: printed as they were.
    named = _named(config)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    erase, status = HarnessRuntime.erase, HarnessRuntime.erasure_status

    async def erasing(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        result = await erase(self, *args, **kwargs)
        return attrs.evolve(result, record=_detailed(result.record, named))

    async def listing(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        page = await status(self, *args, **kwargs)
        return ErasureStatusPage([_detailed(record, named) for record in page], page.next_after)

    monkeypatch.setattr(HarnessRuntime, "erase", erasing)
    monkeypatch.setattr(HarnessRuntime, "erasure_status", listing)
    if mode == ["--status"]:  # something to list
        assert main(["erase", str(config), *SCOPE, "--reason", "asked"]) == 0
    capsys.readouterr()
    flags = ["--json"] if json_form else []
    assert main(["erase", *flags, *mode, str(config), *SCOPE, "--reason", "asked"]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    shown = f"{config.parent}/{HIDDEN}"
    if json_form:
        (record,) = json.loads(out)
        assert {s["detail"] for s in record["stores"]} == {f"vacuumed {shown}"}
        assert record["notes"][-1] == f"compacted {shown}"
    else:
        assert f"removed: vacuumed {shown}]" in out and f"  note       compacted {shown}\n" in out, out


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_retentions_records_and_notes_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    named = _named(config)
    with config.open("a", encoding="utf-8") as handle:
        handle.write("[runtime.resident]\nmax_groups = 1\n[retention]\nmax_archived_groups = 1\n")
    for _ in range(3):  # two groups archived, one past the policy
        assert main(["run", str(config), *ANA, "hello"]) == 0
    real = HarnessRuntime.apply_retention

    async def applying(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        result = await real(self, *args, **kwargs)
        assert result.erasures  # the session's archived groups past the policy
        erasures = tuple(attrs.evolve(e, record=_detailed(e.record, named)) for e in result.erasures)
        return attrs.evolve(result, erasures=erasures, notes=(f"passed over {named}",))

    monkeypatch.setattr(HarnessRuntime, "apply_retention", applying)
    capsys.readouterr()
    assert main(["retention", "apply", *(["--json"] if json_form else []), str(config), *SCOPE]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    shown = f"{config.parent}/{HIDDEN}"
    if json_form:
        report = json.loads(out)
        assert report["notes"] == [f"passed over {shown}"]
        assert report["erasures"][0]["notes"][-1] == f"compacted {shown}"
    else:
        assert f"note: passed over {shown}\n" in out and f"  note       compacted {shown}\n" in out, out


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_evals_reports_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # An infrastructure failure's message is the adapter's error: the summary, the JSON report
    # printed with --json, report.json and report.html all repeated the path the variable gave.
    from agentium_harness._errors import ProviderError

    named = _named(config)

    async def failing(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        raise ProviderError(f"the model behind {named} is down")

    monkeypatch.setattr(HarnessRuntime, "run", failing)
    cases = config.parent / "cases.jsonl"
    cases.write_text('{"id": "c1", "probe": "hello", "expect": {"abstain": true}}\n', encoding="utf-8")
    out_dir = config.parent / "report"
    flags = ["--json"] if json_form else []
    assert main(["eval", *flags, str(config), str(cases), "--out", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    message = f"the model behind {config.parent}/{HIDDEN} is down"
    written = (out_dir / "report.json").read_text("utf-8")
    assert json.loads(written)["runs"][0]["infrastructure_failures"][0]["message"] == message
    page = (out_dir / "report.html").read_text("utf-8")
    assert "s3cret" not in out + err + written + page, out
    assert "&lt;a value from the environment, not shown&gt;" in page
    if json_form:
        assert json.loads(out)["runs"][0]["cases"][0]["failure"]["message"] == message
    else:  # the summary cuts the message at 120 characters: after hiding, so never inside the value
        assert f"infra [agentium] c1: ProviderError: {message}"[:150] in out, out


def test_an_inspected_sessions_erasures_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # session inspect --json printed the tombstones covering the session with their stores' text.
    named = _named(config)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    assert main(["erase", str(config), *ANA[:4], "--session", "s1", "--reason", "asked"]) == 0
    real = HarnessRuntime.inspect_session

    async def inspecting(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        view = await real(self, *args, **kwargs)
        assert view.erasures  # the session's own tombstone
        return attrs.evolve(view, erasures=tuple(_detailed(r, named) for r in view.erasures))

    monkeypatch.setattr(HarnessRuntime, "inspect_session", inspecting)
    capsys.readouterr()
    assert main(["session", "inspect", "--json", str(config), *ANA]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    (record,) = json.loads(out)["erasures"]
    assert record["notes"][-1] == f"compacted {config.parent}/{HIDDEN}"


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_a_recall_searchs_problems_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # recall search printed every problem of the round (a store's error among them) as it was.
    from agentium_harness._cli import recall

    named = _named(config)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    real = recall.gather_evidence

    async def gathering(*args: Any, **kwargs: Any) -> Any:
        evidence = await real(*args, **kwargs)
        return attrs.evolve(evidence, problems=(*evidence.problems, f"read failed on {named}"))

    monkeypatch.setattr(recall, "gather_evidence", gathering)
    capsys.readouterr()
    assert main(["recall", "search", *(["--json"] if json_form else []), str(config), *ANA, "hello"]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    shown = f"read failed on {config.parent}/{HIDDEN}"
    if json_form:
        assert json.loads(out)["problems"][-1] == shown
    else:
        assert f"  problem: {shown}\n" in out, out


def test_evals_report_keeps_its_own_words_and_the_case_ids_that_hold_a_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every string of the report went through the hiding: a value from the environment that is a
    # word ("agentium", a database named after the project) rewrote the schema, the run's label and
    # a case id holding it, and a grader's name rewritten no longer found its score in the summary.
    monkeypatch.setenv("AGT_TEST_DB", "agentium")
    monkeypatch.setenv("AGT_TEST_NAME", "abstention")
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG.replace('"Noted."', '"Noted: ${AGT_TEST_NAME}."'), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "agentium-1", "probe": "hello", "expect": {"abstain": true}}\n', "utf-8")
    assert main(["eval", str(path), str(cases), "--out", str(tmp_path / "report")]) == 0
    out, _ = capsys.readouterr()
    report = json.loads((tmp_path / "report" / "report.json").read_text("utf-8"))
    assert report["schema"] == "agentium.eval.report/1"
    (run,) = report["runs"]
    assert run["label"] == "agentium" and run["cases"][0]["id"] == "agentium-1"
    assert "abstention" in {g["name"] for g in report["graders"]}
    assert "abstention" in run["cases"][0]["grades"]
    assert run["cases"][0]["output"] == f"Noted: {HIDDEN}."  # the answer's value is still hidden
    assert "  agentium: 1 cases" in out, out
    assert "0/1     0.0%" in out, out  # the abstention grader's score, found by its name


def test_eval_compare_hides_a_value_that_holds_the_other_configs(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The two configs' values were hidden one config after the other: the first's hid the start of
    # the second's longer value, which then was no longer found, and its rest was printed.
    from agentium_harness._errors import ProviderError

    named = _named(config)
    monkeypatch.setenv("AGT_TEST_OTHER", "s3cret-folder/state.db-v2-private")
    other = config.parent / "other.toml"
    other.write_text(CONFIG.replace("AGT_TEST_DB", "AGT_TEST_OTHER"), encoding="utf-8")

    async def failing(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        raise ProviderError(f"the model behind {named}-v2-private is down")

    monkeypatch.setattr(HarnessRuntime, "run", failing)
    cases = config.parent / "cases.jsonl"
    cases.write_text('{"id": "c1", "probe": "hello", "expect": {"abstain": true}}\n', encoding="utf-8")
    out_dir = config.parent / "report"
    assert main(["eval", str(config), str(cases), "--compare", str(other), "--out", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    written = (out_dir / "report.json").read_text("utf-8")
    assert "s3cret" not in out + err + written and "v2-private" not in out + err + written, written
    message = json.loads(written)["runs"][1]["infrastructure_failures"][0]["message"]
    assert message == f"the model behind {config.parent}/{HIDDEN} is down"


def test_recall_adds_indexing_notes_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # recall add wrote each document's indexing notes to stderr as they were: unhidden, unescaped.
    from agentium_harness._cli import recall

    named = _named(config)
    real = recall.index_document_fenced

    async def noting(*args: Any, **kwargs: Any) -> Any:
        ref, notes = await real(*args, **kwargs)
        return ref, (*notes, f"not checked again: {named} locked\x1b[2J")

    monkeypatch.setattr(recall, "index_document_fenced", noting)
    doc = config.parent / "notes.md"
    doc.write_text("The VPN needs a token.\n", encoding="utf-8")
    assert main(["run", str(config), *ANA, "hello"]) == 0  # the databases exist
    capsys.readouterr()
    assert main(["recall", "add", str(config), "--tenant", "acme", str(doc)]) == 0
    out, err = capsys.readouterr()
    assert out == "1 indexed, 0 skipped\n"
    assert "s3cret" not in out + err and "\x1b" not in err, err
    assert f"  warning: {doc}: not checked again: {config.parent}/{HIDDEN} locked\\x1b[2J\n" in err, err


def test_demo_with_a_config_hides_values_from_the_environment_in_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # agentium demo --config built its adapters without load_hiding: the error it ended with (the
    # SQLite store naming the database it could not open) showed the path the variable gave.
    monkeypatch.setenv("AGT_TEST_DB", "s3cret-missing/state.db")
    path = tmp_path / "demo.toml"
    path.write_text(CONFIG.replace('[recall]\nplugin = "sqlite"\n', ""), encoding="utf-8")
    assert main(["demo", "--config", str(path), "--turns", "2"]) == 2
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    assert f"{tmp_path}/{HIDDEN}: unable to open database file" in err, err


def _interrupted(named: str) -> Any:
    from agentium_harness._history_controls import InterruptionCause, TurnInterruption

    return TurnInterruption(InterruptionCause.PROVIDER_FAILED, f"the provider failed: no model at {named}")


def test_a_runs_retained_interruption_hides_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # run --json hid the retained record's uncertainty and verification, not its interruption's
    # detail: the error that stopped the turn after its tools ran (the provider's, naming its options).
    named = _named(config)
    real = HarnessRuntime.run

    async def stopped(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        result = await real(self, *args, **kwargs)  # type: ignore[arg-type]
        return attrs.evolve(result, retained=attrs.evolve(result.retained, interruption=_interrupted(named)))

    monkeypatch.setattr(HarnessRuntime, "run", stopped)
    assert main(["run", "--json", str(config), *ANA, "hello"]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    detail = json.loads(out)["retained"]["interruption"]["detail"]
    assert detail == f"the provider failed: no model at {config.parent}/{HIDDEN}"


def test_an_inspected_sessions_interruptions_hide_values_from_the_environment(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # session inspect --json printed each interrupted group's detail (the error that stopped its turn).
    named = _named(config)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    real = HarnessRuntime.inspect_session

    async def inspecting(self: HarnessRuntime, *args: Any, **kwargs: Any) -> Any:
        view = await real(self, *args, **kwargs)
        return attrs.evolve(view, interrupted=((0, _interrupted(named)),))

    monkeypatch.setattr(HarnessRuntime, "inspect_session", inspecting)
    capsys.readouterr()
    assert main(["session", "inspect", "--json", str(config), *ANA]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    ((seq, why),) = json.loads(out)["interrupted"]
    assert (seq, why["detail"]) == (0, f"the provider failed: no model at {config.parent}/{HIDDEN}")
