"""The commit fence inside the SQLite joint commit's transaction agrees with the look before it.

With nothing recording, the built-in SQLite store checks the tenant's erasure
ledger inside the transaction that archives and saves
(``_engine.commit_joint.transaction_fence``); while a tracer records, the
engine's look before the commit runs instead (``.commit_fence``). An erasure
that ran while the model answered (after the run's load, before its commit)
must be met the same way on both paths: the same answer or the same error and
commit state, the same WARNINGs, and the same rows in the file. Telemetry
recording metrics only takes the look too (docs/erasure.md says so). Another
session's erasure moves the ledger too: the fenced transaction is rolled back
and the commit runs again after the look, as before.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    CommitState,
    EraseTarget,
    ErasureIncompleteError,
    Message,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import sqlite as sqlite_adapter
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")
GLOBEX = OperatorAttestation(VerifiedIdentity("globex", "ops", "sso"), "probe")


class Racing(ScriptedProvider):
    """Answers at once; the armed call first runs ``action`` (another process's erasure)."""

    def __init__(self) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.action: Callable[[], Awaitable[None]] | None = None

    async def complete(self, request: Any, ctx: Any) -> Any:
        action, self.action = self.action, None
        if action is not None:
            await action()
        return await super().complete(request, ctx)


def _runtime(db: Path, provider: Any, telemetry: Any = None) -> Any:
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=provider,
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        telemetry=telemetry,
        retention=RetentionPolicy(max_archived_groups=1),
    )


async def _erase(
    other: Any, target: EraseTarget, *, pending: bool = False, operator: OperatorAttestation = OPERATOR
) -> None:
    """``other``'s erasure of ``target``; ``pending``: its session store's part fails (left under way)."""
    if not pending:
        await other.erase(target, reason="dsr", attestation=operator)
        return
    erase = other.session_store.erase

    async def failing(*args: object, **kwargs: object) -> Any:
        raise OSError("session store unreachable")

    other.session_store.erase = failing
    try:
        with pytest.raises(ErasureIncompleteError):
            await other.erase(target, reason="dsr", attestation=OPERATOR)
    finally:
        other.session_store.erase = erase


SCENARIOS: dict[str, Callable[[Any], Awaitable[None]]] = {
    "nothing": lambda other: _noop(),
    "another session of the tenant": lambda other: _erase(other, EraseTarget.session("acme", "ana", "s1")),
    "another user of the tenant": lambda other: _erase(other, EraseTarget.user("acme", "bob")),
    "the session, completed": lambda other: _erase(other, EraseTarget.session("acme", "ana", "s0")),
    "the session, under way": lambda other: _erase(
        other, EraseTarget.session("acme", "ana", "s0"), pending=True
    ),
    "the user, completed": lambda other: _erase(other, EraseTarget.user("acme", "ana")),
    # A groups erasure of the session (retention: all but the newest archived group).
    "retention of the session": lambda other: _retain(other, EraseTarget.session("acme", "ana", "s0")),
    "retention of another session": lambda other: _retain(other, EraseTarget.session("acme", "ana", "s1")),
    "another tenant": lambda other: _erase(other, EraseTarget.tenant("globex"), operator=GLOBEX),
}


async def _retain(other: Any, target: EraseTarget) -> None:
    result = await other.apply_retention(OPERATOR, target)
    assert result.erasures  # it did erase something: the ledger moved


async def _noop() -> None:
    return None


def _file_state(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The tenant's session rows (ids, revision, boundary, next seq) and every group row's id.

    Not their digests: a group's record holds its write's time.
    """
    with contextlib.closing(sqlite3.connect(db)) as conn:
        sessions = conn.execute(
            "SELECT tenant_id, user_id, session_id, revision, boundary, next_seq FROM sessions "
            "WHERE tenant_id = 'acme' ORDER BY sid"
        ).fetchall()
        groups = conn.execute("SELECT id FROM groups ORDER BY id").fetchall()
    return sessions, groups


async def _scenario(
    db: Path, name: str, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> tuple[object, list[tuple[str, int, object]], object, object]:
    """One run racing ``name``'s erasure: what it answered or raised, the WARNINGs, and the file."""
    provider = Racing()
    ours = _runtime(db, provider, telemetry)
    other = _runtime(db, ScriptedProvider(replies=["ok"], cycle=True))
    try:
        for i in range(4):  # two of s1's groups archived: retention erases one
            await ours.run(ANA, "s1", f"elsewhere {i}")
        await ours.run(BOB, "b0", "bob's turn")
        for i in range(4):  # two of s0's groups archived; the racing turn archives another
            await ours.run(ANA, "s0", f"turn {i}")
        provider.action = lambda: SCENARIOS[name](other)
        caplog.clear()
        try:
            result = await ours.run(ANA, "s0", "the racing turn")
        except Exception as exc:
            outcome: object = ("raised", type(exc).__name__, getattr(exc, "commit_state", None))
        else:
            outcome = (
                "answered",
                result.status,
                result.eviction,
                result.commit_state,
                result.snapshot_revision,
                result.boundary,
                result.resident_groups,
                [r.seq for r in result.archived],
                [(d.code, d.severity) for d in result.diagnostics],
            )
        warnings = [(r.name, r.levelno, r.msg) for r in caplog.records if r.levelno >= logging.WARNING]
        # What a fresh load finds: the session as the commit left it (or as the erasure did).
        fresh = SQLiteSessionStore(SQLiteConfig(path=str(db)))
        try:
            stored = await fresh.load(KEY, OpContext.with_timeout(30))
        finally:
            await fresh.aclose()
        loaded = (
            None
            if stored is None
            else (
                stored.revision,
                stored.snapshot.boundary,
                [(g.seq, [m.content for m in g.messages]) for g in stored.snapshot.resident],
            )
        )
        return outcome, warnings, loaded, _file_state(db)
    finally:
        await ours.aclose()
        await other.aclose()


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_an_erasure_while_the_model_answers_is_met_alike_with_and_without_a_tracer(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="agentium")
    checks: list[bool] = []
    real = sqlite_adapter.fence_unmoved

    def counted(conn: sqlite3.Connection, fence: Any) -> bool:
        checks.append(real(conn, fence))
        return checks[-1]

    monkeypatch.setattr(sqlite_adapter, "fence_unmoved", counted)
    untraced = await _scenario(tmp_path / "untraced.db", name, None, caplog)
    fenced = list(checks)
    checks.clear()
    traced = await _scenario(tmp_path / "traced.db", name, Telemetered().telemetry(), caplog)
    assert checks == []  # a tracer records: the look before the commit, no check in the transaction
    # Metrics alone record too (the eviction stage's duration, once a commit): the look, as traced.
    metered = await _scenario(
        tmp_path / "metered.db", name, Telemetry(meter_provider=Telemetered().meter_provider), caplog
    )
    assert checks == []
    assert metered == traced
    # Every evicting commit (the racing turn's last) checked in its transaction: the ledger moved
    # (rolled back, the look after it) exactly when an erasure of the tenant ran meanwhile; a commit
    # that landed was checked unmoved last (after the look, at the revision it saw), a refused one
    # was refused by the look.
    assert (False in fenced) is (name not in ("nothing", "another tenant"))
    answered = isinstance(untraced[0], tuple) and untraced[0][0] == "answered"
    assert fenced[-1] is answered
    assert untraced == traced


async def test_two_runtimes_appending_to_one_session_while_the_ledger_moves_lose_and_repeat_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compare-and-set between two writers, and the fenced commit rolled back and retried meanwhile.

    Every third joint commit of the first runtime meets another session's erasure begun and finished
    just before its transaction (the ledger moved: rolled back, looked, committed again); the second
    runtime appends to the same session at the same time. Each append either committed, and its
    message is in the session's history once, or was refused as not committed, and it is nowhere.
    """
    db = tmp_path / "agentium.db"
    checks: list[bool] = []
    real = sqlite_adapter.fence_unmoved

    def counted(conn: sqlite3.Connection, fence: Any) -> bool:
        checks.append(real(conn, fence))
        return checks[-1]

    monkeypatch.setattr(sqlite_adapter, "fence_unmoved", counted)
    first, second, eraser = (_runtime(db, ScriptedProvider(replies=["ok"], cycle=True)) for _ in range(3))
    real_run = first.session_store.run
    commits: list[int] = []

    async def erasing_first(ctx: Any, operation: str, work: Any) -> Any:
        if operation == "session commit with archive":
            commits.append(1)
            if len(commits) % 3 == 1:
                n = len(commits)
                await eraser.append(ANA, f"x{n}", [Message(Role.USER, "elsewhere")])
                await eraser.erase(
                    EraseTarget.session("acme", "ana", f"x{n}"), reason="dsr", attestation=OPERATOR
                )
        return await real_run(ctx, operation, work)

    first.session_store.run = erasing_first
    committed: list[str] = []
    refused: list[str] = []

    async def appending(runtime: Any, tag: str) -> None:
        for i in range(12):
            text = f"{tag} {i}"
            try:
                await runtime.append(ANA, "s0", [Message(Role.USER, text)])
            except SessionConflictError as exc:
                assert exc.commit_state is CommitState.NOT_COMMITTED
                refused.append(text)
            else:
                committed.append(text)
            await anyio.lowlevel.checkpoint()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(appending, first, "first")
            tg.start_soon(appending, second, "second")
        held: list[str] = []
        before = None
        while True:
            page = await eraser.read_history(ANA, "s0", max_groups=50, before_seq=before)
            held = [m.content for g in page.groups for m in g.group.messages] + held
            if page.next_before_seq is None:
                break
            before = page.next_before_seq
    finally:
        for runtime in (first, second, eraser):
            await runtime.aclose()
    assert sorted(held) == sorted(committed) and len(held) == len(set(held))
    assert len(committed) + len(refused) == 24
    assert False in checks and True in checks  # rolled back and retried, and committed at once
