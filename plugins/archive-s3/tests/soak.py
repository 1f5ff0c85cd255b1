"""A repeatable fault soak: no acknowledged message is lost by the S3 archive and session store under faults.

It starts moto (``s3_servers``) behind the TCP fault proxy (``s3_fault_proxy``),
builds a runtime with :class:`S3Archive` and :class:`S3SessionStore` (both
through the proxy, each on a boto3 client of its own so botocore-injected
errors, ``s3_faults``, can be aimed at either) and a scripted provider, then
runs random operations on six sessions of two tenants for ``seconds``:
``append`` and ``run`` turns, ``read_history``, ``retract``, ``reset_view``,
session erasures (``erase``) and groups erasures (``apply_retention``, which
leaves markers the read-side verified-marker cache then passes). Before an
operation a fault may be armed (dropped acknowledgment, a reply delayed past
the SDK's read timeout, an upload or a reply corrupted, a 503 storm, 409s);
it is disarmed right after.

The model: every written group carries a unique token (in its text, or a
control group's reason). A call that returned a committed result is
*acknowledged*; one that raised says ``not_committed`` (must never read back)
or ``unknown`` (settled by the next check). Erasures are settled with faults
off (``resume_erasures``, then the tenant's completed tombstones) so what
they removed is known exactly. After every step, with faults off, the touched
session is read whole (``view=False``) and checked; every session is checked
periodically and at the end, also through a fresh runtime with no cache:
every acknowledged, not-erased group reads back exactly (messages, and the
digest first seen), nothing erased or uncommitted reads back, nothing
unknown appears, and every failure (reads under faults included) is a typed
:class:`AgentiumError`; a read under faults that returns must return only
true data.

``python plugins/archive-s3/tests/soak.py --seconds 60 --seed 7`` (or ``python -m soak ...`` from that
folder, with ``/work/wt/env.sh``'s PYTHONPATH) prints a summary and exits 1 on any violation;
``--corrupt-snapshots`` also corrupts session-store uploads (a known defect: see test_s3_soak_smoke.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import attrs
from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from s3_helpers import BUCKET, make_config, raw_client
from s3_servers import S3Server, start_server
from soak_model import Item, Record, Stats, Where, content_matches, token_of

from agentium_archive_s3 import S3Archive, S3SessionStore, S3UnavailableError
from agentium_harness import (
    AgentiumError,
    CommitState,
    EraseLevel,
    EraseTarget,
    ErasureState,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionKey

#: (tenant, user) pairs and the sessions of each: six sessions over two tenants.
USERS = (("acme", "ana"), ("globex", "bo"))
SESSIONS = ("s0", "s1", "s2")
#: How long a delayed reply is held: past the SDK read timeout below, so the attempt times out.
READ_TIMEOUT_S = 2.0
DELAY_S = 2.4
#: Attempts a faults-off settle or check makes when the SDK's short read timeout expires under load.
CALM_ATTEMPTS = 3
#: S3 operations a 503 storm or a 409 may hit.
OPERATIONS = ("PutObject", "GetObject", "HeadObject", "ListObjectsV2", "DeleteObject", "DeleteObjects")


class _Armed:
    """The fault armed for one operation; ``disarm`` removes it and counts whether it hit."""

    def __init__(
        self, name: str, proxy: FaultProxy, fault: Fault | None, hook: InjectedErrors | None
    ) -> None:
        self.name, self.proxy, self.fault, self.hook = name, proxy, fault, hook

    def disarm(self, stats: Stats) -> None:
        with self.proxy._lock:  # the proxy's own lock: its threads consume faults under it
            self.proxy.faults.clear()
        hit = self.fault.applied if self.fault is not None else 0
        if self.hook is not None:
            self.hook.remove()
            hit = self.hook.answered
        if hit:
            stats.injected[self.name] += 1


def _proxied(server: S3Server, proxy: FaultProxy) -> Any:
    """A raw boto3 client for ``server`` that goes through ``proxy``."""
    via = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint)
    shim = type(
        "Via",
        (),
        {"endpoint": via.endpoint_url, "access_key": server.access_key, "secret_key": server.secret_key},
    )()
    return raw_client(shim, read_timeout=READ_TIMEOUT_S, connect_timeout=2)


class Soak:
    """One soak: a server, a proxy, a runtime on it, the model and the statistics."""

    def __init__(
        self,
        server: S3Server,
        seed: int,
        *,
        patch: Callable[[S3Archive], None] | None = None,
        corrupt_snapshots: bool = False,
    ) -> None:
        self.server, self.rng, self.stats = server, random.Random(seed), Stats(seed)
        self.corrupt_snapshots = corrupt_snapshots
        self.proxy = FaultProxy(server.port)
        self.direct = make_config(
            server, prefix=f"soak{seed}-{int(time.time())}", max_attempts=2, read_timeout_s=READ_TIMEOUT_S
        )
        self.config = attrs.evolve(self.direct, endpoint_url=self.proxy.endpoint)
        self.archive_client = _proxied(server, self.proxy)
        self.store_client = _proxied(server, self.proxy)
        self.archive = S3Archive(self.config, client=self.archive_client)
        self.store = S3SessionStore(self.config, client=self.store_client)
        if patch is not None:
            patch(self.archive)
        self.runtime = self._runtime(self.archive, self.store)
        self.records: dict[str, Record] = {}
        self.seen_erasures: set[str] = set()
        self.counter = 0

    @staticmethod
    def _runtime(archive: S3Archive, store: S3SessionStore) -> Any:
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["noted."], cycle=True),
            archive=archive,
            session_store=store,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
            retention=RetentionPolicy(max_archived_groups=1),
        )

    async def aclose(self) -> None:
        await self.runtime.aclose()
        await self.archive.aclose()
        await self.store.aclose()
        self.archive_client.close()
        self.store_client.close()
        self.proxy.close()

    # -- faults ---------------------------------------------------------------------------------

    def _arm(self) -> _Armed | None:
        rng = self.rng
        if rng.random() < 0.45:
            return None
        name = rng.choice(("drop", "delay", "corrupt_request", "corrupt_response", "503", "409"))
        where = rng.choice(("/archive/", "/sessions/", "/"))
        fault: Fault | None = None
        hook: InjectedErrors | None = None
        if name == "drop":
            fault = Fault(
                "drop", rng.choice(("PUT", "PUT", "DELETE", "POST")), where, count=rng.randint(1, 2)
            )
        elif name == "delay":
            fault = Fault("delay", rng.choice(("PUT", "GET")), where, count=1, seconds=DELAY_S)
        elif name == "corrupt_request":
            # A snapshot upload corrupted in flight is acknowledged and stored damaged (no checksum is
            # sent or checked): a known defect (test_s3_soak_smoke.py), aimed at only when asked for.
            path = where if self.corrupt_snapshots else "/archive/"
            fault = Fault("corrupt_request", "PUT", path, count=rng.randint(1, 2))
        elif name == "corrupt_response":
            fault = Fault("corrupt_response", "GET", where, count=1)
        else:
            client = rng.choice((self.archive_client, self.store_client))
            operation = rng.choice(OPERATIONS) if name == "503" else "PutObject"
            hook = InjectedErrors(client, int(name), operation=operation, count=rng.randint(1, 6))
        if fault is not None:
            self.proxy.add(fault)
        self.stats.armed[name] += 1
        return _Armed(name, self.proxy, fault, hook)

    # -- operations -----------------------------------------------------------------------------

    def _record(self, where: Where, kind: str) -> Record:
        self.counter += 1
        token = f"k{self.counter:06d}"
        record = Record(token, where, kind, f"{token} {kind} in {where[2]} of {where[0]}", "unknown")
        self.records[token] = record
        return record

    def _failed(self, op: str, exc: BaseException, record: Record | None = None) -> None:
        if not isinstance(exc, AgentiumError):
            self.stats.violations.append(f"{op} raised an untyped {type(exc).__name__}: {exc!r:.300}")
        else:
            self.stats.typed[type(exc).__name__] += 1
        if record is not None:
            state = getattr(exc, "commit_state", None)
            if state == CommitState.COMMITTED:
                self.stats.violations.append(f"{op} {record.token} raised but says committed: {exc!r:.200}")
            record.state = "absent" if state == CommitState.NOT_COMMITTED else "unknown"

    async def _write(self, where: Where, kind: str) -> None:
        tenant, user, session = where
        who = VerifiedIdentity(tenant, user, "soak")
        record = self._record(where, kind)
        try:
            if kind == "append":
                result: Any = await self.runtime.append(who, session, [Message(Role.USER, record.text)])
                seq = result.seq
            elif kind == "run":
                result = await self.runtime.run(who, session, record.text)
                seq = result.group_seq
            elif kind == "retract":
                result = await self.runtime.retract(who, session, count=1, reason=record.text)
                seq = result.seq
            else:
                result = await self.runtime.reset_view(who, session, reason=record.text)
                seq = result.seq
        except Exception as exc:
            self._failed(kind, exc, record)
            return
        if result.commit_state != CommitState.COMMITTED or seq is None:
            record.state = "absent"  # a run the policy stopped: nothing committed
            return
        record.state, record.seq = "acked", seq

    async def _read(self, where: Where) -> None:
        tenant, user, session = where
        try:
            page = await self.runtime.read_history(
                VerifiedIdentity(tenant, user, "soak"),
                session,
                max_groups=self.rng.randint(1, 30),
                view=False,
            )
        except Exception as exc:
            self._failed("read_history", exc)
            return
        self._compare(where, page.groups, whole=False)

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

    async def _erase(self, where: Where, groups: bool) -> None:
        tenant, user, session = where
        target = EraseTarget.session(tenant, user, session)
        operator = _operator(tenant)
        try:
            if groups:
                await self.runtime.apply_retention(operator, target, reason="soak retention")
            else:
                await self.runtime.erase(target, reason="soak erasure", attestation=operator)
        except Exception as exc:
            self._failed("retention" if groups else "erase", exc)
        # Settled with faults off in every case: what it removed is read from the tombstones.

    # -- settling and checking (faults off) -----------------------------------------------------

    async def settle_erasures(self, tenant: str) -> None:
        """Complete what an erasure left pending, then apply every tombstone not seen yet to the model."""
        operator = _operator(tenant)
        for attempt in range(CALM_ATTEMPTS):
            try:
                await self.runtime.resume_erasures(operator)
                break
            except Exception as exc:
                # The SDK's read timeout is short (for the delay faults): on a loaded machine a big
                # erase can outlast it with faults off. The erasure stays pending (typed, reads of
                # its scope refused), so it is resumed again; only a lasting failure is a violation.
                if attempt + 1 == CALM_ATTEMPTS:
                    self.stats.violations.append(f"resume_erasures with faults off failed: {exc!r:.300}")
                else:
                    self.stats.typed[f"calm retry: {type(exc).__name__}"] += 1
        after: str | None = None
        while True:
            try:
                page = await self.runtime.erasure_status(operator, after=after)
            except Exception as exc:
                self.stats.violations.append(
                    f"erasure_status of {tenant} with faults off failed: {exc!r:.300}"
                )
                return
            for record in page:
                if record.state is not ErasureState.COMPLETE or record.erasure_id in self.seen_erasures:
                    continue
                self.seen_erasures.add(record.erasure_id)
                self._apply_tombstone(record)
            after = page.next_after
            if after is None:
                return

    def _apply_tombstone(self, tombstone: Any) -> None:
        target = tombstone.target
        where = (target.tenant_id, target.user_id, target.session_id)
        level = target.level
        self.stats.erasures[str(level.value)] += 1
        for record in self.records.values():
            if record.where != where or record.state not in ("acked", "unknown"):
                continue
            if level is EraseLevel.SESSION:
                hit = True
            else:
                hit = record.seq is not None and any(r.start <= record.seq < r.stop for r in target.groups)
                if record.state == "unknown":
                    self.stats.violations.append(f"{record.token} still unknown when a groups erasure ran")
            if hit:
                record.state = "erased"
                self.stats.erased_groups += 1

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
            elif record.state == "unknown":
                record.state, record.seq = (
                    ("acked", found[record.token]) if record.token in found else ("lost-unknown", None)
                )

    # -- the loop -------------------------------------------------------------------------------

    def _where(self) -> Where:
        tenant, user = self.rng.choice(USERS)
        return tenant, user, self.rng.choice(SESSIONS)

    async def step(self) -> Where:
        """One random operation under a random fault, then settle and check with faults off."""
        where = self._where()
        kind = self.rng.choices(
            ("append", "run", "read", "archive_read", "retract", "reset", "retention", "erase"),
            (30, 20, 12, 8, 8, 4, 12, 3),
        )[0]
        self.stats.ops[kind] += 1
        armed = self._arm()
        try:
            if kind == "read":
                await self._read(where)
            elif kind == "archive_read":
                await self._archive_read(where)
            elif kind in ("retention", "erase"):
                await self._erase(where, groups=kind == "retention")
            else:
                await self._write(where, kind)
        finally:
            if armed is not None:
                armed.disarm(self.stats)
        if kind in ("retention", "erase"):
            await self.settle_erasures(where[0])
        await self.check(where)
        return where

    async def check_all(self, fresh: bool) -> None:
        """Check every session; ``fresh``: also through a new runtime on new adapters (no cache, no proxy)."""
        for tenant, _ in USERS:
            await self.settle_erasures(tenant)
        wheres = [(t, u, s) for t, u in USERS for s in SESSIONS]
        for where in wheres:
            await self.check(where)
        if not fresh:
            return
        archive, store = S3Archive(self.direct), S3SessionStore(self.direct)
        runtime = self._runtime(archive, store)
        try:
            for where in wheres:
                await self.check(where, runtime)
        finally:
            await runtime.aclose()
            await archive.aclose()
            await store.aclose()

    async def run(
        self, seconds: float, log: Callable[[str], None] | None = None, min_steps: int = 0
    ) -> Stats:
        """Loop for ``seconds`` and at least ``min_steps`` steps, then check everything; the statistics.

        ``min_steps`` keeps a short run's coverage the same on a slow machine (the seed fixes the steps).
        """
        end = time.monotonic() + seconds
        steps = 0
        while time.monotonic() < end or steps < min_steps:
            await self.step()
            steps += 1
            if steps % 25 == 0:
                await self.check_all(fresh=steps % 100 == 0)
                if log is not None:
                    log(f"  ... {steps} steps, {len(self.stats.violations)} violations")
        await self.check_all(fresh=True)
        return self.stats


def _operator(tenant: str) -> OperatorAttestation:
    return OperatorAttestation(VerifiedIdentity(tenant, "ops", "sso"), "soak")


async def run_soak(
    seconds: float,
    seed: int,
    workdir: Path,
    *,
    patch: Callable[[S3Archive], None] | None = None,
    corrupt_snapshots: bool = False,
    log: Callable[[str], None] | None = None,
    min_steps: int = 0,
) -> Stats:
    """Start moto in ``workdir``, soak for ``seconds`` with ``seed``, stop the server; returns the statistics.

    ``patch`` is called with the runtime's archive before the first operation (a test breaks it on
    purpose); ``corrupt_snapshots`` lets corrupted uploads hit the session store too (a known defect).
    """
    server = start_server("moto", workdir)
    try:
        admin = raw_client(server)
        admin.create_bucket(Bucket=BUCKET)
        admin.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        admin.close()
        soak = Soak(server, seed, patch=patch, corrupt_snapshots=corrupt_snapshots)
        try:
            return await soak.run(seconds, log, min_steps)
        finally:
            await soak.aclose()
    finally:
        server.stop()


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--seconds N --seed S``: soak, print the summary, exit 1 on any violation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--corrupt-snapshots", action="store_true", help="also corrupt session-store uploads (a known defect)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"soak: seed {seed}, {args.seconds:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="agentium-soak-") as workdir:
        stats = anyio.run(
            partial(
                run_soak,
                args.seconds,
                seed,
                Path(workdir),
                corrupt_snapshots=args.corrupt_snapshots,
                log=_say,
            )
        )
    print(stats.summary(), flush=True)
    return 1 if stats.violations else 0


if __name__ == "__main__":
    sys.exit(main())
