"""The soak's checker (``soak.py``): settles erasures and holds what the stores read back to the model.

:class:`SoakChecks` is the half of :class:`soak.Soak` that judges, with
faults off unless said otherwise: it settles erasures (``resume_erasures``,
then every completed tombstone applied to the model, ``soak_model``), reads a
session whole through the runtime and the archive itself and compares every
group with the model, counts a failure as typed or a violation, and scans the
stored objects for erased text. The operations, the fault schedule and the
loop are :class:`soak.Soak`'s; the model and statistics are ``soak_model``'s.
"""

from __future__ import annotations

from typing import Any

from s3_fault_proxy import Fault, FaultProxy
from soak_model import (
    Item,
    Record,
    Stats,
    Where,
    apply_tombstone,
    content_matches,
    scan_for_erased_text,
    token_of,
)

from agentium_archive_s3 import S3Archive, S3Config, S3UnavailableError
from agentium_harness import (
    AgentiumError,
    CommitState,
    ErasureState,
    OperatorAttestation,
    VerifiedIdentity,
)
from agentium_harness.plugin_api import OpContext, SessionKey

#: Attempts a faults-off settle or check makes when the SDK's short read timeout expires under load.
CALM_ATTEMPTS = 3


def soak_operator(tenant: str) -> OperatorAttestation:
    """The soak's operator of ``tenant``: erasures, retention and erasure status run as it."""
    return OperatorAttestation(VerifiedIdentity(tenant, "ops", "sso"), "soak")


class SoakChecks:
    """The checker half of a soak: its state is set up by :class:`soak.Soak`."""

    stats: Stats
    records: dict[str, Record]
    #: Per session, the ranges erased by groups erasures since its last whole erasure.
    erased_ranges: dict[Where, list[Any]]
    trace: list[str]
    seen_erasures: set[str]
    holds: list[tuple[Fault, Where]]
    proxy: FaultProxy
    runtime: Any
    archive: S3Archive
    admin: Any
    direct: S3Config

    def late_pending(self) -> int:
        """How many late writes the proxy still holds (or has forwarded and not yet seen answered)."""
        with self.proxy._lock:
            return sum(fault.in_hold for fault, _ in self.holds)

    def _failed(self, op: str, exc: BaseException, record: Record | None = None) -> None:
        self.trace.append(f"    {op} failed: {type(exc).__name__} {exc!s:.160}")
        if not isinstance(exc, AgentiumError):
            self.stats.violations.append(f"{op} raised an untyped {type(exc).__name__}: {exc!r:.300}")
        else:
            self.stats.typed[type(exc).__name__] += 1
        if record is not None:
            state = getattr(exc, "commit_state", None)
            if state == CommitState.COMMITTED:
                self.stats.violations.append(f"{op} {record.token} raised but says committed: {exc!r:.200}")
            record.state = "absent" if state == CommitState.NOT_COMMITTED else "unknown"

    async def _archive_read(self, where: Where, *, whole: bool = False) -> None:
        """Read the archive itself from seq 0, across erased groups' markers (the runtime's reads start
        past them, so only this exercises the verified-marker cache); what it returns must be true."""
        archive = self.archive
        try:
            groups = await archive.read_groups(SessionKey(*where), 0, 1000, OpContext.with_timeout(60))
        except Exception as exc:
            if whole:
                self.stats.violations.append(
                    f"an archive read of {where} with faults off failed: {exc!r:.300}"
                )
            else:
                self._failed("archive read", exc)
            return
        self._compare(where, [Item(g) for g in groups], whole=False)

    # -- settling and checking (faults off) -----------------------------------------------------

    async def _erasure_records(self, tenant: str) -> list[Any] | None:
        """Every erasure record of ``tenant`` (faults off), or None (a violation) when that fails."""
        records: list[Any] = []
        after: str | None = None
        while True:
            try:
                page = await self.runtime.erasure_status(soak_operator(tenant), after=after)
            except Exception as exc:
                self.stats.violations.append(f"erasure_status of {tenant} failed (faults off): {exc!r:.300}")
                return None
            records.extend(page)
            after = page.next_after
            if after is None:
                return records

    async def settle_erasures(self, tenant: str) -> None:
        """Complete what an erasure left pending, then apply every tombstone not seen yet to the model.

        An erasure a fault stopped must stay pending (reads of its scope refused) and complete on
        resume with faults off: one still pending after a resume that returned is a violation.
        """
        operator = soak_operator(tenant)
        before = await self._erasure_records(tenant)
        pending = {r.erasure_id for r in before or () if r.state is ErasureState.PENDING}
        resumed = False
        for attempt in range(CALM_ATTEMPTS):
            try:
                await self.runtime.resume_erasures(operator)
                resumed = True
                break
            except Exception as exc:
                # The SDK's read timeout is short (for the delay faults): on a loaded machine a big
                # erase can outlast it with faults off. The erasure stays pending (typed, reads of
                # its scope refused), so it is resumed again; only a lasting failure is a violation.
                if attempt + 1 == CALM_ATTEMPTS:
                    self.stats.violations.append(f"resume_erasures with faults off failed: {exc!r:.300}")
                else:
                    self.stats.typed[f"calm retry: {type(exc).__name__}"] += 1
        records = await self._erasure_records(tenant)
        for record in records or ():
            if record.state is ErasureState.PENDING and resumed:
                self.stats.violations.append(
                    f"erasure {record.erasure_id} of {record.target.describe()} still pending after a resume"
                )
            if record.state is not ErasureState.COMPLETE or record.erasure_id in self.seen_erasures:
                continue
            self.seen_erasures.add(record.erasure_id)
            self.stats.resumed_pending += record.erasure_id in pending
            self._apply_tombstone(record)

    def _apply_tombstone(self, tombstone: Any) -> None:
        target = tombstone.target
        self.trace.append(f"    tombstone {target.describe()} {[(r.start, r.stop) for r in target.groups]}")
        apply_tombstone(target, self.records, self.erased_ranges, self.stats)

    async def check(self, where: Where, runtime: Any | None = None) -> None:
        """Read ``where`` whole with faults off (through ``runtime``) and hold it to the model."""
        tenant, user, session = where
        runtime = runtime or self.runtime
        for attempt in range(CALM_ATTEMPTS):
            groups: list[Any] = []
            before: int | None = None
            try:
                while True:
                    page = await runtime.read_history(
                        VerifiedIdentity(tenant, user, "soak"),
                        session,
                        before_seq=before,
                        max_groups=200,
                        view=False,
                    )
                    groups[:0] = page.groups
                    before = page.next_before_seq
                    if before is None:
                        break
                break
            except S3UnavailableError as exc:  # a timeout on a loaded machine, faults off: read again
                if attempt + 1 == CALM_ATTEMPTS:
                    self.stats.violations.append(f"a read of {where} with faults off failed: {exc!r:.300}")
                    return
                self.stats.typed[f"calm retry: {type(exc).__name__}"] += 1
            except Exception as exc:
                self.stats.violations.append(f"a read of {where} with faults off failed: {exc!r:.300}")
                return
        self.stats.checks += 1
        self._compare(where, groups, whole=True)
        if runtime is self.runtime:
            await self._archive_read(where, whole=True)
            self.stats.markers_cached = max(self.stats.markers_cached, len(self.archive._markers))

    def _compare(self, where: Where, groups: Any, *, whole: bool) -> None:
        """Hold the groups read from ``where`` to the model; ``whole``: the read was every group."""
        found: dict[str, int] = {}
        last = -1
        for item in groups:
            group = item.group
            self.stats.groups_checked += 1
            if group.seq <= last:
                self.stats.violations.append(f"{where}: seq {group.seq} after {last}")
            last = group.seq
            if any(r.start <= group.seq < r.stop for r in self.erased_ranges.get(where, ())):
                self.stats.violations.append(f"{where}: a group reads back at erased seq {group.seq}")
            token = token_of(group)
            record = self.records.get(token or "")
            if record is None or record.where != where:
                self.stats.violations.append(f"{where}: group {group.seq} was never written here ({token})")
                continue
            found[record.token] = group.seq
            if record.state in ("erased", "absent", "lost-unknown"):
                self.stats.violations.append(
                    f"{where}: {record.token} ({record.kind}, {record.state}) reads back at seq {group.seq}"
                )
                continue
            if record.seq is not None and record.seq != group.seq:
                self.stats.violations.append(f"{record.token} acked at seq {record.seq} reads at {group.seq}")
            if not content_matches(record, group):
                self.stats.violations.append(f"{record.token} reads back with other content: {group!r:.300}")
            if record.digest is None:
                record.digest = group.digest
            elif record.digest != group.digest:
                self.stats.violations.append(
                    f"{record.token}'s digest changed: {record.digest} -> {group.digest}"
                )
        if not whole:
            return
        for record in self.records.values():
            if record.where != where:
                continue
            if record.state == "acked" and record.token not in found:
                self.stats.violations.append(
                    f"{where}: acknowledged {record.kind} {record.token} (seq {record.seq}) is lost"
                )
            elif record.state == "unknown" and record.token in found:
                record.state, record.seq = "acked", found[record.token]
                self.stats.late_appeared += record.late
            elif record.state == "unknown" and not self.late_pending():
                # Only once no late write is held: until then it may still land (and must then
                # read back whole, and stay).
                record.state, record.seq = "lost-unknown", None
                self.stats.unknown_lost += 1

    def scan_for_erased_text(self) -> None:
        """Read every object under the soak's prefix for the text of erased writes (``soak_model``)."""
        scan_for_erased_text(self.admin, self.direct.bucket, self.direct.prefix, self.records, self.stats)
