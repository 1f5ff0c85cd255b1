"""What the bad-erase-report tests share: an archive whose reports are rewritten, and the checks (tests only).

A broken adapter is an :class:`InMemoryArchive` whose ``erase`` reports are
rewritten by a :data:`Tamper` on its dry runs or its real calls. A report it
breaks must be refused as a :class:`ContractViolationError`: a dry run
raises it (:func:`dry_run_refused`), a real erasure stops pending with it as
the cause, keeps nothing of the report and completes once the adapter
behaves (:func:`stops_pending_then_resumes`).

(Not in ``_erasure_harness``: that one holds the concurrent-erasure tests' runtimes.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agentium_harness import (
    ContractViolationError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureRecord,
    ErasureState,
    OperatorAttestation,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._validators import DIGEST_FORM
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ErasedSession, EraseReport, EraseStatus

__all__ = [
    "ALICE",
    "GOOD",
    "KEY",
    "OPERATOR",
    "S1",
    "BadReportArchive",
    "Tamper",
    "dry_run_refused",
    "runtime",
    "stops_pending_then_resumes",
    "with_groups",
]

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
S1 = EraseTarget.session("acme", "alice", "s1")
KEY = SessionKey("acme", "alice", "s1")
#: A digest of the port's form.
GOOD = "sha256:" + "0" * 64

#: Rewrites a report: ``(report, call)``, ``call`` counting the tampered calls from 1.
Tamper = Callable[[EraseReport, int], EraseReport]


def with_groups(*groups: tuple[int, str]) -> Tamper:
    """An entry of the target's session listing ``groups`` (``(seq, digest)`` pairs) added to the report."""
    return lambda report, _: attrs.evolve(report, sessions=(*report.sessions, ErasedSession(KEY, groups)))


class BadReportArchive(InMemoryArchive):
    """A broken adapter: ``tamper`` rewrites the reports of its dry runs (``on="dry"``) or real calls.

    Setting ``tamper`` to ``None`` fixes it.
    """

    capabilities = InMemoryArchive.capabilities

    def __init__(self, tamper: Tamper, on: str) -> None:
        super().__init__()
        self.tamper: Tamper | None = tamper
        self.on = on
        self.calls = 0

    async def erase(self, target: Any, ctx: Any, *, dry_run: bool = False, max_items: int = 1000) -> Any:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        if self.tamper is None or self.on != ("dry" if dry_run else "real"):
            return report
        self.calls += 1
        return self.tamper(report, self.calls)


def runtime(archive: InMemoryArchive) -> Any:
    """A runtime over ``archive`` and an in-memory session store."""
    session_store = InMemorySessionStore()
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=session_store,
        owned=[archive, session_store],
    )


async def dry_run_refused(archive: BadReportArchive, match: str = "archive") -> ContractViolationError:
    """After one turn of ``s1``, a dry run of ``S1`` raises the violation (``match``); nothing is recorded."""
    rt = runtime(archive)
    await rt.run(ALICE, "s1", "turn")
    with pytest.raises(ContractViolationError, match=match) as refused:
        await rt.erase(S1, reason="check", attestation=OPERATOR, dry_run=True)
    assert await rt.erasure_status(OPERATOR) == ()
    await rt.aclose()
    return refused.value


async def stops_pending_then_resumes(
    archive: BadReportArchive, kept: Callable[[ErasureRecord], None] | None = None
) -> None:
    """The erasure of ``S1`` stops pending on the bad report, keeps nothing of it, and completes once fixed.

    ``kept`` checks more of the record left pending (what the bad report named is not in it).
    """
    rt = runtime(archive)
    await rt.run(ALICE, "s1", "turn")
    with pytest.raises(ErasureIncompleteError) as stopped:
        await rt.erase(S1, reason="request", attestation=OPERATOR)
    assert isinstance(stopped.value.__cause__, ContractViolationError)
    record = stopped.value.record
    assert record is not None and record.state is ErasureState.PENDING
    # Nothing taken from the bad report: no store marked complete by it, no digest of another form.
    archive_entry = record.store("archive")
    assert archive_entry is None or archive_entry.status is EraseStatus.PARTIAL
    assert all(DIGEST_FORM.fullmatch(d) for s in record.sessions for _, d in s.digests)
    assert all(len(s.detail) < 4096 and len(s.counts) <= 32 for s in record.stores)
    if kept is not None:
        kept(record)
    (listed,) = await rt.erasure_status(OPERATOR)
    assert listed.erasure_id == record.erasure_id and listed.state is ErasureState.PENDING
    assert not any("InvalidArgumentError" in note for note in listed.notes)
    with pytest.raises(ErasureInProgressError):
        await rt.run(ALICE, "s1", "refused while pending")
    # Once the adapter is fixed, the erasure resumes and completes.
    archive.tamper = None
    (done,) = await rt.resume_erasures(OPERATOR)
    assert done.tombstone is not None and done.record.erasure_id == record.erasure_id
    await rt.aclose()
