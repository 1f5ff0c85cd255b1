"""The soak's model and statistics (``soak.py``): what each write should read back as, what a run found."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentium_harness import Message, Role

Where = tuple[str, str, str]  # tenant, user, session


@dataclass
class Record:
    """One write the soak made: what it should read back as, and what the runtime said of it."""

    token: str
    where: Where
    kind: str  # append, run, retract, reset
    text: str
    state: str  # acked, unknown, absent (reported not committed), lost-unknown, erased
    seq: int | None = None
    digest: str | None = None


@dataclass
class Stats:
    """What a soak did and found."""

    seed: int
    ops: Counter[str] = field(default_factory=Counter)
    armed: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    typed: Counter[str] = field(default_factory=Counter)
    erased_groups: int = 0
    erasures: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    #: The most erasure markers the runtime's archive held as verified (its read-side cache) after a check.
    markers_cached: int = 0
    groups_checked: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A few lines for a person: every counter, then the violations."""
        lines = [
            f"soak seed={self.seed}: {sum(self.ops.values())} operations, {self.checks} checks "
            f"({self.groups_checked} groups compared), {len(self.violations)} violations",
            f"  operations: {dict(sorted(self.ops.items()))}",
            f"  faults armed: {dict(sorted(self.armed.items()))}",
            f"  faults injected (applied): {dict(sorted(self.injected.items()))}",
            f"  typed failures: {dict(sorted(self.typed.items()))}",
            f"  erasures completed: {dict(sorted(self.erasures.items()))}, groups erased: "
            f"{self.erased_groups}, most markers in the verified cache: {self.markers_cached}",
        ]
        lines += [f"  VIOLATION: {v}" for v in self.violations[:50]]
        return "\n".join(lines)


@dataclass
class Item:
    """An archived group read directly, shaped as a history page's entry."""

    group: Any


def token_of(group: Any) -> str | None:
    """The soak token of a group: a control group's reason, or its first message's first word."""
    text = (
        group.control.reason
        if group.control is not None
        else (group.messages[0].content if group.messages else "")
    )
    return text.split(" ", 1)[0] if text.startswith("k") else None


def content_matches(record: Record, group: Any) -> bool:
    if record.kind in ("retract", "reset"):
        kind = "retract" if record.kind == "retract" else "reset_view"
        return (
            group.control is not None and group.control.reason == record.text and group.control.kind == kind
        )
    if record.kind == "append":
        return group.control is None and group.messages == (Message(Role.USER, record.text),)
    return (
        group.control is None
        and len(group.messages) >= 2
        and group.messages[0] == Message(Role.USER, record.text)
        and group.messages[-1].content == "noted."
    )
