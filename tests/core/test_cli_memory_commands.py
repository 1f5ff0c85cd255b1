"""``agentium memory list|history|remember|correct|forget`` on a config's [memory] section (SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentium_harness._cli import main

CONFIG = """
[provider]
plugin = "scripted"

[archive]
plugin = "sqlite"

[session_store]
plugin = "sqlite"

[memory]
plugin = "sqlite"

[memory.options]
path = "memory.db"
"""


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG, encoding="utf-8")
    # remember and correct read the session store (agentium.db, the default) for erasures under
    # way, so it must exist: an empty file is a store never written to (docs/cli.md).
    (tmp_path / "agentium.db").touch()
    return str(path)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    assert main([*argv, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def test_remember_list_correct_forget_round_trip(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    who = ["--tenant", "acme", "--user", "alice"]
    ack = _json(
        capsys,
        ["memory", "remember", config, *who, "the VPN needs 2FA", "--valid-until", "2999-01-01T00:00Z"],
    )
    assert isinstance(ack, dict) and ack["status"] == "stored" and ack["revision"] == 1 and ack["durable"]
    fact_id = ack["fact_id"]
    again = _json(
        capsys,
        ["memory", "remember", config, *who, "the VPN needs 2FA", "--valid-until", "2999-01-01T00:00Z"],
    )
    assert isinstance(again, dict) and (again["status"], again["fact_id"]) == ("duplicate", fact_id)
    listed = _json(capsys, ["memory", "list", config, *who])
    assert isinstance(listed, list) and [f["text"] for f in listed] == ["the VPN needs 2FA"]
    assert listed[0]["valid_until"] == "2999-01-01T00:00:00.000000Z"
    fixed = _json(capsys, ["memory", "correct", config, *who, fact_id, "the VPN needs a hardware key"])
    assert isinstance(fixed, dict) and fixed["revision"] == 2
    assert main(["memory", "list", config, *who]) == 0
    assert "hardware key" in capsys.readouterr().out
    assert main(["memory", "forget", config, *who, fact_id]) == 0
    assert f"stored {fact_id} revision 3" in capsys.readouterr().out
    history = _json(capsys, ["memory", "history", config, *who, fact_id])
    assert isinstance(history, list) and [h["status"] for h in history] == ["forgotten"] * 3
    assert all(h["text"] == "" for h in history)
    assert _json(capsys, ["memory", "list", config, *who]) == []


def test_bad_input_is_refused_and_changes_nothing(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    who = ["--tenant", "acme", "--user", "alice"]
    ack = _json(capsys, ["memory", "remember", config, *who, "kept fact"])
    assert isinstance(ack, dict)
    fact_id = ack["fact_id"]
    # Rejected facts: exit 1 with the reason.
    assert main(["memory", "remember", config, *who, "   "]) == 1
    assert "rejected: the fact text is empty" in capsys.readouterr().out
    assert main(["memory", "remember", config, *who, "w", "--valid-from", "2030-01-02T00:00Z",
                 "--valid-until", "2030-01-01T00:00Z"]) == 1  # fmt: skip
    assert "ends before" in capsys.readouterr().out
    # A time without a zone, and another tenant's id: usage errors, nothing changed.
    assert main(["memory", "remember", config, *who, "x", "--valid-until", "2030-01-01"]) == 2
    assert "no time zone" in capsys.readouterr().err
    other = ["--tenant", "globex", "--user", "alice"]
    assert main(["memory", "forget", config, *other, fact_id]) == 2
    foreign = capsys.readouterr().err
    assert main(["memory", "forget", config, *other, "m-" + "0" * 32]) == 2
    missing = capsys.readouterr().err
    assert foreign.replace(fact_id, "ID") == missing.replace("m-" + "0" * 32, "ID")
    assert main(["memory", "correct", config, *other, fact_id, "taken"]) == 2
    capsys.readouterr()
    listed = _json(capsys, ["memory", "list", config, *who])
    assert isinstance(listed, list) and [(f["text"], f["revision"]) for f in listed] == [("kept fact", 1)]


def test_a_config_without_a_memory_section_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.toml"
    path.write_text(CONFIG.split("[memory]")[0], encoding="utf-8")
    assert main(["memory", "list", str(path), "--tenant", "t", "--user", "u"]) == 2
    assert "has no [memory] section" in capsys.readouterr().err


def test_a_stored_fact_cannot_drive_the_terminal_or_forge_a_line_of_the_listing(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fact's text was printed as stored: its escape sequences reached the operator's terminal
    # (colours, a screen clear) and a newline forged what read as another fact of the list.
    who = ["--tenant", "acme", "--user", "alice"]
    text = "fine\x1b[2J\nm-0000 r1 current\n    forged \u202eevil"
    assert main(["memory", "remember", config, *who, text]) == 0
    capsys.readouterr()
    assert main(["memory", "list", config, *who]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert out.splitlines()[1] == "    fine\\x1b[2J\\nm-0000 r1 current\\n    forged \\u202eevil"
    assert len(out.splitlines()) == 2
    listed = _json(capsys, ["memory", "list", config, *who])
    assert isinstance(listed, list) and listed[0]["text"] == text  # --json keeps the text as stored


def test_a_stores_reason_and_notes_cannot_drive_the_terminal(
    config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rejection's reason and an acknowledgment's notes are the store's text, printed raw before.
    from agentium_harness._engine.memory.manager import MemoryManager
    from agentium_harness._ports.memory import AckStatus, MemoryAck

    async def hostile(self: MemoryManager, fact: object) -> MemoryAck:
        return MemoryAck(AckStatus.REJECTED, reason="no\x1b[2J\nstored m1", notes=("slow\x1b]0;x\x07",))

    monkeypatch.setattr(MemoryManager, "remember_with_result", hostile)
    who = ["--tenant", "acme", "--user", "ana"]
    assert main(["memory", "remember", config, *who, "the door code is 4719"]) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in err
    assert out == "rejected: no\\x1b[2J\\nstored m1\n"
    assert "  note: slow\\x1b]0;x\\x07\n" in err


def test_remember_and_correct_are_refused_while_the_user_is_being_erased(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's writes read the erasures recorded in the config's session store, as a runtime's do."""
    import anyio

    from agentium_harness import EraseTarget, OperatorAttestation, VerifiedIdentity
    from agentium_harness._config import load_config
    from agentium_harness._engine.erasure import start
    from agentium_harness._engine.lifecycle import Ticket
    from agentium_harness._ports.erasure import ErasureKind
    from agentium_harness.plugin_api import SessionStore

    who = ["--tenant", "acme", "--user", "ana"]
    ack = _json(capsys, ["memory", "remember", config, *who, "Ana deploys on Tuesdays"])
    assert isinstance(ack, dict)
    resolved = load_config(config)
    sessions = resolved.session_store.spec.build(resolved.session_store.options, base_dir=resolved.base_dir)
    assert isinstance(sessions, SessionStore)
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")

    async def record_pending() -> None:
        ticket = Ticket(None, "test", 30.0)
        await start(ticket, sessions, EraseTarget.user("acme", "ana"), "DSR", operator, ErasureKind.ERASURE)
        await sessions.aclose()

    anyio.run(record_pending)
    assert main(["memory", "remember", config, *who, "Ana's desk is 4B"]) == 2
    assert "is being erased" in capsys.readouterr().err
    assert main(["memory", "correct", config, *who, ack["fact_id"], "Ana deploys on Thursdays"]) == 2
    assert "is being erased" in capsys.readouterr().err
    listed = _json(capsys, ["memory", "list", config, *who])
    assert [f["text"] for f in listed] == ["Ana deploys on Tuesdays"]  # type: ignore[index,union-attr]
    # Another user of the tenant is not fenced.
    assert main(["memory", "remember", config, "--tenant", "acme", "--user", "bob", "Bob is on call"]) == 0
