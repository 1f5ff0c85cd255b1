"""``agentium plugins``: the loaded plugins, their adapters, capabilities and options.

:func:`plugins_report` is the JSON form (``--json``); :func:`options_report`
describes one adapter's config class, field by field, for both forms.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from typing import Any, TextIO, Union, get_args, get_origin

import attrs

from .._codec import unstructure
from .._plugins.registry import PluginRegistry, RegisteredAdapter
from .._plugins.spec import PATH_OPTION
from .._text import error_text
from .output import EXIT_OK, print_json, shown

__all__ = ["add_plugins_command", "options_report", "plugins_report"]


def _type_name(type_: object) -> str:
    """A short, readable spelling of a field type: ``str``, ``int | None``, ``list[ScriptedReply]``."""
    if type_ is None or type_ is type(None):
        return "None"
    if isinstance(type_, str):  # an annotation that could not be resolved
        return type_
    args = get_args(type_)
    origin = get_origin(type_)
    if origin is Union or isinstance(type_, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return (
            f"{name}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]" if args else name
        )
    if isinstance(type_, type):
        return type_.__qualname__
    return str(type_).replace("typing.", "")


def _json_default(value: object) -> Any:
    """A default as JSON data when it has a plain form, else its ``repr`` (a plugin's value: never raises)."""
    try:
        data = unstructure(value)
        json.dumps(data, allow_nan=False)
    except Exception:
        try:
            return repr(value)
        except Exception:
            return f"<{type(value).__name__} that cannot be shown>"
    return data


def options_report(config_class: type) -> list[dict[str, Any]]:
    """Each option of an adapter's config class: ``name``, ``type``, ``required``, ``default``, ``path``.

    ``default`` is the JSON form of the default (``null`` for a required
    option, the ``repr`` when it has no JSON form); a factory default is shown
    by the value it makes, unless the field hides its value from the class's
    ``repr`` (``repr=False`` or a ``repr`` of its own): that one is not computed
    and not shown. ``path`` is true for options resolved against the config
    file's folder.
    """
    if not attrs.has(config_class):
        return []
    try:
        fields = attrs.fields(attrs.resolve_types(config_class))
    except Exception:  # an annotation a plugin left unresolvable; show it as written
        fields = attrs.fields(config_class)
    options = []
    for field in fields:
        default = field.default
        required = default is attrs.NOTHING
        if isinstance(default, attrs.Factory) and field.repr is not True:  # type: ignore[arg-type]
            # A value the field hides from the class's repr (repr=False, or a repr that redacts it)
            # and computes at run time is a credential read from the environment, as often as not:
            # `agentium plugins` printed it. A default written in the plugin's code is shown.
            default = "(computed; not shown: the option hides its value)"
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs.Factory is a class at run time
            try:
                default = "(computed)" if default.takes_self else default.factory()
            # The plugin's code: a factory reading an unset variable made `agentium plugins`, the
            # command that diagnoses plugins, end in a traceback.
            except Exception as exc:
                default = f"(computed; its factory failed: {error_text(exc)})"
        options.append(
            {
                "name": field.alias or field.name,
                "type": _type_name(field.type),
                "required": required,
                "default": None if required else _json_default(default),
                "path": field.metadata.get(PATH_OPTION) is True,
            }
        )
    return options


def _adapter_json(adapter: RegisteredAdapter, registry: PluginRegistry) -> dict[str, Any]:
    spec = adapter.spec
    return {
        "kind": adapter.kind,
        "name": adapter.name,
        "description": spec.description,
        "capabilities": adapter.capabilities.declared(),
        "adapter_class": f"{spec.adapter_class.__module__}.{spec.adapter_class.__qualname__}",
        "config_class": f"{spec.config_class.__module__}.{spec.config_class.__qualname__}",
        "options": options_report(spec.config_class),
        "conflicted": registry.is_conflicted(adapter.kind, adapter.name),
    }


def _option_line(option: dict[str, Any]) -> str:
    where = " (path, relative to the config file)" if option["path"] else ""
    if option["required"]:
        return f"{option['name']}: {option['type']} (required){where}"
    default = json.dumps(option["default"], ensure_ascii=False)
    return f"{option['name']}: {option['type']} = {default}{where}"


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
    if args.json:
        print_json(report, sys.stdout)
        return EXIT_OK
    out: TextIO = sys.stdout

    def line(text: str) -> None:
        # Every line quotes a plugin's text (its description, a default's repr, an import error,
        # a distribution's metadata): escaped, so none of it drives the terminal or forges a line.
        out.write(shown(text) + "\n")

    for plugin in report["plugins"]:
        line(f"{plugin['distribution']} {plugin['version']} [{plugin['status']}]")
        for adapter in plugin["adapters"]:
            note = "  (CONFLICTED: registered twice, cannot be selected)" if adapter["conflicted"] else ""
            line(f"  {adapter['kind']:<14} {adapter['name']:<14} {adapter['description']}{note}")
            line(f"  {'':<14} {'':<14} capabilities: {_flags(adapter['capabilities'])}")
            if not adapter["options"]:
                line(f"  {'':<14} {'':<14} options: none")
            for option in adapter["options"]:
                line(f"  {'':<14} {'':<14} option {_option_line(option)}")
        lifecycle = [h for h in plugin["hooks"] if not h.startswith("agentium_register_")]
        if lifecycle:
            line(f"  lifecycle hooks: {', '.join(lifecycle)}")
    if report["problems"]:
        out.write("\nproblems:\n")
        for p in report["problems"]:
            what = f" {p['kind']} {p['name']!r}" if p["kind"] and p["name"] else ""
            hook = f" in {p['hook']}" if p["hook"] else ""
            line(f"  {p['distribution']} {p['version']}{what} [{p['stage']}{hook}]: {p['error']}")
    if report["skipped"]:
        out.write("\nskipped:\n")
        for s in report["skipped"]:
            line(f"  {s['distribution']} {s['version']}: {s['reason']}")
    return EXIT_OK


def add_plugins_command(subparsers: Any) -> None:
    """Declare ``agentium plugins [--json]``."""
    parser = subparsers.add_parser(
        "plugins",
        help="list loaded plugins, adapters, capabilities and load problems",
        description=cmd_plugins.__doc__,
    )
    parser.add_argument("--json", action="store_true", help="print the stable JSON form (see docs/cli.md)")
    parser.set_defaults(func=cmd_plugins)
