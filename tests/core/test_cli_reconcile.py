"""The operator path for a diverged session on the command line (issue 6, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agentium_harness import Message, MessageGroup, Role, SessionKey
from agentium_harness._cli import main
from agentium_harness._ports import OpContext
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig

KEY = SessionKey("acme", "ana", "s1")
IDS = ["--tenant", "acme", "--user", "ana", "--session", "s1"]


def _config(tmp_path: Path) -> Path:
    db = tmp_path / "state.db"
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[runtime.resident]
max_groups = 1
[provider]
plugin = "scripted"
[provider.options]
responses = ["ok"]
cycle = true
[archive]
plugin = "sqlite"
[archive.options]
path = "{db}"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "{db}"
""",
        encoding="utf-8",
    )
    return cfg


def _squat(db: Path) -> None:
    async def go() -> None:
        archive = SQLiteArchive(SQLiteConfig(path=str(db)))
        await archive.append(KEY, [MessageGroup(0, (Message(Role.USER, "another writer"),))], OpContext())
        await archive.aclose()

    anyio.run(go)


def test_inspect_shows_the_diverged_state_and_reconcile_resolves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path)
    _squat(tmp_path / "state.db")
    assert main(["run", str(cfg), *IDS, "q0"]) == 0
    assert main(["run", str(cfg), *IDS, "q1"]) == 0
    capsys.readouterr()
    assert main(["session", "inspect", str(cfg), *IDS]) == 0
    out = capsys.readouterr().out
    assert "state           diverged" in out and "agentium session reconcile" in out
    # A run on a diverged session is refused with a clear message and exit 2.
    assert main(["run", str(cfg), *IDS, "q2"]) == 2
    assert "reconcile" in capsys.readouterr().err
    assert main(["session", "reconcile", str(cfg), *IDS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] and report["adopted_seqs"] == [0]
    assert report["renumbered"] == [[0, 1], [1, 2]]
    assert main(["session", "inspect", str(cfg), *IDS, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["state"] == "ok" and view["divergence"] is None
    assert main(["run", str(cfg), *IDS, "q2"]) == 0
    assert main(["session", "reconcile", str(cfg), *IDS]) == 0
    assert "unchanged" in capsys.readouterr().out


def test_builtin_sqlite_relative_path_resolves_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    cfg = conf_dir / "agentium.toml"
    cfg.write_text(
        """
[provider]
plugin = "scripted"
[provider.options]
responses = ["ok"]
[archive]
plugin = "sqlite"
[archive.options]
path = "data.db"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "data.db"
""",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", str(cfg), *IDS, "hi"]) == 0
    assert (conf_dir / "data.db").exists()
    assert not (elsewhere / "data.db").exists()


def test_inspect_shows_an_adapters_details_with_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The divergence's detail is the archive's error message and a coverage gap's detail a reader's
    # error: printed raw, an escape sequence reached the terminal and a newline forged a line.
    import attrs

    from agentium_harness._engine.runtime import HarnessRuntime
    from agentium_harness._ports.snapshot import ArchiveDivergence
    from agentium_harness._ports.summary import CoverageGap, GapReason, SummaryState, TaskSummary

    cfg = _config(tmp_path)
    assert main(["run", str(cfg), *IDS, "q0"]) == 0
    real = HarnessRuntime.inspect_session

    async def hostile(self: HarnessRuntime, identity: object, session_id: str) -> object:
        view = await real(self, identity, session_id)  # type: ignore[arg-type]
        gap = CoverageGap(0, GapReason.UNAVAILABLE, "read failed\x1b[2J\n  state           ok")
        summary = SummaryState(TaskSummary("s", 0, policy="p\x1b[1m", version="1"), gaps=(gap,))
        divergence = ArchiveDivergence((3,), "conflict\x1b]0;owned\x07\u202e")
        return attrs.evolve(view, divergence=divergence, summary=summary)

    monkeypatch.setattr(HarnessRuntime, "inspect_session", hostile)
    capsys.readouterr()
    assert main(["session", "inspect", str(cfg), *IDS]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "diverged at     [3]: conflict\\x1b]0;owned\\x07\\u202e\n" in out
    assert "coverage gap    group 0 unavailable: read failed\\x1b[2J\\n  state           ok\n" in out
    assert "(p\\x1b[1m@1)" in out
