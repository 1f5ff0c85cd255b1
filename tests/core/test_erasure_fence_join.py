"""A fact or document written during an erasure is judged by the erasure's join record, not the clocks.

A memory fact or host document written beside no session load is read
against the tenant's erasures before and after it lands; when the ledger
moved meanwhile, a finished erasure covering it takes it back if it joined
the ledger after the write's first check. Its join record (``j-<erasure
id>``: the ledger revision it joined after) says so against the revision
that check saw: an erasure that joined after takes the write back whatever
the two processes' clocks say, and one finished before the check (another
erasure of the tenant then running during the write) leaves it. An erasure
without a join record (an earlier version's) is judged as before: its
``completed_at`` against the writer's clock, less 300 s for skew.

Two sets of stores over the same data (in memory, or one SQLite file) stand
for two processes: the eraser's runtime erases; the writer's fence reads a
clock ``skew`` seconds ahead of the eraser's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from _erasure_records import as_earlier_versions, joined_record

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    ErasureState,
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    SessionKey,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.document_fence import index_document_fenced
from agentium_harness._engine.erasure_fence import ErasureFence, utc_now
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.memory_fence import fence_memory
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, OpContext, SourceRef

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
ANA_DOC = SourceOwner("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
TEXT = "Ana's VPN certificate expires on March 3rd"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _During:
    """What the test runs inside the writer's next store write: past the first check, before it lands."""

    def __init__(self) -> None:
        self.hook: Callable[[], Awaitable[None]] | None = None

    async def run(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            await hook()


def _memory_store(base: type[Any], during: _During, *args: Any) -> Any:
    class Held(base):  # type: ignore[misc,valid-type]
        async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
            await during.run()
            return await super().remember(fact, ctx)

    return Held(*args)


def _recall_store(base: type[Any], during: _During, *args: Any) -> Any:
    class Held(base):  # type: ignore[misc,valid-type]
        async def index_document(
            self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
        ) -> SourceRef:
            await during.run()
            ref: SourceRef = await super().index_document(owner, doc_id, text, ctx, title=title)
            return ref

    return Held(*args)


@attrs.define
class _World:
    """The eraser's runtime and the writer's stores, its fence's clock ``skew`` s ahead."""

    eraser: HarnessRuntime
    writer: HarnessRuntime
    during: _During
    skew: float

    def clock(self) -> datetime:
        return utc_now() + timedelta(seconds=self.skew)


def _world(kind: str, tmp_path: Path, skew: float) -> _World:
    during = _During()
    provider = ScriptedProvider(replies=["noted"], cycle=True)
    limits = MemoryLimits(op_timeout_s=30.0)
    if kind == "memory":
        archive, sessions = InMemoryArchive(), InMemorySessionStore()
        facts, recall = _memory_store(InMemoryMemoryStore, during), _recall_store(InMemoryRecallStore, during)
        eraser = create_harness_runtime(
            provider=provider, archive=archive, session_store=sessions, memory=facts, recall=recall
        )
        manager = MemoryManager(facts, limits=limits)
        world = _World(eraser, eraser, during, skew)
        fence_memory(manager, sessions, 30.0, clock=world.clock)
        world.writer = create_harness_runtime(
            provider=provider, archive=archive, session_store=sessions, memory=manager, recall=recall
        )
        return world
    db = str(tmp_path / "agentium.db")

    def stores(memory: Any, recall: Any) -> dict[str, Any]:
        archive, sessions = SQLiteArchive(SQLiteConfig(path=db)), SQLiteSessionStore(SQLiteConfig(path=db))
        return {"archive": archive, "session_store": sessions, "recall": recall, "owned": (memory, recall)}

    facts = SQLiteMemoryStore(SQLiteConfig(path=db))
    eraser = create_harness_runtime(
        provider=provider, memory=facts, **stores(facts, SQLiteRecallStore(SQLiteRecallConfig(path=db)))
    )
    world = _World(eraser, eraser, during, skew)
    facts = _memory_store(SQLiteMemoryStore, during, SQLiteConfig(path=db))
    mine = stores(facts, _recall_store(SQLiteRecallStore, during, SQLiteRecallConfig(path=db)))
    manager = MemoryManager(facts, limits=limits)
    fence_memory(manager, mine["session_store"], 30.0, clock=world.clock)
    world.writer = create_harness_runtime(provider=provider, memory=manager, **mine)
    return world


async def _write(world: _World, what: str) -> bool:
    """Write ana's fact or document in the writer's process: True if it was kept, False if taken back."""
    writer = world.writer
    if what == "fact":
        assert writer.memory is not None
        try:
            ack = await writer.memory.remember(MemoryFact(ANA, TEXT))
        except ErasureInProgressError as exc:
            assert "written meanwhile, was forgotten: it was not kept" in str(exc), exc
            assert await writer.memory.list(ANA) == ()
            return False
        assert ack.status == "stored" and ack.notes == ()
        assert [f.text for f in await writer.memory.list(ANA)] == [TEXT]
        return True
    assert writer.recall is not None
    fence = ErasureFence(writer.session_store, 30.0, clock=world.clock)
    ticket = Ticket(None, "test", 30.0)
    held = OpContext.with_timeout(30.0)
    try:
        _, notes = await index_document_fenced(fence, ticket, writer.recall, ANA_DOC, "vpn.md", TEXT)
    except ErasureInProgressError as exc:
        assert "the document, indexed meanwhile, was deleted: it was not kept" in str(exc), exc
        assert not await writer.recall.delete_document(ANA_DOC, "vpn.md", held)
        return False
    assert notes == ()
    assert await writer.recall.delete_document(ANA_DOC, "vpn.md", held)  # it was there
    return True


async def _erase(world: _World, user: str) -> str:
    """Erase ``user`` in the eraser's process; the erasure's id."""
    result = await world.eraser.erase(EraseTarget.user("acme", user), reason="DSR", attestation=OPERATOR)
    assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
    return result.record.erasure_id


async def _case(
    world: _World, what: str, when: str, monkeypatch: pytest.MonkeyPatch, earlier: bool
) -> tuple[bool, Any]:
    """Ana erased ``before`` the write (bob then, during it) or ``during`` it: kept?, her join record."""
    erased: list[str] = []

    async def erase_ana() -> None:
        with as_earlier_versions(monkeypatch) if earlier else nullcontext():
            erased.append(await _erase(world, "ana"))

    async def erase_bob() -> None:
        await _erase(world, "bob")  # covers nothing of ana's: only moves the tenant's ledger

    if when == "before":
        await erase_ana()
        world.during.hook = erase_bob
    else:
        world.during.hook = erase_ana
    kept = await _write(world, what)
    assert world.during.hook is None  # it ran, inside the write
    (erasure_id,) = erased
    return kept, await joined_record(world.eraser.session_store, "acme", erasure_id)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("what", ["fact", "document"])
@pytest.mark.parametrize(
    ("when", "skew", "kept"),
    [
        # Joined after the first check, finished before the write landed; by the eraser's clock it
        # completed 400 s before that check (the writer's clock runs ahead): taken back all the same.
        ("during", 400.0, False),
        ("during", -400.0, False),
        # Finished before the write's first check, a few seconds before by both clocks; another
        # erasure of the tenant (bob's) ran during the write: the write stands.
        ("before", 0.0, True),
        ("before", 200.0, True),
    ],
)
async def test_an_erasure_with_a_join_record_is_judged_by_it_not_by_the_clocks(
    kind: str, what: str, when: str, skew: float, kept: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(kind, tmp_path, skew)
    async with world.eraser, world.writer:
        outcome, joined = await _case(world, what, when, monkeypatch, earlier=False)
        assert outcome is kept
        assert joined is not None  # (checked last: the behaviour above is what the test is about)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("what", ["fact", "document"])
@pytest.mark.parametrize(
    ("when", "skew", "kept"),
    [
        # Completed after the first check less 300 s, by the two clocks: taken back.
        ("during", 200.0, False),
        ("before", 0.0, False),  # conservative: it may have joined after the check
        ("before", 200.0, False),
        # Completed more than 300 s before the first check by the clocks (the eraser's runs behind):
        # the write stands. The limit of the clock rule, left to erasures an earlier version ran.
        ("during", 400.0, True),
    ],
)
async def test_an_erasure_without_a_join_record_keeps_the_clock_rule(
    kind: str, what: str, when: str, skew: float, kept: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(kind, tmp_path, skew)
    async with world.eraser, world.writer:
        outcome, joined = await _case(world, what, when, monkeypatch, earlier=True)
        assert outcome is kept
        assert joined is None  # as an earlier version: no join record


@pytest.mark.parametrize("what", ["fact", "document"])
async def test_no_join_record_is_read_while_the_ledger_stays_still(
    what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ana erased before the write and nothing of the tenant during it: no erasure's record is read."""
    world = _world("memory", tmp_path, 0.0)
    store = world.eraser.session_store
    original = store.load
    read: list[str] = []

    async def load(key: Any, ctx: OpContext) -> Any:
        read.append(key.session)
        return await original(key, ctx)

    async with world.eraser, world.writer:
        await _erase(world, "ana")
        monkeypatch.setattr(store, "load", load)
        assert await _write(world, what)
    assert read and all(name == "pending" for name in read), read


async def test_a_clock_that_is_not_one_is_refused_before_anything_is_written() -> None:
    from agentium_harness import InvalidArgumentError

    sessions = InMemorySessionStore()
    with pytest.raises(InvalidArgumentError, match="clock must be callable, got str"):
        ErasureFence(sessions, 30.0, clock="now")  # type: ignore[arg-type]
    recall = InMemoryRecallStore()
    for clock, shown in ((datetime.now, "a naive datetime"), (lambda: 0.0, "float")):
        fence = ErasureFence(sessions, 30.0, clock=clock)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=f"aware datetime, got {shown}; nothing was written"):
            await index_document_fenced(fence, Ticket(None, "test", 30.0), recall, ANA_DOC, "vpn.md", TEXT)
        assert not await recall.delete_document(ANA_DOC, "vpn.md", OpContext.with_timeout(30.0))


@pytest.mark.parametrize("what", ["fact", "document"])
async def test_a_damaged_join_record_is_judged_as_one_without_a_join_record(
    what: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ana erased during the write, her join record then damaged: taken back (by the clocks), not left.

    A join record that does not decode cannot say when its erasure joined:
    it is read as absent, so the clock rule judges the erasure (it just
    completed: the write is taken back), and a WARNING names it. It never
    makes the second read fail, which would leave the write standing.
    """
    world = _world("memory", tmp_path, 0.0)
    store = world.eraser.session_store
    assert isinstance(store, InMemorySessionStore)

    async def erase_ana_and_damage() -> None:
        erasure_id = await _erase(world, "ana")
        key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"j-{erasure_id}")
        revision, _ = store._rows[key]
        store._rows[key] = (revision, b'{"damaged": true}')

    caplog.set_level(logging.WARNING)
    world.during.hook = erase_ana_and_damage
    async with world.eraser, world.writer:
        assert not await _write(world, what)
    assert [r for r in caplog.records if "join record" in r.getMessage() and "damaged" in r.getMessage()]
