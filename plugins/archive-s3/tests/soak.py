"""A repeatable fault soak: no acknowledged message is lost by the S3 archive and session store under faults.

It starts moto or Ceph RGW (``s3_servers``; ``--server rgw``, a throwaway
single-node cluster, unversioned bucket as in the test fixtures) behind the
TCP fault proxy (``s3_fault_proxy``), builds a runtime with
:class:`S3Archive` and :class:`S3SessionStore` (both through the proxy, each
on a boto3 client of its own so botocore-injected errors, ``s3_faults``, can
be aimed at either) and a scripted provider, then runs random operations on
six sessions of three users in two tenants for ``seconds``: ``append`` and
``run`` turns, ``read_history``, ``retract``, ``reset_view``, groups
erasures (``apply_retention``, which leaves markers the read-side
verified-marker cache then passes) and erasures of a session, a user and a
tenant. Before an operation a fault may be armed (``soak_faults``: dropped
acknowledgment, a reply delayed past the SDK's read timeout, an upload or a
reply corrupted, a 503 storm, 409s, and a *late write*: a write held by the
proxy past the SDK's read timeout and forwarded afterwards, so it lands
after the call returned or failed, perhaps after the next operation, which
is then often an erasure over it); it is disarmed right after.

The model (``soak_model``; the checks are ``soak_checks``'s): every written
group carries a unique token (in its text, or a control group's reason). A
call that returned a committed result is *acknowledged*; one that raised says
``not_committed`` (must never read back) or ``unknown`` (settled by a later
check, once no late write is held: until then it may still appear). Erasures
are settled with faults off (``resume_erasures``, then the tenant's completed
tombstones) so what they removed is known exactly; one still pending after a
resume is a violation. After every step, with faults off, the touched session
is read whole (``view=False``) and checked; every session is checked
periodically and at the end (after every late write has landed), also through
a fresh runtime with no cache: every acknowledged, not-erased group reads back
exactly (messages, and the digest first seen), nothing erased or uncommitted
reads back (nothing at a seq a groups erasure removed either), nothing unknown
appears, and every failure (reads under faults included) is a typed
:class:`AgentiumError`; a read under faults that returns must return only true
data. A raw scan of every stored object, periodically, finds no text of a
write erased since (a late write must not put it back where no read looks).

``python plugins/archive-s3/tests/soak.py --seconds 60 --seed 7 [--server rgw]`` (or ``python -m soak
...`` from that folder, with ``/work/wt/env.sh``'s PYTHONPATH) prints a summary and exits 1 on any
violation; ``--trace FILE`` writes one line per step (to minimise a finding); ``--corrupt-snapshots``
also corrupts session-store uploads; ``--no-late`` leaves late writes out.
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
import anyio.to_thread
import attrs
from s3_fault_proxy import Fault, FaultProxy
from s3_helpers import BUCKET, make_config, raw_client
from s3_servers import FLAVOURS, S3Server, start_server
from soak_checks import SoakChecks, soak_operator
from soak_faults import arm
from soak_model import (
    Record,
    Stats,
    Where,
)

from agentium_archive_s3 import S3Archive, S3SessionStore
from agentium_harness import (
    CommitState,
    EraseLevel,
    EraseTarget,
    Message,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider

#: (tenant, user) pairs and the sessions of each: six sessions over two tenants, two users in the
#: first (so a user erasure has a neighbour in its tenant), one in the second (a tenant erasure's).
USERS = (("acme", "ana"), ("acme", "cy"), ("globex", "bo"))
SESSIONS = ("s0", "s1")
#: The SDK's read timeout: a delayed reply or a held (late) write outlasts it, so the attempt times out.
READ_TIMEOUT_S = 2.0
#: Operations and their weights. Erasures of a session, a user and a tenant are rarer than groups
#: erasures (retention): each empties its scope, and the soak needs history to check.
KINDS = {
    "append": 30,
    "run": 20,
    "read": 12,
    "archive_read": 8,
    "retract": 8,
    "reset": 4,
    "retention": 12,
    "erase": 3,
    "erase_user": 2,
    "erase_tenant": 1,
}
ERASURES = {"retention": EraseLevel.GROUPS, "erase": EraseLevel.SESSION}
ERASURES |= {"erase_user": EraseLevel.USER, "erase_tenant": EraseLevel.TENANT}
#: How long the end of a run waits for late writes still held by the proxy to land.
LATE_WAIT_S = 30.0


def _proxied(server: S3Server, proxy: FaultProxy) -> Any:
    """A raw boto3 client for ``server`` that goes through ``proxy``."""
    via = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint)
    shim = type(
        "Via",
        (),
        {"endpoint": via.endpoint_url, "access_key": server.access_key, "secret_key": server.secret_key},
    )()
    return raw_client(shim, read_timeout=READ_TIMEOUT_S, connect_timeout=2)


class Soak(SoakChecks):
    """One soak: a server, a proxy, a runtime on it, the model and the statistics.

    Its operations, fault schedule and loop are here; settling and checking are :class:`SoakChecks`'.
    """

    def __init__(
        self,
        server: S3Server,
        seed: int,
        *,
        patch: Callable[[S3Archive], None] | None = None,
        corrupt_snapshots: bool = False,
        late: bool = True,
    ) -> None:
        self.server, self.rng, self.stats = server, random.Random(seed), Stats(seed)
        self.late_rng = random.Random(seed + 1)
        self.page_size = 30
        self.corrupt_snapshots, self.late = corrupt_snapshots, late
        #: Late-write faults armed so far (each counts its requests still held) and where they were.
        self.holds: list[tuple[Fault, Where]] = []
        #: Sessions a late write was aimed at, to check again once every held write has landed.
        self.late_wheres: set[Where] = set()
        #: Per session, the ranges erased by groups erasures since its last whole erasure: no group
        #: may ever read back at those seqs (an un-acknowledged write landing late included).
        self.erased_ranges: dict[Where, list[Any]] = {}
        self.proxy = FaultProxy(server.port)
        self.direct = make_config(
            server, prefix=f"soak{seed}-{int(time.time())}", max_attempts=2, read_timeout_s=READ_TIMEOUT_S
        )
        self.config = attrs.evolve(self.direct, endpoint_url=self.proxy.endpoint)
        self.admin = raw_client(server)  # faults off, for the raw scans
        self.archive_client = _proxied(server, self.proxy)
        self.store_client = _proxied(server, self.proxy)
        self.archive = S3Archive(self.config, client=self.archive_client)
        self.store = S3SessionStore(self.config, client=self.store_client)
        if patch is not None:
            patch(self.archive)
        self.runtime = self._runtime(self.archive, self.store)
        self.records: dict[str, Record] = {}
        #: One line per step (operation, fault, outcome, violations so far): to minimise a finding.
        self.trace: list[str] = []
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
        self.admin.close()
        self.proxy.close()

    # -- faults ---------------------------------------------------------------------------------

    async def wait_for_late_writes(self, seconds: float) -> None:
        """Wait until every held write has landed (bounded: a proxy thread never holds forever)."""
        end = time.monotonic() + seconds
        # Polled: the held writes are in proxy threads, with no loop to signal.
        while self.late_pending() and time.monotonic() < end:  # noqa: ASYNC110
            await anyio.sleep(0.1)
        if self.late_pending():
            self.stats.violations.append(f"late writes still held after {seconds:g} s (the proxy's)")

    # -- operations -----------------------------------------------------------------------------

    def _record(self, where: Where, kind: str) -> Record:
        self.counter += 1
        token = f"k{self.counter:06d}"
        record = Record(token, where, kind, f"{token} {kind} in {where[2]} of {where[0]}", "unknown")
        self.records[token] = record
        return record

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
                max_groups=self.page_size,
                view=False,
            )
        except Exception as exc:
            self._failed("read_history", exc)
            return
        self._compare(where, page.groups, whole=False)

    async def _erase(self, where: Where, kind: str) -> None:
        """A groups erasure (retention) of ``where``'s session, or an erasure of its session, user, tenant."""
        tenant, user, session = where
        level = ERASURES[kind]
        if level is EraseLevel.TENANT:
            target = EraseTarget.tenant(tenant)
        elif level is EraseLevel.USER:
            target = EraseTarget.user(tenant, user)
        else:
            target = EraseTarget.session(tenant, user, session)
        operator = soak_operator(tenant)
        try:
            if level is EraseLevel.GROUPS:
                await self.runtime.apply_retention(operator, target, reason="soak retention")
            else:
                await self.runtime.erase(target, reason=f"soak {level.value} erasure", attestation=operator)
        except Exception as exc:
            self._failed(kind, exc)
        # Settled with faults off in every case: what it removed is read from the tombstones.

    # -- the loop -------------------------------------------------------------------------------

    def _where(self) -> Where:
        tenant, user = self.rng.choice(USERS)
        return tenant, user, self.rng.choice(SESSIONS)

    def _choose(self) -> tuple[str, Where]:
        """The next operation and its session; while a late write is held, often an erasure over it."""
        # Drawn first whatever happens next: whether a late write is still held depends on timing, so
        # its choices come from a generator of their own and the seed's sequence stays the same.
        kind, where = self.rng.choices(tuple(KINDS), tuple(KINDS.values()))[0], self._where()
        self.page_size = self.rng.randint(1, 30)  # a read's, drawn every step for the same reason
        if self.late_pending() and self.holds and self.late_rng.random() < 0.5:
            where = self.holds[-1][1]
            kind = self.late_rng.choice(("retention", "erase", "erase_user", "erase_tenant", "append", "run"))
            self.stats.late_overlaps[kind] += 1
        elif self.late_pending():
            self.stats.late_overlaps["other"] += 1
        return kind, where

    async def step(self) -> Where:
        """One random operation under a random fault, then settle and check with faults off."""
        if self.late_wheres and not self.late_pending():
            # Every held write has landed since these sessions were last checked: check them now,
            # whatever ran meanwhile (an erasure, say), while the late write is fresh.
            for held_where in sorted(self.late_wheres):
                await self.check(held_where)
            self.late_wheres.clear()
        kind, where = self._choose()
        self.stats.ops[kind] += 1
        clients = (self.archive_client, self.store_client)
        corrupt = self.corrupt_snapshots
        armed = arm(
            self.rng,
            self.proxy,
            clients,
            self.stats,
            corrupt_snapshots=corrupt,
            late=self.late,
            erasing=kind in ERASURES,
        )
        if armed is not None and armed.name == "late" and armed.fault is not None:
            self.holds.append((armed.fault, where))
            if armed.reads is not None:
                self.holds.append((armed.reads, where))
        written = self.counter
        try:
            if kind == "read":
                await self._read(where)
            elif kind == "archive_read":
                await self._archive_read(where)
            elif kind in ERASURES:
                await self._erase(where, kind)
            else:
                await self._write(where, kind)
        finally:
            if armed is not None:
                armed.disarm(self.stats)
        fault = armed.fault if armed is not None else None
        hit = "" if fault is None else f" {fault.mode} {fault.method} {fault.path_contains} x{fault.applied}"
        wrote = self.records[f"k{self.counter:06d}"] if self.counter > written else None
        self.trace.append(
            f"{sum(self.stats.ops.values())} {kind} {where} fault={armed.name if armed else None}{hit}"
            f" -> {wrote.token if wrote else ''} {wrote.state if wrote else ''} {wrote.seq if wrote else ''}"
        )
        if armed is not None and armed.name == "late" and armed.fault is not None and armed.fault.applied:
            self.late_wheres.add(where)
            if self.counter > written:  # the write under the late fault: it may appear later
                self.records[f"k{self.counter:06d}"].late = True
        if kind in ERASURES:
            await self.settle_erasures(where[0])
        await self.check(where)
        self.trace.append(f"    violations: {len(self.stats.violations)}")
        return where

    async def check_all(self, fresh: bool) -> None:
        """Check every session; ``fresh``: also through a new runtime on new adapters (no cache, no proxy)."""
        for tenant, _ in USERS:
            await self.settle_erasures(tenant)
        wheres = [(t, u, s) for t, u in USERS for s in SESSIONS]
        for where in wheres:
            await self.check(where)
        await anyio.to_thread.run_sync(self.scan_for_erased_text)
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
        await self.wait_for_late_writes(LATE_WAIT_S)
        for held_where in sorted(self.late_wheres):
            await self.check(held_where)
        await self.check_all(fresh=True)
        return self.stats


async def run_soak(
    seconds: float,
    seed: int,
    workdir: Path,
    *,
    patch: Callable[[S3Archive], None] | None = None,
    corrupt_snapshots: bool = False,
    late: bool = True,
    flavour: str = "moto",
    log: Callable[[str], None] | None = None,
    min_steps: int = 0,
    trace: Path | None = None,
) -> Stats:
    """Start a server of ``flavour`` (``moto`` or ``rgw``) in ``workdir``, soak for ``seconds`` with
    ``seed``, stop the server; returns the statistics.

    ``patch`` is called with the runtime's archive before the first operation (a test breaks it on
    purpose); ``corrupt_snapshots`` lets corrupted uploads hit the session store too; ``late``: late
    writes are among the faults.
    """
    server = start_server(flavour, workdir)
    try:
        admin = raw_client(server)
        admin.create_bucket(Bucket=BUCKET)
        if server.flavour == "moto":
            # As the test fixtures: Ceph RGW 16 ignores IfNoneMatch="*" in a versioned bucket, so
            # its bucket stays unversioned (and the soak meets its plain deletes too).
            admin.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        admin.close()
        soak = Soak(server, seed, patch=patch, corrupt_snapshots=corrupt_snapshots, late=late)
        try:
            return await soak.run(seconds, log, min_steps)
        finally:
            await soak.aclose()
            if trace is not None:
                await anyio.Path(trace).write_text("\n".join(soak.trace) + "\n")
    finally:
        server.stop()


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--seconds N --seed S``: soak, print the summary, exit 1 on any violation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--corrupt-snapshots", action="store_true", help="also corrupt session-store uploads")
    parser.add_argument("--trace", type=Path, default=None, help="write one line per step to this file")
    parser.add_argument("--no-late", action="store_true", help="leave late writes out of the faults")
    parser.add_argument(
        "--server",
        choices=FLAVOURS,
        default="moto",
        help="moto's standalone server, or a throwaway single-node Ceph RGW (ci/rgw-single-node.sh)",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"soak: seed {seed}, {args.seconds:g} s on {args.server}", flush=True)
    with tempfile.TemporaryDirectory(prefix="agentium-soak-") as workdir:
        stats = anyio.run(
            partial(
                run_soak,
                args.seconds,
                seed,
                Path(workdir),
                corrupt_snapshots=args.corrupt_snapshots,
                late=not args.no_late,
                flavour=args.server,
                log=_say,
                trace=args.trace,
            )
        )
    print(stats.summary(), flush=True)
    return 1 if stats.violations else 0


if __name__ == "__main__":
    sys.exit(main())
