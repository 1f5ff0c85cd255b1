"""Two calls' progress merged into one erasure record is held to the bounds one call's is.

One call's reports, summed into a store's entry, are refused past ``MAX_COUNT`` per kind or
``MAX_REPORT_KINDS`` kinds (``ContractViolationError``). Two calls resuming the same erasure
merge their progress when they save it (``merge_progress``): a count summed past ``MAX_COUNT``
there failed building the entry as the host's bad input (``InvalidArgumentError``), and kinds
united past the bound were saved, a record every later report of the store was then refused
against (the erasure could never complete). Both are the same ``ContractViolationError`` now,
and the record stored is left as the other call saved it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from agentium_harness import (
    ContractViolationError,
    EraseTarget,
    ErasureIncompleteError,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_ledger import load_ledger, pending_records, record_key, update_ledger
from agentium_harness._engine.erasure_resume import merge_progress, save_progress
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports.erasure import (
    MAX_REPORT_KINDS,
    ErasedCount,
    ErasureKind,
    ErasureLedger,
    ErasureRecord,
    ErasureState,
    StoreErasure,
)
from agentium_harness._validators import MAX_COUNT
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

OPERATOR = VerifiedIdentity("acme", "ops", "sso")
ATTESTATION = OperatorAttestation(OPERATOR, "dsr")
ANA = VerifiedIdentity("acme", "ana", "test-auth")
TARGET = EraseTarget.session("acme", "ana", "s1")
BASE = ErasureRecord(
    "e1",
    ErasureKind.ERASURE,
    TARGET,
    "dsr",
    OPERATOR,
    ErasureState.PENDING,
    datetime(2026, 1, 1, tzinfo=UTC),
    stores=(StoreErasure("archive", "InMemoryArchive", (ErasedCount("group", 1),)),),
)


def _with(*counts: ErasedCount) -> ErasureRecord:
    """``BASE`` with the archive's entry holding ``counts`` (a call's progress since it)."""
    return attrs.evolve(BASE, stores=(StoreErasure("archive", "InMemoryArchive", counts),))


#: ``(theirs, ours)``: each call's record within the bounds, their merge past them.
PAST = {
    "a count summed past MAX_COUNT": (
        _with(ErasedCount("group", MAX_COUNT - 1)),
        _with(ErasedCount("group", 3)),
    ),
    "kinds united past MAX_REPORT_KINDS": (
        _with(ErasedCount("group", 1), *(ErasedCount(f"theirs{i}", 1) for i in range(20))),
        _with(ErasedCount("group", 1), *(ErasedCount(f"ours{i}", 1) for i in range(20))),
    ),
}


@pytest.mark.parametrize(("theirs", "ours"), PAST.values(), ids=PAST.keys())
def test_merged_counts_past_the_bounds_are_a_contract_violation(
    theirs: ErasureRecord, ours: ErasureRecord
) -> None:
    with pytest.raises(ContractViolationError, match=rf"archive.*over its calls.*{MAX_REPORT_KINDS} kinds"):
        merge_progress(theirs, ours, BASE)


def test_merged_counts_at_the_bounds_are_summed() -> None:
    # The last count and kind a record may hold are kept.
    theirs = _with(ErasedCount("group", MAX_COUNT - 1), *(ErasedCount(f"t{i}", 1) for i in range(15)))
    ours = _with(ErasedCount("group", 2), *(ErasedCount(f"o{i}", 1) for i in range(16)))
    merged = merge_progress(theirs, ours, BASE)
    entry = merged.store("archive")
    assert entry is not None and len(entry.counts) == MAX_REPORT_KINDS
    assert dict((c.kind, c.count) for c in entry.counts)["group"] == MAX_COUNT


@pytest.mark.parametrize(("theirs", "ours"), PAST.values(), ids=PAST.keys())
async def test_a_save_merging_past_the_bounds_writes_nothing(
    theirs: ErasureRecord, ours: ErasureRecord
) -> None:
    store = InMemorySessionStore()
    ticket = Ticket(None, "test", 30.0)
    key = record_key(TARGET.tenant_id, BASE.erasure_id)
    await save_progress(ticket, store, BASE)
    await save_progress(ticket, store, theirs, BASE)  # the other call's progress, saved first
    before = await load_ledger(ticket, store, key)
    with pytest.raises(ContractViolationError):
        await save_progress(ticket, store, ours, BASE)
    assert await load_ledger(ticket, store, key) == before
    await store.aclose()


class _SavedMeanwhile(InMemoryArchive):
    """Its first real ``erase`` call finds another call's progress saved meanwhile: ``MAX_COUNT`` groups."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self, sessions: InMemorySessionStore) -> None:
        super().__init__()
        self.sessions = sessions
        self.armed = True

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        if dry_run or not self.armed:
            return report
        self.armed = False
        ticket = Ticket(None, "test", 30.0)
        (pending,) = await pending_records(ticket, self.sessions, target.tenant_id)

        def other_call(ledger: ErasureLedger) -> ErasureLedger:
            (record,) = ledger.records
            entry = StoreErasure("archive", "InMemoryArchive", (ErasedCount("group", MAX_COUNT),))
            return ErasureLedger((attrs.evolve(record, stores=(*record.stores, entry)),))

        await update_ledger(
            ticket, self.sessions, record_key(target.tenant_id, pending.erasure_id), other_call
        )
        return report


async def test_an_erasure_whose_merged_progress_passes_the_bounds_stops_pending_and_resumes() -> None:
    # This call's archive progress, merged over what another call saved meanwhile, passes MAX_COUNT:
    # the erasure stops pending (not the merge's error raised out of erase), the stored record as the
    # other call saved it, and a resume completes it.
    sessions = InMemorySessionStore()
    archive = _SavedMeanwhile(sessions)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        owned=[archive, sessions],
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    for i in range(3):
        await rt.run(ANA, "s1", f"turn {i}")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(TARGET, reason="dsr", attestation=ATTESTATION)
    assert isinstance(stopped.value.__cause__, ContractViolationError)
    assert stopped.value.__cause__.__context__ is None  # refused once, not again while stopping
    record = stopped.value.record
    assert record is not None and record.state is ErasureState.PENDING
    entry = record.store("archive")
    assert entry is not None and entry.counts == (ErasedCount("group", MAX_COUNT),)
    (done,) = await rt.resume_erasures(ATTESTATION)
    assert done.tombstone is not None and done.record.erasure_id == record.erasure_id
    await rt.aclose()
