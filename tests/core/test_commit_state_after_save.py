"""An operation cancelled after its save landed says ``committed``, not ``unknown``.

A commit does more after its save: it broadcasts ``agentium_groups_archived``
for the groups it archived (a hook may take up to ``close_timeout_s``), and
a joint commit read back as landed asks the archive for its receipts again.
``aclose()`` cancelling the operation there used to report
``commit_state="unknown"`` ("inspect the session before retrying") for a
write that was known to stand. The hooks here block their thread until the
test lets them go, so the order is certain however the machine is loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _archive_support import ArchiveDownOnce
from _effects_support import DEPLOY

from agentium_harness import (
    BlockingRuntime,
    CommitState,
    EffectLevel,
    HarnessRuntime,
    Message,
    ResidentLimits,
    Role,
    RuntimeClosedError,
    RuntimeLimits,
    SessionKey,
    SessionStoreError,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


class ArchivedHookBlocks:
    """A hook broadcaster whose ``agentium_groups_archived`` blocks its thread until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        if hook == "agentium_groups_archived":
            self.entered.set()
            self.gate.wait(30)
        return ()


def _runtime(store: InMemorySessionStore, hooks: ArchivedHookBlocks) -> HarnessRuntime:
    # Only the settle is meant to run out (aclose then cancels the operation in the hook); the hook
    # itself would be waited for close_timeout_s, and everything else has 30 s.
    limits = RuntimeLimits(
        op_timeout_s=30,
        settle_timeout_s=0.2,
        close_timeout_s=30,
        resident=ResidentLimits(max_groups=1),
    )
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=store,
        hooks=hooks,
        limits=limits,
    )


def _pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"u{n}"), Message(Role.ASSISTANT, f"a{n}")]


async def _closed_in_hook(
    rt: HarnessRuntime, hooks: ArchivedHookBlocks, operation: Callable[[], Awaitable[Any]]
) -> RuntimeClosedError:
    """Run ``operation``, close the runtime while its archived-groups hook blocks; the error it raised."""
    errors: list[RuntimeClosedError] = []

    async def call() -> None:
        try:
            await operation()
        except RuntimeClosedError as exc:
            errors.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(30):
                await anyio.to_thread.run_sync(hooks.entered.wait, 30.0)
            await rt.aclose()
    finally:
        hooks.gate.set()
    assert len(errors) == 1, "the operation was not cancelled by aclose()"
    return errors[0]


@pytest.mark.parametrize("kind", ["append", "run", "retract", "reset_view"])
async def test_an_operation_cancelled_while_its_archived_hook_runs_says_committed(kind: str) -> None:
    store, hooks = InMemorySessionStore(), ArchivedHookBlocks()
    rt = _runtime(store, hooks)
    await rt.append(ANA, "s1", _pair(0))
    before = await store.load(KEY, OpContext())
    assert before is not None and not hooks.entered.is_set()
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "append": lambda: rt.append(ANA, "s1", _pair(1)),
        "run": lambda: rt.run(ANA, "s1", "hello"),
        "retract": lambda: rt.retract(ANA, "s1", reason="pop"),
        "reset_view": lambda: rt.reset_view(ANA, "s1", reason="clear"),
    }
    error = await _closed_in_hook(rt, hooks, operations[kind])
    after = await store.load(KEY, OpContext())
    # The save landed before the hook ran: the group is in the session, the boundary past group 0.
    assert after is not None and after.revision > before.revision
    assert after.snapshot.next_seq == 2 and after.snapshot.boundary == 1
    assert error.commit_state is CommitState.COMMITTED, str(error)
    assert "nothing was committed" not in str(error) and "unknown" not in str(error)
    if kind == "run":
        # Its run_result names the group and the revision the session is at, not the one before.
        assert error.run_result is not None and error.run_result.group_seq == 1
        assert error.run_result.snapshot_revision == after.revision


class JointFailsThenFenceFails(SQLiteSessionStore):
    """The public SQLite store: its joint transaction fails without landing, then one fence read fails.

    The engine reads the session back (unchanged: the transaction did not
    land), retries as separate calls, and that retry's erasure-fence read
    fails before it saves anything. Every fence read is a call here, as with
    any store without the SQLite store's known-rows shortcut.
    """

    _agentium_load_known = None

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.joint_fails = 1
        self.fence_fails = 0

    async def commit_with_archive(self, *args: Any, **kw: Any) -> Any:
        if self.joint_fails:
            self.joint_fails -= 1
            self.fence_fails = 1
            raise SessionStoreError("database is locked")
        return await super().commit_with_archive(*args, **kw)

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if key != KEY and self.fence_fails:
            self.fence_fails -= 1
            raise SessionStoreError("the erasure fence could not be read")
        return await super().load(key, ctx)


@pytest.mark.parametrize("kind", ["append", "run"])
async def test_a_joint_commit_that_did_not_land_then_a_failed_retry_before_its_save_is_not_committed(
    tmp_path: Path, kind: str
) -> None:
    # The joint transaction said "unknown" while it was in flight; read back as not landed, the
    # retry then failed before its own save began. That was reported "unknown" (and a run's tool
    # calls would not have been committed for it), although nothing was or could be written.
    config = SQLiteConfig(path=str(tmp_path / "one.db"))
    archive, store = SQLiteArchive(config), JointFailsThenFenceFails(config)
    limits = RuntimeLimits(op_timeout_s=30, settle_timeout_s=30, close_timeout_s=30)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        limits=attrs.evolve(limits, resident=ResidentLimits(max_groups=1)),
    )
    try:
        await rt.append(ANA, "s1", _pair(0))
        before = await store.load(KEY, OpContext())
        with pytest.raises(SessionStoreError) as caught:
            if kind == "append":
                await rt.append(ANA, "s1", _pair(1))  # evicts group 0: the joint path
            else:
                await rt.run(ANA, "s1", "hello")
        assert store.joint_fails == 0 and store.fence_fails == 0  # both failures happened
        after = await store.load(KEY, OpContext())
        assert before is not None and after is not None
        assert (after.revision, after.snapshot) == (before.revision, before.snapshot)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED, str(caught.value)
    finally:
        await rt.aclose()
        await archive.aclose()
        await store.aclose()


async def test_a_close_session_cancelled_while_its_flush_archived_hook_runs_says_committed() -> None:
    store, hooks, archive = InMemorySessionStore(), ArchivedHookBlocks(), ArchiveDownOnce()
    limits = RuntimeLimits(
        op_timeout_s=30, settle_timeout_s=0.2, close_timeout_s=30, resident=ResidentLimits(max_groups=1)
    )
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        hooks=hooks,
        limits=limits,
    )
    await rt.append(ANA, "s1", _pair(0))
    deferred = await rt.append(ANA, "s1", _pair(1))
    assert deferred.eviction.value == "deferred" and not hooks.entered.is_set()
    before = await store.load(KEY, OpContext())
    error = await _closed_in_hook(rt, hooks, lambda: rt.resources.close_session(ANA, "s1"))
    after = await store.load(KEY, OpContext())
    # The flush's save landed (boundary past group 0) before its archived-groups hook ran.
    assert before is not None and after is not None and after.revision > before.revision
    assert after.snapshot.boundary == 1
    assert error.commit_state is CommitState.COMMITTED, str(error)


def test_a_blocking_runtime_closed_while_an_appends_archived_hook_runs_says_committed() -> None:
    # The facade's close() runs aclose() on its loop: the append blocked in the hook hears the same.
    store, hooks = InMemorySessionStore(), ArchivedHookBlocks()
    blocking = BlockingRuntime(_runtime(store, hooks))
    errors: list[BaseException] = []

    def append() -> None:
        try:
            blocking.append(ANA, "s1", _pair(1))
        except BaseException as exc:
            errors.append(exc)

    try:
        blocking.append(ANA, "s1", _pair(0))
        caller = threading.Thread(target=append, daemon=True)
        caller.start()
        assert hooks.entered.wait(30), "the append never reached its archived-groups hook"
        blocking.close()
        caller.join(30)
    finally:
        hooks.gate.set()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeClosedError), errors
    assert errors[0].commit_state is CommitState.COMMITTED, str(errors[0])


async def test_a_joint_commit_that_did_not_land_keeps_what_ran_when_the_retry_fails_before_its_save(
    tmp_path: Path,
) -> None:
    # The tool ran; the turn's joint commit did not land and its retry failed before saving. That
    # was "unknown", so what ran was never committed (an unknown state is not followed by another
    # commit): the deploy happened and the session did not say so.
    log: list[str] = []

    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        return "deployed v2 to prod"

    config = SQLiteConfig(path=str(tmp_path / "one.db"))
    archive, store = SQLiteArchive(config), JointFailsThenFenceFails(config)
    limits = RuntimeLimits(op_timeout_s=30, settle_timeout_s=30, close_timeout_s=30)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=[DEPLOY, "Deployed."]),
        archive=archive,
        session_store=store,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        limits=attrs.evolve(limits, resident=ResidentLimits(max_groups=1)),
    )
    try:
        await rt.append(ANA, "s1", _pair(0))
        with pytest.raises(SessionStoreError) as caught:
            await rt.run(ANA, "s1", "deploy v2", grants=["deploy"])
        assert log == ["deployed to prod"] and store.fence_fails == 0
        error = caught.value
        assert error.commit_state is CommitState.COMMITTED, str(error)
        assert error.run_result is not None and error.run_result.group_seq == 1
        stored = await store.load(KEY, OpContext())
        assert stored is not None and stored.snapshot.next_seq == 2
        assert [m.role.value for m in stored.snapshot.resident[-1].messages] == ["user", "assistant", "tool"]
    finally:
        await rt.aclose()
        await archive.aclose()
        await store.aclose()
