"""An erasure finished before a turn loaded its session never refuses the turn's commit.

A new session's first commit (or an append's) finds the session absent at
its load and absent again before it writes: only the tenant's finished
erasures can say whether one of the session ran in between. Each tombstone
keeps the ledger revision its erasure joined at (``joined_after``), so the
commit fence refuses exactly those that joined after the load: a user
erased last month who starts new sessions keeps them, even while another
erasure of the tenant begins and ends during a turn. A tombstone an earlier
version wrote does not say it: the fence then refuses, as it always did.

Two runtimes over the same stores (in memory, or one SQLite file) stand for
two processes: ``slow`` runs the turn, ``other`` erases.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import pytest
from _erasure_harness import ANA, OPERATOR, HeldOnce, history_texts, turn_while_held
from _erasure_records import as_earlier_versions, joined_record

from agentium_harness import (
    CommitState,
    EraseTarget,
    ErasureState,
    InvalidArgumentError,
    SessionConflictError,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import (
    ERASURE_RECORDS_TENANT,
    OpContext,
    snapshot_bytes,
)

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")
TURN = "a new session's first turn"


def _pair(kind: str, tmp_path: Path, provider: ScriptedProvider) -> tuple[Any, Any]:
    """The turn's runtime and the other process's, over the same stores."""
    other_provider = ScriptedProvider(replies=["ok"], cycle=True)
    if kind == "memory":
        archive, store = InMemoryArchive(), InMemorySessionStore()
        slow = create_harness_runtime(provider=provider, archive=archive, session_store=store)
        other = create_harness_runtime(provider=other_provider, archive=archive, session_store=store)
        return slow, other
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    slow = create_harness_runtime(
        provider=provider, archive=SQLiteArchive(config), session_store=SQLiteSessionStore(config)
    )
    other = create_harness_runtime(
        provider=other_provider, archive=SQLiteArchive(config), session_store=SQLiteSessionStore(config)
    )
    return slow, other


def _target(level: str, session: str) -> EraseTarget:
    if level == "user":
        return EraseTarget.user("acme", "ana")
    return EraseTarget.session("acme", "ana", session)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("level", ["session", "user"])
@pytest.mark.parametrize("records", ["this-version", "earlier-version"])
async def test_a_first_turn_after_an_old_erasure_commits_while_another_erasure_runs(
    kind: str,
    level: str,
    records: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ana (or her session s1) was erased before; her new s1's first turn commits during bob's erasure.

    Bob's erasure begins and ends while the model answers, so the ledger
    moved and the fence reads ana's tombstone: it joined before the turn's
    load, so the turn commits. Written by an earlier version, the tombstone
    does not say so: the turn is refused (a conflict; the same turn again commits).
    """
    provider = HeldOnce()
    slow, other = _pair(kind, tmp_path, provider)
    try:
        await slow.run(ANA, "s1", "before the erasure")
        await other.run(BOB, "b1", "bob's session")
        with as_earlier_versions(monkeypatch) if records == "earlier-version" else nullcontext():
            old = await other.erase(_target(level, "s1"), reason="dsr", attestation=OPERATOR)
        assert old.tombstone is not None and old.tombstone.state is ErasureState.COMPLETE
        kept = await joined_record(other.session_store, "acme", old.record.erasure_id)

        async def meanwhile() -> None:
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)

        caplog.set_level(logging.WARNING)
        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        if records == "this-version":
            assert error is None, error
            assert await history_texts(slow, "s1") == [TURN, "noted"]
            assert not [r for r in caplog.records if "erasure of its session" in r.getMessage()]
            assert kept is not None  # (checked last: the behaviour above is what the test is about)
            return
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert "may predate the erasure" in str(error) and old.record.erasure_id in str(error)
        assert await history_texts(slow, "s1") == []
        await slow.run(ANA, "s1", TURN)  # transient: nothing of the tenant is erased meanwhile now
        assert await history_texts(slow, "s1") == [TURN, "noted"]
        assert kept is None  # as an earlier version: no join record
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("level", ["session", "user"])
async def test_a_first_turn_after_an_old_erasure_is_refused_when_it_is_erased_again_meanwhile(
    kind: str, level: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The old tombstone does not refuse, the erasure joining and finishing during the turn does."""
    provider = HeldOnce()
    slow, other = _pair(kind, tmp_path, provider)
    erased: list[Any] = []
    try:
        await slow.run(ANA, "s1", "before the erasure")
        await other.erase(_target(level, "s1"), reason="dsr", attestation=OPERATOR)

        async def meanwhile() -> None:
            erased.append(await other.erase(_target(level, "s1"), reason="dsr", attestation=OPERATOR))

        caplog.set_level(logging.WARNING)
        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        (result,) = erased
        assert result.record.erasure_id in str(error)  # the erasure during the turn is named
        assert [r for r in caplog.records if "erasure of its session" in r.getMessage()]
        assert await history_texts(slow, "s1") == []
        assert not (await slow.inspect_session(ANA, "s1")).exists
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_each_erasure_keeps_the_ledger_revision_it_joined_after(kind: str, tmp_path: Path) -> None:
    """Under a key of its own (``j-<id>``); the records earlier versions read keep the bytes they wrote.

    The pending ledger is never removed (emptied when an erasure finishes),
    so its revisions only rise: the next erasure joins after a later one.
    """
    _, other = _pair(kind, tmp_path, HeldOnce())
    store = other.session_store
    pending = SessionKey(ERASURE_RECORDS_TENANT, "acme", "pending")
    try:
        await other.run(ANA, "s1", "hello")
        await other.run(ANA, "s2", "hello")
        assert await store.load(pending, OpContext()) is None
        first = await other.erase(_target("session", "s1"), reason="dsr", attestation=OPERATOR)
        kept = await joined_record(store, "acme", first.record.erasure_id)
        assert kept is not None and kept.snapshot.ledger.joined_after == 0  # no ledger was stored yet
        assert [r.erasure_id for r in kept.snapshot.ledger.records] == [first.record.erasure_id]
        emptied = await store.load(pending, OpContext())
        assert emptied is not None and emptied.snapshot.ledger.records == ()  # kept, empty
        second = await other.erase(_target("session", "s2"), reason="dsr", attestation=OPERATOR)
        kept = await joined_record(store, "acme", second.record.erasure_id)
        assert kept is not None and kept.snapshot.ledger.joined_after == emptied.revision
        after = await store.load(pending, OpContext())
        assert after is not None and after.revision > emptied.revision
        # Nothing an earlier version reads carries the new field: not the fence, the index, the records.
        for name in ("pending", "index", f"e-{first.record.erasure_id}", f"e-{second.record.erasure_id}"):
            stored = await store.load(SessionKey(ERASURE_RECORDS_TENANT, "acme", name), OpContext())
            assert stored is not None and b"joined_after" not in snapshot_bytes(stored.snapshot), name
    finally:
        await other.aclose()


async def test_the_join_is_kept_before_anything_is_erased() -> None:
    """While the stores erase, the join record is there already: a crash after it leaves nothing unknown."""
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=InMemoryArchive(), session_store=store
    )
    seen: list[Any] = []
    original = store.erase

    async def erase(target: Any, ctx: Any, **kwargs: Any) -> Any:
        if not kwargs.get("dry_run"):
            # The join records stored when the session store erases (the shipped store's own rows).
            seen.append([k.session for k in store._rows if k.session.startswith("j-")])
        return await original(target, ctx, **kwargs)

    store.erase = erase  # type: ignore[method-assign]
    try:
        await runtime.run(ANA, "s1", "hello")
        with anyio.fail_after(30):
            done = await runtime.erase(_target("session", "s1"), reason="dsr", attestation=OPERATOR)
        assert seen and all(names == [f"j-{done.record.erasure_id}"] for names in seen), seen
        kept = await joined_record(store, "acme", done.record.erasure_id)
        assert kept is not None and kept.snapshot.ledger.joined_after == 0
    finally:
        await runtime.aclose()


class _RacedJoin(InMemorySessionStore):
    """The shipped store; the first save of ``pending`` meets another writer's save just before it."""

    raced = False

    async def save(
        self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: OpContext
    ) -> int:
        if key.session == "pending" and key.tenant == ERASURE_RECORDS_TENANT and not self.raced:
            self.raced = True
            stored = await self.load(key, ctx)  # the same ledger saved again: only its revision moves
            assert stored is not None
            await super().save(key, stored.snapshot, stored.revision, ctx)
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_a_join_retried_after_a_conflict_keeps_the_revision_it_was_made_on() -> None:
    """The join's compare-and-set lost once: it is rebuilt on what is stored, and that revision is kept."""
    store = _RacedJoin()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=InMemoryArchive(), session_store=store
    )
    pending = SessionKey(ERASURE_RECORDS_TENANT, "acme", "pending")
    try:
        await runtime.run(ANA, "s1", "hello")
        await runtime.run(ANA, "s2", "hello")
        store.raced = True  # the first erasure joins undisturbed (and stores ``pending``)
        await runtime.erase(_target("session", "s1"), reason="dsr", attestation=OPERATOR)
        before = await store.load(pending, OpContext())
        assert before is not None
        store.raced = False
        done = await runtime.erase(_target("session", "s2"), reason="dsr", attestation=OPERATOR)
        assert store.raced
        kept = await joined_record(store, "acme", done.record.erasure_id)
        # Not the revision first read (the lost attempt's), but the one the other writer left.
        assert kept is not None and kept.snapshot.ledger.joined_after == before.revision + 1
    finally:
        await runtime.aclose()


def test_a_join_revision_must_be_a_plain_int_of_at_least_zero() -> None:
    assert ErasureLedger(joined_after=0).joined_after == 0
    for bad in (-1, "3", 2.0, True):
        with pytest.raises(InvalidArgumentError):
            ErasureLedger(joined_after=bad)  # type: ignore[arg-type]


def _damage_join_record(store: InMemorySessionStore, erasure_id: str) -> None:
    """The erasure's join record's bytes damaged in place (its revision kept): it no longer decodes."""
    key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"j-{erasure_id}")
    revision, _ = store._rows[key]
    store._rows[key] = (revision, b'{"damaged": true}')


async def test_a_damaged_join_record_is_read_as_none_and_the_fence_stays_conservative(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ana's s1 erased before; its join record damaged: bob's erasure during s1's first turn refuses it.

    Damaged, the record cannot tell when the erasure joined: it is read as
    absent (an erasure that may have joined at any time), so the commit is
    refused as a conflict, transient like any other (the same turn again
    commits), and a WARNING names the erasure — never a corrupt-data error
    on every commit of a session the erasure covers.
    """
    provider = HeldOnce()
    slow, other = _pair("memory", Path(), provider)
    try:
        await slow.run(ANA, "s1", "before the erasure")
        await other.run(BOB, "b1", "bob's session")
        old = await other.erase(_target("session", "s1"), reason="dsr", attestation=OPERATOR)
        _damage_join_record(other.session_store, old.record.erasure_id)

        async def meanwhile() -> None:
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)

        caplog.set_level(logging.WARNING)
        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert isinstance(error, SessionConflictError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert "may predate the erasure" in str(error) and old.record.erasure_id in str(error)
        assert [r for r in caplog.records if "join record" in r.getMessage() and "damaged" in r.getMessage()]
        await slow.run(ANA, "s1", TURN)  # transient: nothing of the tenant is erased meanwhile now
        assert await history_texts(slow, "s1") == [TURN, "noted"]
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_fence_reads_one_join_record_per_chain_not_one_per_erasure(
    kind: str, tmp_path: Path
) -> None:
    """s1 erased five times before (its id used again each time): one join record is read, not five.

    Erasures of the whole session all overlap, so they ran one after
    another and each index chain lists them in that order: the one that
    joined last ends a chain, and if it joined before the load, all did.
    So the fence reads the join record of each chain's last (here one
    erasure, at the end of two chains), however many came before: a session
    id erased and used again every day costs a commit no more reads.
    """
    provider = HeldOnce()
    slow, other = _pair(kind, tmp_path, provider)
    store = slow.session_store
    original = store.load
    read: list[str] = []

    async def load(key: Any, ctx: OpContext) -> Any:
        read.append(key.session)
        return await original(key, ctx)

    try:
        await other.run(BOB, "b1", "bob's session")
        for n in range(5):
            await slow.run(ANA, "s1", f"before erasure {n}")
            await other.erase(_target("session", "s1"), reason="dsr", attestation=OPERATOR)

        async def meanwhile() -> None:
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)
            read.clear()  # from here: the turn's commit only
            store.load = load

        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert error is None, error
        assert await history_texts(slow, "s1") == [TURN, "noted"]
        assert len([name for name in read if name.startswith("j-")]) == 1, read
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(("before", "during"), [("user", "session"), ("session", "user")])
async def test_the_erasure_joining_during_the_turn_is_found_in_whichever_chain_it_ends(
    kind: str, before: str, during: str, tmp_path: Path
) -> None:
    """Old erasures of one scope (two), the one during the turn of the other: it refuses the commit."""
    provider = HeldOnce()
    slow, other = _pair(kind, tmp_path, provider)
    erased: list[Any] = []
    try:
        for n in range(2):
            await slow.run(ANA, "s1", f"before erasure {n}")
            await other.erase(_target(before, "s1"), reason="dsr", attestation=OPERATOR)

        async def meanwhile() -> None:
            erased.append(await other.erase(_target(during, "s1"), reason="dsr", attestation=OPERATOR))

        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert isinstance(error, SessionConflictError), error
        assert erased[0].record.erasure_id in str(error)
        assert await history_texts(slow, "s1") == []
    finally:
        await slow.aclose()
        await other.aclose()
