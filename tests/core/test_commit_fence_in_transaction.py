"""The commit fence checked inside the SQLite joint commit's transaction.

The built-in SQLite store checks the tenant's erasure ledger inside the
transaction that archives and saves (``_engine.commit_joint.transaction_fence``),
instead of the engine reading it just before: while the transaction holds the
file's write lock no erasure can begin, so an erasure that began after the
load — even after the engine's last look — refuses the commit, and nothing is
written. Every other store (and a subclass of the SQLite one, or any store
while a tracer records) keeps the look before the commit.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_ledger import pending_key
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")
SECRET = "qzthirdsecretq"


def _runtime(db: Path) -> Any:
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


def _rows_holding(db: Path, text: str) -> list[str]:
    """The tables whose stored bytes hold ``text`` (raw SQL: deflated rows are inflated first)."""
    import zlib

    found: list[str] = []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for table, column in (("groups", "data"), ("sessions", "snapshot")):
            for (value,) in conn.execute(f"SELECT {column} FROM {table}"):
                data = value.encode() if isinstance(value, str) else value
                if isinstance(data, bytes) and data[:1] != b"{":
                    with contextlib.suppress(zlib.error):
                        data = zlib.decompress(data)
                if isinstance(data, bytes) and text.encode() in data:
                    found.append(table)
    return found


async def test_an_erasure_begun_after_the_commits_last_look_refuses_the_joint_commit(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    ours, other = _runtime(db), _runtime(db)
    store = ours.session_store
    try:
        for i in range(2):
            await ours.append(ANA, "s0", [Message(Role.USER, f"turn {i}")])
        assert store.shares_transactions_with(ours.archive)  # the third append evicts: the joint path
        real_run = store.run
        began: list[bool] = []

        async def erasure_first(ctx: Any, operation: str, work: Any) -> Any:
            # The joint commit's transaction is about to start: every look the engine takes
            # before it is over. Another process's erasure of the session begins now (its
            # session store's part fails, so it stays pending in the ledger).
            if operation == "session commit with archive" and not began:
                began.append(True)
                erase = other.session_store.erase

                async def failing(*args: object, **kwargs: object) -> Any:
                    raise OSError("session store unreachable")

                other.session_store.erase = failing
                try:
                    with pytest.raises(ErasureIncompleteError):
                        await other.erase(
                            EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
                        )
                finally:
                    other.session_store.erase = erase
            return await real_run(ctx, operation, work)

        store.run = erasure_first
        with pytest.raises(ErasureInProgressError) as caught:
            await ours.append(ANA, "s0", [Message(Role.USER, f"third {SECRET}")])
        assert began == [True]
        assert caught.value.commit_state is not None and caught.value.commit_state.value == "not_committed"
        assert _rows_holding(db, SECRET) == []  # nothing of the refused append was written
        store.run = real_run
        resumed = await other.erase(
            EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
        )
        assert resumed.tombstone is not None and resumed.tombstone.state is ErasureState.COMPLETE
        assert _rows_holding(db, "turn 0") == [] and _rows_holding(db, SECRET) == []
    finally:
        await ours.aclose()
        await other.aclose()


async def test_only_the_sqlite_stores_own_class_checks_the_fence_in_its_transaction(tmp_path: Path) -> None:
    from agentium_harness._engine.commit_joint import transaction_fence

    ticket = Ticket(KEY, "append", 30.0)
    ticket.fence_seen = (7,)
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))

    class Subclass(SQLiteSessionStore):
        """May override the commit: the look before it stays."""

    assert transaction_fence(ticket, SQLiteSessionStore(config), KEY) == (pending_key("acme"), 7)
    assert transaction_fence(ticket, Subclass(config), KEY) is None
    assert transaction_fence(ticket, InMemorySessionStore(), KEY) is None
    ticket.fence_seen = None  # no fenced load (erasure's own rewrites): no look, no check
    assert transaction_fence(ticket, SQLiteSessionStore(config), KEY) is None


async def test_an_erasure_begun_after_the_retrys_look_refuses_the_joint_commit_too(tmp_path: Path) -> None:
    """The ledger moved (another session's erasure): rolled back, looked at again, and fenced again.

    The look taken after the rollback is the engine's last look: an erasure of the session that
    begins after it, before the commit's second transaction, is refused there as well (the ledger
    is no longer at the revision that look saw), and nothing of the append is written.
    """
    db = tmp_path / "agentium.db"
    ours, other = _runtime(db), _runtime(db)
    store = ours.session_store
    try:
        await ours.append(ANA, "s1", [Message(Role.USER, "elsewhere")])
        for i in range(2):
            await ours.append(ANA, "s0", [Message(Role.USER, f"turn {i}")])
        real_run = store.run
        hops: list[str] = []

        async def erasures_first(ctx: Any, operation: str, work: Any) -> Any:
            if operation == "session commit with archive":
                hops.append(operation)
                if len(hops) == 1:  # another session's erasure, complete: the ledger moves
                    await other.erase(
                        EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
                    )
                elif len(hops) == 2:  # after the retry's look: this session's erasure begins
                    erase = other.session_store.erase

                    async def failing(*args: object, **kwargs: object) -> Any:
                        raise OSError("session store unreachable")

                    other.session_store.erase = failing
                    try:
                        with pytest.raises(ErasureIncompleteError):
                            await other.erase(
                                EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
                            )
                    finally:
                        other.session_store.erase = erase
            return await real_run(ctx, operation, work)

        store.run = erasures_first
        with pytest.raises(ErasureInProgressError) as caught:
            await ours.append(ANA, "s0", [Message(Role.USER, f"third {SECRET}")])
        assert len(hops) >= 2
        assert caught.value.commit_state is not None and caught.value.commit_state.value == "not_committed"
        assert _rows_holding(db, SECRET) == []
    finally:
        await ours.aclose()
        await other.aclose()


async def test_a_ledger_moving_under_every_fenced_transaction_ends_in_the_look_as_for_any_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four fenced transactions rolled back (another session erased before each): the fifth commit goes."""
    from agentium_harness._engine.commit_joint import FENCED_ATTEMPTS
    from agentium_harness.adapters import sqlite as sqlite_adapter

    db = tmp_path / "agentium.db"
    ours, other = _runtime(db), _runtime(db)
    store = ours.session_store
    checks: list[bool] = []
    real_check = sqlite_adapter.fence_unmoved

    def counted(conn: sqlite3.Connection, fence: Any) -> bool:
        checks.append(real_check(conn, fence))
        return checks[-1]

    try:
        for i in range(2):
            await ours.append(ANA, "s0", [Message(Role.USER, f"turn {i}")])
        real_run = store.run
        hops: list[str] = []

        async def erasing_first(ctx: Any, operation: str, work: Any) -> Any:
            if operation == "session commit with archive":
                hops.append(operation)
                n = len(hops)
                await other.append(ANA, f"x{n}", [Message(Role.USER, "elsewhere")])
                await other.erase(
                    EraseTarget.session("acme", "ana", f"x{n}"), reason="dsr", attestation=OPERATOR
                )
            return await real_run(ctx, operation, work)

        store.run = erasing_first
        monkeypatch.setattr(sqlite_adapter, "fence_unmoved", counted)
        result = await ours.append(ANA, "s0", [Message(Role.USER, "third")])
        assert result.commit_state.value == "committed"
        assert checks == [False] * FENCED_ATTEMPTS and len(hops) == FENCED_ATTEMPTS + 1
    finally:
        await ours.aclose()
        await other.aclose()
