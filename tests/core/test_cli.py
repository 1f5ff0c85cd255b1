"""The ``agentium`` command: ``--version``, ``plugins`` and ``check``.

Most tests call :func:`agentium_harness._cli.main` in-process; the last ones run
the installed console script in a subprocess, as a user would.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from _fakedist import fakedist

from agentium_harness._cli import main, options_report
from agentium_harness._config import source as config_source
from agentium_harness._plugins.spec import PATH_OPTION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agentium.toml"
BROKEN = ROOT / "examples" / "broken.toml"
VERSION = importlib.metadata.version("agentium-harness")


@pytest.fixture
def fixture_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Install good, importfail and dup; allow the first two and block dup through the environment."""
    fakedist.forget_modules()
    site = tmp_path / "site"
    site.mkdir()
    fakedist.install(site, "good", "importfail", "dup")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("AGENTIUM_PLUGINS", "agentium-test-good,agentium-test-importfail,agentium-test-dup")
    monkeypatch.setenv("AGENTIUM_DISABLE_PLUGINS", "agentium-test-dup")
    yield site
    fakedist.forget_modules()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------ in-process


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--version")
    assert (code, out, err) == (0, f"agentium-harness {VERSION}\n", "")


def test_no_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys)
    assert code == 2
    assert out == ""
    assert "usage: agentium" in err and "check" in err and "plugins" in err


@pytest.mark.parametrize("argv", [["check", "--bogus"], ["plugins", "--bogus"], ["no-such-command"]])
def test_usage_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert "usage: agentium" in err
    assert "Traceback" not in err


def test_plugins_json_lists_builtins_with_capabilities(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "plugins", "--json")
    assert code == 0 and err == ""
    report = json.loads(out)
    assert set(report) == {"plugins", "problems", "skipped"}
    core = next(p for p in report["plugins"] if p["distribution"] == "agentium-harness")
    assert core["version"] == VERSION
    assert core["status"] == "ok"
    assert core["modules"] == ["agentium_harness.adapters.builtin"]
    adapters = {(a["kind"], a["name"]): a for a in core["adapters"]}
    archive = adapters[("archive", "memory")]
    assert archive["capabilities"] == {
        "durable": False,
        "idempotent_append": True,
        "bounded_reads": True,
        "health_check": True,
        "erasure": True,
    }
    assert archive["adapter_class"] == "agentium_harness.adapters.memory.InMemoryArchive"
    assert archive["config_class"] == "agentium_harness.adapters.memory.InMemoryArchiveConfig"
    assert archive["conflicted"] is False
    assert archive["description"]
    assert adapters[("session_store", "memory")]["capabilities"]["compare_and_set"] is True
    assert "archive" in core["kinds"] and "session_store" in core["kinds"]
    assert "agentium_register_archives" in core["hooks"]


def test_plugins_json_reports_problems_and_skipped_deterministically(
    capsys: pytest.CaptureFixture[str], fixture_plugins: Path
) -> None:
    code, out, _ = _run(capsys, "plugins", "--json")
    assert code == 0
    report = json.loads(out)
    distributions = [p["distribution"] for p in report["plugins"]]
    assert distributions == sorted(distributions)
    assert {"agentium-harness", "agentium-test-good", "agentium-test-importfail"} <= set(distributions)
    failed = next(p for p in report["plugins"] if p["distribution"] == "agentium-test-importfail")
    assert (failed["status"], failed["adapters"], failed["version"]) == ("failed", [], "0.3.1")
    (problem,) = [p for p in report["problems"] if p["distribution"] == "agentium-test-importfail"]
    assert problem["stage"] == "import"
    assert problem["version"] == "0.3.1"
    assert "RuntimeError" in problem["error"]
    assert set(problem) == {"distribution", "version", "stage", "kind", "name", "hook", "error"}
    (skipped,) = [s for s in report["skipped"] if s["distribution"] == "agentium-test-dup"]
    assert skipped == {
        "distribution": "agentium-test-dup",
        "version": "2.0.0",
        "entry_point": "dup = agtest_dup",
        "reason": "blocked by AGENTIUM_DISABLE_PLUGINS",
    }
    assert "agtest_dup" not in sys.modules
    good = next(p for p in report["plugins"] if p["distribution"] == "agentium-test-good")
    assert good["kinds"] == sorted(good["kinds"])
    assert "agentium_memory_event" in good["hooks"]
    # The same installation gives byte-identical output.
    fakedist.forget_modules()
    _, again, _ = _run(capsys, "plugins", "--json")
    assert again == out


def test_plugins_text_output(capsys: pytest.CaptureFixture[str], fixture_plugins: Path) -> None:
    code, out, _ = _run(capsys, "plugins")
    assert code == 0
    assert f"agentium-harness {VERSION} [ok]" in out
    assert "archive        memory" in out
    assert "capabilities: idempotent_append, bounded_reads, health_check, erasure" in out
    assert "agentium-test-importfail 0.3.1 [failed]" in out
    assert "problems:" in out and "[import]: RuntimeError" in out
    assert "skipped:" in out and "agentium-test-dup 2.0.0: blocked by AGENTIUM_DISABLE_PLUGINS" in out


def test_check_valid_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "check", str(EXAMPLE))
    assert (code, err) == (0, "")
    assert out.startswith(f"{EXAMPLE}: valid\n")
    assert "archive" in out and "session_store" in out and "provider" in out


def test_check_valid_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", str(EXAMPLE), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["valid"] is True and report["errors"] == []
    assert report["config"] == str(EXAMPLE)
    assert set(report["components"]) == {"provider", "archive", "session_store"}
    assert report["components"]["archive"]["distribution"] == "agentium-harness"
    assert set(report["components"]["archive"]) == {"kind", "plugin", "distribution", "version"}


def test_check_broken_example_lists_every_error_with_its_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "check", str(BROKEN))
    assert code == 2
    assert out == ""
    assert err.startswith(f"{BROKEN}: ")
    for path in ("$.runtime.max_turns", "$.runtime.resident.max_groups", "$.provider.plugin", "$.archive"):
        assert f"  {path}" in err
    assert "did you mean 'scripted'?" in err
    assert "Traceback" not in err


def test_check_broken_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "check", str(BROKEN), "--json")
    assert code == 2 and err == ""
    report = json.loads(out)
    assert report["valid"] is False
    assert report["components"] == {}
    paths = [e["path"] for e in report["errors"]]
    assert paths == sorted(paths)
    assert {"$.runtime.max_turns", "$.runtime.resident.max_groups", "$.provider.plugin"} <= set(paths)
    assert all(set(e) == {"path", "message"} for e in report["errors"])


def test_check_missing_file_is_a_user_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, "check", str(tmp_path / "nope.toml"))
    assert code == 2 and out == ""
    assert "$: cannot read config file" in err
    assert "Traceback" not in err


def test_check_builds_nothing_and_creates_no_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    db = work / "state" / "agentium.db"
    good = work / "good.toml"
    good.write_text(EXAMPLE.read_text().replace("${AGENTIUM_DB:-agentium.db}", str(db)))
    bad = work / "bad.toml"
    bad.write_text(good.read_text() + "\n[memory]\nplugin = 3\n")
    before = sorted(p.name for p in work.rglob("*"))
    assert _run(capsys, "check", str(good))[0] == 0
    assert _run(capsys, "check", str(bad))[0] == 2
    assert sorted(p.name for p in work.rglob("*")) == before
    assert not db.parent.exists()


# ---------------------------------------------------- installed console script


def _console_script() -> str:
    candidate = Path(sys.executable).with_name("agentium")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("agentium")
    assert found, "the agentium console script is not installed (pip install -e ./core)"
    return found


def _script(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    return subprocess.run(
        [_console_script(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_console_script_plugins_json_lists_the_builtins() -> None:
    result = _script("plugins", "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    core = next(p for p in report["plugins"] if p["distribution"] == "agentium-harness")
    adapters = {(a["kind"], a["name"]): a["capabilities"] for a in core["adapters"]}
    assert adapters[("archive", "memory")]["idempotent_append"] is True
    assert adapters[("session_store", "memory")]["compare_and_set"] is True


def test_console_script_check_examples(tmp_path: Path) -> None:
    ok = _script("check", "examples/agentium.toml")
    assert ok.returncode == 0, ok.stderr
    assert "examples/agentium.toml: valid" in ok.stdout
    broken = _script("check", "examples/broken.toml")
    assert broken.returncode == 2
    assert "$.runtime.max_turns" in broken.stderr
    assert "$.runtime.resident.max_groups" in broken.stderr
    assert "$.provider.plugin" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_console_script_version() -> None:
    result = _script("--version")
    assert (result.returncode, result.stdout) == (0, f"agentium-harness {VERSION}\n")


# ------------------------------------------------------------- plugin options


def test_options_report_survives_a_factory_that_raises_and_a_repr_that_raises() -> None:
    # A plugin's default factory reading an unset variable (or a default whose repr raises)
    # made `agentium plugins`, the command that diagnoses plugins, end in a traceback.
    class Opaque:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    def unset() -> str:
        raise KeyError("PLUGIN_HOME")

    @attrs.frozen
    class Options:
        home: str = attrs.field(factory=unset)
        opaque: object = attrs.field(default=Opaque())

    report = {o["name"]: o for o in options_report(Options)}
    assert report["home"]["default"] == "(computed; its factory failed: KeyError: 'PLUGIN_HOME')"
    assert report["opaque"]["default"] == "<Opaque that cannot be shown>"


def test_options_report_does_not_show_a_computed_default_its_field_hides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plugin defaulting a credential from the environment, its field hidden from the class's repr
    # (repr=False, or a repr of its own that redacts it), had the secret printed by
    # `agentium plugins` and `--json`: the factory's value was shown as the default.
    monkeypatch.setenv("AGTEST_API_KEY", "sk-live-0123456789abcdef")

    def redacted(value: object) -> str:
        return "'***'"

    @attrs.frozen
    class Options:
        api_key: str = attrs.field(factory=lambda: os.environ["AGTEST_API_KEY"], repr=False)
        token: str = attrs.field(factory=lambda: os.environ["AGTEST_API_KEY"], repr=redacted)
        region: str = attrs.field(factory=lambda: "eu-1")
        password: str | None = attrs.field(default=None, repr=False)

    report = {o["name"]: o for o in options_report(Options)}
    assert "sk-live" not in json.dumps(report)
    hidden = "(computed; not shown: the option hides its value)"
    assert report["api_key"]["default"] == hidden and report["token"]["default"] == hidden
    assert report["region"]["default"] == "eu-1"  # a field shown in its repr shows its computed default
    assert report["password"]["default"] is None  # a default written in the plugin's code is shown


def test_plugins_json_lists_each_adapters_options_with_types_and_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "plugins", "--json")
    assert code == 0
    core = next(p for p in json.loads(out)["plugins"] if p["distribution"] == "agentium-harness")
    adapters = {(a["kind"], a["name"]): a for a in core["adapters"]}
    sqlite = {o["name"]: o for o in adapters[("archive", "sqlite")]["options"]}
    assert sqlite["busy_timeout_ms"] == {
        "name": "busy_timeout_ms",
        "type": "int",
        "required": False,
        "default": 5000,
        "path": False,
    }
    assert sqlite["path"]["type"] == "str" and sqlite["path"]["default"] == "agentium.db"
    scripted = {o["name"]: o for o in adapters[("provider", "scripted")]["options"]}
    assert scripted["responses"]["type"] == "list[ScriptedReply]" and scripted["responses"]["default"] == []
    assert scripted["path"]["type"] == "str | None" and scripted["path"]["default"] is None
    assert scripted["cycle"] == {
        "name": "cycle",
        "type": "bool",
        "required": False,
        "default": False,
        "path": False,
    }
    assert adapters[("archive", "memory")]["options"] == []


def test_plugins_text_lists_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plugins")
    assert code == 0
    assert "option busy_timeout_ms: int = 5000" in out
    assert "option path: str | None = null" in out
    assert "options: none" in out


def test_options_report_marks_required_path_and_computed_options() -> None:
    @attrs.frozen
    class Options:
        endpoint: str
        cache: str = attrs.field(default="c.db", metadata={PATH_OPTION: True})
        tags: tuple[str, ...] = ("a",)
        limits: dict[str, int] = attrs.field(factory=lambda: {"n": 1})
        odd: object = attrs.field(factory=object)

    report = {o["name"]: o for o in options_report(Options)}
    assert report["endpoint"] == {
        "name": "endpoint",
        "type": "str",
        "required": True,
        "default": None,
        "path": False,
    }
    assert report["cache"]["path"] is True and report["cache"]["default"] == "c.db"
    assert report["tags"]["type"] == "tuple[str, ...]" and report["tags"]["default"] == ["a"]
    assert report["limits"]["type"] == "dict[str, int]" and report["limits"]["default"] == {"n": 1}
    assert report["odd"]["default"].startswith("<object object")
    assert options_report(int) == []


def test_plugins_lists_fixture_plugin_options(
    capsys: pytest.CaptureFixture[str], fixture_plugins: Path
) -> None:
    code, out, _ = _run(capsys, "plugins")
    assert code == 0
    assert "option journal: str | None = null (path, relative to the config file)" in out


# ------------------------------------------------------------- bounded input


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_check_dev_zero_exits_2_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "check", "/dev/zero")
    assert (code, out) == (2, "")
    assert "$: config file larger than 1048576 bytes" in err and "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("command", [["check"], ["eval", "{config}"]])
def test_a_named_pipe_nobody_writes_to_is_refused_at_once(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Opening a FIFO waits for a writer: `agentium check FIFO` (every command given one as CONFIG)
    # and `agentium eval CONFIG FIFO` hung for good instead of reading at most 1 MiB of it.
    # In this process, with the writer's wait cut from 10 s to 0.5 (both runs waited it out).
    monkeypatch.setattr(config_source, "PIPE_WAIT_S", 0.5)
    config = tmp_path / "agentium.toml"
    config.write_text(
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = [a.replace("{config}", str(config)) for a in command]
    status: list[int] = []
    # A thread, so a command that hangs on the pipe fails this test instead of the whole run.
    worker = threading.Thread(target=lambda: status.append(main([*argv, str(fifo)])), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        with open(fifo, "wb"):  # lets the hung open return, so the thread ends
            pass
        pytest.fail(f"agentium {' '.join(command)} on a named pipe did not return within 60 s")
    out, err = capsys.readouterr()
    assert status == [2], err
    assert "a named pipe nothing was written to within 0.5s" in out + err
    assert "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_config_written_into_a_pipe_is_read(tmp_path: Path) -> None:
    # `agentium check pipe & make-config > pipe`: a pipe whose writer comes a little later is read.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    text = (
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n'
    )

    def write() -> None:
        time.sleep(0.5)  # after the command opened it: the command waits for its writer
        with open(fifo, "w", encoding="utf-8") as handle:
            handle.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    from agentium_harness import load_config

    assert load_config(fifo).provider.plugin == "scripted"
    writer.join(30)


def test_check_deeply_nested_file_exits_2_without_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 500 + "]" * 500 + "\n", encoding="utf-8")
    code, _, err = _run(capsys, "check", str(path))
    assert code == 2
    assert "nested more than 32 levels deep (line 1)" in err and "Traceback" not in err
    code, out, _ = _run(capsys, "check", "--json", str(path))
    assert code == 2 and json.loads(out)["errors"][0]["path"] == "$"


def test_plugins_text_shows_a_plugins_text_with_control_characters_escaped(
    capsys: pytest.CaptureFixture[str], fixture_plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A description, an option's default and a load problem are a plugin's text: printed raw,
    # an escape sequence in them reached the terminal and a newline forged a line of the listing.
    from agentium_harness._cli import plugins

    real = plugins.plugins_report

    def hostile(registry: Any) -> dict[str, Any]:
        report = real(registry)
        adapter = report["plugins"][0]["adapters"][0]
        adapter["description"] = "fast\x1b[2J\nagentium-evil 6.6.6 [ok]"
        adapter["options"] = [
            {"name": "mode", "type": "str", "required": False, "default": "a\u009b31m", "path": False}
        ]
        report["problems"][0]["error"] = "ImportError: \x1b]0;owned\x07\u202e"
        report["skipped"][0]["reason"] = "blocked\x1b[8m"
        return report

    monkeypatch.setattr(plugins, "plugins_report", hostile)
    code, out, _ = _run(capsys, "plugins")
    assert code == 0
    for raw in ("\x1b", "\x07", "\u202e", "\u009b", "\nagentium-evil"):
        assert raw not in out, raw
    assert "fast\\x1b[2J\\nagentium-evil 6.6.6 [ok]" in out
    assert 'option mode: str = "a\\x9b31m"' in out
    assert "ImportError: \\x1b]0;owned\\x07\\u202e" in out
    assert "blocked\\x1b[8m" in out


@pytest.mark.parametrize("valid", [True, False], ids=["valid", "invalid"])
def test_check_writes_control_characters_in_the_config_name_as_escapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, valid: bool
) -> None:
    # `agentium check *.toml` in a folder someone else filled: the name reached the terminal raw
    # (an escape sequence), where every other command's message writes it as an escape.
    path = tmp_path / "a\x1b]0;owned\x07\x1b[2J.toml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8") if valid else "x = [", encoding="utf-8")
    code, out, err = _run(capsys, "check", str(path))
    assert code == (0 if valid else 2)
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "a\\x1b]0;owned\\x07\\x1b[2J.toml: " in (out if valid else err)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_config_name_that_is_not_utf8_is_printed_not_a_traceback(tmp_path: Path, as_json: bool) -> None:
    # A file name of bytes that are not UTF-8 reaches Python as lone surrogates; a UTF-8 locale
    # other than C.UTF-8 (en_US.UTF-8) writes stdout strictly: UnicodeEncodeError, a traceback.
    path = tmp_path / "\udcff.toml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    env["PYTHONIOENCODING"] = "utf-8:strict"
    argv = ["check", *(["--json"] if as_json else []), str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "agentium_harness", *argv],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    out = done.stdout.decode("utf-8")  # valid UTF-8
    if as_json:
        assert json.loads(out)["config"] == str(path)  # the name as it is, in a JSON escape
    else:
        assert out.startswith(str(tmp_path / "\\udcff.toml: valid"))


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "utf-8:strict"])
def test_json_output_stays_valid_json_on_a_stdout_that_cannot_encode_the_name(
    tmp_path: Path, encoding: str
) -> None:
    # stdout's backslashreplace writes \xe9 for a character its encoding lacks: valid in a line of
    # text, but an invalid escape in JSON (exit 0 with a document no reader takes). The JSON form
    # escapes such a character itself, and a name the stream can write (UTF-8's) stays as it is.
    path = tmp_path / "caf\u00e9-\u03a9-\U0001f600.toml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    env["PYTHONIOENCODING"] = encoding
    done = subprocess.run(
        [sys.executable, "-m", "agentium_harness", "check", "--json", str(path)],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    out = done.stdout.decode(encoding.split(":")[0])
    assert json.loads(out)["config"] == str(path)
    assert (str(path) in out) == encoding.startswith("utf-8")  # unchanged where it can be written


def test_a_demo_folder_name_that_is_not_utf8_is_printed_not_a_traceback(tmp_path: Path) -> None:
    # Every line a command prints with a path in it, not only check's: the demo's first line
    # names its database, and a strict stdout raised UnicodeEncodeError there (exit 1).
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    env["PYTHONIOENCODING"] = "utf-8:strict"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentium_harness",
            "demo",
            "--dir",
            str(tmp_path / "\udcffd"),
            "--turns",
            "1",
        ],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert "\\udcffd" in done.stdout.decode("utf-8")
