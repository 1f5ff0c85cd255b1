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
from _recall_erasure_support import (
    ANA,
    KEY,
    SECRET,
    MissedErasure,
    Recording,
    chatter,
    erase_completely,
    hidden_with_a_note,
    recall_runtime,
)
from _telemetry_support import Telemetered

from agentium_harness import EraseTarget, RunStatus, SessionKey
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ArchiveReceipt, OpContext

pytestmark = pytest.mark.anyio

FRESH = "My quince locker code is blueberry-7."


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
    runtime = recall_runtime(provider, recall, telemetry=t.telemetry())
    try:
        with anyio.fail_after(30):
            await chatter(runtime, 6, secret_at=at)
            await erase_completely(runtime, _target(level))
            # The same id again: a new session, seqs from 0. Its group 0 is indexed over the old one.
            await runtime.run(ANA, "s1", FRESH)
            await runtime.run(ANA, "s1", "More chatter.")
            await runtime.run(ANA, "s1", "Still more chatter.")
            run = await runtime.run(ANA, "s1", "What is my quince account password or locker code?")
    finally:
        await runtime.aclose()
        await recall.aclose()
    assert run.status is RunStatus.COMPLETED
    blocks = hidden_with_a_note(run, provider, f"group/acme/ana/s1/{at}")
    # The new session's own group is recalled and rendered with its roles: nothing legitimate is hidden.
    assert blocks.get("group/acme/ana/s1/0", "").startswith("user: " + FRESH), blocks
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
    runtime = recall_runtime(provider, recall, session_store=sessions)
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
