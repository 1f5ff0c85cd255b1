"""A session erased whole and then used again: a recall store that missed the erasure shows nothing of it.

The erasure removes the session's snapshot, archived groups and index
entries; the host may then use the same session id again, which starts
over at seq 0. A recall store that missed the erasure (it was down, a stale
replica, restored from a backup) still answers with the erased groups'
excerpts, under the same source ids the new session's groups get. The
engine cannot render them from the archive (no group there at that
revision), and must not show them on one line either: the tenant's
erasure index says the session was erased whole, so an excerpt of it that
the archive does not vouch for is hidden, with a note, a WARNING and a span
event. The new session's own recalled groups are shown as ever.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.recall_groups import UNATTRIBUTED
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports.erasure import DEFAULT_ERASE_BATCH, EraseReport
from agentium_harness._ports.erasure import EraseTarget as Target
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ArchiveReceipt, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), statement="DSR-1")
SECRET = "My quince account password is tangerine-42."
FRESH = "My quince locker code is blueberry-7."


class Recording(ScriptedProvider):
    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.requests: list[object] = []

    async def complete(self, request: object, ctx: OpContext) -> object:
        self.requests.append(request)
        return await super().complete(request, ctx)  # type: ignore[arg-type]


class MissedErasure:
    """Mixed into a real built-in recall store: its ``erase`` never reaches it (the store was down).

    Every other call is the real store's. Its erase reports nothing held and
    nothing removed, as a replica that missed the erasure would, so the
    erasure completes and its index entries stay.
    """

    async def erase(
        self, target: Target, ctx: OpContext, *, dry_run: bool = False, max_items: int = DEFAULT_ERASE_BATCH
    ) -> EraseReport:
        return EraseReport()


class MissedMemory(MissedErasure, InMemoryRecallStore):
    pass


class MissedSQLite(MissedErasure, SQLiteRecallStore):
    pass


def _store(kind: str, tmp_path: Path) -> Any:
    if kind == "sqlite":
        return MissedSQLite(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    return MissedMemory()


def _target(level: str) -> EraseTarget:
    return EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.user("acme", "ana")


@pytest.mark.parametrize("level", ["session", "user"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    "at",
    [2, 4],
    ids=["below-next-seq", "past-next-seq"],
)
async def test_an_erased_sessions_excerpt_never_reaches_the_model_when_the_id_is_used_again(
    tmp_path: Path, kind: str, level: str, at: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The secret was group ``at`` of the erased session; the new one has groups 0 to 2.

    At 2 the new session has a group of its own at that seq (another
    digest); at 4 it has none yet. Either way the store's excerpt of the
    old group is the erased text.
    """
    provider, recall, t = Recording(), _store(kind, tmp_path), Telemetered()
    caplog.set_level(logging.WARNING, "agentium.engine.recall")
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    try:
        with anyio.fail_after(30):
            for i in range(6):
                await runtime.run(ANA, "s1", SECRET if i == at else f"Unrelated chatter number {i}.")
            erased = await runtime.erase(_target(level), reason="data-subject request", attestation=OPERATOR)
            assert erased.tombstone is not None and erased.tombstone.state is ErasureState.COMPLETE
            # The same id again: a new session, seqs from 0. Its group 0 is indexed over the old one.
            await runtime.run(ANA, "s1", FRESH)
            await runtime.run(ANA, "s1", "More chatter.")
            await runtime.run(ANA, "s1", "Still more chatter.")
            run = await runtime.run(ANA, "s1", "What is my quince account password or locker code?")
    finally:
        await runtime.aclose()
        await recall.aclose()
    assert run.status is RunStatus.COMPLETED
    request = provider.requests[-1]
    assert "tangerine" not in repr(request)
    blocks = {b.source_id: b.content for b in request.sources}  # type: ignore[attr-defined]
    # The new session's own group is recalled and rendered with its roles: nothing legitimate is hidden.
    assert blocks.get("group/acme/ana/s1/0", "").startswith("user: " + FRESH), blocks
    assert f"group/acme/ana/s1/{at}" not in blocks
    assert not any(c.startswith(UNATTRIBUTED) for c in blocks.values())
    notes = [d.message for d in run.diagnostics if d.code == "recall_note"]
    assert any("erased" in n and f"group/acme/ana/s1/{at}" in n for n in notes), notes
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    hidden = [
        w
        for w in warnings
        if w.endswith(
            " recalled group(s) hidden: from a session erased whole before this one used its id, "
            "or under an erasure now"
        )
    ]
    assert hidden, warnings
    assert not any("quince" in w or "tangerine" in w for w in warnings)
    # Each run of the new session that met erased groups said so on its span: a count, no ids, no content.
    events = t.events("agentium.recall.group_erased")
    count = int(hidden[-1].split(" ", 1)[0])
    assert events[-1] == (
        f"retrieval {type(recall).__name__}",
        "agentium.recall.group_erased",
        {"agentium.recall.hidden": count},
    )
    assert all(list(attributes) == ["agentium.recall.hidden"] for _, _, attributes in events)
    assert len(events) == len(hidden)


class IndexDown(InMemorySessionStore):
    """A real in-memory session store whose reads of the tenant's erasure index fail once ``down`` is set."""

    down = False

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.down and (key.session == "index" or key.session.startswith("by-")):
            raise ConnectionError("session store unreachable")
        return await super().load(key, ctx)


async def test_when_the_erasure_index_cannot_be_read_recall_fails_and_shows_nothing_unvouched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whether an excerpt the archive does not vouch for is erased text is then not known: nothing of it.

    The session was never erased; the store answers with a group past the
    session's next seq (a host indexing ahead of the runtime), which would be
    shown on one line. With the erasure index unreadable, recall fails and
    the default ``on_failed="stop"`` stops the run before its model call.
    """
    provider, recall, sessions = Recording(), InMemoryRecallStore(), IndexDown()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ahead = MessageGroup(7, (Message(Role.USER, SECRET),))
    try:
        with anyio.fail_after(30):
            await runtime.run(ANA, "s1", "Unrelated chatter.")
            receipt = ArchiveReceipt(7, ahead.digest, "ahead")
            await recall.index_groups(KEY, [ahead], [receipt], OpContext.with_timeout(10.0))
            sessions.down = True
            run = await runtime.run(ANA, "s1", "What is my quince account password?")
    finally:
        await runtime.aclose()
    assert run.status is RunStatus.STOPPED
    assert len(provider.requests) == 1  # the first run's: this one made no model call
    failed = [d.message for d in run.diagnostics if d.code == "recall_failed"]
    assert any("recall erasure check failed" in m and "ConnectionError" in m for m in failed), failed
