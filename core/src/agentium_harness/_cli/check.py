"""``agentium check [--json] [--probe] [CONFIG]``: validate a config file, and with ``--probe`` its backends.

Both phases of the config (docs/config.md) run without building anything;
``--probe`` then builds the runtime and runs each adapter's bounded health
check. With ``--json`` the report is on stdout whatever failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._config import SECTION_KINDS, load_config
from .._config.load import ResolvedConfig
from .._config.runtime import build_runtime, hide_config_env
from .._config.source import find_config
from .._errors import AgentiumError, ConfigError, ConfigIssue
from .interrupt import run_async
from .output import EXIT_OK, EXIT_USAGE, add_config_argument, print_json, shown

__all__ = ["add_check_command", "cmd_check"]


def _check_failed(
    args: argparse.Namespace, path: Path | None, exc: ConfigError, components: dict[str, Any]
) -> int:
    """Report a config that failed the check (to stdout as JSON with ``--json``, else to stderr)."""
    if args.json:
        errors = [{"path": i.path, "message": i.message} for i in exc.issues]
        config = None if path is None else str(path)
        report = {"config": config, "valid": False, "errors": errors, "components": components}
        print_json(report, sys.stdout)
    else:
        # The file's name is escaped too: `agentium check *.toml` takes names someone else chose.
        sys.stderr.write(f"{shown(str(path))}: {len(exc.issues)} error(s)\n")
        for issue in exc.issues:
            # A message can quote a plugin's validator or factory error: escaped like other foreign text.
            sys.stderr.write(f"  {issue.path}: {shown(issue.message)}\n")
    return EXIT_USAGE


def _probe(resolved: ResolvedConfig) -> dict[str, str]:
    """Build the runtime ``resolved`` describes and run each adapter's bounded health check."""
    runtime = build_runtime(resolved)

    async def probe() -> list[tuple[str, str]]:
        async with runtime:
            return await runtime.probe()

    return dict(run_async(probe))


def cmd_check(args: argparse.Namespace) -> int:
    """Validate a config file (schema, plugins, options, capabilities) without building anything.

    With ``--probe`` it also builds the runtime and runs each adapter's bounded health check.
    """
    try:
        path = find_config(args.config)
    except ConfigError as exc:
        if not args.json:
            raise  # reported by main() like every command's missing config
        # With --json the report is on stdout whatever went wrong, this too (docs/cli.md).
        return _check_failed(args, None if exc.source is None else Path(exc.source), exc, {})
    try:
        resolved = load_config(path)
    except ConfigError as exc:
        return _check_failed(args, path, exc, {})
    components = {
        section: {
            "kind": c.kind,
            "plugin": c.plugin,
            "distribution": c.distribution,
            "version": c.version,
        }
        for section, c in resolved.components().items()
    }
    probes: dict[str, str] = {}
    if args.probe:
        try:
            # A health check's answer or error is the adapter's text: it may repeat its options.
            probes = {role: hide_config_env(text, resolved) for role, text in _probe(resolved).items()}
        except AgentiumError as exc:
            # A factory refused its options, the runtime was refused over the built adapters, or
            # closing them failed: reported as the check's errors, on stdout as JSON with --json
            # (it printed only a message on stderr, and nothing a script could parse). The values
            # ${VAR} references supplied are hidden from it, as from every check's message.
            issues = exc.issues if isinstance(exc, ConfigError) else [ConfigIssue("$", str(exc))]
            hidden = [ConfigIssue(i.path, hide_config_env(i.message, resolved)) for i in issues]
            return _check_failed(args, path, ConfigError(hidden, str(path)), components)
    failed = any(v.startswith("failed") for v in probes.values())
    if args.json:
        report = {"config": str(path), "valid": True, "errors": [], "components": components}
        if args.probe:
            report["probe"] = probes
        print_json(report, sys.stdout)
    else:
        sys.stdout.write(f"{shown(str(path))}: valid\n")
        for section in SECTION_KINDS:
            if section in components:
                c = components[section]
                line = f"  {section:<14} {c['plugin']} ({c['distribution']} {c['version']})"
                sys.stdout.write(shown(line) + "\n")  # a distribution's metadata is the plugin's text
        for role, outcome in probes.items():
            # A health check's answer or error is the backend's text: no escape sequence reaches the terminal.
            sys.stdout.write(f"  probe {role:<14} {shown(outcome)}\n")
    return EXIT_USAGE if failed else EXIT_OK


def add_check_command(subparsers: Any) -> None:
    """Add ``agentium check`` to the CLI's subcommands."""
    parser = subparsers.add_parser(
        "check",
        help="validate a config file without building anything",
        description=cmd_check.__doc__,
    )
    add_config_argument(parser)
    # cmd_check finds the file itself, so that with --json a missing one is reported as JSON too.
    parser.set_defaults(discover_config=False)
    parser.add_argument("--json", action="store_true", help="print the stable JSON form (see docs/cli.md)")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="also build the runtime and run each adapter's bounded health check",
    )
    parser.set_defaults(func=cmd_check)
