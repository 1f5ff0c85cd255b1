"""The commit fence reads the same erasure index pages on S3 however many erasures came before.

A new session's first turn, with another erasure of the tenant running
during it, asks the tenant's finished erasures whether one of the whole
session joined after its load. The index chains of the session's scopes
are read newest first and stop at the session's last erasure (whose join
record, against S3's revisions, says it joined before the load): the
heads alone, after 4 erasures of the session or 16 (eight pages at two
headers a page). An erasure of the session during the turn (after 8
before it) is the newest entry of its chain, and still refuses the turn.
Two runtimes over the same bucket and prefix stand for two processes;
chain loads are counted, never timed.
"""

from __future__ import annotations

import time
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
    ERASURE_RECORDS_TENANT,
    ModelRequest,
    ModelResponse,
    OpContext,
    Scope,
    SessionKey,
    SessionSnapshot,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")


class Held(ScriptedProvider):
    """Answers at once, except the armed call, which waits for ``release`` after saying it started."""

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.armed = False
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


class ChainReads(S3SessionStore):
    """The S3 session store, counting loads of the erasure index's chains (heads and pages)."""

    chain_loads = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith(("by-", "index")):
            self.chain_loads += 1
        return await super().load(key, ctx)


def _runtime(provider: Any, config: S3Config) -> tuple[Any, ChainReads]:
    archive, store = S3Archive(config), ChainReads(config)
    runtime = create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store)
    )
    return runtime, store


async def _first_turn(config: S3Config, session: str, during: EraseTarget) -> tuple[int, Any]:
    """``session``'s first turn while ``during`` is erased: the chain loads of its commit fence, its error."""
    provider = Held()
    slow, store = _runtime(provider, config)
    other, _ = _runtime(ScriptedProvider(replies=["ok"], cycle=True), config)
    caught: list[BaseException] = []

    async def turn() -> None:
        try:
            await slow.run(ANA, session, "a new session's first turn")
        except Exception as exc:
            caught.append(exc)

    try:
        provider.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):
                await provider.started.wait()
            await other.erase(during, reason="dsr", attestation=OPERATOR)  # the ledger moves
            store.chain_loads = 0
            provider.release.set()
        return store.chain_loads, (caught[0] if caught else None)
    finally:
        await slow.aclose()
        await other.aclose()


async def test_an_s3_first_turn_reads_the_same_chain_pages_after_4_or_16_erasures_of_its_session(
    monkeypatch: pytest.MonkeyPatch, config: S3Config
) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    eraser, _ = _runtime(ScriptedProvider(replies=["ok"], cycle=True), config)
    try:
        for session, count in (("s4", 4), ("s16", 16), ("r8", 8)):
            with anyio.fail_after(30):
                for _ in range(count):
                    target = EraseTarget.session("acme", "ana", session)
                    await eraser.erase(target, reason="dsr", attestation=OPERATOR)
    finally:
        await eraser.aclose()
    bob = EraseTarget.session("acme", "bob", "b1")
    reads = []
    for session in ("s4", "s16"):
        with anyio.fail_after(30):
            loads, error = await _first_turn(config, session, bob)
        assert error is None, error  # every erasure of the session joined before the turn's load
        reads.append(loads)
    # The tenant's head and the heads of the tenant's, the user's and the session's chains.
    assert reads == [4, 4], reads
    with anyio.fail_after(30):
        loads, error = await _first_turn(config, "r8", EraseTarget.session("acme", "ana", "r8"))
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
                store.chain_loads = 0
                found = await reader.finished_erasures(time.monotonic() + 30)
                loads = store.chain_loads
    finally:
        await eraser.aclose()
    assert [r.erasure_id for r in found] == [first.record.erasure_id]
    assert loads == 4 + 1, loads  # the heads, then the session chain's mark: no page
