"""MemoryManager over the real SQLite memory store: acknowledgments, bad input, hooks, selection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from _memory_support import hook_registry, sqlite_store, texts

from agentium_harness import (
    AckStatus,
    AgentLifecycleError,
    ContractViolationError,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryFact,
    MemoryFactForgottenError,
    MemoryFactNotFoundError,
    MemoryLimits,
    MemoryManager,
    MemoryRejectedError,
    MemoryScope,
    SelectionRequest,
)
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import (
    MAX_FACT_BYTES,
    FactStatus,
    GroupRef,
    MemoryEventKind,
    Message,
    OpContext,
    Role,
    StoredFact,
)

pytestmark = pytest.mark.anyio

#: The group an extraction reads (its facts cite it): any one will do here.
SOURCES = (GroupRef("agent", 0, "sha256:" + "0" * 64),)

ALICE = MemoryScope("tenant-a", "alice")
BOB = MemoryScope("tenant-b", "bob")
REF = GroupRef("s1", 3, "sha256:" + "a" * 64)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    s = sqlite_store(tmp_path)
    yield s
    await s.aclose()


async def _all(store: SQLiteMemoryStore, scope: MemoryScope) -> list[StoredFact]:
    return list(await store.list_facts(scope, 200, OpContext.with_timeout(30.0)))


async def test_remember_with_result_reports_stored_duplicate_and_rejected(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store)
    stored = await manager.remember_with_result(MemoryFact(ALICE, "Alice uses vim", provenance=[REF]))
    assert stored.status is AckStatus.STORED and stored.revision == 1 and stored.durable and stored.fact_id
    again = await manager.remember_with_result(MemoryFact(ALICE, "Alice uses vim"))
    assert (again.status, again.fact_id, again.revision) == (AckStatus.DUPLICATE, stored.fact_id, 1)
    rejected = await manager.remember_with_result(MemoryFact(ALICE, "x" * (MAX_FACT_BYTES + 1)))
    assert rejected.status is AckStatus.REJECTED and not rejected.ok and "over the limit" in rejected.reason
    assert rejected.fact_id is None and rejected.revision is None
    assert texts(await _all(store, ALICE)) == ["Alice uses vim"]


@pytest.mark.parametrize(
    ("fact", "reason"),
    [
        (MemoryFact(ALICE, "y" * (MAX_FACT_BYTES + 1)), "over the limit"),
        (
            MemoryFact(ALICE, "window", datetime(2030, 1, 2, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)),
            "ends before",
        ),
        (MemoryFact(ALICE, "note \x00 with a NUL"), "NUL"),
        (MemoryFact(ALICE, "   "), "empty"),
    ],
)
async def test_bad_facts_are_rejected_with_a_reason_and_nothing_is_written(
    store: SQLiteMemoryStore, fact: MemoryFact, reason: str
) -> None:
    registry, events = hook_registry()
    manager = MemoryManager(store, hooks=registry)
    ack = await manager.remember_with_result(fact)
    assert ack.status is AckStatus.REJECTED and reason in ack.reason
    with pytest.raises(MemoryRejectedError, match=reason):
        await manager.remember(fact)
    assert await _all(store, ALICE) == [] and events == []


async def test_the_hosts_accept_rule_rejects_too(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store, accept=lambda f: "no phone numbers" if "555" in f.text else None)
    ack = await manager.remember_with_result(MemoryFact(ALICE, "call 555-0100"))
    assert ack.status is AckStatus.REJECTED and ack.reason == "no phone numbers"
    assert (await manager.remember(MemoryFact(ALICE, "likes chess"))).status is AckStatus.STORED
    assert texts(await _all(store, ALICE)) == ["likes chess"]


def test_types_are_refused_at_construction() -> None:
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        MemoryFact(ALICE, "naive", valid_until=datetime(2030, 1, 1))
    with pytest.raises(InvalidArgumentError, match="str"):
        MemoryFact(ALICE, b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="GroupRef"):
        MemoryFact(ALICE, "x", provenance=["group/1"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tenant"):
        MemoryScope("", "alice")
    with pytest.raises(InvalidArgumentError, match="digest"):
        GroupRef("s", 0, "md5:abc")


async def test_correct_keeps_history_and_a_forgotten_fact_cannot_be_corrected(
    store: SQLiteMemoryStore,
) -> None:
    manager = MemoryManager(store)
    ack = await manager.remember(MemoryFact(ALICE, "office in Leeds"))
    assert ack.fact_id is not None
    fixed = await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "office in York"))
    assert (fixed.status, fixed.revision) == (AckStatus.STORED, 2)
    history = await manager.history(ALICE, ack.fact_id)
    assert [(h.revision, h.status, h.text) for h in history] == [
        (1, FactStatus.SUPERSEDED, "office in Leeds"),
        (2, FactStatus.CURRENT, "office in York"),
    ]
    gone = await manager.forget(ALICE, ack.fact_id)
    assert gone.revision == 3
    before = await manager.history(ALICE, ack.fact_id)
    with pytest.raises(MemoryFactForgottenError):
        await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "office in Hull"))
    assert await manager.history(ALICE, ack.fact_id) == before
    assert all(h.text == "" and h.status is FactStatus.FORGOTTEN for h in before)
    kept, _ = await manager.select(ALICE, "office")
    assert kept == ()


async def test_another_tenants_correct_and_forget_are_refused_without_revealing_the_id(
    store: SQLiteMemoryStore,
) -> None:
    registry, events = hook_registry()
    manager = MemoryManager(store, hooks=registry)
    ack = await manager.remember(MemoryFact(ALICE, "alice's secret plan"))
    assert ack.fact_id is not None
    events.clear()
    before = await manager.history(ALICE, ack.fact_id)
    missing = "m-" + "0" * 32
    for call in (
        lambda fid: manager.forget(BOB, fid),
        lambda fid: manager.correct(BOB, fid, MemoryFact(BOB, "bob's now")),
        lambda fid: manager.history(BOB, fid),
    ):
        with pytest.raises(MemoryFactNotFoundError) as foreign:
            await call(ack.fact_id)
        with pytest.raises(MemoryFactNotFoundError) as absent:
            await call(missing)
        assert str(foreign.value).replace(ack.fact_id, "?") == str(absent.value).replace(missing, "?")
    assert await manager.history(ALICE, ack.fact_id) == before
    assert events == [] and await _all(store, BOB) == []


async def test_a_correction_cannot_move_a_fact_to_another_tenant(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store)
    ack = await manager.remember(MemoryFact(ALICE, "stays with alice"))
    assert ack.fact_id is not None
    with pytest.raises(InvalidArgumentError, match="tenant and user"):
        await manager.correct(ALICE, ack.fact_id, MemoryFact(BOB, "moved"))
    assert texts(await _all(store, ALICE)) == ["stays with alice"]


async def test_lifecycle_hooks_fire_and_a_raising_hook_is_isolated_and_reported(
    store: SQLiteMemoryStore,
) -> None:
    registry, events = hook_registry(raising=True)
    manager = MemoryManager(store, hooks=registry)
    ack = await manager.remember(MemoryFact(ALICE, "hooked fact"))
    assert ack.fact_id is not None
    assert any("memory hook exploded" in note for note in ack.notes)
    duplicate = await manager.remember(MemoryFact(ALICE, "hooked fact"))
    fixed = await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "hooked fact, corrected"))
    gone = await manager.forget(ALICE, ack.fact_id)
    result = await manager.drain(30.0)
    assert [(e.kind, e.fact_id, e.revision) for e in events] == [
        (MemoryEventKind.REMEMBERED, ack.fact_id, 1),
        (MemoryEventKind.CORRECTED, ack.fact_id, 2),
        (MemoryEventKind.FORGOTTEN, ack.fact_id, 3),
        (MemoryEventKind.DRAINED, None, None),
    ]
    assert events[0].scope == ALICE and events[-1].scope is None
    assert duplicate.notes == () and fixed.notes and gone.notes and result.notes
    # The writes stand although a hook raised each time.
    assert [h.revision for h in await manager.history(ALICE, ack.fact_id)] == [1, 2, 3]


async def test_selection_is_bounded_checked_and_host_replaceable(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store, limits=MemoryLimits(max_injected_facts=2))
    for i in range(4):
        await manager.remember(MemoryFact(ALICE, f"tea fact {i}"))
    past = datetime.now(UTC) - timedelta(days=1)
    await manager.remember(MemoryFact(ALICE, "expired tea fact", valid_until=past))
    kept, dropped = await manager.select(ALICE, "tea")
    assert len(kept) == 2 and dropped == ()
    foreign = (await manager.remember(MemoryFact(BOB, "bob tea"))).fact_id
    expired_rows = await _all(store, ALICE)

    async def rogue(request: SelectionRequest) -> Sequence[StoredFact]:
        # A host selection that returns everything it can find, including what must not be injected.
        return [*await store.list_facts(BOB, 10, request.ctx), *expired_rows]

    hosted = MemoryManager(store, selection=rogue, limits=MemoryLimits(max_injected_facts=3))
    kept, dropped = await hosted.select(ALICE, "tea")
    assert len(kept) == 3 and all(f.scope.owns(ALICE) and f.text != "expired tea fact" for f in kept)
    reasons = dict(dropped)
    assert reasons[foreign] == "outside the request's scope"  # type: ignore[index]
    assert "not valid at the request's time" in reasons.values()
    # The refused facts left their places to the eligible ones after them, in rank order; the
    # eligible one past the limit is a spare candidate, not examined, so not reported either.
    eligible = [f for f in expired_rows if f.text != "expired tea fact"]
    assert list(kept) == eligible[:3] and eligible[3].fact_id not in reasons
    assert len(dropped) == 2


async def test_a_forgotten_fact_is_never_selected_even_by_a_stale_selection(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store)
    ack = await manager.remember(MemoryFact(ALICE, "stale secret"))
    cached = list(await store.lookup(ALICE, "", 10, OpContext.with_timeout(30.0)))

    async def stale(request: SelectionRequest) -> Sequence[StoredFact]:
        return cached

    manager.selection = stale
    assert ack.fact_id is not None
    await manager.forget(ALICE, ack.fact_id)
    kept, dropped = await manager.select(ALICE, "secret")
    assert kept == () and dropped == ((ack.fact_id, "forgotten"),)


async def test_a_store_that_breaks_its_contract_is_caught(store: SQLiteMemoryStore) -> None:
    class Liar(SQLiteMemoryStore):
        capabilities = SQLiteMemoryStore.capabilities

        async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
            return list(await super().list_facts(BOB, limit, ctx))

    liar = Liar(store.config)
    try:
        await MemoryManager(store).remember(MemoryFact(BOB, "bob's"))
        with pytest.raises(ContractViolationError, match="another tenant"):
            await MemoryManager(liar).list(ALICE)
    finally:
        await liar.aclose()


async def test_calls_after_close_are_refused(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store)
    await manager.aclose()
    with pytest.raises(AgentLifecycleError, match="closed"):
        await manager.remember(MemoryFact(ALICE, "too late"))
    assert not store.closed  # borrowed: never closed by the manager
    assert await _all(store, ALICE) == []


async def test_an_owned_store_is_closed_by_the_manager(tmp_path: Path) -> None:
    owned = sqlite_store(tmp_path, "owned.db")
    manager = MemoryManager(owned, owns_store=True)
    await manager.remember(MemoryFact(ALICE, "x"))
    await manager.aclose()
    assert owned.closed


class Extractor:
    """Proposes one fact per user message that says 'remember'."""

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        ctx.raise_if_expired("extract")
        return [
            MemoryFact(scope, m.content.split("remember", 1)[1].strip())
            for m in messages
            if m.role is Role.USER and "remember" in m.content
        ]


async def test_extraction_runs_as_named_owned_work_that_drain_reports(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store, extractor=Extractor())
    said = [Message(Role.USER, "please remember the boiler is red")]
    name = manager.extract_in_background(ALICE, said, "ex 1", sources=SOURCES)
    assert name == "ex 1"
    result = await manager.drain(5.0)
    assert result.completed == ("ex 1",) and result.ok
    assert texts(await _all(store, ALICE)) == ["the boiler is red"]
    assert MemoryManager(store).extract_in_background(ALICE, [], "none", sources=SOURCES) is None


class _Widening:
    """An extractor passing on what a model proposed: the fact in another scope than the conversation's."""

    def __init__(self, target: MemoryScope) -> None:
        self.target = target

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return [MemoryFact(scope, "an ordinary fact"), MemoryFact(self.target, "planted elsewhere")]


@pytest.mark.parametrize(
    "target",
    [
        MemoryScope("tenant-a", "alice"),  # every project of the user, from a conversation in one
        MemoryScope("tenant-a", "alice", "other-project"),
        MemoryScope("tenant-a", "alice", "proj", "other-repo"),
        MemoryScope("tenant-a", "alice", "proj"),  # no repository: every repository of the project
        MemoryScope("tenant-b", "alice", "proj", "repo"),
    ],
)
async def test_an_extracted_fact_cannot_widen_or_move_its_scope(
    store: SQLiteMemoryStore, target: MemoryScope
) -> None:
    scoped = MemoryScope("tenant-a", "alice", "proj", "repo")
    manager = MemoryManager(store, extractor=_Widening(target))
    manager.extract_in_background(scoped, [Message(Role.USER, "hi")], "ex", sources=SOURCES)
    with pytest.raises(MemoryDrainError):
        await manager.drain(5.0)
    for scope in (scoped, target):
        assert await manager.list(scope) == ()


async def test_an_extracted_fact_may_be_narrower_than_its_scope(store: SQLiteMemoryStore) -> None:
    narrower = MemoryScope("tenant-a", "alice", "proj", "repo")
    manager = MemoryManager(store, extractor=_Widening(narrower))
    manager.extract_in_background(
        MemoryScope("tenant-a", "alice"), [Message(Role.USER, "hi")], "ex", sources=SOURCES
    )
    assert (await manager.drain(5.0)).ok
    assert sorted(f.text for f in await manager.list(narrower)) == ["an ordinary fact", "planted elsewhere"]


class _Endless:
    """An extractor whose answer is a generator that never ends; counts how far it was read."""

    def __init__(self) -> None:
        self.read = 0

    async def extract(self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext) -> Any:
        def facts() -> Any:
            while self.read < 100_000:  # endless in spirit; bounded so a regression fails, not hangs
                self.read += 1
                yield MemoryFact(scope, f"fact {self.read}")

        return facts()


@pytest.mark.parametrize("answer", [None, 5, "a fact", b"a fact"])
async def test_an_extractor_answer_that_is_no_sequence_fails_the_work_typed(
    store: SQLiteMemoryStore, answer: object
) -> None:
    class Odd:
        async def extract(self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext) -> Any:
            return answer

    manager = MemoryManager(store, extractor=Odd())
    manager.extract_in_background(ALICE, [Message(Role.USER, "hi")], "ex", sources=SOURCES)
    with pytest.raises(MemoryDrainError, match="not a sequence of MemoryFact") as info:
        await manager.drain(5.0)
    assert info.value.result.failed == ("ex",)
    assert await manager.list(ALICE) == ()


async def test_an_endless_extractor_is_read_one_past_its_bound_and_writes_nothing(
    store: SQLiteMemoryStore,
) -> None:
    extractor = _Endless()
    manager = MemoryManager(store, extractor=extractor, limits=MemoryLimits(max_extracted_facts=3))
    manager.extract_in_background(ALICE, [Message(Role.USER, "hi")], "ex", sources=SOURCES)
    with pytest.raises(MemoryDrainError):
        await manager.drain(5.0)
    assert extractor.read == 4
    assert await manager.list(ALICE) == ()


class _EndlessList(list):  # type: ignore[type-arg]
    """A list subclass whose iterator lies about its length and (nearly) never ends; counts its reads."""

    def __init__(self, scope: MemoryScope) -> None:
        super().__init__()
        self.scope = scope
        self.read = 0

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Any:
        while self.read < 100_000:  # endless in spirit; bounded so a regression fails, not hangs
            self.read += 1
            fact = MemoryFact(self.scope, f"fact {self.read}")
            yield StoredFact(f"m-{self.read}", 1, FactStatus.CURRENT, fact, datetime.now(UTC))


async def test_an_endless_answer_is_read_only_to_its_bound(store: SQLiteMemoryStore) -> None:
    """A selection's or list's endless answer: read one past the bound, refused or cut, never read whole."""
    answer = _EndlessList(ALICE)

    async def endless(request: SelectionRequest) -> Sequence[StoredFact]:
        return answer

    kept, dropped = await MemoryManager(store, selection=endless).select(ALICE, "q")
    # Read one past the candidates the selection was asked for (4 per place: 32 for 8 places).
    assert len(kept) == 8 and answer.read == 33
    assert dropped == (("?", "the selection returned more than 32 facts; the rest was not read"),)

    class Lists(SQLiteMemoryStore):
        async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
            return listed

    listed = _EndlessList(ALICE)
    with pytest.raises(ContractViolationError, match="more than 50 facts"):
        await MemoryManager(Lists(store.config)).list(ALICE)
    assert listed.read == 51


@pytest.mark.parametrize("bad", [{"owns_store": "no"}, {"owns_store": 1}, {"hooks": 5}])
async def test_a_manager_flag_or_hooks_of_the_wrong_type_is_refused(
    store: SQLiteMemoryStore, bad: dict[str, object]
) -> None:
    """owns_store="no" was truthy: the manager's aclose closed a store the host said it borrows."""
    with pytest.raises(InvalidArgumentError):
        MemoryManager(store, **bad)  # type: ignore[arg-type]
    assert await store.list_facts(ALICE, 1, OpContext()) == []  # the borrowed store is still open


@pytest.mark.parametrize("lie", ["other_id", "no_revision", "bool_revision"])
async def test_an_acknowledgment_naming_another_fact_or_no_revision_is_a_contract_violation(
    store: SQLiteMemoryStore, lie: str
) -> None:
    """The host was told another fact was forgotten (or corrected), or revision None / True was written."""
    from agentium_harness.plugin_api import MemoryAck

    def bent(ack: MemoryAck) -> MemoryAck:
        if lie == "other_id":
            return attrs.evolve(ack, fact_id="m-someone-else")
        return attrs.evolve(ack, revision=None if lie == "no_revision" else True)

    class Bent(SQLiteMemoryStore):
        async def correct(self, *args: Any) -> MemoryAck:
            return bent(await super().correct(*args))

        async def forget(self, *args: Any) -> MemoryAck:
            return bent(await super().forget(*args))

        async def remember(self, *args: Any) -> MemoryAck:
            ack = await super().remember(*args)
            return ack if lie == "other_id" else bent(ack)

    bent_store = Bent(store.config)
    manager = MemoryManager(bent_store)
    try:
        if lie != "other_id":
            with pytest.raises(ContractViolationError, match="revision"):
                await manager.remember(MemoryFact(ALICE, "first"))
        ack = await MemoryManager(store).remember(MemoryFact(ALICE, "the one asked about"))
        assert ack.fact_id is not None
        with pytest.raises(ContractViolationError):
            await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "changed"))
        with pytest.raises(ContractViolationError):
            await manager.forget(ALICE, ack.fact_id)
        assert ack.fact_id in manager.forgotten_ids  # the store ran the forget: never injected again
    finally:
        await bent_store.aclose()


async def test_forgotten_ids_stay_bounded_and_keep_the_most_recent_forgets(
    store: SQLiteMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A manager serving a tenant for weeks must not grow with every forget; the most recent forgets are
    # still refused whatever a stale selection returns, older ones by the store's own tombstone.
    from agentium_harness._engine.memory import selection

    monkeypatch.setattr(selection, "MAX_FORGOTTEN_IDS", 5)
    manager = MemoryManager(store)
    ids = []
    for i in range(30):
        ack = await manager.remember(MemoryFact(ALICE, f"fact number {i}"))
        assert ack.fact_id is not None
        ids.append(ack.fact_id)
    cached = list(await store.lookup(ALICE, "", 50, OpContext.with_timeout(30.0)))

    async def stale(request: SelectionRequest) -> Sequence[StoredFact]:
        return cached

    for fact_id in ids:
        await manager.forget(ALICE, fact_id)
        assert len(manager.forgotten_ids) <= 5
    assert manager.forgotten_ids == frozenset(ids[-5:])
    manager.selection = stale
    _kept, dropped = await manager.select(ALICE, "fact", limit=50)
    assert {fid for fid, why in dropped if why == "forgotten"} == set(ids[-5:])
    # The default selection reads the store, whose tombstones keep every older forgotten fact out.
    manager.selection = selection.recent_and_relevant
    assert await manager.select(ALICE, "fact", limit=50) == ((), ())


def test_recent_ids_hold_at_most_the_bound_after_many_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentium_harness._engine.memory import selection

    monkeypatch.setattr(selection, "MAX_FORGOTTEN_IDS", 100)
    recent = selection.RecentIds()
    for i in range(5000):
        recent.add(f"m-{i}")
    recent.add("m-4900")  # forgotten again: becomes the most recent, not a second entry
    assert len(recent) == 100 and list(recent)[-1] == "m-4900"
    assert "m-4901" in recent and "m-4899" not in recent and "m-0" not in recent


async def test_a_listing_holds_each_current_fact_once_whatever_the_store_lists(
    store: SQLiteMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    kept = await MemoryManager(store).remember(MemoryFact(ALICE, "kept fact"))
    gone = await MemoryManager(store).remember(MemoryFact(ALICE, "the forgotten secret"))
    assert kept.fact_id is not None and gone.fact_id is not None
    [stale] = [f for f in await _all(store, ALICE) if f.fact_id == gone.fact_id]

    class Repeats(SQLiteMemoryStore):
        async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
            listed = list(await super().list_facts(scope, limit, ctx))
            tombstone = [r for r in await self.history(scope, gone.fact_id, ctx) if r.fact_id == gone.fact_id]
            # Another fact twice, the forgotten one listed as current and its tombstone too.
            return [*listed, *listed, stale, tombstone[-1]][:limit]

    repeats = Repeats(store.config)
    manager = MemoryManager(repeats)
    try:
        await manager.forget(ALICE, gone.fact_id)
        with caplog.at_level("WARNING", logger="agentium.engine.memory"):
            listed = await manager.list(ALICE)
        assert [f.fact_id for f in listed] == [kept.fact_id]
        [record] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
        assert record.levelname == "WARNING" and "3 fact(s)" in record.getMessage()
        assert "secret" not in record.getMessage()  # counts only, never a fact's text
        # A fresh manager (nothing forgotten through it) still drops the tombstone and the repeats.
        fresh = await MemoryManager(repeats).list(ALICE)
        assert [f.fact_id for f in fresh] == [kept.fact_id, gone.fact_id]
        assert {f.status for f in fresh} == {FactStatus.CURRENT}
    finally:
        await repeats.aclose()
