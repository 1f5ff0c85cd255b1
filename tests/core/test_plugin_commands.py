"""Plugin subcommands of the ``agentium`` command line (the ``agentium_register_commands`` hook).

A plugin registers ``CliCommand``s; ``agentium <name> ...`` parses with the
arguments the plugin declared and runs it, its Agentium errors are reported
like the core's (exit 2, message on stderr), a core command's name or a
malformed one is refused at registration, and the core's commands never load
plugins.
"""

from __future__ import annotations

import argparse
import types
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO

import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness._cli import build_parser, main, plugin_commands
from agentium_harness._plugins.commands import CORE_COMMANDS
from agentium_harness.plugin_api import CliCommand, PluginRegistry, hookimpl


def _configure(parser: argparse.ArgumentParser) -> None:
    inner = parser.add_subparsers(dest="action", required=True)
    greet = inner.add_parser("greet")
    greet.add_argument("who")
    greet.add_argument("--fail", action="store_true")


def _run(args: argparse.Namespace) -> int:
    if args.fail:
        raise InvalidArgumentError(f"cannot greet {args.who}; nothing was done")
    print(f"hello {args.who}")
    return 0


def _plugin(*commands: CliCommand) -> types.ModuleType:
    module = types.ModuleType("agtest_commands")

    @hookimpl
    def agentium_register_commands(register: object) -> None:
        for command in commands:
            register(command)  # type: ignore[operator]

    module.agentium_register_commands = agentium_register_commands  # type: ignore[attr-defined]
    return module


def _registry(*commands: CliCommand) -> PluginRegistry:
    return PluginRegistry.load(autoload=False, extra_plugins=[("agentium-test-commands", _plugin(*commands))])


GREETER = CliCommand(name="greeter", help="say hello", configure=_configure, run=_run)


def test_a_plugin_subcommand_parses_its_arguments_and_runs() -> None:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["greeter", "greet", "ana"], registry=_registry(GREETER))
    assert status == 0, err.getvalue()
    assert out.getvalue() == "hello ana\n"


def test_an_agentium_error_from_a_plugin_command_exits_2_with_its_message() -> None:
    err = StringIO()
    with redirect_stderr(err):
        status = main(["greeter", "greet", "bob", "--fail"], registry=_registry(GREETER))
    assert status == 2
    assert err.getvalue() == "agentium greeter: cannot greet bob; nothing was done\n"


def test_help_lists_plugin_subcommands() -> None:
    out = StringIO()
    with redirect_stdout(out):
        assert main(["--help"], registry=_registry(GREETER)) == 0
    assert "greeter" in out.getvalue() and "say hello" in out.getvalue()


def test_a_plugin_command_whose_configure_exits_breaks_no_other_command() -> None:
    # configure() calling parser.error() (or sys.exit) raised SystemExit out of main(): every
    # plugin command and ``agentium --help`` exited with the broken plugin's usage message.
    def refuse(parser: argparse.ArgumentParser) -> None:
        parser.error("cannot declare anything")

    broken = CliCommand(name="broken", help="exits in configure", configure=refuse, run=_run)
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["greeter", "greet", "ana"], registry=_registry(broken, GREETER))
    assert status == 0 and out.getvalue() == "hello ana\n"
    assert "plugin command 'broken' could not declare its arguments: it exited" in err.getvalue()


@pytest.mark.parametrize(
    ("returned", "status", "says"),
    [(None, 0, ""), (3, 3, ""), (300, 1, "returned 300"), (True, 1, "returned True"), ("ok", 1, "'ok'")],
)
def test_what_a_plugin_command_returns_becomes_a_truthful_exit_status(
    returned: object, status: int, says: str
) -> None:
    # The value went to sys.exit as it was: 300 exited 44 (modulo 256) and a string exited 1
    # after printing itself as if it were the error.
    command = CliCommand(
        name="returner", help="returns a value", configure=lambda p: None, run=lambda a: returned
    )
    err = StringIO()
    with redirect_stderr(err):
        assert main(["returner"], registry=_registry(command)) == status
    assert says in err.getvalue() and ("not an exit status" in err.getvalue()) == bool(says)


@pytest.mark.parametrize("name", ["run", "plugins", "Bad", "9lives", "with space", "x" * 33, ""])
def test_core_and_malformed_names_are_refused_at_registration(name: str) -> None:
    registry = _registry(CliCommand(name=name, help="h", configure=_configure, run=_run))
    assert registry.commands() == ()
    [problem] = registry.problems
    assert problem.distribution == "agentium-test-commands"
    assert "agentium_register_commands" in str(problem)


def test_a_name_registered_twice_keeps_the_first() -> None:
    second = CliCommand(name="greeter", help="another", configure=_configure, run=lambda a: 1)
    registry = _registry(GREETER, second)
    assert [c for c, _ in registry.commands()] == [GREETER]
    assert len(registry.problems) == 1


def test_core_commands_do_not_load_plugins_and_the_reserved_names_match_the_parser() -> None:
    class Exploding:
        def commands(self) -> object:
            raise AssertionError("plugins were loaded for a core command")

    for word in sorted(CORE_COMMANDS):
        assert plugin_commands([word, "--help"], Exploding()) == []  # type: ignore[arg-type]
    choices = next(a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(choices) == CORE_COMMANDS
