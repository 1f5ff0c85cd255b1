"""Erasure through the runtime (issue 23): one operator operation, every store, a tombstone, resumable.

Written as a host would use it: ``runtime.erase(EraseTarget…, reason=…,
attestation=OperatorAttestation(…))`` over the built-in adapters. The SQLite
test reads the database file and its log byte for byte after the erase and
compares every neighbouring row with what it was before.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest
from _short_deadline import short_only_for

from agentium_harness import (
    ArchiveError,
    CapabilityError,
    ContractViolationError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureRefusedError,
    ErasureState,
    GroupRef,
    IdentityError,
    InvalidArgumentError,
    InvalidIdError,
    MemoryFact,
    MemoryScope,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionBusyError,
    SessionKey,
    SessionState,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    ERASURE_RECORDS_TENANT,
    ArchiveCapabilities,
    ArchiveReceipt,
    ErasedSession,
    SeqRange,
)
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
OTHER = VerifiedIdentity("globex", "alice", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
S1 = EraseTarget.session("acme", "alice", "s1")


def marker(label: str) -> str:
    """A word no store holds by chance (one full-text token)."""
    return f"q{label}{secrets.token_hex(8)}9"


def _runtime(tmp: Path | None = None, **kw: Any) -> Any:
    if tmp is None:
        stores: dict[str, Any] = {
            "archive": InMemoryArchive(),
            "session_store": InMemorySessionStore(),
            "recall": InMemoryRecallStore(),
            "memory": InMemoryMemoryStore(),
        }
    else:
        db = str(tmp / "agentium.db")
        config = SQLiteConfig(path=db)
        stores = {
            "archive": SQLiteArchive(config),
            "session_store": SQLiteSessionStore(config),
            "recall": SQLiteRecallStore(SQLiteRecallConfig(path=db)),
            "memory": SQLiteMemoryStore(config),
        }
    stores.update(kw)
    owned = [s for s in stores.values() if s is not None]
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        owned=owned,
        **stores,
    )


def _rows(db: str, where: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table outside the erased scope (``where`` selects the erased one), as stored."""
    conn = sqlite3.connect(db)
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        # The archive's and session store's rows: a session's row and its groups' rows (keyed by its sid).
        outside = f"NOT ({where}) AND tenant_id != char(65535) || 'agentium-erasure'"
        out["sessions"] = sorted(conn.execute(f"SELECT * FROM sessions WHERE {outside}").fetchall())
        out["groups"] = sorted(
            conn.execute(
                f"SELECT g.* FROM groups AS g JOIN sessions AS s ON s.sid = g.id >> 33 WHERE {outside}"
            ).fetchall()
        )
        for table, cond in (
            ("recall_sources", f"NOT ({where})"),
            ("memory_facts", "NOT (tenant_id = 'acme' AND user_id = 'alice' AND provenance LIKE '%\"s1\"%')"),
        ):
            out[table] = sorted(conn.execute(f"SELECT * FROM {table} WHERE {cond}").fetchall())
        out["recall_texts"] = sorted(
            conn.execute(
                "SELECT t.* FROM recall_texts AS t JOIN recall_sources AS s ON s.id = t.id "
                f"WHERE NOT ({where.replace('session_id', 's.session_id')})"
            ).fetchall()
        )
        return out
    finally:
        conn.close()


async def test_a_session_erasure_reaches_every_store_down_to_the_bytes(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    secret, kept = marker("secret"), marker("kept")
    for i in range(4):  # max_groups=1: groups 0-2 are archived (and indexed), 3 stays resident
        await rt.run(ALICE, "s1", f"{secret} number {i}")
    for i in range(3):
        await rt.run(ALICE, "s2", f"{kept} number {i}")
    await rt.run(BOB, "s1", f"{kept} for bob")
    digest = "sha256:" + "0" * 64
    await rt.memory.remember(
        MemoryFact(
            MemoryScope("acme", "alice"), f"{secret} as a fact", provenance=[GroupRef("s1", 0, digest)]
        )
    )
    await rt.memory.remember(
        MemoryFact(MemoryScope("acme", "alice"), f"{kept} as a fact", provenance=[GroupRef("s2", 0, digest)])
    )
    db = str(tmp_path / "agentium.db")
    erased_rows = "tenant_id = 'acme' AND user_id = 'alice' AND session_id = 's1'"
    before = _rows(db, erased_rows)
    assert secret[-12:].encode() in database_bytes(db)

    result = await rt.erase(S1, reason="data-subject request", attestation=OPERATOR)

    record = result.tombstone
    assert record is not None and record.state is ErasureState.COMPLETE and not result.resumed
    assert (record.reason, record.operator, record.statement) == (
        "data-subject request",
        OPERATOR.operator,
        "request 42",
    )
    counts = {s.role: {c.kind: c.count for c in s.counts} for s in record.stores}
    assert counts == {
        "recall": {"group": 3},
        "memory": {"fact": 1, "revision": 1},
        "archive": {"group": 3},
        "session_store": {"snapshot": 1},
    }
    (session,) = record.sessions
    assert session.session == SessionKey("acme", "alice", "s1") and session.snapshot
    assert session.ranges == (SeqRange(0, 4),) and session.count == 4
    assert [seq for seq, _ in session.digests] == [0, 1, 2, 3]
    raw = database_bytes(db)
    assert secret[-12:].encode() not in raw, "erased text is still in the database file or its log"
    assert kept[-12:].encode() in raw
    assert _rows(db, erased_rows) == before, "a neighbouring row changed"
    view = await rt.inspect_session(ALICE, "s1")
    assert view.state is SessionState.ABSENT and [r.erasure_id for r in view.erasures] == [record.erasure_id]
    assert (await rt.inspect_session(ALICE, "s2")).erasures == ()
    # The session id can be used again: it starts empty.
    again = await rt.run(ALICE, "s1", "hello again")
    assert again.committed
    await rt.aclose()


async def test_bad_requests_are_refused_before_anything_is_written() -> None:
    rt = _runtime()
    await rt.run(ALICE, "s1", "keep me")
    before = await rt.inspect_session(ALICE, "s1")
    cases: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"reason": "", "attestation": OPERATOR}, InvalidArgumentError),
        ({"reason": "   ", "attestation": OPERATOR}, InvalidArgumentError),
        ({"reason": 42, "attestation": OPERATOR}, InvalidArgumentError),
        ({"reason": "x" * 1025, "attestation": OPERATOR}, InvalidArgumentError),
        ({"reason": "why", "attestation": None}, InvalidArgumentError),
        ({"reason": "why", "attestation": ALICE}, InvalidArgumentError),
    ]
    for kwargs, error in cases:
        with pytest.raises(error):
            await rt.erase(S1, **kwargs)
    with pytest.raises(InvalidArgumentError):
        await rt.erase(SessionKey("acme", "alice", "s1"), reason="why", attestation=OPERATOR)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):  # groups are retention's and forget's, not erase's
        await rt.erase(
            EraseTarget.groups_of(SessionKey("acme", "alice", "s1"), [SeqRange(0, 1)]),
            reason="x",
            attestation=OPERATOR,
        )
    # Broader than the operator's tenant: another tenant is refused.
    foreign = OperatorAttestation(VerifiedIdentity("globex", "ops", "sso"))
    with pytest.raises(ErasureRefusedError):
        await rt.erase(S1, reason="why", attestation=foreign)
    with pytest.raises(ErasureRefusedError):
        await rt.erase(EraseTarget.tenant("globex"), reason="why", attestation=OPERATOR)
    with pytest.raises(IdentityError):  # nobody can name the reserved tenant of the records
        VerifiedIdentity(ERASURE_RECORDS_TENANT, "ops", "sso")
    assert await rt.inspect_session(ALICE, "s1") == before
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()


class _NoEraseArchive(InMemoryArchive):
    capabilities = ArchiveCapabilities(idempotent_append=True, bounded_reads=True)


async def test_a_store_that_cannot_erase_refuses_the_whole_erasure() -> None:
    rt = _runtime(archive=_NoEraseArchive())
    await rt.run(ALICE, "s1", "keep me")
    before = await rt.inspect_session(ALICE, "s1")
    with pytest.raises(CapabilityError, match="archive"):
        await rt.erase(S1, reason="why", attestation=OPERATOR)
    assert await rt.inspect_session(ALICE, "s1") == before
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()


async def test_erasing_what_does_not_exist_leaves_a_tombstone_saying_so() -> None:
    rt = _runtime()
    result = await rt.erase(EraseTarget.user("acme", "nobody"), reason="request 7", attestation=OPERATOR)
    record = result.tombstone
    assert record is not None and record.sessions == ()
    assert all(not s.counts for s in record.stores)
    assert any("nothing" in note for note in record.notes)
    assert [r.erasure_id for r in await rt.erasure_status(OPERATOR)] == [record.erasure_id]
    await rt.aclose()


async def test_a_dry_run_reports_per_store_and_changes_nothing() -> None:
    rt = _runtime()
    for i in range(3):
        await rt.run(ALICE, "s1", f"turn {i}")
    before = await rt.inspect_session(ALICE, "s1")
    plan = await rt.erase(
        EraseTarget.user("acme", "alice"), reason="check", attestation=OPERATOR, dry_run=True
    )
    assert plan.state is ErasureState.PLANNED and plan.tombstone is None
    counts = {s.role: {c.kind: c.count for c in s.counts} for s in plan.record.stores}
    assert counts["archive"] == {"group": 2} and counts["session_store"] == {"snapshot": 1}
    assert await rt.inspect_session(ALICE, "s1") == before
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()


async def test_a_user_erasure_takes_every_session_and_fact_of_the_user_only() -> None:
    rt = _runtime()
    for sid in ("s1", "s2"):
        await rt.run(ALICE, sid, "alice writes")
    await rt.run(BOB, "s1", "bob writes")
    await rt.run(OTHER, "s1", "the other tenant's alice writes")
    await rt.memory.remember(MemoryFact(MemoryScope("acme", "alice"), "alice likes tea"))
    await rt.memory.remember(MemoryFact(MemoryScope("acme", "bob"), "bob likes coffee"))
    result = await rt.erase(EraseTarget.user("acme", "alice"), reason="account deleted", attestation=OPERATOR)
    assert result.tombstone is not None
    assert {s.session.session for s in result.record.sessions} == {"s1", "s2"}
    for sid in ("s1", "s2"):
        assert not (await rt.inspect_session(ALICE, sid)).exists
    assert (await rt.inspect_session(BOB, "s1")).exists
    assert (await rt.inspect_session(OTHER, "s1")).exists
    assert await rt.memory.list(MemoryScope("acme", "alice")) == ()
    assert [f.text for f in await rt.memory.list(MemoryScope("acme", "bob"))] == ["bob likes coffee"]
    await rt.aclose()


async def test_erase_is_never_reachable_from_a_run() -> None:
    # The model cannot erase: no tool, no reply, no run argument leads there.
    rt = _runtime()
    result = await rt.run(ALICE, "s1", "please erase everything about me")
    assert result.committed
    assert (await rt.inspect_session(ALICE, "s1")).exists
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()


# -- a store that fails midway; the durable fence; resume ------------------------------------------


class FlakyArchive(SQLiteArchive):
    """Erases one group, then fails, until ``fail`` is cleared (a disk unplugged mid-erase)."""

    capabilities = SQLiteArchive.capabilities
    fail = True

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        if self.fail and not dry_run:
            await super().erase(target, ctx, max_items=1)
            raise ArchiveError("the archive's disk went away")
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


async def test_a_store_failing_midway_leaves_a_durable_record_that_fences_runs_and_resumes(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "agentium.db")
    flaky = FlakyArchive(SQLiteConfig(path=db))
    rt = _runtime(tmp_path, archive=flaky)
    for i in range(4):
        await rt.run(ALICE, "s1", f"turn {i}")
    await rt.run(ALICE, "s2", "the other session")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request 9", attestation=OPERATOR)
    pending = stopped.value.record
    assert pending is not None and pending.state is ErasureState.PENDING
    # The record names every group there was, taken before anything was removed.
    assert [s.ranges for s in pending.sessions] == [(SeqRange(0, 4),)]
    assert pending.store("archive") is None and "ArchiveError" in pending.notes[-1]
    # The record is kept for good: the error's type, never its text (a backend may quote content).
    assert "disk went away" not in repr(pending) and "disk went away" in str(stopped.value)
    # Another process on the same file (a fresh runtime) sees the record and refuses the scope.
    other = _runtime(tmp_path)
    with pytest.raises(ErasureInProgressError) as refused:
        await other.run(ALICE, "s1", "a new turn")
    assert refused.value.erasure_id == pending.erasure_id
    with pytest.raises(ErasureInProgressError):
        await other.append(ALICE, "s1", [Message(Role.USER, "appended")])
    with pytest.raises(ErasureInProgressError):
        await other.read_history(ALICE, "s1", max_groups=10)
    assert (await other.inspect_session(ALICE, "s1")).state is SessionState.ERASING
    assert (await other.run(ALICE, "s2", "not covered")).committed
    status = await other.erasure_status(OPERATOR, S1)
    assert [(r.erasure_id, r.state) for r in status] == [(pending.erasure_id, ErasureState.PENDING)]
    # A second, overlapping erasure waits for the first.
    with pytest.raises(ErasureInProgressError):
        await other.erase(EraseTarget.user("acme", "alice"), reason="another", attestation=OPERATOR)
    flaky.fail = False
    (resumed,) = await rt.resume_erasures(OPERATOR)
    record = resumed.tombstone
    assert resumed.resumed and record is not None and record.erasure_id == pending.erasure_id
    assert record.reason == "request 9"
    # The failed call removed one group without reporting it; the rest is counted, every group listed.
    assert {c.kind: c.count for c in record.store("archive").counts} == {"group": 2}  # type: ignore[union-attr]
    assert [s.ranges for s in record.sessions] == [(SeqRange(0, 4),)] and record.sessions[0].count == 4
    assert (await other.inspect_session(ALICE, "s1")).state is SessionState.ABSENT
    assert (await other.run(ALICE, "s1", "after the erasure")).committed
    assert await other.erasure_status(OPERATOR, EraseTarget.session("acme", "alice", "s9")) == ()
    await other.aclose()
    await rt.aclose()


async def test_calling_erase_again_completes_a_pending_erasure() -> None:
    archive = _FailOnceArchive()
    rt = _runtime(archive=archive)
    for i in range(3):
        await rt.run(ALICE, "s1", f"turn {i}")
    with pytest.raises(ErasureIncompleteError):
        await rt.erase(S1, reason="first try", attestation=OPERATOR)
    again = await rt.erase(S1, reason="second try", attestation=OPERATOR)
    assert again.resumed and again.tombstone is not None and again.record.reason == "first try"
    assert not (await rt.inspect_session(ALICE, "s1")).exists
    await rt.aclose()


class _FailOnceArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities
    failed = False

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        if not dry_run and not self.failed:
            self.failed = True
            raise ArchiveError("transient failure")
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


# -- concurrency: runs and erasures of one scope exclude each other --------------------------------


class GatedProvider(ScriptedProvider):
    """Answers once ``gate`` is set (a slow model)."""

    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.gate = anyio.Event()
        self.entered = anyio.Event()

    async def complete(self, request: Any, ctx: Any) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await super().complete(request, ctx)


class GatedArchive(InMemoryArchive):
    """Erases once ``gate`` is set (a slow backend)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()
        self.entered = anyio.Event()

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        if not dry_run:
            self.entered.set()
            await self.gate.wait()
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


async def test_an_erasure_is_refused_while_a_run_holds_a_session_of_its_scope() -> None:
    provider = GatedProvider()
    rt = create_harness_runtime(
        provider=provider, archive=InMemoryArchive(), session_store=InMemorySessionStore()
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.run, ALICE, "s1", "a slow turn")
        await provider.entered.wait()
        with pytest.raises(SessionBusyError):
            await rt.erase(EraseTarget.user("acme", "alice"), reason="why", attestation=OPERATOR)
        provider.gate.set()
    assert (await rt.inspect_session(ALICE, "s1")).exists
    result = await rt.erase(EraseTarget.user("acme", "alice"), reason="why", attestation=OPERATOR)
    assert result.tombstone is not None
    await rt.aclose()


async def test_runs_on_the_scope_are_refused_while_the_erasure_runs() -> None:
    archive = GatedArchive()
    rt = _runtime(archive=archive)
    await rt.run(ALICE, "s1", "first")
    done: list[Any] = []

    async def erase() -> None:
        done.append(await rt.erase(EraseTarget.user("acme", "alice"), reason="why", attestation=OPERATOR))

    async with anyio.create_task_group() as tg:
        tg.start_soon(erase)
        await archive.entered.wait()
        for sid in ("s1", "a-new-session"):
            with pytest.raises(ErasureInProgressError):
                await rt.run(ALICE, sid, "during the erasure")
        assert (await rt.run(BOB, "s1", "another user")).committed
        archive.gate.set()
    assert done[0].tombstone is not None
    assert not (await rt.inspect_session(ALICE, "s1")).exists
    assert not (await rt.inspect_session(ALICE, "a-new-session")).exists
    await rt.aclose()


# -- a write still in flight past its deadline -----------------------------------------------------


class StuckArchive(InMemoryArchive):
    """Its append blocks in a worker thread that ignores cancellation, then stores (a stuck PUT)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.landed = threading.Event()

    async def append(self, key: Any, groups: Any, ctx: Any) -> Any:
        rows = [(g.seq, g.canonical_bytes(), g.digest) for g in groups]

        def put() -> None:  # the blocking client call: it stores once released, whatever the deadline said
            self.release.wait(30.0)
            for seq, data, digest in rows:
                self.put_raw(key, seq, data, digest)
            self.landed.set()

        await anyio.to_thread.run_sync(put)  # not abandonable: the engine must walk away from it
        return [ArchiveReceipt(seq, digest, f"stuck://{seq}") for seq, _, digest in rows]


def _stuck_runtime(archive: StuckArchive, settle_s: float) -> tuple[Any, Any]:
    """A seeding runtime and the runtime whose second turn (evicting the first) strands an append.

    The engine has one call deadline for every adapter call, and only that
    append is meant to outlive it: the first turn is seeded by a runtime with
    a generous deadline over the same stores, the second turn's append runs
    under 0.3 s (its other calls get 30 s), and every operation after it (the erasure, which must be this
    runtime's: it waits for this runtime's late calls) gets 30 s per call
    again, so a stalled machine cannot fail what has to succeed.
    """
    sessions = InMemorySessionStore()

    def runtime(op_timeout_s: float) -> Any:
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["ok"], cycle=True),
            archive=archive,
            session_store=sessions,
            limits=RuntimeLimits(
                resident=ResidentLimits(max_groups=1),
                op_timeout_s=op_timeout_s,
                settle_timeout_s=settle_s,
                model_timeout_s=30.0,
            ),
        )

    return runtime(30.0), runtime(0.3)


def _call_deadline(rt: Any, seconds: float) -> None:
    """Each adapter call of ``rt``'s next operations gets ``seconds`` (the deadline admission gives them).

    ``op_timeout_s`` is read once, when the runtime is built; this is the seam
    that makes only the stranded append's turn short (see ``_stuck_runtime``).
    """
    admission = rt.parts.admission
    assert isinstance(admission._op_timeout_s, float), "the admission's call deadline moved"
    admission._op_timeout_s = seconds


async def _strand_an_append(archive: StuckArchive, settle_s: float, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Seed turn one, then run turn two whose eviction's append is abandoned, still running.

    Within turn two only the append keeps 0.3 s (``short_only_for``): its load and save, which
    are to succeed, get 30 s, and its model call its own 30 s.
    """
    seeder, rt = _stuck_runtime(archive, settle_s)
    await seeder.run(ALICE, "s1", "first")
    await seeder.aclose()
    kept = short_only_for(monkeypatch, "archive append")
    second = await rt.run(ALICE, "s1", "second")
    assert any(d.code == "call_abandoned" for d in second.diagnostics)
    assert kept.kept == [("archive append", 0.3)]
    kept.operations.clear()
    _call_deadline(rt, 30.0)
    return rt


async def test_an_archive_write_in_flight_past_its_deadline_cannot_bring_erased_groups_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive = StuckArchive()
    rt = await _strand_an_append(archive, settle_s=30.0, monkeypatch=monkeypatch)
    assert archive.raw(SessionKey("acme", "alice", "s1"), 0) is None

    async def release_later() -> None:
        await anyio.sleep(0.3)
        archive.release.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_later)
        result = await rt.erase(S1, reason="why", attestation=OPERATOR)
    assert archive.landed.is_set(), "the late write landed during the erasure"
    assert result.tombstone is not None
    assert archive.raw(SessionKey("acme", "alice", "s1"), 0) is None, "an erased group came back"
    await rt.aclose()


async def test_an_erasure_stops_pending_while_a_late_write_is_still_running_and_resumes_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive = StuckArchive()
    rt = await _strand_an_append(archive, settle_s=0.3, monkeypatch=monkeypatch)
    with pytest.raises(ErasureIncompleteError, match="still running"):
        await rt.erase(S1, reason="why", attestation=OPERATOR)
    with pytest.raises(ErasureInProgressError):
        await rt.run(ALICE, "s1", "third")
    archive.release.set()
    assert await anyio.to_thread.run_sync(archive.landed.wait, 30.0)
    assert archive.raw(SessionKey("acme", "alice", "s1"), 0) is not None  # the late write landed
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.tombstone is not None
    assert archive.raw(SessionKey("acme", "alice", "s1"), 0) is None
    await rt.aclose()


class StopsBeforeUnlisting(InMemorySessionStore):
    """Fails the save that takes a finished erasure out of the pending list (a crash at that point)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True
        self._indexed = False

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        if self.armed and key.tenant == ERASURE_RECORDS_TENANT:
            if key.session == "index":
                self._indexed = True
            elif key.session == "pending" and self._indexed:
                raise SessionStoreError("the process stopped here")
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_an_erasure_stopped_between_its_tombstone_and_its_unlisting_is_listed_once() -> None:
    store = StopsBeforeUnlisting()
    rt = _runtime(session_store=store)
    await rt.run(ALICE, "s1", "hello")
    with pytest.raises(ErasureIncompleteError, match="stopped here") as stopped:
        await rt.erase(S1, reason="request 9", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, SessionStoreError)  # still pending: said as such
    status = await rt.erasure_status(OPERATOR, S1)
    assert len(status) == 1, [(r.erasure_id, r.state) for r in status]
    store.armed = False
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.state is ErasureState.COMPLETE
    assert [r.erasure_id for r in await rt.erasure_status(OPERATOR, S1)] == [status[0].erasure_id]


async def test_inspect_shows_no_summary_text_while_an_erasure_of_the_session_is_pending(
    tmp_path: Path,
) -> None:
    from agentium_harness import SummaryLimits
    from agentium_harness.adapters.summarizers import ExtractiveSummarizer

    secret = marker("sum")
    db = str(tmp_path / "agentium.db")
    flaky = FlakyArchive(SQLiteConfig(path=db))
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=flaky,
        session_store=SQLiteSessionStore(SQLiteConfig(path=db)),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        owned=[flaky],
    )
    for i in range(4):
        await rt.run(ALICE, "s1", f"turn {i} says {secret}.")
    before = await rt.inspect_session(ALICE, "s1")
    assert before.summary is not None and secret in before.summary.summary.text
    with pytest.raises(ErasureIncompleteError):
        await rt.erase(S1, reason="request 9", attestation=OPERATOR)
    during = await rt.inspect_session(ALICE, "s1")
    assert during.state is SessionState.ERASING and during.summary is None
    flaky.fail = False
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.state is ErasureState.COMPLETE
    await rt.aclose()


async def test_a_dry_run_answers_as_a_real_run_would_while_an_erasure_is_pending() -> None:
    # A dry run ignored the pending ledger: it planned a fresh erasure where a real run would resume
    # the pending one (its id and reason), or be refused by an overlapping one.
    archive = _FailOnceArchive()
    rt = _runtime(archive=archive)
    for i in range(3):
        await rt.run(ALICE, "s1", f"turn {i}")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="first reason", attestation=OPERATOR)
    pending = stopped.value.record
    assert pending is not None
    plan = await rt.erase(S1, reason="another reason", attestation=OPERATOR, dry_run=True)
    assert plan.state is ErasureState.PLANNED and plan.resumed
    assert plan.record.erasure_id == pending.erasure_id and plan.record.reason == "first reason"
    assert any("resumes" in note for note in plan.record.notes)
    with pytest.raises(ErasureInProgressError):
        await rt.erase(EraseTarget.user("acme", "alice"), reason="wider", attestation=OPERATOR, dry_run=True)
    # Nothing was written: the pending erasure is the only one, and a real run resumes it.
    assert [r.erasure_id for r in await rt.erasure_status(OPERATOR)] == [pending.erasure_id]
    done = await rt.erase(S1, reason="another reason", attestation=OPERATOR)
    assert done.resumed and done.record.erasure_id == pending.erasure_id
    await rt.aclose()


class _OverreachingSessionStore(InMemorySessionStore):
    """Reports removing a snapshot of a session outside the target (and no group of it)."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        if dry_run:
            return report
        outside = ErasedSession(SessionKey("acme", "bob", "s1"), ())
        return attrs.evolve(report, sessions=(*report.sessions, outside))


async def test_a_report_naming_a_session_outside_the_target_stops_the_erasure() -> None:
    # A report entry with no groups was not checked against the target: a session store saying it
    # removed another user's snapshot passed, and the tombstone listed bob's session as erased.
    rt = _runtime(session_store=_OverreachingSessionStore())
    await rt.run(ALICE, "s1", "turn")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, ContractViolationError)
    record = stopped.value.record
    assert record is not None and record.state is ErasureState.PENDING
    assert [s.session for s in record.sessions] == [SessionKey("acme", "alice", "s1")]
    await rt.aclose()


def test_a_groups_target_from_an_empty_iterator_is_refused_not_widened_to_the_session() -> None:
    # groups_of tested the iterator's truth, not its ranges: an empty generator made a target with
    # no groups, which is the whole session (and erase() accepts a session target).
    key = SessionKey("acme", "alice", "s1")
    with pytest.raises(InvalidArgumentError, match="at least one seq range"):
        EraseTarget.groups_of(key, iter([]))
    for bad in (5, object()):
        with pytest.raises(InvalidArgumentError, match="SeqRange"):
            EraseTarget.groups_of(key, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="SeqRange"):
            EraseTarget("acme", "alice", "s1", bad)  # type: ignore[arg-type]
    target = EraseTarget.groups_of(key, iter([SeqRange(0, 2)]))
    assert target.groups == (SeqRange(0, 2),)


def test_a_user_or_session_target_with_a_missing_id_is_refused_not_widened() -> None:
    # EraseTarget.user("acme", None) made a target of the whole tenant, and
    # EraseTarget.session("acme", "alice", None) one of the whole user: a host whose user id came
    # back None would erase every user. Each constructor makes the target it names, or none.
    for make in (
        lambda: EraseTarget.user("acme", None),
        lambda: EraseTarget.session("acme", "alice", None),
        lambda: EraseTarget.session("acme", None, None),
    ):
        with pytest.raises(InvalidIdError):
            make()  # type: ignore[arg-type]
    assert EraseTarget.user("acme", "alice") == EraseTarget("acme", "alice")
    assert EraseTarget.session("acme", "alice", "s1").session_key == SessionKey("acme", "alice", "s1")


async def test_erasure_status_refuses_a_target_of_the_wrong_type_as_bad_input() -> None:
    # A str target was refused with ErasureRefusedError, "outside tenant 'acme'": untrue, and the
    # wrong error type for bad input.
    rt = _runtime()
    with pytest.raises(InvalidArgumentError, match="EraseTarget"):
        await rt.erasure_status(OPERATOR, "acme")  # type: ignore[arg-type]
    with pytest.raises(ErasureRefusedError):
        await rt.erasure_status(OPERATOR, EraseTarget.tenant("globex"))
    await rt.aclose()


class _InventoryFailsArchive(InMemoryArchive):
    """Fails the inventory (the dry run taken once the record is pending) while ``fail`` is set."""

    capabilities = InMemoryArchive.capabilities
    fail = False

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        if self.fail and dry_run:
            raise ArchiveError("unreachable during the inventory")
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


async def test_an_erasure_stopped_after_its_record_is_pending_says_so_whatever_stopped_it() -> None:
    # A failure of the inventory escaped as a bare ArchiveError: the caller was not told that the
    # erasure was now pending and the session fenced (the CLI exited 2, not 7, without the record).
    archive = _InventoryFailsArchive()
    rt = _runtime(archive=archive)
    for i in range(3):
        await rt.run(ALICE, "s1", f"turn {i}")
    archive.fail = True
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, ArchiveError)
    pending = stopped.value.record
    assert pending is not None and pending.state is ErasureState.PENDING
    assert [r.erasure_id for r in await rt.erasure_status(OPERATOR)] == [pending.erasure_id]
    with pytest.raises(ErasureInProgressError):
        await rt.run(ALICE, "s1", "refused while pending")
    archive.fail = False
    (done,) = await rt.resume_erasures(OPERATOR)
    assert done.tombstone is not None and done.record.erasure_id == pending.erasure_id
    await rt.aclose()


class _RecordSaveFails(InMemorySessionStore):
    """Fails saving an erasure's own record (``e-<id>``) while ``fail`` is set."""

    fail = False

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        if self.fail and key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith("e-"):
            raise SessionStoreError("the disk is full")
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_an_erasure_whose_record_cannot_be_saved_after_its_fence_says_it_is_pending() -> None:
    store = _RecordSaveFails()
    rt = _runtime(session_store=store)
    await rt.run(ALICE, "s1", "hello")
    store.fail = True
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, SessionStoreError)
    with pytest.raises(ErasureInProgressError):
        await rt.run(ALICE, "s1", "fenced")
    store.fail = False
    (done,) = await rt.resume_erasures(OPERATOR)
    assert done.tombstone is not None
    await rt.aclose()
