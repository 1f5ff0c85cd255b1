"""A run says truthfully whether it committed, even when the session save's own answer was wrong.

A store can lose the reply to a write that landed (a timeout after the
backend accepted it, a dropped connection, a retried conditional write that
then sees its first attempt as a conflict). The engine reads the session
back before reporting: a landed save is a committed run, a save that did not
land raises with ``commit_state`` ``not_committed``, and one that cannot be
settled raises with ``unknown``. The stores here are the public in-memory
and SQLite stores, wrapped so that a save lands and then fails.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs
import pytest
from _short_deadline import short_only_for

from agentium_harness import (
    CommitState,
    OperationTimeoutError,
    ResidentLimits,
    RunStatus,
    RuntimeClosedError,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SessionSnapshot

pytestmark = pytest.mark.anyio

T = TypeVar("T")

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
#: For the tests whose save is to run past its deadline. Only the save keeps it (``short_only_for``):
#: the run's loads, read-backs and model call get 30 s, a stalled machine must not fail them.
FAST = RuntimeLimits(op_timeout_s=0.5, settle_timeout_s=0.5, close_timeout_s=0.5, model_timeout_s=30)
#: For everything a test expects to succeed: a loaded CI machine can stall for longer than 0.5 s.
ROOMY = RuntimeLimits(op_timeout_s=30, settle_timeout_s=30, close_timeout_s=30)


class LandsThenFails(InMemorySessionStore):
    """The public in-memory store, whose next ``fail`` saves write the snapshot and then raise ``error``.

    ``hang`` makes such a save wait past its deadline after writing instead
    of raising (the engine's deadline then cancels it); ``land=False`` makes
    it raise without writing; ``reads_fail`` makes every load after a failed
    save raise too.
    """

    def __init__(
        self,
        error: Exception | None = None,
        *,
        fail: int = 1,
        land: bool = True,
        hang: bool = False,
        reads_fail: bool = False,
    ) -> None:
        super().__init__()
        self.error = error
        self.fail = fail
        self.land = land
        self.hang = hang
        self.reads_fail = reads_fail
        self.failed = False
        self.saves = 0

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected: int | None, ctx: OpContext
    ) -> int:
        self.saves += 1
        if self.fail <= 0:
            return await super().save(key, snapshot, expected, ctx)
        self.fail -= 1
        self.failed = True
        if self.land:
            await super().save(key, snapshot, expected, ctx)
        if self.hang:
            await anyio.sleep(30)
        assert self.error is not None
        raise self.error

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.failed and self.reads_fail:
            raise SessionStoreError("the backend is unreachable")
        return await super().load(key, ctx)


def _runtime(store: Any, **kw: Any) -> Any:
    return create_harness_runtime(
        provider=kw.pop("provider", None) or ScriptedProvider(replies=["ok"], cycle=True),
        archive=kw.pop("archive", None) or InMemoryArchive(),
        session_store=store,
        limits=kw.pop("limits", ROOMY),
        **kw,
    )


async def _groups(store: Any) -> int:
    stored = await InMemorySessionStore.load(store, KEY, OpContext())
    return 0 if stored is None else stored.snapshot.next_seq


@pytest.mark.parametrize(
    "error",
    [
        SessionStoreError("S3UnavailableError: 503 Slow Down"),
        ConnectionResetError("connection reset by peer"),
    ],
    ids=["store-error", "raw-error"],
)
async def test_a_save_that_landed_and_then_raised_is_a_committed_run(error: Exception) -> None:
    store = LandsThenFails(error)
    runtime = _runtime(store)
    result = await runtime.run(ANA, "s1", "hello")
    assert result.commit_state is CommitState.COMMITTED and result.committed
    assert result.status is RunStatus.COMPLETED and result.group_seq == 0
    assert result.has("save_settled")
    stored = await store.load(KEY, OpContext())
    assert stored is not None and result.snapshot_revision == stored.revision
    # The host does not retry: the next run follows on the committed turn, nothing is duplicated.
    after = await runtime.run(ANA, "s1", "and then")
    assert after.group_seq == 1 and await _groups(store) == 2


async def test_a_save_that_landed_and_then_timed_out_is_a_committed_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = short_only_for(monkeypatch, "session save")
    store = LandsThenFails(hang=True)
    runtime = _runtime(store, limits=FAST)
    with anyio.fail_after(30):
        result = await runtime.run(ANA, "s1", "hello")
    assert result.commit_state is CommitState.COMMITTED and result.group_seq == 0
    assert result.has("save_settled")
    assert "OperationTimeoutError" in next(d.message for d in result.diagnostics if d.code == "save_settled")
    assert kept.kept == [("session save", FAST.op_timeout_s)]


async def test_a_retried_conditional_write_that_sees_its_own_first_attempt_is_committed() -> None:
    # The backend accepted the first attempt, the reply was lost, the retry found the revision
    # moved by that very attempt and reported a conflict.
    store = LandsThenFails(SessionConflictError("precondition failed: the revision moved"))
    result = await _runtime(store).run(ANA, "s1", "hello")
    assert result.commit_state is CommitState.COMMITTED and result.group_seq == 0


async def test_a_save_that_did_not_land_raises_not_committed_and_says_what_ran() -> None:
    store = LandsThenFails(SessionStoreError("S3UnavailableError: 503"), land=False)
    runtime = _runtime(store)
    with pytest.raises(SessionStoreError) as caught:
        await runtime.run(ANA, "s1", "hello")
    error = caught.value
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "nothing was committed" in str(error) and "did not land" in str(error)
    report = error.run_result
    assert report is not None and report.commit_state is CommitState.NOT_COMMITTED
    assert report.status is RunStatus.INTERRUPTED and report.group_seq is None and not report.committed
    assert report.usage.input_tokens and report.usage.output_tokens  # the model call is still reported
    assert await _groups(store) == 0
    # Retrying is safe and commits exactly one turn.
    assert (await runtime.run(ANA, "s1", "hello")).group_seq == 0 and await _groups(store) == 1


async def test_a_save_that_timed_out_without_landing_raises_not_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = short_only_for(monkeypatch, "session save")
    store = LandsThenFails(land=False, hang=True)
    with pytest.raises(OperationTimeoutError) as caught:
        await _runtime(store, limits=FAST).run(ANA, "s1", "hello")
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert caught.value.operation == "session save" and kept.kept == [("session save", FAST.op_timeout_s)]
    assert await _groups(store) == 0


async def test_a_save_that_cannot_be_settled_raises_unknown() -> None:
    store = LandsThenFails(SessionStoreError("S3UnavailableError: 503"), reads_fail=True)
    with pytest.raises(SessionStoreError) as caught:
        await _runtime(store).run(ANA, "s1", "hello")
    error = caught.value
    assert error.commit_state is CommitState.UNKNOWN
    assert "unknown" in str(error) and "inspect the session before retrying" in str(error)
    assert "nothing was committed" not in str(error)
    assert error.run_result is not None and error.run_result.commit_state is CommitState.UNKNOWN


async def test_another_writers_conflict_is_not_committed() -> None:
    store = InMemorySessionStore()
    runtime = _runtime(store)
    await runtime.run(ANA, "s1", "first")

    class Racing(InMemorySessionStore):
        async def save(
            self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext
        ) -> int:
            # Another host commits first: this save's compare-and-set fails, as it should.
            stored = await store.load(key, ctx)
            assert stored is not None
            await store.save(key, stored.snapshot, stored.revision, ctx)
            return await store.save(key, snapshot, expected, ctx)

        async def load(self, key: SessionKey, ctx: OpContext) -> Any:
            return await store.load(key, ctx)

    with pytest.raises(SessionConflictError) as caught:
        await _runtime(Racing()).run(ANA, "s1", "second")
    assert caught.value.commit_state is CommitState.NOT_COMMITTED


async def test_errors_before_the_turn_say_not_committed_too() -> None:
    runtime = _runtime(InMemorySessionStore())
    with pytest.raises(Exception) as caught:
        await runtime.run(ANA, "s1", 42)  # type: ignore[arg-type]
    assert caught.value.commit_state is CommitState.NOT_COMMITTED  # type: ignore[attr-defined]
    assert caught.value.run_result is None  # type: ignore[attr-defined]  # nothing was loaded or run


class JointLandsThenFails(SQLiteSessionStore):
    """The public SQLite store: its next joint archive-and-save transaction commits, then raises."""

    fail = 1

    async def commit_with_archive(self, *args: Any, **kw: Any) -> Any:
        answer = await super().commit_with_archive(*args, **kw)
        if self.fail:
            self.fail -= 1
            raise SessionStoreError("database is locked (after COMMIT)")
        return answer


async def test_a_joint_commit_that_landed_and_then_raised_is_committed_not_retried(tmp_path: Path) -> None:
    config = SQLiteConfig(path=str(tmp_path / "one.db"))
    archive, store = SQLiteArchive(config), JointLandsThenFails(config)
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1), op_timeout_s=30.0)
    runtime = _runtime(store, archive=archive, limits=limits)
    try:
        await runtime.run(ANA, "s1", "first")
        result = await runtime.run(ANA, "s1", "second")  # evicts group 0: the joint path
        assert result.commit_state is CommitState.COMMITTED and result.group_seq == 1
        assert result.has("save_settled") and not result.has("joint_commit_failed")
        assert result.boundary == 1 and [r.seq for r in result.archived] == [0]
        stored = await store.load(KEY, OpContext())
        assert stored is not None and stored.revision == result.snapshot_revision
        assert stored.snapshot.next_seq == 2  # one turn each, nothing duplicated
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_run_cancelled_by_aclose_while_its_save_is_in_flight_says_unknown() -> None:
    saving = anyio.Event()

    class Hangs(InMemorySessionStore):
        async def save(
            self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext
        ) -> int:
            saving.set()
            await anyio.sleep(30)
            raise AssertionError("unreachable")

    # Only the settle is meant to run out (the save hangs); the cancelled run stopping is not.
    limits = attrs.evolve(ROOMY, settle_timeout_s=0.2)
    runtime = _runtime(Hangs(), limits=limits)
    errors: list[BaseException] = []

    async def run() -> None:
        try:
            await runtime.run(ANA, "s1", "hello")
        except RuntimeClosedError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(30):
            await saving.wait()  # the save is in flight
        await runtime.aclose()
    assert len(errors) == 1
    error = errors[0]
    assert error.commit_state is CommitState.UNKNOWN  # type: ignore[attr-defined]
    assert "nothing was committed" not in str(error) and "unknown" in str(error)


class SlowSQLite(SQLiteSessionStore):
    """The public SQLite store, whose save transaction blocks its worker thread until a read-back.

    The engine cannot cancel a blocked thread: it abandons the call at its
    deadline and reads the session back to settle it; the thread then commits
    anyway (as a backend that already took the request would), unless
    ``land=False``. Waiting for the read-back rather than for a fixed time
    makes the order certain however the machine is loaded.
    """

    def __init__(self, config: SQLiteConfig, *, land: bool = True) -> None:
        super().__init__(config)
        self.land = land
        self.saving = False
        self.read_back = threading.Event()

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.saving:
            self.read_back.set()  # a load after the save began: the engine settling it
        return await super().load(key, ctx)

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        if operation != "session save":
            return await super().run(ctx, operation, work)
        self.saving = True

        def blocked(conn: Any) -> T:
            self.read_back.wait(30)  # not cancellable
            if not self.land:
                raise sqlite3.OperationalError("disk I/O error")
            return work(conn)

        return await super().run(ctx, operation, blocked)


async def test_an_abandoned_save_that_lands_during_the_read_back_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Abandoned at 0.3 s (+0.1 s grace), the thread commits once the engine reads the session back,
    # while the read-backs still look. Only the save has the short deadline: the run's load and the
    # read-backs (SQLite reads in a worker thread) get 30 s, and the model call its own.
    kept = short_only_for(monkeypatch, "session save")
    store = SlowSQLite(SQLiteConfig(path=str(tmp_path / "s.db")))
    limits = RuntimeLimits(op_timeout_s=0.3, settle_timeout_s=1, close_timeout_s=1, model_timeout_s=30)
    try:
        # The file is created (WAL switch, schema, their fsyncs) before the run, without a deadline:
        # on a busy disk that alone took longer than the run's 0.3 s and failed its first load.
        assert await store.load(KEY, OpContext()) is None
        result = await _runtime(store, limits=limits).run(ANA, "s1", "hello")
        assert result.commit_state is CommitState.COMMITTED and result.has("save_settled")
        assert kept.kept == [("session save", 0.3)]
    finally:
        store.read_back.set()
        await store.aclose()


async def test_an_abandoned_save_that_has_not_landed_is_unknown_not_not_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the save has the short deadline: the run's load and the read-backs get 30 s.
    kept = short_only_for(monkeypatch, "session save")
    release = threading.Event()

    class Blocked(InMemorySessionStore):
        async def save(
            self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext
        ) -> int:
            # Not cancellable: the engine abandons it. Blocked until the test ends (30 s at most).
            await anyio.to_thread.run_sync(release.wait, 30.0)
            raise SessionStoreError("gave up")

    # Every read-back finds the session unchanged, but the blocked save may still land after them:
    # "not committed" would be a guess.
    limits = RuntimeLimits(op_timeout_s=0.3, settle_timeout_s=1, close_timeout_s=1, model_timeout_s=30)
    try:
        with pytest.raises(OperationTimeoutError) as caught:
            await _runtime(Blocked(), limits=limits).run(ANA, "s1", "hello")
        assert caught.value.abandoned and caught.value.commit_state is CommitState.UNKNOWN
        assert "may still land" in str(caught.value)
        assert kept.kept == [("session save", 0.3)]
    finally:
        release.set()


class OthersWriteDuringSave(InMemorySessionStore):
    """Delegates to a shared store; during the first save, another runtime runs turns on the session.

    ``land`` makes that save write first (then the other turns archive its group, then it raises);
    otherwise the other turns come first and the save's compare-and-set fails.
    """

    def __init__(self, shared: InMemorySessionStore, other: Any, *, land: bool) -> None:
        super().__init__()
        self.shared, self.other, self.land, self.armed = shared, other, land, True

    async def save(self, key: SessionKey, snapshot: SessionSnapshot, expected: Any, ctx: OpContext) -> int:
        if not self.armed:
            return await self.shared.save(key, snapshot, expected, ctx)
        self.armed = False
        if self.land:
            await self.shared.save(key, snapshot, expected, ctx)
        for n in range(3):  # resident bound 1: each turn archives the one before
            await self.other.run(ANA, "s1", f"other {n}")
        if self.land:
            raise SessionStoreError("the reply to the save was lost")
        return await self.shared.save(key, snapshot, expected, ctx)

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        return await self.shared.load(key, ctx)


@pytest.mark.parametrize("land", [True, False], ids=["landed", "lost-the-race"])
async def test_a_save_whose_group_another_writer_archived_is_settled_by_the_archive(land: bool) -> None:
    # The read-back finds a later revision whose boundary is past the turn's group: only the
    # archive can say whose group that seq holds. It was "unknown", so a host could not retry.
    archive, shared = InMemoryArchive(), InMemorySessionStore()
    one = ResidentLimits(max_groups=1)
    other = _runtime(shared, archive=archive, limits=RuntimeLimits(resident=one))
    await other.run(ANA, "s1", "first")
    ours = _runtime(
        OthersWriteDuringSave(shared, other, land=land), archive=archive, limits=RuntimeLimits(resident=one)
    )
    if land:
        result = await ours.run(ANA, "s1", "mine")
        assert result.committed and result.has("save_settled")
        assert "the archive holds them" in next(
            d.message for d in result.diagnostics if d.code == "save_settled"
        )
    else:
        with pytest.raises(SessionConflictError) as caught:
            await ours.run(ANA, "s1", "mine")
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "another writer's group" in str(caught.value)
    page = await ours.read_history(ANA, "s1", max_groups=10)
    assert [m.content for m in page.messages if m.role.value == "user"] == (
        ["first", "mine", "other 0", "other 1", "other 2"]
        if land
        else ["first", "other 0", "other 1", "other 2"]
    )
