"""The runtime side of the CLI: demo, run, session inspect/migrate, check --probe, load_runtime."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from _only_plugin import install_only_plugin

from agentium_harness._cli import main
from agentium_harness._config.runtime import load_runtime
from agentium_harness._demo import run as demo
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._errors import ConfigError
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import ArchiveCapabilities
from agentium_harness._ports.sessions import SessionSnapshot
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore

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
    # The first turn's fact was evicted, indexed and recalled into the prompt.
    assert "recall: 'What is the warehouse door code?' -> status complete, decision proceed" in out
    assert "in the prompt as labeled source data: group/demo-tenant/demo-user/demo-1/0" in out
    assert re.search(r"budget use: 1 candidate\(s\), \d+ discovery bytes", out), out
    assert "4719" in out.split("answer:")[1]
    # A second demo in the same directory is a new session; the first one persists.
    assert main(["demo", "--dir", str(tmp_path), "--turns", "2"]) == 0
    assert "session 'demo-2'" in capsys.readouterr().out


def test_demo_without_the_verifier_names_the_distribution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIUM_DISABLE_PLUGINS", "agentium-verifier-fs")
    assert main(["demo", "--dir", str(tmp_path), "--turns", "2"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("verification:")]
    assert "agentium-verifier-fs" in line and "pip install ./plugins/verifier-fs" in line


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


def test_inspect_shows_the_view_after_a_retraction_and_a_reset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentium_harness import VerifiedIdentity

    cfg = write_config(tmp_path)
    ana = VerifiedIdentity("acme", "ana", "test")

    async def go() -> None:
        async with load_runtime(cfg) as runtime:
            await runtime.append(ana, "s/1", [Message(Role.USER, "q"), Message(Role.ASSISTANT, "a")])
            await runtime.reset_view(ana, "s/1", reason="clear")
            await runtime.append(ana, "s/1", [Message(Role.USER, "q2"), Message(Role.ASSISTANT, "a2")])
            await runtime.retract(ana, "s/1", reason="pop")

    anyio.run(go)
    assert main(["session", "inspect", str(cfg), *ids()]) == 0
    assert (
        "  view            from group 2, 1 message(s) retracted (nothing deleted)" in capsys.readouterr().out
    )
    assert main(["session", "inspect", str(cfg), *ids(), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["view_start"], shown["retracted"], shown["next_seq"]) == (2, 1, 4)


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


# ------------------------------------------------------------ demo --dir and --config


@pytest.mark.parametrize(
    "case", ["file", "missing-parent", "parent-is-a-file", "unwritable-parent", "name-too-long"]
)
def test_demo_refuses_a_dir_it_cannot_use_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x", encoding="utf-8")
    target = {
        "file": a_file,
        "missing-parent": tmp_path / "no" / "such" / "dir",
        "parent-is-a-file": a_file / "sub",
        # /proc refuses new folders even for root, who ignores permission bits.
        "unwritable-parent": Path("/proc/agentium-demo-test"),
        # Path.exists() raised ENAMETOOLONG: a traceback, exit 1.
        "name-too-long": tmp_path / ("x" * 5000),
    }[case]
    if case == "unwritable-parent" and not Path("/proc").is_dir():
        pytest.skip("needs /proc")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["demo", "--dir", str(target), "--turns", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"agentium demo: --dir {target}: ")
    assert "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not os.path.exists(target) or target == a_file


def test_demo_creates_only_the_last_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "new"
    assert main(["demo", "--dir", str(target), "--turns", "1"]) == 0
    assert (target / "demo.db").is_file()
    assert "recovered 1 groups" in capsys.readouterr().out


def test_demo_runs_on_a_configured_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, max_groups=2)
    assert main(["demo", "--config", str(cfg), "--turns", "5"]) == 0
    out = capsys.readouterr().out
    assert f"session 'demo-1', config {cfg}" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("turn")]) == 5
    assert "recovered 5 groups (3 archived + 2 resident)" in out  # the config's bound of 2
    assert (tmp_path / "state.db").is_file()  # the configured SQLite file holds it
    assert main(["demo", "--config", str(cfg), "--turns", "1"]) == 0
    assert "session 'demo-2'" in capsys.readouterr().out


def test_demo_runs_on_any_configured_provider(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        '[runtime.resident]\nmax_groups = 1\n[provider]\nplugin = "extractive"\n'
        '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    assert main(["demo", "--config", str(cfg), "--turns", "3"]) == 0
    assert "recovered 3 groups (2 archived + 1 resident)" in capsys.readouterr().out


class _WriteOnlyArchive(InMemoryArchive):
    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(idempotent_append=True)


def test_demo_proof_is_reported_not_checked_when_the_archive_cannot_be_read() -> None:
    archive, store = _WriteOnlyArchive(), InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["a", "b", "c"]),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        tools=demo._tools(),
    )
    out = io.StringIO()
    assert anyio.run(demo._converse, runtime, ["x", "y", "z"], out, "test") is True
    text = out.getvalue()
    assert "proof not checked: archive _WriteOnlyArchive does not declare bounded_reads" in text
    assert "recovered" not in text


def test_demo_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, extra="[memory]\nplugin = 'nope'\n")
    assert main(["demo", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "$.memory.plugin" in err and "Traceback" not in err
    assert not (tmp_path / "state.db").exists()
    assert main(["demo", "--config", str(cfg), "--dir", str(tmp_path)]) == 2
    assert "not both" in capsys.readouterr().err


def test_an_adapters_error_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The error of a failed run was printed as it was: a provider's message quoting what a remote
    # server said could carry escape sequences (a screen clear, colours) to the operator's terminal.
    from agentium_harness._errors import ProviderError

    async def failing(self: ScriptedProvider, request: Any, ctx: Any) -> Any:
        raise ProviderError("server said: \x1b[2J\x1b[31mall good\x1b[0m \u202eevil\nsecond line")

    monkeypatch.setattr(ScriptedProvider, "complete", failing)
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), "--tenant", "t", "--user", "u", "--session", "s", "hi"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err
    assert "\\x1b[2J\\x1b[31mall good" in err and "\\u202eevil\nsecond line" in err


@pytest.mark.parametrize(
    ("extra", "text", "says"),
    [
        (["--grant", "shell"], "hi", "--grant 'shell' names no tool"),
        ([], "", "the TEXT argument is empty"),
        ([], " \n\t", "the TEXT argument is empty"),
    ],
)
def test_run_refuses_a_grant_of_no_tool_and_an_empty_text_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], text: str, says: str
) -> None:
    # Both were accepted: the grant silently did nothing (the command's runtime has no tools), and
    # an empty turn was sent to the model and committed.
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), *ids(), *extra, text]) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err and "Nothing was run" in err
    assert not (tmp_path / "state.db").exists()


def test_demo_fails_with_a_typed_error_when_the_verifier_factory_hangs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo called the ``fs`` verifier's factory on the event loop: a hung one hung the demo."""
    from agentium_harness.plugin_api import AdapterSpec, hookimpl
    from agentium_verifier_fs.config import FsVerifierConfig
    from agentium_verifier_fs.verifier import FsVerifier

    gate, called = threading.Event(), threading.Event()

    def factory(config: FsVerifierConfig) -> FsVerifier:
        called.set()
        gate.wait(30)  # released at the end of the test; 30 s is far past the 0.5 s bound
        return FsVerifier(config)

    @hookimpl
    def agentium_register_verifiers(register: Any) -> None:
        register(AdapterSpec("fs", FsVerifier, FsVerifierConfig, factory=factory))

    module = types.SimpleNamespace(agentium_register_verifiers=agentium_register_verifiers)
    install_only_plugin(
        monkeypatch, module, dist="agtest-hang-fs", value="agtest_hang_fs:main", hook_timeout_s=0.5
    )
    try:
        started = time.monotonic()
        code = main(["demo", "--dir", str(tmp_path), "--turns", "2"])
        took = time.monotonic() - started
    finally:
        gate.set()
    assert called.is_set()
    assert took < 10
    err = capsys.readouterr().err
    assert code == 2, err
    named = "the factory of verifier adapter 'fs' (plugin agtest-hang-fs)"
    assert err.startswith(f"agentium demo: {named} did not return within 0.5s"), err
    assert "Traceback" not in err
