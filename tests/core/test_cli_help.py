"""Every ``agentium`` help text reads as plain text, and ``docs/cli.md``'s synopsis is the parser's own.

Help comes from docstrings written in reST for the API reference; in a
terminal, ``:class:`~x.Y``` and double backquotes are noise. The synopsis at
the top of ``docs/cli.md`` is generated from each subcommand's usage (what
``--help`` prints), so a new command or option cannot be left out of it.
"""

from __future__ import annotations

import re
from pathlib import Path

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
