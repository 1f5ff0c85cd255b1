"""A joint commit loaded before another process erased the session brings none of it back (PostgreSQL).

The PostgreSQL session store and archive on one schema archive and save in
one transaction (``commit_with_archive``). That alone does not make a stale
load safe: while an erasure is under way the snapshot may still be at the
loaded revision; once it completed, the erased id used again no longer comes
back to that revision (a new session starts past the store's revision floor,
which the erase raised to the erased session's last revision), and before
schema version 3 it did (revisions started again at 1), so the
compare-and-set passed. Two runtimes over the same database stand
for two processes; runtime A's run waits in the model while runtime B erases.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest
from pg_race import Held, pg_runtime
from psycopg import sql

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionState,
    VerifiedIdentity,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_postgres import PostgresConfig

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")
LIMITS = RuntimeLimits(resident=ResidentLimits(max_groups=2))
SECRETS = ("qzfirstsecretq", "qzsecondsecretq", "third turn")


def _rows_holding(admin: psycopg.Connection[Any], schema: str, text: str) -> list[str]:
    """Tables whose rows' data holds ``text`` (raw SQL, as superuser: behind row-level security)."""
    found = []
    for table in ("archive_groups", "session_snapshots"):
        query = sql.SQL("SELECT count(*) FROM {}.{} WHERE position(%s IN data) > 0").format(
            sql.Identifier(schema), sql.Identifier(table)
        )
        row = admin.execute(query, (text.encode(),)).fetchone()
        if row is not None and row[0]:
            found.append(table)
    return found


async def _readable(runtime: Any, text: str) -> bool:
    page = await runtime.read_history(ANA, "s0", max_groups=100, view=False)
    view = await runtime.inspect_session(ANA, "s0")
    return text in repr(page) or text in repr(view)


@pytest.mark.parametrize("erasure", ["session", "user", "pending", "reused"])
async def test_a_joint_pg_commit_loaded_before_an_erasure_brings_none_of_it_back(
    erasure: str, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    provider = Held()
    slow = pg_runtime(provider, app_config, LIMITS)  # one process: its run waits in the model
    other = pg_runtime(
        ScriptedProvider(replies=["ok"], cycle=True), app_config, LIMITS
    )  # another: the operator
    assert slow.session_store.shares_transactions_with(slow.archive)  # the joint path
    target = (
        EraseTarget.user("acme", "ana") if erasure == "user" else EraseTarget.session("acme", "ana", "s0")
    )
    try:
        await slow.run(ANA, "s0", f"first {SECRETS[0]}")
        await slow.run(ANA, "s0", f"second {SECRETS[1]}")
        provider.armed = True
        failures: list[BaseException] = []
        results: list[Any] = []

        async def stale_run() -> None:
            try:
                results.append(await slow.run(ANA, "s0", SECRETS[2]))
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_run)
            await provider.started.wait()  # loaded (revision 2, groups 0 and 1 resident) before the erasure
            if erasure == "pending":
                # Erased from the archive, but the session store's erase fails: pending, scope fenced.
                await _pending_store_erasure(other, target)
                expected: type[Exception] = ErasureInProgressError
            else:
                result = await other.erase(target, reason="dsr", attestation=OPERATOR)
                assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
                expected = SessionConflictError
                if erasure == "reused":
                    # The erased id is used again (at revisions 3 and 4: past the erased session's 2).
                    for i in range(2):
                        assert (await other.run(ANA, "s0", f"new turn {i}")).committed
            provider.release.set()

        assert results == [], "the stale run committed"
        (failure,) = failures
        assert isinstance(failure, expected), failure
        assert str(getattr(failure, "commit_state", None)) in ("not_committed", "CommitState.NOT_COMMITTED")
        if erasure == "pending":
            resumed = await other.erase(target, reason="dsr", attestation=OPERATOR)
            assert resumed.tombstone is not None and resumed.tombstone.state is ErasureState.COMPLETE
        for secret in SECRETS:
            assert _rows_holding(admin, schema, secret) == [], secret
            assert not await _readable(other, secret), secret
        # The session id used again (or further): every run commits, nothing diverges, and the
        # stale runtime's own next run loads the new session.
        for i in range(2 if erasure == "reused" else 0, 4):
            assert (await other.run(ANA, "s0", f"new turn {i}")).committed
        assert (await slow.run(ANA, "s0", "new turn 4")).committed
        view = await other.inspect_session(ANA, "s0")
        assert view.state is SessionState.OK and view.divergence is None
        texts = repr(await other.read_history(ANA, "s0", max_groups=100, view=False))
        assert all(f"new turn {i}" in texts for i in range(5))
        assert not any(secret in texts for secret in SECRETS)
        archived = await other.archive.read_groups(KEY, 0, 100, OpContext.with_timeout(20))
        assert [g.seq for g in archived] == [0, 1, 2]
    finally:
        await slow.aclose()
        await other.aclose()


async def _pending_store_erasure(runtime: Any, target: EraseTarget) -> None:
    """Leave an erasure pending after the archive erased: the session store's erase call fails."""
    store = runtime.session_store
    real = store.erase

    async def failing(*args: object, **kwargs: object) -> Any:
        raise OSError("session store unreachable")

    store.erase = failing
    try:
        with pytest.raises(ErasureIncompleteError):
            await runtime.erase(target, reason="dsr", attestation=OPERATOR)
    finally:
        store.erase = real


async def test_a_pg_save_without_eviction_loaded_before_an_erasure_never_replaces_the_reused_session(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # Nothing to archive: the commit is a compare-and-set save alone. The erased id used again starts
    # past the revision floor (2, not the revision 1 the stale run loaded, as before the floor).
    provider = Held()
    slow = pg_runtime(provider, app_config, LIMITS)
    other = pg_runtime(ScriptedProvider(replies=["ok"], cycle=True), app_config, LIMITS)
    try:
        await slow.run(ANA, "s0", f"first {SECRETS[0]}")  # revision 1, one group resident
        provider.armed = True
        failures: list[BaseException] = []

        async def stale_run() -> None:
            try:
                await slow.run(ANA, "s0", SECRETS[2])
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_run)
            await provider.started.wait()
            result = await other.erase(
                EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
            )
            assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
            assert (await other.run(ANA, "s0", "new turn 0")).snapshot_revision == 2
            provider.release.set()

        (failure,) = failures
        assert isinstance(failure, SessionConflictError), failure
        assert str(getattr(failure, "commit_state", None)) in ("not_committed", "CommitState.NOT_COMMITTED")
        for secret in (SECRETS[0], SECRETS[2]):
            assert _rows_holding(admin, schema, secret) == [], secret
            assert not await _readable(other, secret), secret
        assert "new turn 0" in repr(await other.read_history(ANA, "s0", max_groups=100, view=False))
        assert (await slow.run(ANA, "s0", "new turn 1")).committed
        assert (await other.inspect_session(ANA, "s0")).state is SessionState.OK
    finally:
        await slow.aclose()
        await other.aclose()
