"""Agentium worker: ``runtime.run`` on the built-in SQLite archive and session store (one file).

Driven like ``benchmarks/turn_overhead.py``: the runtime runs in an anyio
event loop on a blocking portal thread, each turn is timed inside the loop
with ``perf_counter_ns``, and the provider is the built-in scripted provider
(no model). The adapters run with their default options, which are the ones
every system here uses: WAL, ``synchronous=FULL``.

Seeding goes through Agentium's own ports in bulk rather than through
thousands of turns. First a few real turns run through the runtime, so the
snapshot and the groups have exactly the shape the runtime produces (memory
scope, retained record, resident count). Then the archive gets the groups
that a long session would have evicted, ``SEED_BATCH`` per ``append``
transaction, and the session store gets one snapshot whose boundary,
``next_seq`` and resident groups are those of the long session, sealed with
``seal_snapshot`` and saved with compare-and-set on the runtime's revision.
``inspect_session`` checks the result; the timing worker checks again that
its first turn gets the expected ``seq``.

Held shape: after each timed turn, untimed, the session is put back to the
seeded state. The turn archived its evicted group by adoption (the group's
row became the archive's: the session row's ``adopted`` watermark moved past
it); the restore moves the watermark back and deletes any archive row at or
past the seeded boundary (the archive port has no delete: these are the
adapters' tables, schema version 4), then saves the seeded snapshot again
through the store's ``save``, with compare-and-set on the turn's revision,
which deletes the turn's new group row. Both run on the session store's own
connection, the one a turn's joint commit writes through, so the next turn
loads as it would after its own commit.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import anyio
import attrs
import common
from anyio.from_thread import start_blocking_portal

from agentium_harness import create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits
from agentium_harness._history import MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.sessions import StoredSnapshot, seal_snapshot
from agentium_harness._scope import SessionKey, VerifiedIdentity
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

IDENTITY = VerifiedIdentity("bench-tenant", "bench-user", "benchmark")
INCLUDES = (
    "runtime.run(identity, session, 500-char text): load the snapshot, build the request, call the "
    "scripted provider (canned 500-char reply), archive the evicted group, save the snapshot (CAS)"
)


def _build(db_path: str) -> tuple[Any, SQLiteArchive, SQLiteSessionStore]:
    archive = SQLiteArchive(SQLiteConfig(path=db_path))
    store = SQLiteSessionStore(SQLiteConfig(path=db_path))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[common.REPLY], cycle=True), archive=archive, session_store=store
    )
    return runtime, archive, store


def _user_text(seq: int) -> str:
    # Group ``seq`` holds messages 2*seq (user) and 2*seq + 1 (assistant).
    return common.message_text(2 * seq, "user")


def _group_like(template: MessageGroup, seq: int) -> MessageGroup:
    """Group ``seq`` with the template's shape: its user message's text is message 2*seq."""
    messages = tuple(
        attrs.evolve(m, content=_user_text(seq)) if m.role is Role.USER else m for m in template.messages
    )
    return attrs.evolve(template, seq=seq, messages=messages)


async def archive_ends(
    archive: SQLiteArchive, key: SessionKey, boundary: int, ctx: OpContext
) -> tuple[list[int], list[int]]:
    """The archive's first seq (a list of at most one) and every seq it holds from ``boundary - 1`` on.

    A seeded archive holds every group below the boundary and none past it: ``([0], [boundary -
    1])``, or ``([], [])`` with no boundary. The end is read to an empty page: ``read_groups`` may
    answer with fewer groups than asked (the SQLite archive bounds the bytes of one answer), so a
    page of one from ``boundary - 1`` does not say no group follows it.
    """
    first = [g.seq for g in await archive.read_groups(key, 0, 1, ctx)]
    last: list[int] = []
    start = max(0, boundary - 1)
    while page := await archive.read_groups(key, start, 2, ctx):
        last += [g.seq for g in page]
        if page[-1].seq < start:  # an answer that does not move on would be read without end
            raise SystemExit(f"archive read from seq {start} answered with seq {page[-1].seq}")
        start = page[-1].seq + 1
    return first, last


async def _seed(db_path: str, messages: int) -> dict[str, Any]:
    runtime, archive, store = _build(db_path)
    key = SessionKey.of(IDENTITY, common.SESSION_ID)
    ctx = OpContext.unbounded()
    groups = messages // 2
    try:
        # A few real turns: past the resident limit, so the runtime has evicted and archived.
        real = min(groups, ResidentLimits().max_groups + 2)
        for seq in range(real):
            await runtime.run(IDENTITY, common.SESSION_ID, _user_text(seq))
        stored = await store.load(key, ctx)
        assert stored is not None
        snap = stored.snapshot
        template = snap.resident[-1]
        if len(template.messages) != 2:
            raise SystemExit(f"a turn produced {len(template.messages)} messages, expected 2 (user, reply)")
        if groups > real:
            keep = len(snap.resident)
            boundary = groups - keep
            # What the long session would have archived beyond what the real turns archived:
            # the real turns' resident groups as they are, then generated ones.
            to_archive = [g for g in snap.resident if g.seq < boundary]
            to_archive += [_group_like(template, s) for s in range(snap.next_seq, boundary)]
            for start in range(0, len(to_archive), common.SEED_BATCH):
                await archive.append(key, to_archive[start : start + common.SEED_BATCH], ctx)
            resident = tuple(
                next((g for g in snap.resident if g.seq == s), None) or _group_like(template, s)
                for s in range(boundary, groups)
            )
            long_snap = seal_snapshot(
                attrs.evolve(snap, boundary=boundary, next_seq=groups, resident=resident)
            )
            await store.save(key, long_snap, stored.revision, ctx)
        view = await runtime.inspect_session(IDENTITY, common.SESSION_ID)
        first, last = await archive_ends(archive, key, view.boundary, ctx)
    finally:
        await archive.aclose()
        await store.aclose()
    if view.next_seq != groups or view.boundary != groups - len(view.resident_seqs):
        raise SystemExit(f"seeded session is at next_seq={view.next_seq}, boundary={view.boundary}")
    expected = ([0], [view.boundary - 1]) if view.boundary else ([], [])
    if (first, last) != expected:
        raise SystemExit(f"seeded archive starts at {first} and ends at {last}; boundary is {view.boundary}")
    return {"groups": groups, "boundary": view.boundary, "resident": len(view.resident_seqs)}


class Agentium:
    """The runtime on a seeded database, turns driven through a blocking portal."""

    includes = INCLUDES

    def __init__(self, db_path: str, messages: int, shape: str) -> None:
        self.versions = {"agentium-harness": metadata.version("agentium-harness")}
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._runtime, self._archive, self._store = self._portal.call(self._abuild, db_path)
        self._next = messages // 2
        self._key = SessionKey.of(IDENTITY, common.SESSION_ID)
        self._base: StoredSnapshot | None = None
        if shape == "held":
            self._base = self._portal.call(self._store.load, self._key, OpContext.unbounded())
            if self._base is None or self._base.snapshot.next_seq != self._next:
                raise SystemExit(f"the seeded session is not at next_seq {self._next}")

    @staticmethod
    async def _abuild(db_path: str) -> tuple[Any, SQLiteArchive, SQLiteSessionStore]:
        return _build(db_path)

    async def _restore(self, revision: int) -> None:
        """Put the session back to the seeded state (held shape, untimed)."""
        assert self._base is not None
        key, boundary, ctx = self._key, self._base.snapshot.boundary, OpContext.unbounded()

        def drop(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                (sid,) = conn.execute(
                    "SELECT sid FROM sessions WHERE tenant_id = ? AND user_id = ? AND session_id = ?",
                    (key.tenant, key.user, key.session),
                ).fetchone()
                conn.execute("UPDATE sessions SET adopted = ? WHERE sid = ?", (boundary, sid))
                # Archive rows (odd ids) from the seeded boundary on: sid << 33 | seq << 1 | 1.
                conn.execute(
                    "DELETE FROM groups WHERE id >= ? AND id < ? AND (id & 1) = 1",
                    ((sid << 33) + (boundary << 1), (sid + 1) << 33),
                )

        await self._store.run(ctx, "benchmark restore", drop)
        await self._store.save(key, self._base.snapshot, revision, ctx)

    async def _batch(self, n: int, max_seconds: float) -> common.TurnLog:
        log = common.TurnLog()
        deadline = time.perf_counter() + max_seconds
        for k in range(n):
            if k and time.perf_counter() >= deadline:
                break
            seq = self._next
            text = _user_text(seq)
            log.start()
            result = await self._runtime.run(IDENTITY, common.SESSION_ID, text)
            log.stop()
            if result.group_seq != seq:
                raise SystemExit(f"turn got seq {result.group_seq}, expected {seq}: the seeded state is off")
            if self._base is not None:
                await self._restore(result.snapshot_revision)
            else:
                self._next += 1
        return log

    def run(self, n: int, max_seconds: float) -> common.TurnLog:
        """Up to ``n`` timed ``runtime.run`` turns."""
        return self._portal.call(self._batch, n, max_seconds)

    def connections(self) -> Sequence[sqlite3.Connection]:
        """The adapters' own connections, found by type (their attribute names are private)."""
        found: dict[int, sqlite3.Connection] = {}
        for adapter in (self._archive, self._store):
            for value in vars(adapter).values():
                if isinstance(value, sqlite3.Connection):
                    found[id(value)] = value
        return list(found.values())

    def close(self) -> None:
        """Close the adapters and stop the portal."""
        self._portal.call(self._archive.aclose)
        self._portal.call(self._store.aclose)
        self._portal_cm.__exit__(None, None, None)


def main() -> None:
    """Seed, or serve timed turns."""
    args = common.arguments(__doc__.splitlines()[0])
    if args.seed:
        common.seed_all(args.seed, lambda db, n: anyio.run(_seed, db, n))
        return
    common.serve(lambda: Agentium(args.db, args.messages, args.shape))


if __name__ == "__main__":
    sys.exit(main())
