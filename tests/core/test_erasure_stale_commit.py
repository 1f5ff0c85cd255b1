"""A run that loaded a session just before another process erased it archives nothing of the old session.

Found by a probe of four processes over one S3 bucket and one Redis while a
fifth erased sessions: a slow run loaded session ``s0`` before the erasure's
record was written; the erasure completed while the model answered; the run's
commit then archived its evicted resident group (the erased session's text)
at the old seq, and only then did its compare-and-set save fail. The group
stayed in the archive, orphaned, and when the re-used session reached that
seq its own eviction met the stale group: the session became ``diverged``,
and reconciling would have adopted the erased text over the committed group.

Two runtimes over the same stores stand for the two processes.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from _session_store_support import RevisionsRestartStore

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionState,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext
from agentium_harness.testing.erasure_races import HeldProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s0")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")


Held = HeldProvider  # a model held mid-turn


def _runtime(provider: Any, archive: InMemoryArchive, store: InMemorySessionStore) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def _archived(archive: InMemoryArchive) -> list[str]:
    groups = await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(30))
    return [repr(g) for g in groups]


@pytest.mark.parametrize("erasure", ["completed", "pending"])
async def test_a_run_loaded_before_an_erasure_archives_none_of_the_erased_session(erasure: str) -> None:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    provider = Held()
    slow = _runtime(provider, archive, store)  # one process: its run is slow
    other = _runtime(ScriptedProvider(replies=["ok"], cycle=True), archive, store)  # another: the operator
    try:
        await slow.run(ANA, "s0", "first secret qzfirstsecretq")
        await slow.run(ANA, "s0", "second turn")
        assert await _archived(archive) == []  # both groups resident: the next commit evicts group 0

        provider.armed = True
        failures: list[BaseException] = []

        async def stale_run() -> None:
            try:
                await slow.run(ANA, "s0", "third turn")
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_run)
            await provider.started.wait()  # the run loaded the session before the erasure's record
            if erasure == "completed":
                result = await other.erase(
                    EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
                )
                assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
                expected: type[Exception] = SessionConflictError
            else:
                # An erasure whose record is written but which has not erased anything yet (its first
                # store call fails): pending, the scope fenced.
                await _pending_erasure(other, archive)
                expected = ErasureInProgressError
            provider.release.set()

        (failure,) = failures
        assert isinstance(failure, expected), failure
        assert getattr(failure, "commit_state", None) is not None
        assert str(failure.commit_state) in ("not_committed", "CommitState.NOT_COMMITTED")
        # The old session's group 0 (its text) was never written back to the archive.
        assert not [g for g in await _archived(archive) if "qzfirstsecretq" in g]
        if erasure == "completed":
            # The erased session id is used again from seq 0, and its groups archive at their seqs.
            for i in range(4):
                done = await other.run(ANA, "s0", f"new turn {i}")
                assert done.committed
            assert [r for r in await _archived(archive) if "qzfirstsecretq" in r] == []
            groups = await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(30))
            assert [g.seq for g in groups] == [0, 1]
            assert "new turn 0" in repr(groups[0])
    finally:
        await slow.aclose()
        await other.aclose()


async def _pending_erasure(runtime: Any, archive: InMemoryArchive) -> None:
    """Leave an erasure of the session pending: the archive's first erase call fails."""
    real = archive.erase

    async def failing(*args: object, **kwargs: object) -> Any:
        raise OSError("archive unreachable")

    archive.erase = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(ErasureIncompleteError):
            await runtime.erase(EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR)
    finally:
        archive.erase = real  # type: ignore[method-assign]


# The joint path: the built-in SQLite pair on one file archives and saves in one transaction
# (``commit_with_archive``), and its commit was said to need no second look. The same scenario,
# with both runtimes over one database file, checks that claim.

SECRETS = ("qzfirstsecretq", "qzsecondsecretq")


def _sqlite_runtime(provider: Any, db: Path) -> Any:
    config = SQLiteConfig(path=str(db))
    return create_harness_runtime(
        provider=provider,
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


def _rows_holding(db: Path, text: str) -> list[str]:
    """Rows of the file's session and group tables whose stored bytes hold ``text`` (raw SQL)."""
    needle = text.encode()
    found: list[str] = []
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for table, column in (("groups", "data"), ("sessions", "snapshot")):
            for (value,) in conn.execute(f"SELECT {column} FROM {table}"):
                data = value.encode() if isinstance(value, str) else value
                if isinstance(data, bytes) and needle in data:
                    found.append(table)
    return found


async def _readable(runtime: Any, text: str) -> bool:
    page = await runtime.read_history(ANA, "s0", max_groups=100, view=False)
    view = await runtime.inspect_session(ANA, "s0")
    return text in repr(page) or text in repr(view)


@pytest.mark.parametrize("erasure", ["session", "user", "pending", "reused"])
async def test_a_joint_sqlite_commit_loaded_before_an_erasure_brings_none_of_it_back(
    erasure: str, tmp_path: Path
) -> None:
    db = tmp_path / "agentium.db"
    provider = Held()
    slow = _sqlite_runtime(provider, db)
    other = _sqlite_runtime(ScriptedProvider(replies=["ok"], cycle=True), db)
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
                results.append(await slow.run(ANA, "s0", "third turn"))
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
                    # The erased id is used again up to the revision the stale run loaded.
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
        for secret in (*SECRETS, "third turn"):
            assert _rows_holding(db, secret) == [], secret
            assert not await _readable(other, secret), secret
        # The session id used again (or further): every run commits, nothing diverges, the stale
        # runtime's own next run loads the new session.
        start = 2 if erasure == "reused" else 0
        for i in range(start, 4):
            assert (await other.run(ANA, "s0", f"new turn {i}")).committed
        assert (await slow.run(ANA, "s0", "new turn 4")).committed
        view = await other.inspect_session(ANA, "s0")
        assert view.state is SessionState.OK and view.divergence is None
        page = await other.read_history(ANA, "s0", max_groups=100, view=False)
        texts = repr(page)
        assert all(f"new turn {i}" in texts for i in range(5))
        assert not any(secret in texts for secret in (*SECRETS, "third turn"))
        assert [g.seq for g in await other.archive.read_groups(KEY, 0, 100, OpContext.with_timeout(30))] == [
            0,
            1,
            2,
        ]
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


@pytest.mark.parametrize("stores", ["memory", "sqlite"])
async def test_a_save_without_eviction_loaded_before_an_erasure_never_replaces_the_reused_session(
    stores: str, tmp_path: Path
) -> None:
    # A commit with nothing to archive is a compare-and-set save alone. The erased id, used again,
    # was back at revision 1, the revision the stale run loaded: the save's compare-and-set passed
    # and put the erased group over the new session, whose own turn was lost. The commit fence
    # refuses it, and so, now, does the store: the new session starts above the erased one's
    # revisions (the store's revision floor), so no revision the stale run holds comes back.
    provider = Held()
    if stores == "memory":
        archive, store = InMemoryArchive(), InMemorySessionStore()
        slow = _runtime(provider, archive, store)
        other = _runtime(ScriptedProvider(replies=["ok"], cycle=True), archive, store)
    else:
        slow = _sqlite_runtime(provider, tmp_path / "agentium.db")
        other = _sqlite_runtime(ScriptedProvider(replies=["ok"], cycle=True), tmp_path / "agentium.db")
    try:
        await slow.run(ANA, "s0", f"first {SECRETS[0]}")  # revision 1, one group: the next run evicts nothing
        provider.armed = True
        failures: list[BaseException] = []

        async def stale_run() -> None:
            try:
                await slow.run(ANA, "s0", "stale turn")
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stale_run)
            await provider.started.wait()
            result = await other.erase(
                EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR
            )
            assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
            assert (await other.run(ANA, "s0", "new turn 0")).snapshot_revision == 2  # above the erased 1
            provider.release.set()

        (failure,) = failures
        assert isinstance(failure, SessionConflictError), failure
        assert str(getattr(failure, "commit_state", None)) in ("not_committed", "CommitState.NOT_COMMITTED")
        texts = repr(await other.read_history(ANA, "s0", max_groups=100, view=False))
        assert "new turn 0" in texts
        assert SECRETS[0] not in texts and "stale turn" not in texts
        if stores == "sqlite":
            assert _rows_holding(tmp_path / "agentium.db", SECRETS[0]) == []
        assert (await slow.run(ANA, "s0", "new turn 1")).committed
        assert (await other.inspect_session(ANA, "s0")).state is SessionState.OK
    finally:
        await slow.aclose()
        await other.aclose()


class HeldSummarizer(ExtractiveSummarizer):
    """Summarizes at once, except the armed call, which waits for ``release`` after saying it started."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def summarize(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().summarize(*args, **kwargs)


@pytest.mark.parametrize("floor", [True, False], ids=["builtin", "revisions-restart"])
async def test_a_summary_of_an_erased_session_is_not_saved_into_the_reused_one(floor: bool) -> None:
    # The run committed before the erasure; its summary update (made from the erased groups) waits
    # on the summarizer while another process erases the session and uses the id again up to the
    # revision the update expects: that revision alone let it save the erased text into the new
    # session's summary. The built-in store never comes back to that revision (its revision floor);
    # a store that restarts at 1 does, and the engine's own check must refuse the update then too.
    archive = InMemoryArchive()
    store = InMemorySessionStore() if floor else RevisionsRestartStore()
    summarizer = HeldSummarizer()
    slow = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    other = create_harness_runtime(  # no summarizer: its commits move the revision one at a time
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        await slow.run(ANA, "s0", f"The vault code is {SECRETS[0]}.")
        summarizer.armed = True
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _into(results, slow.run(ANA, "s0", "Another sentence here.")))
            await summarizer.started.wait()  # committed (group 0 archived), the summary on its way
            revision = (await other.inspect_session(ANA, "s0")).revision
            await other.erase(EraseTarget.session("acme", "ana", "s0"), reason="dsr", attestation=OPERATOR)
            for i in range(revision):
                await other.run(ANA, "s0", f"New turn {i}.")
            reused = (await other.inspect_session(ANA, "s0")).revision
            assert reused > revision if floor else reused == revision
            summarizer.release.set()

        (done,) = results
        assert done.committed  # its commit came before the erasure
        assert "summary_conflict" in [d.code for d in done.diagnostics]
        view = await other.inspect_session(ANA, "s0")
        assert view.revision == reused and view.summary is None
        assert not await _readable(other, SECRETS[0])
    finally:
        await slow.aclose()
        await other.aclose()


async def _into(results: list[Any], call: Any) -> None:
    results.append(await call)
