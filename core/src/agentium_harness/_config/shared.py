"""Connection settings written once: the ``[plugins.<name>]`` tables of a config file.

A plugin that serves several kinds (``s3`` as archive and session store,
``postgres`` as four, ``sqlite`` as several) takes the same connection
options in each section. A ``[plugins.<name>]`` table holds them once; every
section with ``plugin = "<name>"`` inherits the keys its own config class
takes, and its ``[<section>.options]`` may override any of them::

    [plugins.s3]
    bucket = "agentium"
    endpoint_url = "${S3_ENDPOINT}"

    [archive]
    plugin = "s3"

    [session_store]
    plugin = "s3"
    options.prefix = "sessions/"

A key is checked where it is written: a bad value inherited from the shared
table is reported at ``$.plugins.<name>.<key>``, a key no selecting section
takes, or a table no section selects, is an error (a typo would otherwise be
silently ignored).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._errors import ConfigIssue
from .source import join_path

__all__ = ["SHARED_TABLE", "inherit", "relocate", "shared_issues", "shared_path"]

#: The top-level table whose sub-tables hold each plugin's shared options.
SHARED_TABLE = "plugins"


def shared_path(plugin: str) -> str:
    """The ``$``-path of ``[plugins.<plugin>]``."""
    return join_path(f"$.{SHARED_TABLE}", plugin)


def _fields(config_class: type) -> set[str]:
    return {f.name for f in attrs.fields(config_class)} if attrs.has(config_class) else set()


def inherit(
    shared: Mapping[str, Any], options: Mapping[str, Any], config_class: type
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A section's options with the shared keys its config class takes and it does not set itself.

    Returns the merged options and the keys taken from ``shared``.
    """
    fields = _fields(config_class)
    taken = tuple(k for k in shared if k in fields and k not in options)
    return {**{k: shared[k] for k in taken}, **options}, taken


def relocate(
    issues: Iterable[ConfigIssue], where: str, plugin: str, taken: Iterable[str]
) -> list[ConfigIssue]:
    """``issues`` about inherited keys moved from ``where`` (the section's options) to the shared table."""
    moves = {join_path(where, key): join_path(shared_path(plugin), key) for key in taken}
    out: list[ConfigIssue] = []
    for issue in issues:
        for old, new in moves.items():
            if issue.path == old or issue.path.startswith((old + ".", old + "[")):
                issue = ConfigIssue(new + issue.path[len(old) :], issue.message)
                break
        out.append(issue)
    return out


def shared_issues(
    shared: Mapping[str, Any], selected: Mapping[str, list[tuple[str, type | None]]]
) -> list[ConfigIssue]:
    """Shared tables no section selects, and keys no selecting section takes.

    ``selected`` maps a plugin name to its sections and their config classes
    (``None`` when the plugin was not found: its keys cannot be checked, and
    the missing plugin is reported already).
    """
    issues: list[ConfigIssue] = []
    for plugin, table in shared.items():
        users = selected.get(plugin, [])
        if not users:
            issues.append(
                ConfigIssue(
                    shared_path(plugin),
                    f"no section selects plugin {plugin!r}: select it (plugin = {plugin!r}) "
                    "or remove the table",
                )
            )
            continue
        if not isinstance(table, Mapping) or any(cls is None for _, cls in users):
            continue
        known: set[str] = set()
        for _, cls in users:
            assert cls is not None
            known |= _fields(cls)
        sections = ", ".join(f"[{section}]" for section, _ in users)
        for key in table:
            if key not in known:
                issues.append(
                    ConfigIssue(
                        join_path(shared_path(plugin), key),
                        f"unknown key: no section that selects {plugin!r} ({sections}) takes it; "
                        f"allowed keys: {', '.join(sorted(known)) or 'none'}",
                    )
                )
    return issues
