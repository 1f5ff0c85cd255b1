"""``agentium check --probe`` checks the backends without changing them: no database file is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentium_harness._cli import main

CONFIG = """
[provider]
plugin = "scripted"
options.responses = ["Noted."]
[plugins.sqlite]
path = "{path}"
[archive]
plugin = "sqlite"
[session_store]
plugin = "sqlite"
[recall]
plugin = "sqlite"
"""
ANA = ["--tenant", "acme", "--user", "ana", "--session", "s1"]


def _config(folder: Path, db: str = "state.db") -> Path:
    path = folder / "agentium.toml"
    path.write_text(CONFIG.format(path=db), encoding="utf-8")
    return path


def _probe(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, dict[str, str]]:
    status = main(["check", "--probe", "--json", str(config)])
    report = json.loads(capsys.readouterr().out)
    return status, report["probe"]


def test_probe_on_a_new_database_creates_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    status, probes = _probe(capsys, config)
    assert status == 0, probes
    for role in ("archive", "session_store", "recall"):
        assert probes[role].startswith("ok:") and "does not exist yet" in probes[role], probes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


def test_probe_on_an_existing_database_opens_it_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    capsys.readouterr()
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.iterdir() if p.is_file()}
    status, probes = _probe(capsys, config)
    assert status == 0 and "schema v" in probes["archive"] and "journal_mode=wal" in probes["session_store"]
    db = tmp_path / "state.db"
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before["state.db"]


def test_probe_of_a_database_in_a_missing_folder_fails_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, db="nope/state.db")
    status, probes = _probe(capsys, config)
    assert status == 2 and probes["archive"].startswith("failed:") and "does not exist" in probes["archive"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_probe_of_a_database_in_a_read_only_folder_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    config = _config(tmp_path, db="locked/state.db")
    locked.chmod(0o555)
    try:
        status, probes = _probe(capsys, config)
    finally:
        locked.chmod(0o755)
    assert status == 2 and "not writable" in probes["archive"]
    assert list(locked.iterdir()) == []


def test_an_adapter_that_refuses_its_options_at_build_is_reported_as_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A recorded provider in record mode with nothing to wrap is refused when it is built: the
    # error went to stderr only, and --json printed nothing on stdout.
    config = tmp_path / "agentium.toml"
    config.write_text(
        '[provider]\nplugin = "recorded"\noptions.path = "rec.jsonl"\noptions.mode = "record"\n'
        '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    assert main(["check", "--probe", "--json", str(config)]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["components"]["provider"]["plugin"] == "recorded"
    assert any("needs the provider to wrap" in e["message"] for e in report["errors"]), report


def test_a_runtime_refused_after_the_adapters_were_built_is_reported_as_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a ConfigError from building was reported as the check's JSON: a runtime refused over
    # the built adapters (a CapabilityError) or a failed close printed a message on stderr only,
    # and --json left stdout empty.
    from agentium_harness._cli import check
    from agentium_harness._errors import CapabilityError

    def refused(resolved: object) -> object:
        raise CapabilityError("provider instance_capabilities turns on a flag its class does not declare")

    monkeypatch.setattr(check, "build_runtime", refused)
    config = _config(tmp_path)
    assert main(["check", "--probe", "--json", str(config)]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert err == "" and report["valid"] is False and "provider" in report["components"]
    (error,) = report["errors"]
    assert error["path"] == "$" and "instance_capabilities" in error["message"]


def test_a_probes_text_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A health check's answer (or its error, quoting a server) was printed as it was.
    from agentium_harness._cli import check

    monkeypatch.setattr(check, "_probe", lambda resolved: {"archive": "failed: \x1b[2Jserver \u202edown"})
    assert main(["check", "--probe", str(_config(tmp_path))]) == 2
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "probe archive        failed: \\x1b[2Jserver \\u202edown" in out


def test_check_reports_the_recorded_providers_wrapped_provider_and_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were checked only when the runtime was built: `agentium check` passed, the run failed.
    config = tmp_path / "agentium.toml"
    for wrapped, says in (
        ('options.provider = "scripted"\noptions.provider_options = {evil = 1}', "extra fields found (evil)"),
        ('options.provider = "no-such-provider"', "no-such-provider"),
    ):
        config.write_text(
            '[provider]\nplugin = "recorded"\noptions.path = "rec.jsonl"\noptions.mode = "record"\n'
            f'{wrapped}\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
            encoding="utf-8",
        )
        assert main(["check", str(config)]) == 2
        assert says in capsys.readouterr().err


READ_ONLY = [
    ["session", "inspect", "{cfg}", *ANA],
    ["memory", "list", "{cfg}", "--tenant", "acme", "--user", "ana"],
    ["recall", "search", "{cfg}", *ANA, "anything"],
    ["erase", "{cfg}", "--tenant", "acme", "--user", "ana", "--reason", "r", "--dry-run"],
    ["erase", "{cfg}", "--tenant", "acme", "--status"],
    ["retention", "apply", "{cfg}", "--tenant", "acme", "--dry-run"],
]


@pytest.mark.parametrize(
    "argv", READ_ONLY, ids=lambda a: " ".join(a[:2]) + (" " + a[-1] if a[-1][0] == "-" else "")
)
def test_a_command_that_only_reads_creates_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # Each one created the configured SQLite file (a mistyped path left an empty database).
    config = tmp_path / "agentium.toml"
    config.write_text(
        CONFIG.format(path="fresh.db")
        + '[memory]\nplugin = "sqlite"\n[retention]\nmax_archived_groups = 5\n',
        encoding="utf-8",
    )
    code = main([a.replace("{cfg}", str(config)) for a in argv])
    assert code == 0, capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


def test_a_checks_error_messages_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An issue's message can quote a plugin's error (a factory, a validator): it was printed raw.
    from agentium_harness._cli import check
    from agentium_harness._errors import CapabilityError

    def refused(resolved: object) -> object:
        raise CapabilityError("adapter said \x1b[2J\n  $.archive: forged \u202e")

    monkeypatch.setattr(check, "build_runtime", refused)
    assert main(["check", "--probe", str(_config(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\n  $.archive: forged" not in err
    assert "  $: adapter said \\x1b[2J\\n  $.archive: forged \\u202e\n" in err


NOTHING_THERE = [
    (["memory", "forget", "{cfg}", "--tenant", "acme", "--user", "ana", "m-1"], 2, "nothing was changed"),
    (["memory", "correct", "{cfg}", "--tenant", "acme", "--user", "ana", "m-1", "new"], 2, "no fact"),
    (["session", "reconcile", "{cfg}", *ANA], 0, "unchanged: no stored session"),
    (["session", "migrate", "{cfg}", *ANA, "--attest-legacy-memory-scope"], 0, "unchanged"),
    (["recall", "rebuild", "{cfg}", *ANA], 0, "0 group(s) newly indexed"),
    # Retention erases: pointed at no database it is refused (exit 2, naming it), as erase is.
    (["retention", "apply", "{cfg}", "--tenant", "acme"], 2, "no database at"),
]


@pytest.mark.parametrize(
    ("argv", "code", "says"), NOTHING_THERE, ids=[" ".join(a[:2]) for a, _, _ in NOTHING_THERE]
)
def test_a_command_with_nothing_to_change_in_a_missing_database_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, says: str
) -> None:
    # A database that does not exist holds no fact, no session and no archived group: each of these
    # said so (memory forget: "nothing was changed", exit 2) after creating an empty database there,
    # so a mistyped path left one behind, as the read-only commands above used to.
    config = tmp_path / "agentium.toml"
    config.write_text(
        CONFIG.format(path="fresh.db")
        + '[memory]\nplugin = "sqlite"\n[retention]\nmax_archived_groups = 5\n',
        encoding="utf-8",
    )
    assert main([a.replace("{cfg}", str(config)) for a in argv]) == code
    out, err = capsys.readouterr()
    assert says in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


HIDDEN = "<a value from the environment, not shown>"


def _env_config(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose SQLite path comes from the environment: a folder that does not exist."""
    monkeypatch.setenv("AGT_TEST_DB", "s3cret-folder/state.db")
    return _config(folder, db="${AGT_TEST_DB}")


def test_a_probes_error_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The adapter's health error named the folder and the path the variable gave, as they were.
    config = _env_config(tmp_path, monkeypatch)
    status, probes = _probe(capsys, config)
    assert status == 2 and probes["archive"].startswith("failed:") and HIDDEN in probes["archive"], probes
    assert "s3cret" not in json.dumps(probes)
    assert main(["check", "--probe", str(config)]) == 2
    out, err = capsys.readouterr()
    assert "probe archive        failed:" in out and "s3cret" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


def test_a_probes_refused_build_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A runtime refused over the built adapters: its error was reported as it was.
    from agentium_harness._cli import check
    from agentium_harness._errors import CapabilityError

    def refused(resolved: object) -> object:
        raise CapabilityError("the store at s3cret-folder/state.db declares no recall")

    monkeypatch.setattr(check, "build_runtime", refused)
    assert main(["check", "--probe", "--json", str(_env_config(tmp_path, monkeypatch))]) == 2
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert error["message"] == f"the store at {HIDDEN} declares no recall"


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_a_runs_error_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # The session store's error named the database path the variable gave ("load failed on ...").
    config = _env_config(tmp_path, monkeypatch)
    flags = ["--json"] if json_form else []
    assert main(["run", *flags, str(config), *ANA, "hello"]) == 2
    out, err = capsys.readouterr()
    assert f"agentium run: sqlite session store: session load failed on {tmp_path}/{HIDDEN}" in err, err
    assert "s3cret" not in out + err
    if json_form:
        error = json.loads(out)["error"]
        assert error.endswith(f"failed on {tmp_path}/{HIDDEN}: unable to open database file"), error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"]


def _not_a_database(folder: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A config whose SQLite path (every store's, memory's too) comes from the environment: no database."""
    config = _env_config(folder, monkeypatch)
    config.write_text(config.read_text(encoding="utf-8") + '[memory]\nplugin = "sqlite"\n', encoding="utf-8")
    db = folder / "s3cret-folder" / "state.db"
    db.parent.mkdir()
    db.write_bytes(b"not a database " * 20)
    return config, db


SCOPE = ["--tenant", "acme", "--user", "ana"]


@pytest.mark.parametrize(
    "command",
    [
        ["session", "inspect", "{config}", *ANA],
        ["session", "reconcile", "{config}", *ANA],
        ["session", "migrate", "--attest-legacy-memory-scope", "{config}", *ANA],
        ["memory", "list", "{config}", *SCOPE],
        ["memory", "remember", "{config}", *SCOPE, "a fact"],
        ["recall", "search", "{config}", *ANA, "hello"],
        ["recall", "rebuild", "{config}", *ANA],
        ["erase", "{config}", *SCOPE, "--reason", "asked"],
        ["retention", "apply", "{config}", *SCOPE],
    ],
    ids=lambda c: " ".join(w for w in c[:2] if not w.startswith("{")),
)
def test_a_commands_error_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # The store's error named the database path the variable gave ("... failed on <path>: file is
    # not a database", "<path> ([session_store]) is not a SQLite database"), on stderr and in --json.
    config, db = _not_a_database(tmp_path, monkeypatch)
    argv = [str(config) if word == "{config}" else word for word in command]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert f"{tmp_path}/{HIDDEN}" in err and "s3cret" not in out + err, err
    assert main([*argv, "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"] == err.split(": ", 1)[1].rstrip("\n") and "s3cret" not in out + err
    assert db.read_bytes() == b"not a database " * 20 and os.listdir(db.parent) == ["state.db"]


def test_an_erasure_stopped_part_way_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # erase reports an ErasureIncompleteError itself (exit 7): it printed the store's error as it was.
    from agentium_harness._cli import erase
    from agentium_harness._errors import ErasureIncompleteError

    (tmp_path / "s3cret-folder").mkdir()
    config = _env_config(tmp_path, monkeypatch)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    real = erase._run

    async def failing(rt: object) -> object:
        raise ErasureIncompleteError(f"the archive at {tmp_path}/s3cret-folder/state.db failed", None)

    monkeypatch.setattr(erase, "_run", lambda given, work, **kw: real(given, failing, **kw))
    capsys.readouterr()
    assert main(["erase", str(config), *SCOPE, "--reason", "asked", "--json"]) == 7
    out, err = capsys.readouterr()
    assert json.loads(out)["error"] == f"the archive at {tmp_path}/{HIDDEN} failed"
    assert "s3cret" not in out + err


def test_a_memory_stores_reason_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rejected write's reason and notes are the store's text: printed as they were.
    from agentium_harness._engine.memory.manager import MemoryManager
    from agentium_harness._ports.memory import MemoryAck

    (tmp_path / "s3cret-folder").mkdir()
    config = _env_config(tmp_path, monkeypatch)
    config.write_text(config.read_text(encoding="utf-8") + '[memory]\nplugin = "sqlite"\n', encoding="utf-8")
    assert main(["run", str(config), *ANA, "hello"]) == 0
    named = f"{tmp_path}/s3cret-folder/state.db"

    async def rejecting(self: MemoryManager, fact: object) -> MemoryAck:
        return MemoryAck("rejected", reason=f"{named} is read-only", notes=(f"see {named}",))

    monkeypatch.setattr(MemoryManager, "remember_with_result", rejecting)
    capsys.readouterr()
    assert main(["memory", "remember", str(config), *SCOPE, "a fact"]) == 1
    out, err = capsys.readouterr()
    assert out == f"rejected: {tmp_path}/{HIDDEN} is read-only\n" and "s3cret" not in err, err
    assert main(["memory", "remember", str(config), *SCOPE, "a fact", "--json"]) == 1
    ack = json.loads(capsys.readouterr().out)
    assert ack["reason"] == f"{tmp_path}/{HIDDEN} is read-only"
    assert ack["notes"] == [f"see {tmp_path}/{HIDDEN}"]


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_a_runs_recall_and_verifier_reasons_do_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # The recall outcome's reason (a store's error the policy stopped on) and a verification's reason
    # (the verifier's, or its error) were printed as they were, on stderr and in --json.
    import attrs

    from agentium_harness._engine.results import RunStatus
    from agentium_harness._engine.runtime import HarnessRuntime
    from agentium_harness._verdicts import Verdict, VerificationAttempt, VerificationRecord

    (tmp_path / "s3cret-folder").mkdir()
    config = _env_config(tmp_path, monkeypatch)
    named = f"{tmp_path}/s3cret-folder/state.db"
    real = HarnessRuntime.run

    async def stopped(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        result = await real(self, *args, **kwargs)  # type: ignore[arg-type]
        assert result.recall is not None
        attempt = VerificationAttempt(revision=0, verdict=Verdict.UNKNOWN, reason=f"cannot read {named}")
        return attrs.evolve(
            result,
            status=RunStatus.STOPPED,
            recall=attrs.evolve(result.recall, reason=f"recall store {named} is locked"),
            verification=VerificationRecord(Verdict.UNKNOWN, 0, "stop", (attempt,)),
        )

    monkeypatch.setattr(HarnessRuntime, "run", stopped)
    flags = ["--json"] if json_form else []
    assert main(["run", *flags, str(config), *ANA, "hello"]) == 4  # stopped
    out, err = capsys.readouterr()
    assert f"the recall policy stopped the run: recall store {tmp_path}/{HIDDEN} is locked" in err, err
    assert "s3cret" not in out + err
    if json_form:
        result = json.loads(out)
        assert result["recall"]["reason"] == f"recall store {tmp_path}/{HIDDEN} is locked"
        assert result["verification"]["attempts"][0]["reason"] == f"cannot read {tmp_path}/{HIDDEN}"
    else:
        assert f"[verification (revision 0): unknown: cannot read {tmp_path}/{HIDDEN}]" in err, err


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_an_inspected_sessions_adapter_details_do_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # The divergence's detail is the archive's error and a coverage gap's a reader's: shown as they were.
    import attrs

    from agentium_harness._engine.runtime import HarnessRuntime
    from agentium_harness._ports.snapshot import ArchiveDivergence
    from agentium_harness._ports.summary import CoverageGap, GapReason, SummaryState, TaskSummary

    (tmp_path / "s3cret-folder").mkdir()
    config = _env_config(tmp_path, monkeypatch)
    assert main(["run", str(config), *ANA, "hello"]) == 0
    named = f"{tmp_path}/s3cret-folder/state.db"
    real = HarnessRuntime.inspect_session

    async def detailed(self: HarnessRuntime, identity: object, session_id: str) -> object:
        view = await real(self, identity, session_id)  # type: ignore[arg-type]
        gap = CoverageGap(0, GapReason.UNAVAILABLE, f"read failed on {named}")
        summary = SummaryState(TaskSummary("s", 0, policy="p", version="1"), gaps=(gap,))
        return attrs.evolve(view, divergence=ArchiveDivergence((3,), f"conflict in {named}"), summary=summary)

    monkeypatch.setattr(HarnessRuntime, "inspect_session", detailed)
    capsys.readouterr()
    assert main(["session", "inspect", str(config), *ANA, *(["--json"] if json_form else [])]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    if json_form:
        view = json.loads(out)
        assert view["divergence"]["detail"] == f"conflict in {tmp_path}/{HIDDEN}"
        assert view["summary"]["gaps"][0]["detail"] == f"read failed on {tmp_path}/{HIDDEN}"
    else:
        assert f"diverged at     [3]: conflict in {tmp_path}/{HIDDEN}\n" in out
        assert f"coverage gap    group 0 unavailable: read failed on {tmp_path}/{HIDDEN}\n" in out


@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_a_verifiers_reason_does_not_repeat_a_value_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_form: bool
) -> None:
    # agentium verify printed the verifier's reason (or its error) and the notes as they were.
    from agentium_harness._engine.results import Diagnostic, Severity
    from agentium_harness._engine.runtime import HarnessRuntime
    from agentium_harness._verdicts import Verdict, VerificationAttempt, VerificationRecord

    (tmp_path / "s3cret-folder").mkdir()
    config = _env_config(tmp_path, monkeypatch)
    named = f"{tmp_path}/s3cret-folder/state.db"

    async def verify(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        attempt = VerificationAttempt(revision=0, verdict=Verdict.UNKNOWN, reason=f"cannot read {named}")
        note = Diagnostic("verify_failed", f"the verifier failed on {named}", Severity.WARNING)
        return VerificationRecord(Verdict.UNKNOWN, 0, "on-demand", (attempt,)), (note,)

    monkeypatch.setattr(HarnessRuntime, "verify", verify)
    flags = ["--json"] if json_form else []
    assert main(["verify", *flags, str(config), *ANA, "--claim", "done"]) == 3  # not accepted
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out + err
    if json_form:
        data = json.loads(out)
        assert data["record"]["attempts"][0]["reason"] == f"cannot read {tmp_path}/{HIDDEN}"
        assert data["diagnostics"][0]["message"] == f"the verifier failed on {tmp_path}/{HIDDEN}"
    else:
        assert f"[verification: unknown: cannot read {tmp_path}/{HIDDEN}]" in out, out
        assert f"verify_failed: the verifier failed on {tmp_path}/{HIDDEN}" in err, err
