"""Every ``agentium`` help text reads as plain text, and ``docs/cli.md``'s synopsis is the parser's own.

Help comes from docstrings written in reST for the API reference; in a
terminal, ``:class:`~x.Y``` and double backquotes are noise. The synopsis at
the top of ``docs/cli.md`` is generated from each subcommand's usage (what
``--help`` prints), so a new command or option cannot be left out of it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentium_harness._cli import build_parser, main, plugin_commands
from agentium_harness.testing._cli_docs import BEGIN, END, command_paths, render_synopsis

ROOT = Path(__file__).resolve().parents[2]

#: reST that must not reach a terminal: roles, double-backquoted literals, substitutions, directives.
MARKUP = re.compile(r":[a-z]+:`|``|\|[a-z_]+\||^\s*\.\. [a-z]+::", re.M)

#: Every subcommand path, plugin commands of the installed plugins included (postgres migrate ...).
PATHS = [path for path, _ in command_paths(build_parser(plugin_commands(["(a plugin command)"])))]


def test_the_paths_cover_nested_and_plugin_commands() -> None:
    assert ("session", "inspect") in PATHS and ("memory", "remember") in PATHS and ("eval",) in PATHS


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "agentium")
def test_help_has_no_rest_markup(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: agentium")
    found = MARKUP.findall(out)
    assert not found, f"agentium {' '.join(path)} --help shows reST markup {found}:\n{out}"


def test_markup_is_stripped_from_a_plugin_commands_help(capsys: pytest.CaptureFixture[str]) -> None:
    from agentium_harness.plugin_api import CliCommand

    command = CliCommand(
        name="shout",
        help="say ``it`` loudly",
        description="Uses :class:`~agentium_harness.HarnessRuntime` and :func:`the loader <x.load>`.",
        configure=lambda parser: parser.add_argument("--level", help="see ``--help``"),
        run=lambda args: 0,
    )
    parser = build_parser([command])
    sub = next(p for path, p in command_paths(parser) if path == ("shout",))
    text = sub.format_help()
    assert "Uses HarnessRuntime and the loader." in text and "see --help" in text
    assert not MARKUP.findall(parser.format_help() + text)


def _synopsis_block(text: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END, start)].strip("\n") + "\n"


def test_docs_cli_synopsis_is_generated_from_the_parser() -> None:
    current = _synopsis_block((ROOT / "docs" / "cli.md").read_text("utf-8"))
    assert current == render_synopsis(), (
        "docs/cli.md's synopsis is stale: run python -m agentium_harness.testing._cli_docs docs/cli.md"
    )


def test_the_synopsis_names_every_core_command_and_option() -> None:
    synopsis = render_synopsis()
    every = list(command_paths(build_parser(())))
    for path, parser in every:
        if any(p[: len(path)] == path and len(p) > len(path) for p, _ in every):
            continue  # a group (session, memory, recall): its leaves are checked
        assert f"agentium {' '.join(path)} " in synopsis
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in synopsis, f"{flag} of agentium {' '.join(path)} is not in the synopsis"


# ------------------------------------------------------------------ samples in docs/cli.md

CLI_MD = ROOT / "docs" / "cli.md"


def _blocks(language: str) -> list[str]:
    """The bodies of the ``language`` fenced blocks of docs/cli.md, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", CLI_MD.read_text("utf-8"), re.M | re.S)


def _core_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The samples show a machine with only agentium-harness installed.
    monkeypatch.setenv("AGENTIUM_PLUGINS", "agentium-harness")
    monkeypatch.delenv("AGENTIUM_DISABLE_PLUGINS", raising=False)
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("config", ["examples/agentium.toml", "examples/broken.toml"])
def test_the_check_samples_are_what_check_prints(
    config: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _core_only(monkeypatch)
    [sample] = [b for b in _blocks("text") if b.startswith("$ agentium check examples/agentium.toml")]
    shown = sample.split(f"$ agentium check {config}\n", 1)[1].split("\n\n$ ", 1)[0].rstrip("\n")
    main(["check", config])
    out, err = capsys.readouterr()
    assert shown == (out + err).rstrip("\n")


def test_the_check_json_sample_is_a_part_of_what_check_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _core_only(monkeypatch)
    [sample] = [json.loads(b) for b in _blocks("json") if '"config": "examples/broken.toml"' in b]
    main(["check", "--json", "examples/broken.toml"])
    real = json.loads(capsys.readouterr().out)
    assert (
        set(sample) == set(real) and sample["config"] == real["config"] and sample["valid"] is real["valid"]
    )
    messages = {e["path"]: e["message"] for e in real["errors"]}
    for error in sample["errors"]:
        assert messages[error["path"]].startswith(error["message"].removesuffix("..."))


def test_the_plugins_samples_are_what_plugins_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _core_only(monkeypatch)
    main(["plugins"])
    text = capsys.readouterr().out.splitlines()
    [sample] = [b for b in _blocks("text") if b.startswith("$ agentium plugins")]
    core_lines = sample.split("\n\nproblems:", 1)[0].splitlines()[1:]
    for line in core_lines:
        if line.strip() != "...":
            assert line in text, f"docs/cli.md shows {line!r}; agentium plugins prints no such line"
    main(["plugins", "--json"])
    real = json.loads(capsys.readouterr().out)
    [shown] = [json.loads(b) for b in _blocks("json") if '"plugins": [' in b]
    assert set(shown) == set(real)
    [core] = real["plugins"]
    [shown_core] = shown["plugins"]
    assert set(shown_core) == set(core) and shown_core["kinds"] == core["kinds"]
    assert shown_core["modules"] == core["modules"]
    assert [h for h in shown_core["hooks"] if h != "..."] == [
        h for h in core["hooks"] if h in shown_core["hooks"]
    ]
    adapters = {(a["kind"], a["name"]): a for a in core["adapters"]}
    for adapter in shown_core["adapters"]:
        actual = adapters[(adapter["kind"], adapter["name"])]
        for key, value in adapter.items():
            if key != "...":
                assert value == actual[key], (adapter["name"], key)
    skipped_keys = {"distribution", "version", "entry_point", "reason"}
    assert all(set(s) == skipped_keys for s in shown["skipped"])


# ------------------------------------------------------------------ commands the docs show

#: ``agentium <words>`` at a line start, after a backquote, a ``$ `` prompt or a table bar.
DOC_COMMAND = re.compile(r"(?:^|`|\$ |\| )agentium ((?:[a-z][a-z-]*)(?: [^`\n|#]*)?)")


def _doc_files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if p.name not in ("api.md", "contracts.md")]
    readmes = [*ROOT.glob("plugins/**/README.md"), *ROOT.glob("integrations/**/README.md")]
    return sorted([*docs, ROOT / "README.md", ROOT / "CONTRIBUTING.md", *readmes])


def _resolve(words: list[str], parser: Any) -> tuple[Any, tuple[str, ...]]:
    path: tuple[str, ...] = ()
    for word in words:
        subs = dict(command_paths(parser))
        child = next((p for q, p in subs.items() if q == (word,)), None)
        if child is None:
            break
        parser, path = child, (*path, word)
    return parser, path


def test_every_command_the_docs_show_exists_with_its_options() -> None:
    problems, seen = [], 0
    full = build_parser(plugin_commands(["(a plugin command)"]))
    for doc in _doc_files():
        for n, line in enumerate(doc.read_text("utf-8").splitlines(), 1):
            for match in DOC_COMMAND.finditer(line):
                seen += 1
                words = match.group(1).split()
                parser, path = _resolve(words, full)
                where = f"{doc.relative_to(ROOT)}:{n}"
                if not path:
                    problems.append(f"{where}: no command agentium {words[0]}")
                    continue
                options = {o for action in parser._actions for o in action.option_strings}
                for word in words[len(path) :]:
                    flag = word.strip("`.,;:()[]").split("=")[0]
                    if flag.startswith("--") and flag not in options:
                        problems.append(f"{where}: agentium {' '.join(path)} has no {flag}")
    assert seen > 100  # the scan finds the commands
    assert problems == [], "\n".join(problems)
