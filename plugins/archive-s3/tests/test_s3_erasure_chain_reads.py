"""The commit fence reads the same erasure index pages on S3 however many erasures came before.

A new session's first turn, with another erasure of the tenant running
during it, asks the tenant's finished erasures whether one of the whole
session joined after its load. The index chains of the session's scopes
are read newest first and stop at the session's last erasure (whose join
record, against S3's revisions, says it joined before the load): the
heads alone, after 2 erasures of the session or 10 (five pages at two
headers a page). An erasure of the session during the turn (after 4
before it) is the newest entry of its chain, and still refuses the turn.
Two runtimes over the same bucket and prefix stand for two processes;
chain loads are counted, never timed.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import anyio
import pytest

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import (
    EraseTarget,
    ErasureKind,
    OperatorAttestation,
    SeqRange,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_index
from agentium_harness._engine.erasure_api import run_erasure
from agentium_harness._engine.recall_readback import SessionGroups
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    Scope,
    SessionKey,
    SessionSnapshot,
)
from agentium_harness.testing.erasure_races import counting_index_loads, first_turn_during_erasure

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")


ChainReads = counting_index_loads(S3SessionStore)


def _runtime(provider: Any, config: S3Config) -> tuple[Any, Any]:
    archive, store = S3Archive(config), ChainReads(config)
    runtime = create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store)
    )
    return runtime, store


async def _first_turn(config: S3Config, session: str, during: EraseTarget) -> tuple[int, Any]:
    """``session``'s first turn while ``during`` is erased: the chain loads of its commit fence, its error."""
    return await first_turn_during_erasure(partial(_runtime, config=config), ANA, session, during, OPERATOR)


async def test_an_s3_first_turn_reads_the_same_chain_pages_after_2_or_10_erasures_of_its_session(
    monkeypatch: pytest.MonkeyPatch, config: S3Config
) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    eraser, _ = _runtime(ScriptedProvider(replies=["ok"], cycle=True), config)
    try:
        for session, count in (("s2", 2), ("s10", 10), ("r4", 4)):
            with anyio.fail_after(30):
                for _ in range(count):
                    target = EraseTarget.session("acme", "ana", session)
                    await eraser.erase(target, reason="dsr", attestation=OPERATOR)
    finally:
        await eraser.aclose()
    bob = EraseTarget.session("acme", "bob", "b1")
    reads = []
    for session in ("s2", "s10"):
        with anyio.fail_after(30):
            loads, error = await _first_turn(config, session, bob)
        assert error is None, error  # every erasure of the session joined before the turn's load
        reads.append(loads)
    # The tenant's head and the heads of the tenant's, the user's and the session's chains.
    assert reads == [4, 4], reads
    with anyio.fail_after(30):
        loads, error = await _first_turn(config, "r4", EraseTarget.session("acme", "ana", "r4"))
    assert isinstance(error, SessionConflictError), error  # the erasure during the turn: newest
    assert loads == 4, loads


async def test_an_s3_recall_check_finds_the_whole_erasure_past_the_read_cap_of_retention_entries_in_one_read(
    monkeypatch: pytest.MonkeyPatch, config: S3Config
) -> None:
    # s1 erased whole, then 8 retention erasures of it: 5 pages of two, past a cap of 3 pages (as
    # 8,192 retention erasures pass 128 pages of 64). The session chain's mark answers in one read.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    key = SessionKey("acme", "ana", "s1")
    eraser, store = _runtime(ScriptedProvider(replies=["ok"], cycle=True), config)
    try:
        with anyio.fail_after(30):
            first = await eraser.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
            for _ in range(8):
                groups = EraseTarget.groups_of(key, [SeqRange(0, 1)])
                await run_erasure(eraser, groups, "retention", OPERATOR, ErasureKind.RETENTION)
        with anyio.fail_after(30):
            async with eraser.parts.admission.admit_shared(key, "recall check") as ticket:
                reader = SessionGroups(
                    ticket,
                    S3Archive(config),
                    store,
                    key,
                    SessionSnapshot(memory_scope=Scope("acme", "ana", "s1")),
                )
                store.index_loads = 0
                found = await reader.finished_erasures(time.monotonic() + 30)
                loads = store.index_loads
    finally:
        await eraser.aclose()
    assert [r.erasure_id for r in found] == [first.record.erasure_id]
    assert loads == 4 + 1, loads  # the heads, then the session chain's mark: no page
