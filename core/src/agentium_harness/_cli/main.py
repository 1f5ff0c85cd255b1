"""The ``agentium`` command.

Each subcommand is a function ``cmd_<name>(args) -> int`` plus an
``_add_<name>(subparsers)`` that declares its arguments; :func:`build_parser`
lists them. Add a subcommand by writing both and one line in
:func:`build_parser`.

Plugins add subcommands through the ``agentium_register_commands`` hook
(:class:`~agentium_harness._plugins.commands.CliCommand`); they are loaded
only when the first word is not one of the core's commands.

Exit codes: 0 success, 2 a problem the user can fix (bad arguments, invalid
config, any :class:`~agentium_harness._errors.AgentiumError`). User errors print
a message on stderr, never a traceback. Anything else is a bug and keeps
Python's traceback (exit 1) so it can be reported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .. import __version__
from .._codec import unstructure
from .._config.runtime import build_runtime
from .._demo import run_demo, run_demo_config
from .._engine.runtime import MigrationReport, ReconcileReport, SessionView
from .._errors import AgentiumError, InvalidArgumentError
from .._observe.spans import unattributed
from .._plugins.commands import CORE_COMMANDS, CliCommand
from .._plugins.deadline import call_with_deadline, process_hook_timeout
from .._plugins.registry import BUILTIN_DISTRIBUTION, PluginRegistry
from .._text import error_text, shorten
from .check import add_check_command
from .erase import add_erase_commands, erasure_lines
from .eval import add_eval_commands
from .hiding import hidden_view
from .interrupt import EXIT_INTERRUPTED, interrupted, interrupts, run_async
from .memory import add_memory_commands
from .output import (
    EXIT_OK,
    EXIT_USAGE,
    CommandParser,
    complete,
    discover_config,
    hide_env,
    json_error,
    load_hiding,
    plain_help,
    print_json,
    reading_only,
    shown,
    shown_lines,
    unless_missing,
)
from .plugins import add_plugins_command, options_report, plugins_report
from .recall import add_recall_commands
from .run import add_identity_args, add_run_command, identity, recall_scope
from .verify import add_verify_commands

__all__ = [
    "DEFAULT_DEMO_DIR",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "options_report",
    "plugin_commands",
    "plugins_report",
]

Command = Callable[[argparse.Namespace], int]


def _version() -> str:
    try:
        return importlib.metadata.version(BUILTIN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return __version__


# ---------------------------------------------------------------- runtime


def cmd_demo(args: argparse.Namespace) -> int:
    """Run a scripted conversation and prove nothing was lost.

    On the embedded SQLite defaults (in ``--dir``), or with ``--config FILE``
    on the adapters that file configures.
    """
    if not 1 <= args.turns <= 10_000:
        sys.stderr.write("agentium demo: --turns must be between 1 and 10000\n")
        return EXIT_USAGE
    if args.config is not None:
        if args.dir is not None:
            sys.stderr.write(
                "agentium demo: give --dir or --config, not both (the config says where data goes)\n"
            )
            return EXIT_USAGE
        # Loaded here so main() hides its ${VAR} values from an adapter's error (load_hiding).
        ok = run_async(run_demo_config, load_hiding(args), args.turns, sys.stdout)
    else:
        ok = run_async(run_demo, Path(args.dir or DEFAULT_DEMO_DIR), args.turns, sys.stdout)
    return EXIT_OK if ok else 1


#: Where ``agentium demo`` keeps its database without ``--dir``.
DEFAULT_DEMO_DIR = "agentium-demo"


def _add_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the embedded demo", description=cmd_demo.__doc__)
    parser.add_argument(
        "--dir",
        default=None,
        help=f"folder for the demo database (default ./{DEFAULT_DEMO_DIR}; its parent must exist)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="run on the adapters this TOML config file configures instead",
    )
    parser.add_argument("--turns", type=int, default=12, help="number of turns (default 12)")
    parser.set_defaults(func=cmd_demo)


def cmd_session_inspect(args: argparse.Namespace) -> int:
    """Show a stored session: boundary, resident groups, archived count, snapshot revision."""
    runtime = build_runtime(reading_only(load_hiding(args)))  # an inspection creates no database

    async def go() -> SessionView:
        async with runtime:
            return await runtime.inspect_session(identity(args), args.session)

    view = run_async(go)
    # The divergence's detail is the archive's error, a gap's a reader's: either may repeat the
    # options the adapter was given. Hidden as printed: the records bound their detail's length.
    # The tombstones' stores' details and notes and the interruptions' details (--json shows them)
    # are hidden in the view.
    hide = hide_env(args)
    view = hidden_view(view, hide)
    if args.json:
        data = unstructure(view)
        for item in [data["divergence"] or {}, *(data["summary"] or {}).get("gaps", ())]:
            if "detail" in item:
                item["detail"] = hide(item["detail"])
        print_json(data, sys.stdout)
    elif not view.exists:
        sys.stdout.write(f"session {args.session!r}: not stored\n")
        sys.stdout.write("".join(line + "\n" for line in erasure_lines(view)))
    else:
        scope = "legacy (no memory scope)" if view.memory_scope is None else view.memory_scope.key()
        sys.stdout.write(
            f"session {args.session!r}\n"
            f"  revision        {view.revision}\n"
            f"  format version  {view.format_version}\n"
            f"  memory scope    {scope}\n"
            f"  boundary        {view.boundary}\n"
            f"  archived groups {view.archived_count}\n"
            f"  resident groups {len(view.resident_seqs)} {list(view.resident_seqs)}\n"
            f"  next seq        {view.next_seq}\n"
            f"  state           {view.state.value}\n"
        )
        if view.view_start or view.retracted:
            sys.stdout.write(
                f"  view            from group {view.view_start}, {view.retracted} message(s) retracted "
                "(nothing deleted)\n"
            )
        for seq, why in view.interrupted:
            sys.stdout.write(
                f"  group {seq} has no answer: its turn stopped after its tools ran ({why.cause.value})\n"
            )
        if view.divergence is not None:
            sys.stdout.write(
                # The detail is the archive's error message: escaped like every adapter's text.
                f"  diverged at     {list(view.divergence.seqs)}: {shown(hide(view.divergence.detail))}\n"
                "  the archive holds other groups at these seqs; run "
                "'agentium session reconcile' to keep both copies\n"
            )
        if view.summary is not None:
            summary = view.summary.summary
            cited = ", ".join(f"{c.seq} {c.digest[:19]}" for c in summary.citations)
            made_by = f"{shown(summary.policy)}@{shown(summary.version)}"  # the summarizer's words
            sys.stdout.write(
                f"  summary         {view.summary.coverage()} ({made_by})\n"
                f"  frontier        {summary.frontier}\n"
                f"  citations       {cited or '-'}\n"
            )
            for gap in view.summary.gaps:
                sys.stdout.write(
                    f"  coverage gap    group {gap.seq} {gap.reason.value}: {shown(hide(gap.detail))}\n"
                )
        sys.stdout.write("".join(line + "\n" for line in erasure_lines(view)))
    return EXIT_OK


def cmd_session_reconcile(args: argparse.Namespace) -> int:
    """Resolve a diverged session: keep the archive's groups and renumber the session's own after them."""
    # No session in a missing database: "unchanged"; a missing archive is refused. None is created.
    runtime = build_runtime(unless_missing(load_hiding(args), "session_store", refuse=("archive",)))

    async def go() -> ReconcileReport:
        async with runtime:
            return await runtime.reconcile_session(identity(args), args.session)

    report = run_async(go)
    if args.json:
        print_json(unstructure(report), sys.stdout)
    else:
        state = "reconciled" if report.changed else "unchanged"
        sys.stdout.write(f"{state}: {shown(report.message)}\n")
        if report.changed:
            sys.stdout.write(
                f"  revision {report.previous_revision} -> {report.revision}, boundary {report.boundary}\n"
                f"  adopted archive seqs {list(report.adopted_seqs)}\n"
                f"  renumbered {[f'{old}->{new}' for old, new in report.renumbered]}\n"
            )
    return EXIT_OK


def cmd_session_migrate(args: argparse.Namespace) -> int:
    """Stamp a legacy session snapshot with its verified memory scope (storage identity migration)."""
    if not args.attest_legacy_memory_scope:
        # Raised, not printed: main() reports it like every error, as JSON on stdout with --json too.
        raise InvalidArgumentError(
            "verify the session's exact scope first, then pass --attest-legacy-memory-scope; "
            "nothing was changed"
        )
    runtime = build_runtime(unless_missing(load_hiding(args), "session_store"))

    async def go() -> MigrationReport:
        async with runtime:
            return await runtime.migrate_legacy_session(
                identity(args),
                args.session,
                recall_scope=recall_scope(args),
                attest_legacy_memory_scope=True,
            )

    report = run_async(go)
    if args.json:
        print_json(unstructure(report), sys.stdout)
    else:
        state = "migrated" if report.changed else "unchanged"
        sys.stdout.write(
            f"{state}: {shown(report.message)} (revision {report.previous_revision} -> {report.revision})\n"
        )
    return EXIT_OK


def _add_session(subparsers: Any) -> None:
    parser = subparsers.add_parser("session", help="inspect, migrate or reconcile a stored session")
    inner = parser.add_subparsers(dest="session_command", metavar="ACTION", required=True)
    inspect = inner.add_parser(
        "inspect", help="show a stored session", description=cmd_session_inspect.__doc__
    )
    add_identity_args(inspect)
    inspect.set_defaults(func=cmd_session_inspect)
    migrate = inner.add_parser(
        "migrate", help="stamp a legacy snapshot with its scope", description=cmd_session_migrate.__doc__
    )
    add_identity_args(migrate)
    migrate.add_argument(
        "--attest-legacy-memory-scope",
        action="store_true",
        help="required: you verified the session's exact scope",
    )
    migrate.set_defaults(func=cmd_session_migrate)
    reconcile = inner.add_parser(
        "reconcile",
        help="resolve a diverged session, keeping both copies",
        description=cmd_session_reconcile.__doc__,
    )
    add_identity_args(reconcile)
    reconcile.set_defaults(func=cmd_session_reconcile)


# --------------------------------------------------------------------- main


def build_parser(commands: Sequence[CliCommand] = ()) -> argparse.ArgumentParser:
    """The argument parser with every core subcommand, and ``commands`` that plugins registered."""
    parser = CommandParser(
        prog="agentium",
        description="Agentium: continuity for LLM agent hosts.",
    )
    parser.add_argument("--version", action="version", version=f"{BUILTIN_DISTRIBUTION} {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_plugins_command(subparsers)
    add_check_command(subparsers)
    _add_demo(subparsers)
    add_run_command(subparsers)
    _add_session(subparsers)
    add_recall_commands(subparsers, add_identity_args)
    add_memory_commands(subparsers, add_identity_args)
    add_verify_commands(subparsers, add_identity_args, identity)
    add_eval_commands(subparsers)
    add_erase_commands(subparsers)
    timeout_s = process_hook_timeout() if commands else 0.0
    for command in commands:
        sub = subparsers.add_parser(
            command.name, help=command.help, description=command.description or command.help
        )
        try:
            # Bounded (a hang is a broken command) and nobody's, as loading it is: never runtime A's.
            with unattributed():
                what = f"configure of command {command.name!r}"
                call_with_deadline(partial(command.configure, sub), timeout_s, what)
        # A plugin's bug must not break the other commands: SystemExit too (``parser.error()`` in
        # configure exited the whole command line, --help and every other plugin command included).
        except (Exception, SystemExit) as exc:
            why = "it exited" if isinstance(exc, SystemExit) else error_text(exc)
            sys.stderr.write(
                f"agentium: plugin command {command.name!r} could not declare its arguments: {why}\n"
            )
            continue
        sub.set_defaults(func=partial(_run_plugin_command, command))
    return plain_help(parser)


def _run_plugin_command(command: CliCommand, args: argparse.Namespace) -> object:
    """A plugin command's ``run(args)``, abandoned past its ``timeout_s``.

    The call runs in a daemon thread (:func:`call_with_deadline`, as for every
    other call into plugin code), so a ``run`` that never returns cannot hang
    the command: past the bound ``HookTimeoutError`` (an ``AgentiumError``)
    names the command and main() reports it, exit status 2. What ``run`` raises
    in time (``SystemExit`` included) is re-raised here as if it had been called directly.
    Ctrl-C (``KeyboardInterrupt``) reaches this thread, waiting, never ``run``'s: the
    command is reported interrupted and abandoned, exit status 130, not a traceback. It
    does so at once whichever thread the kernel gave the SIGINT to: the wait wakes in
    short slices to run a pending handler (``call_with_deadline``).
    """
    try:
        return call_with_deadline(
            partial(command.run, args),
            command.timeout_s,
            f"plugin command {command.name!r}",
            bound="the command's CliCommand timeout_s",
        )
    except KeyboardInterrupt:
        sys.stderr.write(
            f"agentium {command.name}: interrupted; plugin command {command.name!r} was abandoned\n"
        )
        return EXIT_INTERRUPTED


def _first_word(argv: Sequence[str]) -> str | None:
    """The subcommand word of ``argv`` (the first argument not starting with ``-``), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def plugin_commands(argv: Sequence[str], registry: PluginRegistry | None = None) -> list[CliCommand]:
    """The plugin subcommands to offer for ``argv``: none when it names a core command.

    Plugins are loaded (``registry`` or the installed ones) only when the
    first word is not a core command, so ``agentium run`` never imports them.
    """
    word = _first_word(argv)
    if word is not None and word in CORE_COMMANDS:
        return []
    loaded = registry if registry is not None else PluginRegistry.load()
    return [command for command, _ in loaded.commands()]


def _version_only(argv: Sequence[str]) -> bool:
    """Whether ``argv`` only asks for the version: ``--version`` first, no shell completion.

    argparse prints the version and exits as soon as it reads a leading ``--version``, before
    any subcommand, so loading every installed plugin to offer its commands (about half a
    second of imports) would be wasted. A completing shell still gets the plugins' commands.
    """
    return argv[:1] == ["--version"] and "_ARGCOMPLETE" not in os.environ


def _exit_status(command: str, returned: object) -> int:
    """What a command's ``run`` returned, as the process's exit status.

    A plugin's ``run`` may return anything: ``None`` is success (``sys.exit``'s reading); 300 used
    to exit 44 (the status is taken modulo 256), a string exited 1 after printing it as an error.
    """
    if returned is None:
        return EXIT_OK
    if type(returned) is int and 0 <= returned <= 255:
        return returned
    sys.stderr.write(
        f"agentium {command}: the command returned {shorten(repr(returned), 80)}, not an exit status\n"
    )
    return 1  # a bug in the command (docs/cli.md: status 1)


def main(argv: Sequence[str] | None = None, *, registry: PluginRegistry | None = None) -> int:
    """Run the ``agentium`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    ``registry`` supplies the plugins whose subcommands are offered (default:
    the installed plugins, loaded only for a word that is not a core command).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser([] if _version_only(args_list) else plugin_commands(args_list, registry))
    except AgentiumError as exc:  # AGENTIUM_HOOK_TIMEOUT is not a number of seconds
        sys.stderr.write(f"agentium: {shown_lines(error_text(exc, named=False))}\n")
        return EXIT_USAGE
    if "_ARGCOMPLETE" in os.environ:  # a shell asks for completions (docs/cli.md, "Shell completion")
        complete(parser)
    argv = args_list
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        with interrupts(args.command):
            discover_config(args)
            return _exit_status(args.command, func(args))
    except KeyboardInterrupt:  # Ctrl-C: a message, not a traceback (interrupt.py; docs/cli.md)
        sys.stderr.write(f"agentium {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except AgentiumError as exc:
        # A command that read a config hides what ${VAR} references supplied from its error (load_hiding).
        hide = hide_env(args)
        # With --json a core command's failure is a JSON document on stdout too (docs/cli.md), unless
        # the command printed its own (run's interrupted RunResult); a plugin's --json is its own.
        if (
            getattr(args, "json", False) is True
            and args.command in CORE_COMMANDS
            and not getattr(args, "printed_json", False)
        ):
            print_json(json_error(exc, hide), sys.stdout)
        # shown_lines: the message may quote an adapter's error, and a server's text in it.
        sys.stderr.write(f"agentium {args.command}: {shown_lines(hide(error_text(exc, named=False)))}\n")
        if interrupted():  # it failed because Ctrl-C cancelled it: the error says what it left
            sys.stderr.write(f"agentium {args.command}: interrupted\n")
            return EXIT_INTERRUPTED
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into a command that exited early (``| head``)
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover - `python -m agentium_harness._cli.main`
    from agentium_harness._cli import console

    sys.exit(console())
