"""The runtime side of the CLI: demo, run, session inspect/migrate, check --probe, load_runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.cli import main
from agentium_harness.engine.loader import load_runtime
from agentium_harness.errors import ConfigError
from agentium_harness.history import Message, MessageGroup, Role
from agentium_harness.ports import OpContext
from agentium_harness.ports.sessions import SessionSnapshot
from agentium_harness.scope import SessionKey

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, *, extra: str = "", max_groups: int = 2) -> Path:
    db = tmp_path / "state.db"
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[runtime]
instructions = "Be brief."
max_steps = 4
[runtime.resident]
max_groups = {max_groups}
[provider]
plugin = "scripted"
[provider.options]
responses = ["one", "two", "three", "four", "five"]
cycle = true
[archive]
plugin = "sqlite"
[archive.options]
path = "{db}"
[session_store]
plugin = "sqlite"
[session_store.options]
path = "{db}"
{extra}
""",
        encoding="utf-8",
    )
    return cfg


def ids(session: str = "s/1") -> list[str]:
    return ["--tenant", "acme", "--user", "ana", "--session", session]


def test_demo_proves_recoverability(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path), "--turns", "9"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("turn")]
    assert len(lines) == 9
    assert "eviction=archived" in lines[-1]
    assert "recovered 9 groups (5 archived + 4 resident)" in out
    assert "digest matches its receipt: yes" in out
    # A second demo in the same directory is a new session; the first one persists.
    assert main(["demo", "--dir", str(tmp_path), "--turns", "2"]) == 0
    assert "session 'demo-2'" in capsys.readouterr().out


def test_demo_refuses_bad_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path / "d"), "--turns", "0"]) == 2
    assert "--turns" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_run_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    for text in ["a", "b", "c"]:
        assert main(["run", str(cfg), *ids(), text]) == 0
    out = capsys.readouterr()
    # Each CLI run is a new process-like runtime: the scripted provider starts over.
    assert out.out.splitlines() == ["one", "one", "one"]
    assert "eviction archived" in out.err
    assert main(["session", "inspect", str(cfg), *ids(), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["boundary"] == 1 and view["resident_seqs"] == [1, 2] and view["revision"] == 3
    assert view["memory_scope"]["session"] == "s/1"


def test_run_refuses_mismatched_scope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), *ids(), "--project", "p1", "hi"]) == 0
    capsys.readouterr()
    assert main(["run", str(cfg), *ids(), "--project", "p2", "--attest-legacy-memory-scope", "hi"]) == 2
    assert "different memory scope" in capsys.readouterr().err
    assert main(["session", "inspect", str(cfg), *ids(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == 1


def _store_legacy(db: Path, key: SessionKey) -> None:
    async def go() -> None:
        store = SQLiteSessionStore(SQLiteConfig(path=str(db)))
        group = MessageGroup(0, (Message(Role.USER, "old q"), Message(Role.ASSISTANT, "old a")))
        legacy = SessionSnapshot(
            memory_scope=None, boundary=0, next_seq=1, resident=(group,), format_version=1
        )
        await store.save(key, legacy, None, OpContext())
        await store.aclose()

    anyio.run(go)


def test_session_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    _store_legacy(tmp_path / "state.db", SessionKey("acme", "ana", "old"))
    # Without the attestation: refused, nothing written.
    assert main(["session", "migrate", str(cfg), *ids("old")]) == 2
    assert "--attest-legacy-memory-scope" in capsys.readouterr().err
    assert main(["run", str(cfg), *ids("old"), "hi"]) == 2
    assert "legacy snapshot" in capsys.readouterr().err
    assert main(["session", "migrate", str(cfg), *ids("old"), "--attest-legacy-memory-scope", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] is True and report["previous_revision"] == 1 and report["revision"] == 2
    assert report["memory_scope"] == {
        "tenant": "acme",
        "user": "ana",
        "session": "old",
        "project": None,
        "repository": None,
    }
    assert main(["session", "migrate", str(cfg), *ids("old"), "--attest-legacy-memory-scope"]) == 0
    assert capsys.readouterr().out.startswith("unchanged")
    assert main(["run", str(cfg), *ids("old"), "hi"]) == 0


def test_check_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    assert main(["check", str(cfg)]) == 0
    assert not (tmp_path / "state.db").exists()  # plain check touches no backend
    capsys.readouterr()
    assert main(["check", "--probe", "--json", str(cfg)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["probe"]["archive"].startswith("ok") and report["probe"]["session_store"].startswith("ok")


def test_load_runtime_owns_and_closes_its_adapters(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    runtime = load_runtime(cfg)
    assert not (tmp_path / "state.db").exists()  # building does no I/O

    async def go() -> Any:
        from agentium_harness import VerifiedIdentity

        async with runtime:
            return await runtime.run(VerifiedIdentity("acme", "ana", "test"), "s", "hi")

    result = anyio.run(go)
    assert result.output == "one" and runtime.limits.max_steps == 4
    assert runtime.instructions == "Be brief."
    assert runtime.state.value == "closed"


def test_load_runtime_reports_config_errors(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, extra="[recall]\nplugin = 'nope'\n")
    with pytest.raises(ConfigError) as info:
        load_runtime(cfg)
    assert any(i.path == "$.recall.plugin" for i in info.value.issues)


def test_agentium_demo_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "agentium"
    result = subprocess.run(
        [str(exe), "demo", "--turns", "5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert "recovered 5 groups" in result.stdout
    assert (tmp_path / "agentium-demo" / "demo.db").exists()
