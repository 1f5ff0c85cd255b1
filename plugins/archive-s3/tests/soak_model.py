"""The soak's model and statistics (``soak.py``): what each write should read back as, what a run found."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentium_harness import EraseLevel, Message, Role

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
    #: The level of the erasure that removed it (``groups``, ``session``, ``user``, ``tenant``).
    erased_by: str | None = None
    #: Written under a late-write fault (a held request of it may land after the call failed).
    late: bool = False


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
    #: Write requests the proxy held past the client's read timeout and forwarded late.
    late_held: int = 0
    #: Steps that began while a late write was still held (it may land during or after them).
    late_overlaps: Counter[str] = field(default_factory=Counter)
    #: Un-acknowledged writes that a late write made appear later, and those that never did.
    late_appeared: int = 0
    unknown_lost: int = 0
    #: Erasures still pending after their operation (a fault stopped them) that a resume completed.
    resumed_pending: int = 0
    #: Raw scans of every stored object for the text of erased writes, and objects scanned.
    raw_scans: int = 0
    raw_objects: int = 0
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
            f"{self.erased_groups}, most markers in the verified cache: {self.markers_cached}, "
            f"pending ones completed by a resume: {self.resumed_pending}",
            f"  late writes held: {self.late_held}, steps overlapping one: "
            f"{dict(sorted(self.late_overlaps.items()))}, un-acknowledged writes that appeared: "
            f"{self.late_appeared}, that never did: {self.unknown_lost}",
            f"  raw scans for erased text: {self.raw_scans} ({self.raw_objects} objects read)",
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


def apply_tombstone(
    target: Any, records: dict[str, Record], ranges: dict[Where, list[Any]], stats: Stats
) -> None:
    """A completed erasure of ``target``: what it removed is erased in the model.

    ``ranges`` holds, per session, the ranges groups erasures removed since the session was last
    erased whole (no group may ever read back there); an erasure of the session (or of its user or
    tenant) clears them: the session starts again from nothing.
    """
    level = target.level
    stats.erasures[str(level.value)] += 1

    def covered(where: Where) -> bool:
        tenant, user, session = where
        return (
            tenant == target.tenant_id
            and (target.user_id is None or user == target.user_id)
            and (target.session_id is None or session == target.session_id)
        )

    if level is EraseLevel.GROUPS:
        ranges.setdefault((target.tenant_id, target.user_id, target.session_id), []).extend(target.groups)
    else:
        for where in [w for w in ranges if covered(w)]:
            del ranges[where]
    for record in records.values():
        if not covered(record.where) or record.state not in ("acked", "unknown", "lost-unknown"):
            continue
        if level is EraseLevel.GROUPS:
            # An un-acknowledged write has no seq yet: the erased ranges catch it if it ever reads
            # back inside one.
            hit = record.seq is not None and any(r.start <= record.seq < r.stop for r in target.groups)
        else:
            hit = True
        if hit:
            if record.state == "acked":
                stats.erased_groups += 1
            record.state, record.erased_by = "erased", str(level.value)


def scan_for_erased_text(
    admin: Any, bucket: str, prefix: str, records: dict[str, Record], stats: Stats
) -> None:
    """Read every object stored under ``prefix``: none may hold the text of an erased write.

    Reads through the runtime see only what the engine reaches; a late write landing after an
    erasure may put an erased group or snapshot back where no read looks yet (a seq past the
    session's boundary, a snapshot of a session not read since). Writes reported not committed may
    stay stored (a failed batch deletes nothing it stored); erased ones may not. Worker thread.
    """
    stats.raw_scans += 1
    for page in admin.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            key = item["Key"]
            try:
                body = admin.get_object(Bucket=bucket, Key=key)["Body"].read()
            except Exception as exc:  # deleted since it was listed
                stats.typed[f"raw scan: {type(exc).__name__}"] += 1
                continue
            stats.raw_objects += 1
            for token in sorted(set(re.findall(rb"k[0-9]{6}", body))):
                record = records.get(token.decode())
                if record is not None and record.state == "erased":
                    stats.violations.append(
                        f"{record.token} ({record.kind}, erased by a {record.erased_by} erasure) "
                        f"is stored again at {key.removeprefix(prefix)}"
                    )
