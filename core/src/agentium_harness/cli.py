"""The ``agentium`` command.

Each subcommand is a function ``cmd_<name>(args) -> int`` plus an
``_add_<name>(subparsers)`` that declares its arguments; :func:`build_parser`
lists them. Add a subcommand by writing both and one line in
:func:`build_parser`.

Exit codes: 0 success, 2 a problem the user can fix (bad arguments, invalid
config, any :class:`~agentium_harness.errors.AgentiumError`). User errors print
a message on stderr, never a traceback. Anything else is a bug and keeps
Python's traceback (exit 1) so it can be reported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .config import SECTION_KINDS, load_config
from .errors import AgentiumError, ConfigError
from .plugins.registry import BUILTIN_DISTRIBUTION, PluginRegistry, RegisteredAdapter

__all__ = ["EXIT_OK", "EXIT_USAGE", "build_parser", "main", "plugins_report"]

#: Success.
EXIT_OK = 0
#: A problem the user can fix: bad arguments, an invalid config, a plugin error.
EXIT_USAGE = 2

Command = Callable[[argparse.Namespace], int]


def _version() -> str:
    try:
        return importlib.metadata.version(BUILTIN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        from . import __version__

        return __version__


def _print_json(data: Any, out: TextIO) -> None:
    out.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


# ------------------------------------------------------------------ plugins


def _adapter_json(adapter: RegisteredAdapter, registry: PluginRegistry) -> dict[str, Any]:
    spec = adapter.spec
    return {
        "kind": adapter.kind,
        "name": adapter.name,
        "description": spec.description,
        "capabilities": adapter.capabilities.declared(),
        "adapter_class": f"{spec.adapter_class.__module__}.{spec.adapter_class.__qualname__}",
        "config_class": f"{spec.config_class.__module__}.{spec.config_class.__qualname__}",
        "conflicted": registry.is_conflicted(adapter.kind, adapter.name),
    }


def plugins_report(registry: PluginRegistry) -> dict[str, Any]:
    """The data ``agentium plugins --json`` prints (documented in ``docs/cli.md``)."""
    by_dist: dict[str, list[dict[str, Any]]] = {}
    for adapter in registry.adapters():
        by_dist.setdefault(adapter.distribution, []).append(_adapter_json(adapter, registry))
    plugins = [
        {
            "distribution": p.distribution,
            "version": p.version,
            "status": p.status.value,
            "kinds": list(p.kinds),
            "hooks": list(p.hooks),
            "modules": list(p.modules),
            "adapters": sorted(by_dist.get(p.distribution, []), key=lambda a: (a["kind"], a["name"])),
        }
        for p in registry.plugins
    ]
    problems = [
        {
            "distribution": p.distribution,
            "version": p.version,
            "stage": p.stage.value,
            "kind": p.kind,
            "name": p.name,
            "hook": p.hook,
            "error": p.error,
        }
        for p in registry.problems
    ]
    skipped = [
        {
            "distribution": s.distribution,
            "version": s.version,
            "entry_point": s.entry_point,
            "reason": s.reason,
        }
        for s in registry.skipped
    ]
    return {
        "plugins": sorted(plugins, key=lambda p: p["distribution"]),
        "problems": sorted(
            problems,
            key=lambda p: (p["distribution"], p["stage"], p["kind"] or "", p["name"] or "", p["error"]),
        ),
        "skipped": sorted(skipped, key=lambda s: (s["distribution"], s["entry_point"])),
    }


def _flags(capabilities: dict[str, bool]) -> str:
    on = [name for name, value in capabilities.items() if value]
    return ", ".join(on) if on else "(no optional capabilities)"


def cmd_plugins(args: argparse.Namespace) -> int:
    """List loaded plugins, their adapters and capabilities, load problems and skipped plugins."""
    registry = PluginRegistry.load()
    report = plugins_report(registry)
    out: TextIO = sys.stdout
    if args.json:
        _print_json(report, out)
        return EXIT_OK
    for plugin in report["plugins"]:
        out.write(f"{plugin['distribution']} {plugin['version']} [{plugin['status']}]\n")
        for adapter in plugin["adapters"]:
            note = "  (CONFLICTED: registered twice, cannot be selected)" if adapter["conflicted"] else ""
            out.write(f"  {adapter['kind']:<14} {adapter['name']:<14} {adapter['description']}{note}\n")
            out.write(f"  {'':<14} {'':<14} capabilities: {_flags(adapter['capabilities'])}\n")
        lifecycle = [h for h in plugin["hooks"] if not h.startswith("agentium_register_")]
        if lifecycle:
            out.write(f"  lifecycle hooks: {', '.join(lifecycle)}\n")
    if report["problems"]:
        out.write("\nproblems:\n")
        for p in report["problems"]:
            what = f" {p['kind']} {p['name']!r}" if p["kind"] and p["name"] else ""
            hook = f" in {p['hook']}" if p["hook"] else ""
            out.write(f"  {p['distribution']} {p['version']}{what} [{p['stage']}{hook}]: {p['error']}\n")
    if report["skipped"]:
        out.write("\nskipped:\n")
        for s in report["skipped"]:
            out.write(f"  {s['distribution']} {s['version']}: {s['reason']}\n")
    return EXIT_OK


def _add_plugins(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list loaded plugins, adapters, capabilities and load problems",
        description=cmd_plugins.__doc__,
    )
    parser.add_argument("--json", action="store_true", help="print the stable JSON form (see docs/cli.md)")
    parser.set_defaults(func=cmd_plugins)


# -------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    """Validate a config file (schema, plugins, options, capabilities) without building anything."""
    path = Path(args.config)
    try:
        resolved = load_config(path)
    except ConfigError as exc:
        if args.json:
            errors = [{"path": i.path, "message": i.message} for i in exc.issues]
            _print_json({"config": str(path), "valid": False, "errors": errors, "components": {}}, sys.stdout)
        else:
            sys.stderr.write(f"{path}: {len(exc.issues)} error(s)\n")
            for issue in exc.issues:
                sys.stderr.write(f"  {issue.path}: {issue.message}\n")
        return EXIT_USAGE
    components = {
        section: {
            "kind": c.kind,
            "plugin": c.plugin,
            "distribution": c.distribution,
            "version": c.version,
        }
        for section, c in resolved.components().items()
    }
    if args.json:
        _print_json({"config": str(path), "valid": True, "errors": [], "components": components}, sys.stdout)
    else:
        sys.stdout.write(f"{path}: valid\n")
        for section in SECTION_KINDS:
            if section in components:
                c = components[section]
                sys.stdout.write(f"  {section:<14} {c['plugin']} ({c['distribution']} {c['version']})\n")
    return EXIT_OK


def _add_check(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a config file without building anything",
        description=cmd_check.__doc__,
    )
    parser.add_argument("config", help="path of the TOML config file")
    parser.add_argument("--json", action="store_true", help="print the stable JSON form (see docs/cli.md)")
    parser.set_defaults(func=cmd_check)


# --------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="agentium",
        description="Agentium: continuity for LLM agent hosts (plugins, config checks).",
    )
    parser.add_argument("--version", action="version", version=f"{BUILTIN_DISTRIBUTION} {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_plugins(subparsers)
    _add_check(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``agentium`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return func(args)
    except AgentiumError as exc:
        sys.stderr.write(f"agentium {args.command}: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into a command that exited early (``| head``)
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover - `python -m agentium_harness.cli`
    sys.exit(main())
