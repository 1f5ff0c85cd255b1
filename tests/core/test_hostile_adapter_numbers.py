"""Numbers and texts an adapter returns are checked, and kept, as the exact values they hold.

An adapter may answer with an ``int`` (or ``str``) subclass whose own
comparisons, ``__eq__``, ``__hash__`` or ``__index__`` lie: a store revision
that says it is past the one the save expected, a receipt seq or digest that
says it matches, a catch-up seq that says it is below the end. The engine reads
the value it holds (``int.__index__``, ``str.__str__``, which call no method of
the subclass), checks that, and keeps it: a lying one is refused as a contract
violation, and nothing is committed on its word.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import pytest

from agentium_harness import (
    ArchiveCorruptError,
    CommitState,
    ContractViolationError,
    Scope,
    SessionConflictError,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
)
from agentium_harness._engine import recall_items
from agentium_harness._engine.archive_receipts import checked_receipts
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.catch_up import _checked as checked_missing
from agentium_harness._engine.catch_up import catch_up_index
from agentium_harness._engine.commit_fence import refuse_if_erased_since_load
from agentium_harness._engine.erasure_ledger import ledger_of, pending_key
from agentium_harness._engine.index_recheck import drop_erased_meanwhile
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.memory.answers import checked_ack
from agentium_harness._engine.settle import Settled, _judge
from agentium_harness._engine.settle import _archived as settle_archived
from agentium_harness._engine.summary import _admissible as admissible_for_summary
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness._ports.memory import MemoryAck
from agentium_harness._ports.recall import Candidate, SourceRef
from agentium_harness._ports.recall_sources import SourceOwner, document_source_id
from agentium_harness._ports.summary import SummaryLimits
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionSnapshot, StoredSnapshot, seal_snapshot
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-suite")
KEY = SessionKey("acme", "ana", "s1")


class LyingInt(int):
    """An int that says it is past every bound and equal to anything (its ``__index__`` lies too).

    What it holds is what the engine must check: ``LyingInt(0)`` is 0, whatever it says.
    """

    def __lt__(self, other: object) -> bool:
        return False

    __le__ = __lt__

    def __gt__(self, other: object) -> bool:
        return True

    __ge__ = __gt__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 7


class LyingStr(str):
    """A str that says it equals anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


class Number(enum.IntEnum):
    """A harmless subclass: taken as the number it holds."""

    ONE = 1
    TWO = 2


def _runtime(store: Any, archive: Any = None) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive or InMemoryArchive(),
        session_store=store,
    )


async def _real(store: InMemorySessionStore) -> StoredSnapshot | None:
    return await InMemorySessionStore.load(store, KEY, OpContext())


# -- session store revisions ---------------------------------------------------------------------


class LyingLoad(InMemorySessionStore):
    """Once ``lie`` is set, loads answer the stored snapshot under a lying revision (0: none at all)."""

    lie = False

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        stored = await super().load(key, ctx)
        if stored is None or key != KEY or not self.lie:
            return stored
        return StoredSnapshot(stored.snapshot, LyingInt(0))


async def test_a_loaded_revision_that_lies_is_refused_and_nothing_is_committed() -> None:
    store = LyingLoad()
    runtime = _runtime(store)
    await runtime.run(ANA, "s1", "hello")
    before = await _real(store)
    store.lie = True
    with pytest.raises(ContractViolationError, match="revision 0"):
        await runtime.run(ANA, "s1", "again")
    after = await _real(store)
    assert after is not None and before is not None
    assert after.revision == before.revision and after.snapshot.next_seq == before.snapshot.next_seq == 1


class HonestSubclassStore(InMemorySessionStore):
    """Answers loads and saves with an IntEnum-like subclass holding the true revision."""

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        stored = await super().load(key, ctx)
        return None if stored is None else StoredSnapshot(stored.snapshot, _Rev(stored.revision))

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        return _Rev(await super().save(key, snapshot, expected, ctx))


class _Rev(int):
    """Harmless: only its type differs."""


async def test_an_honest_revision_subclass_is_taken_as_the_exact_int_it_holds() -> None:
    store = HonestSubclassStore()
    runtime = _runtime(store)
    first = await runtime.run(ANA, "s1", "hello")
    second = await runtime.run(ANA, "s1", "again")
    assert type(first.snapshot_revision) is int and type(second.snapshot_revision) is int
    assert second.snapshot_revision == first.snapshot_revision + 1 and second.group_seq == 1


class SaveSaysLanded(InMemorySessionStore):
    """A save that writes nothing and answers a revision that says it is past any expected one."""

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        return LyingInt(0)


async def test_a_save_answering_a_lying_revision_is_not_taken_as_committed() -> None:
    store = SaveSaysLanded()
    with pytest.raises(ContractViolationError) as caught:
        await _runtime(store).run(ANA, "s1", "hello")
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert await _real(store) is None


def test_a_read_back_revision_that_lies_settles_nothing_as_committed() -> None:
    saved = scoped_snapshot(KEY, "x")
    # The saved snapshot, under the revision the save expected, which says it is past it.
    settled = _judge(StoredSnapshot(saved, LyingInt(1)), saved, 1, ())
    assert settled is not None and settled.state is CommitState.UNKNOWN and settled.revision is None
    settled = _judge(StoredSnapshot(saved, Number.TWO), saved, 1, ())
    assert settled is not None and settled.state is CommitState.COMMITTED and type(settled.revision) is int


def test_an_erasure_ledger_revision_is_read_as_the_exact_int_it_holds() -> None:
    key = pending_key("acme")
    ledger = seal_snapshot(SessionSnapshot(memory_scope=None, ledger=ErasureLedger()))
    with pytest.raises(ContractViolationError, match="revision 0"):
        ledger_of(key, StoredSnapshot(ledger, LyingInt(0)))
    revision, _ = ledger_of(key, StoredSnapshot(ledger, Number.TWO))
    assert type(revision) is int and revision == 2


# -- archive receipts and reads ------------------------------------------------------------------


def test_an_archive_receipt_whose_seq_or_digest_lies_is_a_contract_violation() -> None:
    group = plain_group(3)
    with pytest.raises(ContractViolationError, match="says seq 7"):
        checked_receipts([group], (ArchiveReceipt(LyingInt(7), group.digest, "x"),))
    with pytest.raises(ContractViolationError, match="says seq 3"):
        checked_receipts([group], (ArchiveReceipt(3, LyingStr("sha256:other"), "x"),))
    with pytest.raises(ContractViolationError, match="not an int and a str"):
        checked_receipts([group], (ArchiveReceipt(3.0, group.digest, "x"),))  # type: ignore[arg-type]
    (kept,) = checked_receipts([group], (ArchiveReceipt(_Rev(3), str(group.digest), "x"),))
    assert type(kept.seq) is int and type(kept.digest) is str


class TamperedArchive(InMemoryArchive):
    """Answers a read with another group, its seq set past the group's validator to a lying int."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        group = plain_group(2)
        object.__setattr__(group, "seq", LyingInt(2))  # as a hostile adapter could
        return [group]


async def test_an_archived_group_whose_seq_lies_is_not_read_as_another_seq() -> None:
    store = InMemorySessionStore()
    await store.save(KEY, scoped_snapshot(KEY, "x"), None, OpContext())  # boundary 5
    runtime = _runtime(store, TamperedArchive())
    with pytest.raises(ArchiveCorruptError, match="group 4"):
        await runtime.read_history(ANA, "s1", before_seq=5, max_groups=1)


def test_catch_up_seqs_are_bounded_as_the_ints_they_hold() -> None:
    assert checked_missing([LyingInt(9)], 5) is None  # it holds 9, past the end
    seqs = checked_missing([Number.ONE, 3], 5)
    assert seqs == [1, 3] and all(type(s) is int for s in seqs)


# -- memory acknowledgments and recall candidates ------------------------------------------------


def test_a_memory_ack_with_a_lying_revision_or_fact_id_is_a_contract_violation() -> None:
    with pytest.raises(ContractViolationError):
        checked_ack(MemoryAck("stored", "f1", LyingInt(0)), "memory remember")
    with pytest.raises(ContractViolationError):
        checked_ack(MemoryAck("stored", LyingStr("another"), 2), "memory correct", "f1")
    ack = checked_ack(MemoryAck("stored", LyingStr("f1"), Number.TWO), "memory correct", "f1")
    assert type(ack.fact_id) is str and type(ack.revision) is int and ack.revision == 2


def test_a_recall_candidate_is_checked_and_kept_with_the_exact_numbers_it_holds() -> None:
    owner = SourceOwner("acme")
    sid = document_source_id(owner, "doc-1")
    lying = Candidate(SourceRef(sid, "r1"), owner, 1.0, LyingInt(-1))
    assert "size_bytes" in str(recall_items.candidate_fault(lying))

    class Score(float):
        def __neg__(self) -> float:
            raise RuntimeError("the adapter's float ran")

    honest = Candidate(SourceRef(LyingStr(sid), "r1"), owner, Score(0.5), _Rev(10))
    assert recall_items.candidate_fault(honest) is None
    kept = recall_items.exact_candidate(honest)
    assert type(kept.score) is float and type(kept.size_bytes) is int and type(kept.ref.source_id) is str
    assert -kept.score == -0.5 and kept.ref.source_id == sid


class TamperedFromZero(InMemoryArchive):
    """A read from seq 0 answers group 5, its seq set past the validator to an int saying it is 0."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        if start_seq != 0:
            return []
        group = plain_group(5)
        object.__setattr__(group, "seq", LyingInt(5))
        return [group]


async def test_reconcile_refuses_an_archived_group_whose_seq_lies_and_changes_nothing() -> None:
    store = InMemorySessionStore()
    await _runtime(store).run(ANA, "s1", "hello")
    before = await _real(store)
    with pytest.raises(ContractViolationError, match="where group 0 belongs"):
        await _runtime(store, TamperedFromZero()).reconcile_session(ANA, "s1")
    after = await _real(store)
    assert after is not None and before is not None
    assert after.revision == before.revision and after.snapshot == before.snapshot


class SaysThree(int):
    """An int holding another seq, which hashes and compares as seq 3."""

    def __hash__(self) -> int:
        return 3

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


class LacksThree(InMemoryRecallStore):
    """Says it lacks group 3, and records what it is given to index."""

    def __init__(self) -> None:
        super().__init__()
        self.indexed: list[Any] = []

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int]:
        return [3]

    async def index_groups(self, key: SessionKey, groups: Any, receipts: Any, ctx: OpContext) -> None:
        self.indexed.extend(groups)


class AnswersNine(InMemoryArchive):
    """Any read answers group 9, its seq set past the validator to an int that says it is 3."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        group = plain_group(9)
        object.__setattr__(group, "seq", SaysThree(9))
        return [group]


async def test_catch_up_does_not_index_a_group_whose_seq_says_it_is_another() -> None:
    store = LacksThree()
    notes = await catch_up_index(store, AnswersNine(), Ticket(KEY, "run", 30.0), KEY, 5)
    assert store.indexed == []
    assert any(n.code == "recall_index_behind" and "did not return" in n.message for n in notes)


class RevisionSaysSame(InMemorySessionStore):
    """The session re-loaded by the commit fence answers revision 99, which says it equals any."""

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        stored = await super().load(key, ctx)
        if stored is None or key != KEY:
            return stored
        return StoredSnapshot(stored.snapshot, LyingInt(99))


async def test_the_commit_fence_compares_the_reloaded_revision_as_the_int_it_holds() -> None:
    store = RevisionSaysSame()
    ctx = OpContext()
    ledger = seal_snapshot(SessionSnapshot(memory_scope=None, ledger=ErasureLedger()))
    # An erasure record was written (and cleared) since the load, which saw none.
    await store.save(pending_key("acme"), ledger, None, ctx)
    snapshot = scoped_snapshot(KEY, "x")
    await store.save(KEY, snapshot, None, ctx)
    ticket = Ticket(KEY, "run", 30.0)
    ticket.fence_seen = (None,)
    with pytest.raises(SessionConflictError, match="revision 99"):
        await refuse_if_erased_since_load(ticket, store, KEY, StoredSnapshot(snapshot, 1))


class ErasesRecorded(InMemoryRecallStore):
    """Records the targets it is asked to erase."""

    def __init__(self) -> None:
        super().__init__()
        self.erased: list[Any] = []

    async def erase(self, target: Any, ctx: OpContext) -> Any:
        self.erased.append(target)
        return await super().erase(target, ctx)


class HoldsThreeAsNine(InMemoryArchive):
    """Any read answers group 3's content with its seq set past the validator to 9 that says it is 3."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        group = plain_group(3)
        assert group.digest  # the digest of group 3, computed before the seq is changed
        object.__setattr__(group, "seq", SaysThree(9))
        return [group]


async def test_the_index_recheck_does_not_take_a_group_whose_seq_lies_as_still_held() -> None:
    store = ErasesRecorded()
    notes = await drop_erased_meanwhile(
        store, HoldsThreeAsNine(), Ticket(KEY, "run", 30.0), KEY, [plain_group(3)]
    )
    assert len(store.erased) == 1 and [n.code for n in notes] == ["recall_index_erased_meanwhile"]


class HoldsTwoAsEight(InMemoryArchive):
    """Any read answers group 2's content with its seq set past the validator to 8 that says it is 2."""

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        group = plain_group(2)
        assert group.digest  # the digest of group 2, computed before the seq is changed
        object.__setattr__(group, "seq", LyingInt(8))
        return [group]


async def test_a_read_back_archived_group_whose_seq_lies_settles_nothing() -> None:
    stored = StoredSnapshot(scoped_snapshot(KEY, "x"), 4)  # boundary 5: group 2 archived past
    unsettled = Settled(CommitState.UNKNOWN, None, "archived past", archived_past=True)
    ticket = Ticket(KEY, "run", 30.0)
    settled = await settle_archived(ticket, HoldsTwoAsEight(), KEY, stored, [plain_group(2)], unsettled)
    assert settled is unsettled


class AnswersSnapshot(InMemorySessionStore):
    """Loads of the session answer one given (sealed) snapshot at revision 1."""

    def __init__(self, snapshot: SessionSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        return StoredSnapshot(self.snapshot, 1) if key == KEY else await super().load(key, ctx)


@pytest.mark.parametrize(
    ("boundary", "next_seq"),
    [(LyingInt(-1), LyingInt(-1)), (0, -1), (_Rev(0), 0)],
    ids=["lying-negative", "next-seq-below-boundary", "harmless-subclass"],
)
async def test_a_snapshot_whose_boundary_or_next_seq_is_not_an_exact_int_in_order_is_refused(
    boundary: int, next_seq: int
) -> None:
    scope = Scope(KEY.tenant, KEY.user, KEY.session, "project-1", None)
    snapshot = seal_snapshot(SessionSnapshot(memory_scope=scope, boundary=boundary, next_seq=next_seq))
    store = AnswersSnapshot(snapshot)
    with pytest.raises(SnapshotCorruptError):
        await _runtime(store).inspect_session(ANA, "s1")
    assert await _real(store) is None  # nothing was written


def test_a_group_read_for_a_summary_whose_seq_lies_ends_the_run() -> None:
    group = plain_group(9)
    object.__setattr__(group, "seq", LyingInt(9))  # says it is the 3 expected
    run, gap = admissible_for_summary(KEY, 3, 4, [group], {}, SummaryLimits())
    assert run == [] and gap is not None and gap.seq == 3 and "group 9 instead" in gap.detail
