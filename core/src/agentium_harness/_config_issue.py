"""One problem found in a config file (what :class:`~agentium_harness.ConfigError` lists).

A plain record, not an error: kept apart from :mod:`._errors`, which holds
the error hierarchy and imports it from here (so ``_errors.ConfigIssue`` still names it).
"""

from __future__ import annotations

__all__ = ["ConfigIssue"]


class ConfigIssue:
    """One problem found in a config file, with the path to the bad key."""

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __repr__(self) -> str:
        return f"ConfigIssue({self.path!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigIssue) and (self.path, self.message) == (
            other.path,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self.path, self.message))
