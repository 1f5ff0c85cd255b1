"""Finding the installed plugins' entry points, whatever one damaged distribution holds."""

from __future__ import annotations

import importlib.metadata

from .hook_calls import describe_error
from .selection import normalize_distribution_name

__all__ = ["entry_points_of"]


def entry_points_of(group: str) -> tuple[list[importlib.metadata.EntryPoint], list[tuple[str, str]]]:
    """The entry points of ``group``, and ``(distribution, error)`` for each that could not be read.

    One distribution's ``entry_points.txt`` that cannot be read (not UTF-8: a damaged install)
    made ``importlib.metadata.entry_points()`` raise, and every command with it. Then each
    distribution is read on its own; the first of a name on ``sys.path`` wins, as there.
    """
    try:
        everything = importlib.metadata.entry_points(group=group)
    except Exception:  # read them one distribution at a time below
        everything = None
    if everything is not None:
        return list(everything), []
    found: list[importlib.metadata.EntryPoint] = []
    unreadable: list[tuple[str, str]] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        try:
            name = dist.name or ""
        except Exception:  # its metadata is damaged too: still look at its entry points
            name = ""
        key = normalize_distribution_name(name) if name else f"#{id(dist)}"
        if key in seen:
            continue
        seen.add(key)
        try:
            found.extend(ep for ep in dist.entry_points if ep.group == group)
        except Exception as exc:
            unreadable.append((name or "unknown", describe_error(exc)))
    return found, unreadable
