"""A store's erase report naming a group seq no group can have is the adapter's contract violation.

A report naming seq ``MAX_SEQ + 1`` (or a negative one) inside the target passed the
report's check and then failed building the merged record with
:class:`InvalidArgumentError`: bad input of the host's, which it was not. It is refused
as what it is, a :class:`ContractViolationError`, on the same path as every other bad
report: a dry run raises it, a real erasure stops pending with it as the cause, and no
store's entry is marked complete.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentium_harness import (
    ContractViolationError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    OperatorAttestation,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._validators import MAX_SEQ
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ErasedSession, EraseStatus

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
S1 = EraseTarget.session("acme", "alice", "s1")
KEY = SessionKey("acme", "alice", "s1")
DIGEST = "sha256:" + "0" * 64


class _BadSeqArchive(InMemoryArchive):
    """A broken adapter: adds a group of the target's session at ``seq`` to its reports.

    ``on`` says which calls: ``"dry"`` (dry runs: the plan, the inventory), ``"real"`` (the
    erasing calls) or ``"off"``.
    """

    capabilities = InMemoryArchive.capabilities

    def __init__(self, seq: int, on: str) -> None:
        super().__init__()
        self.seq = seq
        self.on = on

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        if self.on != ("dry" if dry_run else "real"):
            return report
        bad = ErasedSession(KEY, ((self.seq, DIGEST),))
        return attrs.evolve(report, sessions=(*report.sessions, bad))


def _runtime(archive: InMemoryArchive) -> Any:
    session_store = InMemorySessionStore()
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=session_store,
        owned=[archive, session_store],
    )


@pytest.mark.parametrize("seq", [MAX_SEQ + 1, -1])
async def test_a_dry_run_refuses_a_report_naming_an_impossible_seq_as_a_contract_violation(seq: int) -> None:
    rt = _runtime(_BadSeqArchive(seq, "dry"))
    await rt.run(ALICE, "s1", "turn")
    with pytest.raises(ContractViolationError, match="archive"):
        await rt.erase(S1, reason="check", attestation=OPERATOR, dry_run=True)
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()


@pytest.mark.parametrize("on", ["dry", "real"])
@pytest.mark.parametrize("seq", [MAX_SEQ + 1, -1])
async def test_an_erasure_meeting_a_report_naming_an_impossible_seq_stops_pending(seq: int, on: str) -> None:
    archive = _BadSeqArchive(seq, on)
    rt = _runtime(archive)
    await rt.run(ALICE, "s1", "turn")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, ContractViolationError)
    record = stopped.value.record
    assert record is not None and record.state is ErasureState.PENDING
    # Nothing taken from the bad report: no store marked complete by it, no group it named.
    archive_entry = record.store("archive")
    assert archive_entry is None or archive_entry.status is EraseStatus.PARTIAL
    assert all(seq not in r for s in record.sessions for r in s.ranges)
    (listed,) = await rt.erasure_status(OPERATOR)
    assert listed.erasure_id == record.erasure_id and listed.state is ErasureState.PENDING
    assert not any("InvalidArgumentError" in note for note in listed.notes)
    with pytest.raises(ErasureInProgressError):
        await rt.run(ALICE, "s1", "refused while pending")
    # Once the adapter is fixed, the erasure resumes and completes.
    archive.on = "off"
    (done,) = await rt.resume_erasures(OPERATOR)
    assert done.tombstone is not None and done.record.erasure_id == record.erasure_id
    await rt.aclose()
