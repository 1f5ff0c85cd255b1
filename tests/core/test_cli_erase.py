"""``agentium erase``: dry run per store, erase, status, inspect, resume (issue 23, item 6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentium_harness._cli import main
from agentium_harness.testing.sqlite_rows import database_bytes

MARK = "qcliSecret4f2a9"


def _config(tmp_path: Path) -> Path:
    db = tmp_path / "agentium.db"
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[runtime.resident]
max_groups = 1
[provider]
plugin = "scripted"
[provider.options]
responses = ["noted"]
cycle = true
[archive]
plugin = "sqlite"
[archive.options]
path = "{db}"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "{db}"
[recall]
plugin = "sqlite"
[recall.options]
path = "{db}"
[memory]
plugin = "sqlite"
[memory.options]
path = "{db}"
""",
        encoding="utf-8",
    )
    return cfg


def _agentium(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_erase_dry_run_then_erase_then_status_and_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana")
    for i in range(3):
        assert _agentium(capsys, "run", cfg, *who, "--session", "s1", f"{MARK} turn {i}")[0] == 0
    assert _agentium(capsys, "run", cfg, *who, "--session", "s2", "keep this")[0] == 0
    assert MARK[-10:].encode() in database_bytes(tmp_path / "agentium.db")

    code, out, _ = _agentium(
        capsys, "erase", cfg, *who, "--session", "s1", "--reason", "request 5", "--dry-run"
    )
    assert code == 0
    assert "planned: session 's1' of user 'ana' of tenant 'acme'" in out
    assert "archive        SQLiteArchive: 2 group(s)" in out
    assert "session_store  SQLiteSessionStore: 1 snapshot(s)" in out
    assert "recall         SQLiteRecallStore: 2 group(s)" in out
    code, out, _ = _agentium(capsys, "session", "inspect", cfg, *who, "--session", "s1")
    assert "archived groups 2" in out, "the dry run changed something"

    code, out, err = _agentium(capsys, "erase", cfg, *who, "--session", "s1")
    assert code == 2 and "--reason is required" in err
    code, out, _ = _agentium(
        capsys,
        "erase",
        cfg,
        *who,
        "--session",
        "s1",
        "--reason",
        "request 5",
        "--operator",
        "ops-1",
        "--json",
    )
    assert code == 0
    (record,) = json.loads(out)
    assert record["state"] == "complete" and record["reason"] == "request 5"
    assert record["operator"] == {"tenant": "acme", "user": "ops-1", "verified_by": "cli-operator"}
    assert [s["ranges"] for s in record["sessions"]] == [[{"start": 0, "stop": 3}]]
    assert MARK[-10:].encode() not in database_bytes(tmp_path / "agentium.db")

    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--session", "s1", "--status")
    assert code == 0 and f"erasure {record['erasure_id']} (erasure) complete" in out
    code, out, _ = _agentium(capsys, "session", "inspect", cfg, *who, "--session", "s1")
    assert "not stored" in out and f"erasure    {record['erasure_id']} complete" in out
    code, out, _ = _agentium(capsys, "session", "inspect", cfg, *who, "--session", "s2")
    assert "archived groups" in out and "erasure " not in out
    code, out, _ = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--resume")
    assert code == 0 and out == "no erasure\n"


def test_a_reason_with_a_line_break_is_printed_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Printed raw, a newline in the operator's reason printed a line that looked like the record's.
    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    reason = "request 5\n  session    acme/bob/s9: groups 0-99 (100)"
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--reason", reason, "--dry-run")
    assert code == 0 and "request 5\\n  session    acme/bob/s9" in out
    assert not any(line.startswith("  session    acme/bob") for line in out.splitlines())


def test_a_bad_operator_is_refused_by_its_own_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The operator was checked as the attestation's user: the error said "invalid user" and
    # pointed at a --user that was fine.
    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    code, out, err = _agentium(
        capsys, "erase", cfg, *who, "--reason", "x", "--operator", "op\x1b[2J", "--dry-run"
    )
    assert code == 2 and out == ""
    assert "invalid operator (--operator): contains control character U+001B" in err
    assert "invalid user" not in err


def _erase_json_raising(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: Callable[[Any], Exception],
    reason: str,
) -> tuple[int, str, str]:
    """``agentium erase --json`` of s1 after a turn, its erasure done but raising ``error(record)``.

    Returns the exit code, stdout and stderr.
    """
    from agentium_harness._cli import erase

    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    real = erase._run

    def raising(config: str, work: Any, reading: bool = False) -> Any:
        done = real(config, work, reading=reading)
        raise error(done.record)

    monkeypatch.setattr(erase, "_run", raising)
    return _agentium(capsys, "erase", cfg, *who, "--reason", reason, "--json")


def test_an_erasure_that_stops_part_way_prints_its_progress_as_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/cli.md: an erasure that stops part way prints its progress and exits 7. With --json
    # the record was printed nowhere: not on stderr (left out for --json), not on stdout.
    from agentium_harness._errors import ErasureIncompleteError

    def stopping(record: Any) -> Exception:
        return ErasureIncompleteError("the archive failed; the erasure stays pending", record)

    code, out, err = _erase_json_raising(tmp_path, capsys, monkeypatch, stopping, "request 7")
    assert code == 7 and "stays pending" in err
    (record,) = json.loads(out)
    assert record["reason"] == "request 7" and record["resumed"] is False


def test_an_erasure_overtaken_prints_its_tombstone_with_the_error_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/cli.md: exit 7 when another call completed the erasure but the target may still hold
    # data. With --json the completed record is printed with the error's fields, never alone (a
    # script would read a complete tombstone as the target erased).
    from agentium_harness import ErasureOvertakenError

    def overtaken(record: Any) -> Exception:
        return ErasureOvertakenError(
            "completed by another call; the target may still hold data",
            record,
            pending_id="e1",
            still_held=("session_store",),
        )

    code, out, err = _erase_json_raising(tmp_path, capsys, monkeypatch, overtaken, "request 8")
    assert code == 7 and "may still hold data" in err
    (record,) = json.loads(out)
    assert record["state"] == "complete" and record["error_type"] == "ErasureOvertakenError"
    assert record["still_held"] == ["session_store"] and record["pending_id"] == "e1"
    assert "may still hold data" in record["error"]


def test_a_completed_erasure_whose_fence_may_still_be_up_prints_the_error_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/cli.md: a tombstone saved whose removal from pending could not be read back (exit 7) is
    # printed with the error's fields, never alone as if the erasure had simply completed.
    from agentium_harness._errors import ErasureIncompleteError

    def unknown(record: Any) -> Exception:
        return ErasureIncompleteError("whether its scope is still refused is not known", record)

    code, out, err = _erase_json_raising(tmp_path, capsys, monkeypatch, unknown, "request 9")
    assert code == 7 and "not known" in err
    (record,) = json.loads(out)
    assert record["state"] == "complete" and record["error_type"] == "ErasureIncompleteError"
    assert "not known" in record["error"] and "still_held" not in record


def test_erase_refuses_a_session_without_its_user_and_two_modes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(_config(tmp_path))
    code, _, err = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--session", "s1", "--reason", "x")
    assert code == 2 and "--session needs --user" in err
    code, _, err = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--dry-run", "--status")
    assert code == 2 and "at most one" in err


def test_retention_apply_uses_the_config_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path)
    cfg.write_text(
        cfg.read_text(encoding="utf-8") + "[retention]\nmax_archived_groups = 1\n", encoding="utf-8"
    )
    who = ("--tenant", "acme", "--user", "ana")
    for i in range(4):
        assert _agentium(capsys, "run", str(cfg), *who, "--session", "s1", f"turn {i}")[0] == 0
    code, out, _ = _agentium(capsys, "retention", "apply", str(cfg), "--tenant", "acme", "--dry-run")
    assert code == 0 and "retention planned: 1 session(s) checked, 1 trimmed" in out
    code, out, _ = _agentium(capsys, "retention", "apply", str(cfg), "--tenant", "acme", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["checked"] == 1 and report["policy"]["max_archived_groups"] == 1
    (record,) = report["erasures"]
    assert record["kind"] == "retention" and record["state"] == "complete"
    assert record["target"]["groups"] == [{"start": 0, "stop": 2}]
    code, out, _ = _agentium(capsys, "session", "inspect", str(cfg), *who, "--session", "s1")
    assert "erased     groups 0\u20131" in out


def test_an_empty_operator_is_refused_not_replaced_by_the_login_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--operator ''" erased under the login name: the tombstone named an operator nobody gave.
    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    code, out, err = _agentium(capsys, "erase", cfg, *who, "--reason", "r", "--operator", "")
    assert code == 2 and "operator" in err and out == ""
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--status")
    assert code == 0 and out == "no erasure\n"


def test_an_empty_retention_reason_is_refused_not_replaced_by_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--reason ''" trimmed the sessions under "retention policy": a reason nobody gave, where
    # apply_retention(reason="") itself refuses.
    cfg = _config(tmp_path)
    cfg.write_text(
        cfg.read_text(encoding="utf-8") + "[retention]\nmax_archived_groups = 1\n", encoding="utf-8"
    )
    who = ("--tenant", "acme", "--user", "ana")
    for i in range(4):
        assert _agentium(capsys, "run", str(cfg), *who, "--session", "s1", f"turn {i}")[0] == 0
    before = database_bytes(tmp_path / "agentium.db")
    code, out, err = _agentium(
        capsys, "retention", "apply", str(cfg), "--tenant", "acme", "--reason", "", "--json"
    )
    assert code == 2 and "reason" in err
    assert json.loads(out)["error_type"] == "InvalidArgumentError"
    assert database_bytes(tmp_path / "agentium.db") == before
    code, out, _ = _agentium(capsys, "erase", str(cfg), "--tenant", "acme", "--status")
    assert code == 0 and out == "no erasure\n"


def test_resume_refuses_a_narrower_scope_than_the_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--resume --user bob" resumed every pending erasure of the tenant, alice's too.
    cfg = str(_config(tmp_path))
    for extra in (("--user", "bob"), ("--user", "bob", "--session", "s1")):
        code, out, err = _agentium(capsys, "erase", cfg, "--tenant", "acme", *extra, "--resume")
        assert code == 2 and "--resume" in err and out == ""


def test_retention_apply_exits_7_when_an_erasure_it_started_stays_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stopped retention erasure was only a note and the command exited 0, although the session
    # was left fenced until resumed (agentium erase exits 7 for the same state).
    from agentium_harness import ArchiveError
    from agentium_harness.adapters.sqlite import SQLiteArchive

    cfg = _config(tmp_path)
    cfg.write_text(
        cfg.read_text(encoding="utf-8") + "[retention]\nmax_archived_groups = 1\n", encoding="utf-8"
    )
    who = ("--tenant", "acme", "--user", "ana")
    for i in range(4):
        assert _agentium(capsys, "run", str(cfg), *who, "--session", "s1", f"turn {i}")[0] == 0
    erase = SQLiteArchive.erase

    async def failing(self: SQLiteArchive, target: object, ctx: object, **kw: object) -> object:
        if not kw.get("dry_run"):
            raise ArchiveError("disk went away")
        return await erase(self, target, ctx, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteArchive, "erase", failing)
    code, out, err = _agentium(capsys, "retention", "apply", str(cfg), "--tenant", "acme")
    assert code == 7 and "stay pending" in err and "0 trimmed" in out
    monkeypatch.setattr(SQLiteArchive, "erase", erase)
    code, out, _ = _agentium(capsys, "erase", str(cfg), "--tenant", "acme", "--resume")
    assert code == 0 and "(retention) complete" in out
    code, out, err = _agentium(capsys, "retention", "apply", str(cfg), "--tenant", "acme")
    assert code == 0 and err == ""


def test_a_stores_detail_and_the_notes_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store's detail and the record's notes are the adapters' text: printed raw, an escape
    # sequence in them reached the operator's terminal and a newline forged a line of the record.
    import attrs

    from agentium_harness._cli import erase

    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    real = erase._run

    def hostile(config: str, work: Any, reading: bool = False) -> Any:
        done = real(config, work, reading=reading)
        record = done.record
        stores = tuple(
            attrs.evolve(s, detail="free pages\x1b[2J\n  session    forged") for s in record.stores
        )
        record = attrs.evolve(record, stores=stores, notes=("late write\x1b]0;owned\x07\u202e",))
        return attrs.evolve(done, record=record)

    monkeypatch.setattr(erase, "_run", hostile)
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--reason", "request 8", "--dry-run")
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\n  session    forged" not in out
    assert "free pages\\x1b[2J\\n  session    forged" in out
    assert "note       late write\\x1b]0;owned\\x07\\u202e" in out


def test_the_save_notes_are_counted_on_one_line_and_kept_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each progress save leaves 'progress save <n> of call <id>' in the record (up to 16 calls'):
    # bookkeeping so a save whose reply was lost is counted once. Printed one line each, they told
    # the operator nothing and buried the notes that do; --json keeps the record as stored.
    import attrs

    from agentium_harness._cli import erase

    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    real = erase._run
    marks = ("progress save 3 of call 0123456789abcdef", "progress save 1 of call fedcba9876543210")

    def marked(config: str, work: Any, reading: bool = False) -> Any:
        done = real(config, work, reading=reading)
        return attrs.evolve(done, record=attrs.evolve(done.record, notes=(*marks, "late write")))

    monkeypatch.setattr(erase, "_run", marked)
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--reason", "request 8", "--dry-run")
    assert code == 0
    assert "of call" not in out
    assert "note       late write\n" in out
    assert "note       2 progress save note(s) of the calls that carried it out (--json shows them)" in out
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--reason", "request 8", "--dry-run", "--json")
    assert code == 0
    (record,) = json.loads(out)
    assert record["notes"] == [*marks, "late write"]


def _typo_config(tmp_path: Path, archive: str, store: str) -> Path:
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[provider]
plugin = "scripted"
[provider.options]
responses = ["noted"]
[archive]
plugin = "sqlite"
[archive.options]
path = "{tmp_path / archive}"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "{tmp_path / store}"
""",
        encoding="utf-8",
    )
    return cfg


@pytest.mark.parametrize("mode", [(), ("--resume",), ("--json",)], ids=["erase", "resume", "json"])
def test_erase_on_a_database_that_does_not_exist_is_refused_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: tuple[str, ...]
) -> None:
    # A mistyped path created an empty database there and saved a tombstone saying nothing was
    # there (exit 0), while the data to erase stayed where it was.
    cfg = str(_typo_config(tmp_path, "typo.db", "typo.db"))
    scope = ("--tenant", "acme") + (() if mode == ("--resume",) else ("--user", "ana", "--reason", "r"))
    code, out, err = _agentium(capsys, "erase", cfg, *scope, *mode)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("agentium erase: no database at ") and str(tmp_path / "typo.db") in line
    assert "([archive], [session_store])" in line and "no database was created" in line
    if mode == ("--json",):
        assert json.loads(out)["error_type"] == "InvalidArgumentError"
    else:
        assert out == ""
    assert not (tmp_path / "typo.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agentium.toml"], "a -wal or -shm was left"


def test_erase_is_refused_when_the_session_stores_database_is_missing_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The archive exists and holds a turn; the session store's path (where the tombstone is
    # recorded) is mistyped. Erasing created an empty session store and recorded it there.
    cfg = str(_typo_config(tmp_path, "real.db", "real.db"))
    assert _agentium(capsys, "run", cfg, "--tenant", "acme", "--user", "ana", "--session", "s1", "hi")[0] == 0
    cfg = str(_typo_config(tmp_path, "real.db", "tpyo.db"))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--reason", "r")
    assert code == 2 and out == ""
    assert f"no database at {tmp_path / 'tpyo.db'} ([session_store])" in err
    assert str(tmp_path / "real.db") not in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("made_by", ["touch", "another tenant's run"])
def test_erase_on_an_existing_database_holding_nothing_records_that_nothing_was_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made_by: str
) -> None:
    # Refusing a database that does not exist must not refuse one that exists and is empty.
    cfg = str(_typo_config(tmp_path, "empty.db", "empty.db"))
    if made_by == "touch":
        (tmp_path / "empty.db").touch()
    else:
        globex = ("--tenant", "globex", "--user", "u", "--session", "s")
        assert _agentium(capsys, "run", cfg, *globex, "hi")[0] == 0
    code, out, err = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--reason", "r", "--json")
    assert code == 0, err
    (record,) = json.loads(out)
    assert record["state"] == "complete"
    assert any("nothing of the target was stored" in note for note in record["notes"])
    code, out, _ = _agentium(capsys, "erase", cfg, "--tenant", "acme", "--status")
    assert code == 0 and f"erasure {record['erasure_id']} (erasure) complete" in out


def test_erase_with_a_store_not_yet_used_is_refused_until_its_file_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A store's database is created on first use: after one turn nothing was archived, so the
    # archive's file does not exist yet. A missing file cannot be told from a mistyped path (whose
    # erasure recorded "nothing" while the real archive kept the data), so the erasure is refused,
    # creating nothing, and says how to go on: an empty file there is a store holding nothing.
    cfg = str(_typo_config(tmp_path, "archive.db", "sessions.db"))
    who = ("--tenant", "acme", "--user", "ana")
    assert _agentium(capsys, "run", cfg, *who, "--session", "s1", f"{MARK} hi")[0] == 0
    assert not (tmp_path / "archive.db").exists() and (tmp_path / "sessions.db").exists()
    code, out, err = _agentium(capsys, "erase", cfg, *who, "--reason", "r")
    assert code == 2 and out == "" and f"no database at {tmp_path / 'archive.db'} ([archive])" in err
    assert "create an empty file at that path" in err and not (tmp_path / "archive.db").exists()
    (tmp_path / "archive.db").touch()
    code, out, err = _agentium(capsys, "erase", cfg, *who, "--reason", "r", "--json")
    assert code == 0, err
    (record,) = json.loads(out)
    assert record["state"] == "complete" and [s["session"] for s in record["sessions"]]


@pytest.mark.parametrize("command", [["erase", "--reason", "r"], ["retention", "apply"]])
def test_no_login_name_asks_for_operator_and_erases_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # A container run under a uid with no passwd entry and no USER/LOGNAME (`docker run -u 12345`):
    # getpass.getuser() raised KeyError (OSError on 3.13), a traceback where --operator was wanted.
    cfg = str(_config(tmp_path))
    who = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    assert _agentium(capsys, "run", cfg, *who, "hello")[0] == 0
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    import os
    import pwd

    free = next(uid for uid in range(4_000_000_000, 4_000_001_000) if not _has_entry(pwd, uid))
    monkeypatch.setattr(os, "getuid", lambda: free)
    code, out, err = _agentium(capsys, *command, cfg, *who)
    assert (code, out) == (2, "")
    assert "no login name to name the operator; give --operator" in err and "Traceback" not in err
    monkeypatch.undo()
    code, out, _ = _agentium(capsys, "erase", cfg, *who, "--status")
    assert code == 0 and out == "no erasure\n"
    assert _agentium(capsys, "session", "inspect", cfg, *who)[1].startswith("session 's1'\n")


def _has_entry(pwd: Any, uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
