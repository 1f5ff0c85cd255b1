"""Hostile adapters' sequence answers: the engine reads each only to its bound, and acts on none it refuses.

A port method that returns many things (``read_groups``, ``list_sessions``,
``append``'s receipts, ``unindexed_groups``, a recall session's answers)
answers with a value the engine walks in its own task. Each adapter here is
a real in-memory adapter with one method overridden to answer, on demand,
with: a list subclass that says it is empty and whose iterator (nearly)
never ends; an iterator that (nearly) never ends (not a sequence); more items than were asked; a
sequence whose iteration raises half way; items of the wrong type. The
engine must refuse it with a typed error (``ContractViolationError``, or
the path's own diagnostic), read no more than one item past the bound, and
change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import anyio
import pytest
from _recall_support import Scripted, ScriptedSession
from _recall_support import runtime as recall_runtime

from agentium_harness import (
    ArchiveCorruptError,
    ContractViolationError,
    EraseTarget,
    EvictionStatus,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Message,
    OperatorAttestation,
    RecallStatus,
    RecallUnavailableError,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionKey,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness._engine.adapter_lists import bounded_list, listed
from agentium_harness._engine.index_recheck import drop_erased_meanwhile
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports.summary import GapReason
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    Candidate,
    Excerpt,
    MessageGroup,
    OpContext,
    RecallLimits,
    RecallSession,
    Scope,
    SourceRef,
    StoredFact,
    Validation,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))
#: How far an "endless" answer goes before it gives up: endless in spirit, bounded so a regression
#: fails (by the count of items read) instead of hanging the suite.
ENDLESS = 100_000


class Boom(Exception):
    """What a hostile answer raises half way through its iteration: never a typed error."""


class Endless(list):  # type: ignore[type-arg]
    """A list that says it is empty and whose iterator repeats ``item`` (nearly) without end; counts reads."""

    def __init__(self, item: object) -> None:
        super().__init__()
        self.item = item
        self.read = 0

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        while self.read < ENDLESS:
            self.read += 1
            yield self.item

    def __getitem__(self, index: Any) -> Any:
        return self if isinstance(index, slice) else self.item


class EndlessGroups(Endless):
    """:class:`Endless`, yielding groups at ascending seqs from ``first``'s: each in place, none ever last."""

    def __iter__(self) -> Iterator[Any]:
        first: MessageGroup = self.item  # type: ignore[assignment]
        while self.read < ENDLESS:
            self.read += 1
            yield MessageGroup(first.seq + self.read - 1, first.messages)


class Raising(list):  # type: ignore[type-arg]
    """A list whose length and iteration raise a foreign exception after its first item."""

    def __len__(self) -> int:
        raise Boom("len")

    def __iter__(self) -> Iterator[Any]:
        yield list.__getitem__(self, 0)
        raise Boom("half way")


class EndlessIterator:
    """An iterator that repeats ``item`` (nearly) without end; not a sequence, so never read at all."""

    def __init__(self, item: object) -> None:
        self.item = item
        self.read = 0

    def __iter__(self) -> EndlessIterator:
        return self

    def __next__(self) -> object:
        if self.read >= ENDLESS:
            raise StopIteration
        self.read += 1
        return self.item


def endless_generator(item: object) -> Iterator[object]:
    """A generator that never ends (for the helper's own test: it is refused before it is read)."""
    while True:
        yield item


#: How each kind of hostile answer is made from the honest answer ``real`` (non-empty) and the bound.
KINDS: dict[str, Callable[[list[Any], int], object]] = {
    "endless": lambda real, limit: Endless(real[0]),
    "endless in order": lambda real, limit: EndlessGroups(real[0]),
    "iterator": lambda real, limit: EndlessIterator(real[0]),
    "too many": lambda real, limit: real + [real[-1]] * (limit + 1),
    "raising": lambda real, limit: Raising(real),
    "wrong type": lambda real, limit: [object()] * len(real),
}

#: What a listing of ids can be answered with (groups in order are an archive's).
LISTING_KINDS = [k for k in KINDS if k != "endless in order"]


def _bounded(answer: object, limit: int) -> None:
    """An endless answer was read to one past its bound at most; an iterator (no sequence) not at all."""
    if isinstance(answer, Endless):
        assert answer.read <= limit + 1, f"read {answer.read} items of an answer bounded at {limit}"
    if isinstance(answer, EndlessIterator):
        assert answer.read == 0, f"read {answer.read} items of an iterator, which is no sequence"


# -- the shared helper ------------------------------------------------------------------------------


def test_listed_reads_one_past_the_bound_and_refuses_what_is_no_sequence_or_fails() -> None:
    endless = Endless("x")
    assert listed(endless, 3, "archive A.read_groups") == ["x"] * 4 and endless.read == 4
    with pytest.raises(ContractViolationError, match=r"archive A\.read_groups returned generator"):
        listed(endless_generator("x"), 3, "archive A.read_groups")
    for bad in (None, 5, "text", b"bytes", {"a": 1}, {1, 2}):
        with pytest.raises(ContractViolationError, match="not a sequence"):
            listed(bad, 3, "archive A.read_groups")
    with pytest.raises(ContractViolationError, match=r"could not be read.*Boom") as info:
        listed(Raising(["x", "y"]), 3, "archive A.read_groups")
    assert isinstance(info.value.__cause__, Boom)
    assert listed(("a", "b"), 3, "w") == ["a", "b"]


def test_bounded_list_refuses_more_than_the_bound_and_items_of_another_type() -> None:
    assert bounded_list(["a", "b"], 2, "store S.list_sessions", "ids", str) == ["a", "b"]
    with pytest.raises(ContractViolationError, match=r"store S\.list_sessions returned more than the 2 ids"):
        bounded_list(["a", "b", "c"], 2, "store S.list_sessions", "ids", str)
    with pytest.raises(ContractViolationError, match="returned int as item 1, not str"):
        bounded_list(["a", 1], 2, "store S.list_sessions", "ids", str)


class _OwnSequence(Sequence[str]):
    """A well-behaved sequence of the adapter's own (not a list or tuple): it is one, and read as one."""

    def __init__(self, items: list[str]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]


class _Registered:
    """Registered with ``collections.abc.Sequence`` rather than subclassing it."""

    def __init__(self, items: list[str]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> str:
        return self._items[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)


Sequence.register(_Registered)


class _Ids(tuple):  # type: ignore[type-arg]  # a tuple subclass: a sequence too
    pass


def test_a_well_behaved_sequence_of_any_class_is_read_and_a_duck_typed_one_is_refused_saying_why() -> None:
    who = "store S.list_sessions"
    for answer in (_OwnSequence(["a", "b"]), _Registered(["a", "b"]), _Ids(("a", "b")), ["a", "b"]):
        assert bounded_list(answer, 2, who, "ids", str) == ["a", "b"], type(answer).__name__
    assert bounded_list(_OwnSequence([]), 2, who, "ids", str) == []
    assert bounded_list((), 0, who, "ids", str) == []
    with pytest.raises(ContractViolationError, match="more than the 1 ids"):
        bounded_list(_OwnSequence(["a", "b"]), 1, who, "ids", str)
    # Only __getitem__ and __len__, neither subclassing nor registered with Sequence: refused, and
    # the error says what would have been read.
    duck = type("Duck", (), {"__len__": lambda self: 1, "__getitem__": lambda self, i: ["a"][i]})()
    with pytest.raises(
        ContractViolationError, match=r"returned Duck.*registered with collections\.abc\.Sequence"
    ):
        bounded_list(duck, 2, who, "ids", str)


# -- archive read_groups: read_history ----------------------------------------------------------------


class HostileArchive(InMemoryArchive):
    """The in-memory archive; while ``kind`` is set, ``read_groups`` (or ``append``) answers with it."""

    def __init__(self) -> None:
        super().__init__()
        self.kind: str | None = None
        self.on = "read_groups"
        self.single: str | None = None
        self.answers: list[object] = []

    def _hostile(self, real: list[Any], limit: int) -> object:
        assert self.kind is not None
        answer = KINDS[self.kind](real, limit)
        self.answers.append(answer)
        return answer

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        real = list(await super().read_groups(key, start_seq, max_groups, ctx))
        if self.kind is None or self.on != "read_groups" or not real:
            return real
        if max_groups == 1 and self.single is not None:  # a one-group read answers with ``single``
            return KINDS[self.single](real, 1)  # type: ignore[return-value]
        return self._hostile(real, max_groups)  # type: ignore[return-value]

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        real = list(await super().append(key, groups, ctx))
        if self.kind is None or self.on != "append":
            return real
        return self._hostile(real, len(groups))  # type: ignore[return-value]


def _pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"u{n}"), Message(Role.ASSISTANT, f"a{n}")]


def _runtime(
    archive: InMemoryArchive, store: InMemorySessionStore | None = None, **kw: Any
) -> tuple[HarnessRuntime, InMemorySessionStore]:
    store = store or InMemorySessionStore()
    rt = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        **kw,
    )
    return rt, store


def _archived(archive: InMemoryArchive, key: SessionKey = KEY) -> dict[int, Any]:
    return {seq: row for seq in range(64) if (row := archive.raw(key, seq)) is not None}


@pytest.mark.parametrize("kind", list(KINDS))
async def test_read_history_refuses_a_hostile_archive_answer_typed_and_bounded(kind: str) -> None:
    archive = HostileArchive()
    rt, store = _runtime(archive)
    for n in range(6):
        await rt.append(ANA, "s1", _pair(n))
    before = store.raw(KEY), _archived(archive)
    archive.kind = kind
    # Before the fix: a generator or a raising length was an untyped TypeError or Boom.
    wanted = ArchiveCorruptError if kind == "wrong type" else ContractViolationError
    with anyio.fail_after(20), pytest.raises(wanted):
        await rt.read_history(ANA, "s1", max_groups=6)
    assert (store.raw(KEY), _archived(archive)) == before
    for answer in archive.answers:
        _bounded(answer, 6)
    archive.kind = None
    assert len((await rt.read_history(ANA, "s1", max_groups=6)).groups) == 6


# -- archive append: the receipts of an eviction -----------------------------------------------------


@pytest.mark.parametrize("kind", ["endless", "iterator", "too many", "raising"])
async def test_hostile_receipts_are_refused_bounded_and_the_boundary_does_not_move(kind: str) -> None:
    archive = HostileArchive()
    rt, store = _runtime(archive)
    for n in range(2):
        await rt.append(ANA, "s1", _pair(n))
    before = store.raw(KEY)
    assert before is not None
    archive.kind, archive.on = kind, "append"
    with anyio.fail_after(20):
        result = await rt.append(ANA, "s1", _pair(2))
    # The group is committed, its eviction deferred: no receipt of this answer was trusted.
    assert result.eviction is EvictionStatus.DEFERRED
    assert "archive_contract_violation" in [d.code for d in result.diagnostics]
    page = await rt.read_history(ANA, "s1", max_groups=10)
    assert page.boundary == 0 and len(page.groups) == 3
    for answer in archive.answers:
        _bounded(answer, 1)


# -- archive read_groups: reconcile_session ------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
async def test_reconcile_refuses_a_hostile_archive_answer_and_saves_nothing(kind: str) -> None:
    archive = HostileArchive()
    old, _ = _runtime(archive)
    for n in range(4):
        await old.append(ANA, "s1", _pair(n))
    rt, fresh = _runtime(archive)  # the snapshot store was lost; the archive kept its groups
    evictions = [(await rt.append(ANA, "s1", _pair(10 + n))).eviction for n in range(3)]
    assert evictions[-1] is EvictionStatus.DIVERGED
    before = fresh.raw(KEY), _archived(archive)
    archive.kind = kind
    with anyio.fail_after(20), pytest.raises(ContractViolationError):
        await rt.reconcile_session(ANA, "s1")
    assert (fresh.raw(KEY), _archived(archive)) == before
    for answer in archive.answers:
        _bounded(answer, 256)
    archive.kind = None
    assert (await rt.reconcile_session(ANA, "s1")).changed


# -- session store list_sessions: the history API's listing and retention -----------------------------


class HostileListing(InMemorySessionStore):
    """The in-memory session store; while ``kind`` is set, ``list_sessions`` answers with it."""

    def __init__(self) -> None:
        super().__init__()
        self.kind: str | None = None
        self.answers: list[object] = []

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        real = list(await super().list_sessions(tenant, user, limit, ctx, after=after))
        if self.kind is None or not real:
            return real
        answer = KINDS[self.kind](real, limit)
        self.answers.append(answer)
        return answer  # type: ignore[return-value]


@pytest.mark.parametrize("kind", LISTING_KINDS)
async def test_list_sessions_refuses_a_hostile_listing_typed_and_bounded(kind: str) -> None:
    store = HostileListing()
    rt, _ = _runtime(InMemoryArchive(), store)
    for sid in ("s1", "s2", "s3"):
        await rt.append(ANA, sid, _pair(0))
    store.kind = kind
    with anyio.fail_after(20), pytest.raises(ContractViolationError):
        await rt.list_sessions(ANA, limit=2)
    for answer in store.answers:
        _bounded(answer, 3)  # the engine asks for limit + 1
    store.kind = None
    assert (await rt.list_sessions(ANA, limit=2)).sessions == ("s1", "s2")


@pytest.mark.parametrize("kind", LISTING_KINDS)
async def test_retention_refuses_a_hostile_listing_and_erases_nothing(kind: str) -> None:
    store, archive = HostileListing(), InMemoryArchive()
    rt, _ = _runtime(archive, store, retention=RetentionPolicy(max_archived_groups=1))
    for sid in ("s1", "s2"):
        for n in range(5):
            await rt.append(ANA, sid, _pair(n))
    keys = [SessionKey("acme", "ana", sid) for sid in ("s1", "s2")]
    before = [(store.raw(k), _archived(archive, k)) for k in keys]
    store.kind = kind
    with anyio.fail_after(20), pytest.raises(ContractViolationError):
        await rt.apply_retention(OPERATOR, EraseTarget.user("acme", "ana"))
    assert [(store.raw(k), _archived(archive, k)) for k in keys] == before
    for answer in store.answers:
        _bounded(answer, 500)
    store.kind = None
    assert len((await rt.apply_retention(OPERATOR, EraseTarget.user("acme", "ana"))).erasures) == 2


# -- recall indexing: unindexed_groups and the catch-up's archive read ---------------------------------


class HostileIndex(InMemoryRecallStore):
    """The in-memory recall store: archive indexing fails while ``down``; ``unindexed_groups`` answers
    with ``kind`` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.kind: str | None = None
        self.answers: list[object] = []

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        if self.down:
            raise RecallUnavailableError("the index is down")
        return await super().index_groups(key, groups, receipts, ctx)

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int] | None:
        real = await super().unindexed_groups(key, end_seq, max_groups, ctx, start_seq=start_seq)
        if self.kind is None or not real:
            return real
        answer = KINDS[self.kind](list(real), max_groups)
        self.answers.append(answer)
        return answer  # type: ignore[return-value]


async def _indexed(store: InMemoryRecallStore) -> list[int]:
    return [g.seq for g in await store.seek_groups(KEY, 0, 1000, OpContext.with_timeout(30))]


async def _behind(archive: InMemoryArchive) -> tuple[HarnessRuntime, HostileIndex]:
    """A runtime whose recall index missed archived groups 1-3 (it was down while they were archived)."""
    store = HostileIndex()
    rt, _ = _runtime(archive, recall=store)
    for n in range(3):
        await rt.run(ANA, "s1", f"note {n} about kiwis")
    store.down = True
    for n in range(3, 6):
        await rt.run(ANA, "s1", f"note {n} about plums")
    store.down = False
    assert await _indexed(store) == [0]
    return rt, store


@pytest.mark.parametrize("kind", LISTING_KINDS)
async def test_a_hostile_unindexed_groups_answer_is_a_bounded_violation_and_nothing_is_caught_up(
    kind: str,
) -> None:
    rt, store = await _behind(InMemoryArchive())
    store.kind = kind
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "note 6 about figs")
    codes = [d.code for d in result.diagnostics]
    assert "contract_violation" in codes and "recall_index_caught_up" not in codes
    assert not {1, 2, 3} & set(await _indexed(store))
    for answer in store.answers:
        _bounded(answer, 16)


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_hostile_archive_answer_to_the_catch_up_indexes_nothing_of_it(kind: str) -> None:
    archive = HostileArchive()
    rt, store = await _behind(archive)
    archive.kind = kind
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "note 6 about figs")
    codes = [d.code for d in result.diagnostics]
    assert "recall_catch_up_failed" in codes and "recall_index_caught_up" not in codes
    assert not {1, 2, 3} & set(await _indexed(store))
    for answer in archive.answers:
        _bounded(answer, 16)


@pytest.mark.parametrize("kind", list(KINDS))
async def test_the_check_after_indexing_erases_nothing_on_a_hostile_archive_answer(kind: str) -> None:
    archive, store = HostileArchive(), InMemoryRecallStore()
    groups = [MessageGroup(n, tuple(_pair(n))) for n in range(3)]
    receipts = list(await archive.append(KEY, groups, OpContext.with_timeout(30)))
    await store.index_groups(KEY, groups, receipts, OpContext.with_timeout(30))
    archive.kind = kind
    with anyio.fail_after(20):
        notes = await drop_erased_meanwhile(store, archive, Ticket(KEY, "test", 30.0), KEY, groups)
    assert [d.code for d in notes] == ["recall_index_erased_meanwhile"]
    assert "could not check" in notes[0].message
    assert await _indexed(store) == [0, 1, 2]
    for answer in archive.answers:
        _bounded(answer, 3)


# -- a recall session's answers: discover, read, validate_current ---------------------------------------


class HostileRecallSession(ScriptedSession):
    """The scripted session; the store's ``method`` answers with its ``kind`` (from the honest answer)."""

    store: HostileRecall

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        real = list(await super().discover(query, max_candidates, ctx))
        return self.store.hostile("discover", real, max_candidates)  # type: ignore[return-value]

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        real = list(await super().read(refs, max_excerpt_bytes, ctx))
        return self.store.hostile("read", real, len(refs))  # type: ignore[return-value]

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        real = list(await super().validate_current(refs, ctx))
        return self.store.hostile("validate_current", real, len(refs))  # type: ignore[return-value]


class HostileRecall(Scripted):
    """A scripted recall store with one document whose session's ``method`` answers with ``kind``."""

    def __init__(self, method: str, kind: str) -> None:
        super().__init__([("rota", "The release train leaves on Thursday.")])
        self.method, self.kind = method, kind
        self.answers: list[object] = []

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return HostileRecallSession(self)

    def hostile(self, method: str, real: list[Any], limit: int) -> object:
        if method != self.method or not real:
            return real
        answer = KINDS[self.kind](real, limit)
        self.answers.append(answer)
        return answer


HostileRecall.session_class = HostileRecallSession


@pytest.mark.parametrize("method", ["discover", "read", "validate_current"])
@pytest.mark.parametrize("kind", LISTING_KINDS)
async def test_a_recall_sessions_hostile_answer_is_read_to_its_bound_and_never_trusted(
    method: str, kind: str
) -> None:
    store = HostileRecall(method, kind)
    rt, _, _ = recall_runtime(store, recall_policy=current_session_recall_policy(on_partial="continue"))
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "When does the Thursday train leave?")
    # The round is failed or partial, never complete on such an answer; the run itself stands.
    assert result.recall is not None
    assert result.recall.status in (RecallStatus.FAILED, RecallStatus.PARTIAL), result.recall.status
    assert store.answers
    for answer in store.answers:
        _bounded(answer, 8)
    if kind in ("endless", "too many"):
        assert any("more than the" in v for v in result.recall.violations) or result.recall.included == ()


# -- a memory store's listings: list_facts, history, lookup ----------------------------------------------

ALICE = MemoryScope("acme", "ana")


class HostileMemory(InMemoryMemoryStore):
    """The in-memory memory store; while ``kind`` is set, its listings answer with it."""

    def __init__(self) -> None:
        super().__init__()
        self.kind: str | None = None
        self.answers: list[object] = []

    def _hostile(self, real: Sequence[StoredFact], limit: int) -> Any:
        if self.kind is None or not real:
            return real
        answer = KINDS[self.kind](list(real), limit)
        self.answers.append(answer)
        return answer

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        return self._hostile(await super().list_facts(scope, limit, ctx), limit)  # type: ignore[no-any-return]

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        return self._hostile(await super().history(scope, fact_id, ctx), 200)  # type: ignore[no-any-return]

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        return self._hostile(await super().lookup(scope, query, limit, ctx, at=at), limit)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", LISTING_KINDS)
async def test_a_memory_stores_hostile_listing_is_refused_typed_bounded_and_changes_nothing(
    kind: str,
) -> None:
    store = HostileMemory()
    manager = MemoryManager(store)
    ack = await manager.remember(MemoryFact(ALICE, "Ana takes her tea without sugar"))
    store.kind = kind
    with anyio.fail_after(20):
        with pytest.raises(ContractViolationError):
            await manager.list(ALICE, limit=5)
        with pytest.raises(ContractViolationError):
            await manager.history(ALICE, ack.fact_id)
        # The owner check reads the history first: a hostile one refuses the forget, which changes nothing.
        with pytest.raises(ContractViolationError):
            await manager.forget(ALICE, ack.fact_id)
        kept, dropped = await manager.select(ALICE, "tea")
    # A selection drops what it cannot inject (an endless or long answer is cut to its bound, as before).
    assert dropped and (kept == () or kind in ("endless", "too many"))
    for answer in store.answers:
        _bounded(answer, 200)
    store.kind = None
    assert [f.fact_id for f in await manager.list(ALICE)] == [ack.fact_id]


# -- summaries: the group-by-group read after a batch read failed ---------------------------------------


async def test_a_summary_read_whose_answer_raises_late_is_read_group_by_group_not_a_foreign_error() -> None:
    # The batch read's answer raises past its first group, so the update reads group by group; each
    # answer then raised from its own __len__ outside the read's guard, and the run failed untyped.
    # Now each is read through its iterator: its first group is what a one-group read needs.
    archive, store = HostileArchive(), InMemorySessionStore()
    before, _ = _runtime(archive, store)  # no summarizer yet: the first summary reads the archive
    for n in range(5):
        await before.run(ANA, "s1", f"Fact {n}: the widget number {n} weighs {n * 7} grams.")
    limits = SummaryLimits(background=False)
    rt, _ = _runtime(archive, store, summarizer=ExtractiveSummarizer(), summary_limits=limits)
    archive.kind = "raising"
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "Fact 5: the widget number 5 weighs 35 grams.")
    assert result.committed and result.summary is not None and archive.answers
    assert result.summary.gaps == () and result.summary.summary.frontier == result.boundary


async def test_a_summary_read_answering_no_sequence_is_a_gap_not_a_foreign_error() -> None:
    # An iterator is no sequence: group by group, ``not answer`` passed it and ``answer[0]`` raised
    # a TypeError outside the read's guard. Now it is a gap, and the next update reads on.
    archive, store = HostileArchive(), InMemorySessionStore()
    before, _ = _runtime(archive, store)
    for n in range(5):
        await before.run(ANA, "s1", f"Fact {n}: the widget number {n} weighs {n * 7} grams.")
    limits = SummaryLimits(background=False)
    rt, _ = _runtime(archive, store, summarizer=ExtractiveSummarizer(), summary_limits=limits)
    archive.kind = "raising"
    archive.single = "iterator"
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "Fact 5: the widget number 5 weighs 35 grams.")
    assert result.committed and result.summary is not None
    (gap,) = result.summary.gaps
    # The gap is committed: the refusal by its class (its text quotes what the archive answered);
    # the summary_gap diagnostic says it whole.
    assert gap.reason is GapReason.UNAVAILABLE and "ContractViolationError" in gap.detail
    (note,) = [d for d in result.diagnostics if d.code == "summary_gap"]
    assert "not a sequence" in note.message
    archive.kind = archive.single = None
    healed = await rt.run(ANA, "s1", "Fact 6: the widget number 6 weighs 42 grams.")
    assert healed.summary is not None and healed.summary.gaps == ()
