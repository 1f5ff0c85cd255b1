"""Engine hardening (issue 6): enforced deadlines, bounded shutdown, divergence, bad input, defects.

Each test here failed on the engine before the hardening: a hung archive made
``run()`` block forever, a hung adapter made ``aclose()`` wait forever, a
conflicting archive left eviction deferred forever, and so on.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest
from _session_store_support import HangingStore
from _short_deadline import short_only_for

from agentium_harness import (
    ContractViolationError,
    IdentityError,
    Message,
    MessageGroup,
    RecallScope,
    Role,
    RuntimeClosedError,
    Scope,
    SessionKey,
    SnapshotCorruptError,
    ToolCall,
    VerifiedIdentity,
)
from agentium_harness._codec import canonical_json, unstructure
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._engine.maintenance import SessionState
from agentium_harness._engine.results import CleanupStatus, EvictionStatus
from agentium_harness._engine.tools import Tool, ToolRegistry, ToolStatus
from agentium_harness._errors import (
    InvalidArgumentError,
    OperationTimeoutError,
    ProviderTimeoutError,
    RuntimeCloseError,
    SessionDivergedError,
)
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderCapabilities,
    SourceBlock,
    SourceKind,
    Usage,
)
from agentium_harness._ports.sessions import SNAPSHOT_FORMAT_VERSION, SessionSnapshot, verify_snapshot
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("tenant-a", "alice", "test-auth")
KEY = SessionKey("tenant-a", "alice", "s1")
CTX = OpContext()
#: The short deadlines, only for the operation a test wants to time out (see ROOMY).
FAST = RuntimeLimits(
    resident=ResidentLimits(max_groups=1),
    op_timeout_s=0.3,
    tool_timeout_s=0.3,
    settle_timeout_s=0.3,
    close_timeout_s=0.3,
)
#: FAST's resident bound with deadlines no stalled machine misses, for everything a test expects to
#: succeed (the runtimes' default here): on a loaded CI machine (one pytest process, two cores,
#: servers beside it) a stall can outlast FAST's 0.3 s and fail an operation that did nothing wrong.
ROOMY = attrs.evolve(
    FAST, op_timeout_s=30.0, tool_timeout_s=30.0, settle_timeout_s=30.0, close_timeout_s=30.0
)
#: Scheduling slack on a loaded two-core machine: far under what a bound left unenforced would take.
SLACK_S = 5.0


def build(**kw: Any) -> Any:
    return create_harness_runtime(
        provider=kw.pop("provider", None) or ScriptedProvider(replies=["ok"], cycle=True),
        archive=kw.pop("archive", None) or InMemoryArchive(),
        session_store=kw.pop("store", None) or InMemorySessionStore(),
        limits=kw.pop("limits", ROOMY),
        **kw,
    )


async def raw_row(store: InMemorySessionStore) -> tuple[int, bytes] | None:
    return store._rows.get(KEY)


# -- 1. deadlines are enforced ---------------------------------------------------------


class HangingArchive(InMemoryArchive):
    """An archive whose append never answers (and ignores its deadline), recording its context."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.contexts: list[OpContext] = []

    async def append(self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext) -> Any:
        if self.hang:
            self.contexts.append(ctx)
            await anyio.sleep_forever()
        return await super().append(key, groups, ctx)


async def test_archive_that_never_answers_defers_eviction_and_the_run_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive, store = HangingArchive(), InMemorySessionStore()
    rt = build(archive=archive, store=store)  # the turns before and after: generous deadlines
    await rt.run(ALICE, "s1", "q0")
    archive.hang = True
    # Only the append runs under FAST's deadline: the timed run's loads, model call and save succeed.
    kept = short_only_for(monkeypatch, "archive append")
    timed = build(archive=archive, store=store, limits=attrs.evolve(FAST, model_timeout_s=ROOMY.op_timeout_s))
    started = time.monotonic()
    result = await timed.run(ALICE, "s1", "q1")
    assert time.monotonic() - started < FAST.op_timeout_s + SLACK_S  # the append never answers
    assert result.eviction is EvictionStatus.DEFERRED and result.has("eviction_deferred")
    assert "OperationTimeoutError" in next(
        d.message for d in result.diagnostics if d.code == "eviction_deferred"
    )
    assert result.boundary == 0 and result.resident_groups == 2
    assert kept.kept == [("archive append", FAST.op_timeout_s)]
    # The adapter's context was cancelled at the deadline, with the reason.
    assert archive.contexts[0].signal.cancelled and archive.contexts[0].signal.reason == "deadline passed"
    archive.hang = False
    later = await rt.run(ALICE, "s1", "q2")
    assert later.eviction is EvictionStatus.ARCHIVED and later.boundary == 2


class SlowProvider(ModelProvider):
    capabilities = ProviderCapabilities(tool_calls=True)

    def __init__(self, delay: float = math.inf, reply: Message | None = None, usage: Usage | None = None):
        self.delay = delay
        self.reply = reply or Message(Role.ASSISTANT, "answer")
        self.usage = usage or Usage()
        self.contexts: list[OpContext] = []
        self.requests: list[ModelRequest] = []
        self.entered = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.contexts.append(ctx)
        self.requests.append(request)
        self.entered.set()
        if self.delay:
            await anyio.sleep(self.delay)
        return ModelResponse(self.reply, self.usage)


class SeqProvider(SlowProvider):
    """Answers with the given messages in order."""

    def __init__(self, replies: Sequence[Message]) -> None:
        super().__init__(delay=0)
        self.replies = list(replies)

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        return ModelResponse(self.replies.pop(0))


async def test_provider_past_its_deadline_fails_the_run_and_changes_nothing() -> None:
    store = InMemorySessionStore()
    await build(store=store).run(ALICE, "s1", "q0")
    before = await raw_row(store)
    provider = SlowProvider()
    # Only the model call's deadline is short: the run's session load around it keeps ROOMY's.
    limits = attrs.evolve(ROOMY, model_timeout_s=FAST.op_timeout_s)
    with pytest.raises(ProviderTimeoutError, match=r"did not answer within 0\.3s"):
        await build(store=store, provider=provider, limits=limits).run(ALICE, "s1", "q1")
    assert provider.contexts[0].signal.cancelled
    assert await raw_row(store) == before


async def test_session_store_past_its_deadline_raises_typed_error_and_commits_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archive, store = InMemoryArchive(), HangingStore()
    rt = build(archive=archive, store=store)  # the turns before and after: generous deadlines
    await rt.run(ALICE, "s1", "q0")
    before = await raw_row(store)
    store.hang_save = True
    # Only the save runs under FAST's deadline: the timed run's load, model call and append succeed.
    kept = short_only_for(monkeypatch, "session save")
    timed = build(archive=archive, store=store, limits=attrs.evolve(FAST, model_timeout_s=ROOMY.op_timeout_s))
    with pytest.raises(OperationTimeoutError, match="session save") as info:
        await timed.run(ALICE, "s1", "q1")
    assert info.value.timeout_s == FAST.op_timeout_s and kept.kept == [("session save", FAST.op_timeout_s)]
    assert await raw_row(store) == before
    # The session is free again afterwards: the timed-out run left its admission, and the next turn
    # follows on the last committed one.
    assert KEY not in timed.parts.admission.active
    store.hang_save = False
    assert (await rt.run(ALICE, "s1", "q2")).group_seq == 1


async def test_tool_handler_gets_a_deadline() -> None:
    async def hang(arguments: Any) -> str:
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    call = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "slow", {}),))
    provider = SeqProvider([call, Message(Role.ASSISTANT, "done")])
    # Only the tool's deadline is short: the turn around it must not trip over a stalled machine.
    limits = attrs.evolve(ROOMY, tool_timeout_s=FAST.tool_timeout_s)
    rt = build(provider=provider, tools=ToolRegistry([Tool("slow", hang)]), limits=limits)
    result = await rt.run(ALICE, "s1", "go", grants=["slow"])
    assert result.tool_outcomes[0].status is ToolStatus.TIMED_OUT
    assert result.has("tool_timeout") and result.output == "done"


# -- 2. bounded shutdown ---------------------------------------------------------------


class HangingClose(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.closed = 0

    async def aclose(self) -> None:
        if self.mode == "hang":
            await anyio.sleep_forever()
        if self.mode == "raise":
            raise OSError("disk gone")
        self.closed += 1


async def test_aclose_is_bounded_with_a_hung_run_and_cancels_it() -> None:
    # Only the settle is meant to run out (the run hangs); the cancelled run stopping is not.
    limits = attrs.evolve(ROOMY, settle_timeout_s=FAST.settle_timeout_s)
    provider = SlowProvider()
    rt = build(provider=provider, limits=limits)
    outcome: list[BaseException] = []

    async def running() -> None:
        try:
            await rt.run(ALICE, "s1", "q0")
        except BaseException as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(running)
        with anyio.fail_after(30):
            await provider.entered.wait()  # the run is admitted and hangs in the model call
        started = time.monotonic()
        await rt.aclose()
        elapsed = time.monotonic() - started
    assert elapsed < limits.settle_timeout_s + SLACK_S
    assert isinstance(outcome[0], RuntimeClosedError)
    assert rt.state.value == "closed"


async def test_aclose_closes_every_owned_adapter_reports_all_failures_and_can_be_retried() -> None:
    hung, broken, good = HangingClose("hang"), HangingClose("raise"), HangingClose("ok")
    store = InMemorySessionStore()
    limits = attrs.evolve(ROOMY, close_timeout_s=FAST.close_timeout_s)  # the hung close runs out
    rt = build(archive=good, store=store, owned=[hung, broken, good], limits=limits)
    started = time.monotonic()
    with pytest.raises(RuntimeCloseError) as info:
        await rt.aclose()
    assert time.monotonic() - started < limits.close_timeout_s + SLACK_S
    assert len(info.value.failures) == 2
    assert any("did not finish within 0.3s" in f for f in info.value.failures)
    assert any("disk gone" in f for f in info.value.failures)
    assert good.closed == 1
    assert rt.state.value == "closing"
    with pytest.raises(RuntimeClosedError):
        await rt.run(ALICE, "s1", "q")
    hung.mode = broken.mode = "ok"
    rt.limits = attrs.evolve(rt.limits, close_timeout_s=ROOMY.close_timeout_s)  # the retry is to succeed
    await rt.aclose()
    assert rt.state.value == "closed" and good.closed == 1 and hung.closed == broken.closed == 1


async def test_migration_is_admitted_like_a_run_and_cancelled_by_aclose() -> None:
    loading = anyio.Event()

    class SlowLoadStore(InMemorySessionStore):
        capabilities = InMemorySessionStore.capabilities

        async def load(self, key: SessionKey, ctx: OpContext) -> Any:
            loading.set()
            await anyio.sleep_forever()

    # Only the settle is meant to run out (the migration hangs); the cancelled one stopping is not.
    rt = build(store=SlowLoadStore(), limits=attrs.evolve(ROOMY, settle_timeout_s=FAST.settle_timeout_s))
    errors: list[BaseException] = []

    async def migrate() -> None:
        try:
            await rt.migrate_legacy_session(ALICE, "s1", attest_legacy_memory_scope=True)
        except BaseException as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(migrate)
        with anyio.fail_after(30):
            await loading.wait()  # the migration is admitted and hangs in its load
        from agentium_harness import SessionBusyError

        with pytest.raises(SessionBusyError, match="migration"):
            await rt.run(ALICE, "s1", "q")
        await rt.aclose()
    assert isinstance(errors[0], RuntimeClosedError)


# -- 4. divergence is a typed state with an operator path -------------------------------


async def test_diverged_archive_is_a_typed_state_and_reconcile_keeps_both_copies() -> None:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    squatter = MessageGroup(0, (Message(Role.USER, "another writer"),))
    await archive.append(KEY, [squatter], CTX)
    rt = build(archive=archive, store=store)
    await rt.run(ALICE, "s1", "q0")
    result = await rt.run(ALICE, "s1", "q1")
    assert result.eviction is EvictionStatus.DIVERGED and result.has("archive_diverged")
    view = await rt.inspect_session(ALICE, "s1")
    assert view.state is SessionState.DIVERGED and view.divergence is not None
    assert view.divergence.seqs == (0,)
    before = await raw_row(store)
    with pytest.raises(SessionDivergedError, match="reconcile"):
        await rt.run(ALICE, "s1", "q2")
    assert await raw_row(store) == before
    report = await rt.reconcile_session(ALICE, "s1")
    assert report.changed and report.adopted_seqs == (0,)
    assert report.renumbered == ((0, 1), (1, 2))
    view = await rt.inspect_session(ALICE, "s1")
    assert view.state is SessionState.OK and view.divergence is None
    # Nothing is lost: the other writer's group and both of ours, in order.
    later = await rt.run(ALICE, "s1", "q2")
    assert later.eviction is EvictionStatus.ARCHIVED
    archived = await archive.read_groups(KEY, 0, 100, CTX)
    stored = await store.load(KEY, CTX)
    assert stored is not None
    everything = [g for g in archived if g.seq < stored.snapshot.boundary] + list(stored.snapshot.resident)
    assert [g.messages[0].content for g in everything] == ["another writer", "q0", "q1", "q2"]
    assert [g.seq for g in everything] == [0, 1, 2, 3]
    # A second reconcile has nothing to do.
    assert not (await rt.reconcile_session(ALICE, "s1")).changed


async def test_lost_snapshot_store_is_reconciled_after_the_archived_history() -> None:
    archive = InMemoryArchive()
    old = build(archive=archive, store=InMemorySessionStore())
    for i in range(4):
        await old.run(ALICE, "s1", f"old{i}")
    fresh_store = InMemorySessionStore()  # the snapshot store was lost; the archive kept 0..2
    rt = build(archive=archive, store=fresh_store)
    await rt.run(ALICE, "s1", "new0")
    assert (await rt.run(ALICE, "s1", "new1")).eviction is EvictionStatus.DIVERGED
    report = await rt.reconcile_session(ALICE, "s1")
    assert report.adopted_seqs == (0, 1, 2) and report.boundary >= 3
    stored = await fresh_store.load(KEY, CTX)
    archived = await archive.read_groups(KEY, 0, 100, CTX)
    assert stored is not None
    everything = [g for g in archived if g.seq < stored.snapshot.boundary] + list(stored.snapshot.resident)
    assert [g.messages[0].content for g in everything] == ["old0", "old1", "old2", "new0", "new1"]


async def test_close_session_on_a_diverged_session_reports_incomplete_without_saving() -> None:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    await archive.append(KEY, [MessageGroup(0, (Message(Role.USER, "x"),))], CTX)
    rt = build(archive=archive, store=store)
    await rt.run(ALICE, "s1", "q0")
    await rt.run(ALICE, "s1", "q1")
    before = await raw_row(store)
    report = await rt.resources.close_session(ALICE, "s1")
    assert report.status is CleanupStatus.INCOMPLETE
    assert any(d.code == "archive_diverged" for d in report.diagnostics)
    assert await raw_row(store) == before


# -- 5. bad input that used to escape ---------------------------------------------------


async def test_recall_scope_as_dict_is_a_typed_error() -> None:
    store = InMemorySessionStore()
    with pytest.raises(IdentityError, match="RecallScope"):
        await build(store=store).run(ALICE, "s1", "q", recall_scope={"project": "p"})  # type: ignore[arg-type]
    assert await raw_row(store) is None


async def test_grants_as_a_string_is_refused_not_split_into_characters() -> None:
    store = InMemorySessionStore()
    with pytest.raises(InvalidArgumentError, match='grants=\\["shell"\\]'):
        await build(store=store).run(ALICE, "s1", "q", grants="shell")
    assert await raw_row(store) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, {1, 2}])
async def test_tool_arguments_that_cannot_be_encoded_are_refused_before_any_tool_runs(bad: object) -> None:
    ran: list[object] = []

    async def tool(arguments: Any) -> str:
        ran.append(arguments)
        return "ran"

    reply = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {"x": bad}),))
    store = InMemorySessionStore()
    rt = build(
        store=store, provider=SlowProvider(delay=0, reply=reply), tools=ToolRegistry([Tool("t", tool)])
    )
    with pytest.raises(ContractViolationError, match="encoded canonically"):
        await rt.run(ALICE, "s1", "q", grants=["t"])
    assert ran == [] and await raw_row(store) is None


async def test_tool_calls_from_a_provider_that_did_not_declare_them_are_refused() -> None:
    class NoTools(SlowProvider):
        capabilities = ProviderCapabilities(tool_calls=False)

    ran: list[object] = []

    async def tool(arguments: Any) -> str:
        ran.append(arguments)
        return "ran"

    reply = Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t", {}),))
    store = InMemorySessionStore()
    rt = build(store=store, provider=NoTools(delay=0, reply=reply), tools=ToolRegistry([Tool("t", tool)]))
    with pytest.raises(ContractViolationError, match="tool_calls capability"):
        await rt.run(ALICE, "s1", "q", grants=["t"])
    assert ran == [] and await raw_row(store) is None


@pytest.mark.parametrize("key", ['x" onload="y', "Kind", "id", "", "a b", "é"])
def test_source_block_attribute_names_are_checked(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="attribute name"):
        SourceBlock(SourceKind.RECALL, "s", "text", attributes=((key, "v"),))


async def test_sources_must_be_source_blocks() -> None:
    with pytest.raises(InvalidArgumentError, match="SourceBlock"):
        await build().run(ALICE, "s1", "q", sources=[{"content": "x"}])  # type: ignore[list-item]


# -- 6. defects found by reading --------------------------------------------------------


async def test_tool_handler_cannot_rewrite_committed_history() -> None:
    async def vandal(arguments: Any) -> str:
        arguments["path"] = "/etc/passwd"
        arguments["nested"]["deep"] = "changed"
        return "done"

    call = Message(
        Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "v", {"path": "a", "nested": {"deep": 1}}),)
    )
    store = InMemorySessionStore()
    provider = SeqProvider([call, Message(Role.ASSISTANT, "ok")])
    limits = attrs.evolve(ROOMY, resident=ResidentLimits(max_groups=8))
    rt = build(store=store, provider=provider, tools=ToolRegistry([Tool("v", vandal)]), limits=limits)
    await rt.run(ALICE, "s1", "q", grants=["v"])
    stored = await store.load(KEY, CTX)
    assert stored is not None
    args = stored.snapshot.resident[0].messages[1].tool_calls[0].arguments
    assert args == {"path": "a", "nested": {"deep": 1}}


class FailingArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities
    fail = False

    async def append(self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext) -> Any:
        if self.fail:
            raise OSError("archive down")
        return await super().append(key, groups, ctx)


async def test_a_flush_that_archives_nothing_does_not_bump_the_revision() -> None:
    archive, store = FailingArchive(), InMemorySessionStore()
    rt = build(archive=archive, store=store)
    archive.fail = True
    await rt.run(ALICE, "s1", "q0")
    await rt.run(ALICE, "s1", "q1")
    before = await raw_row(store)
    report = await rt.resources.close_session(ALICE, "s1")
    assert report.status is CleanupStatus.INCOMPLETE and report.flushed_groups == 0
    assert await raw_row(store) == before
    archive.fail = False
    report = await rt.resources.close_session(ALICE, "s1")
    assert report.status is CleanupStatus.CLEAN and report.flushed_groups == 1


def _legacy_row(groups: int) -> bytes:
    snap = SessionSnapshot(
        memory_scope=None,
        boundary=0,
        next_seq=groups,
        resident=tuple(MessageGroup(i, (Message(Role.USER, f"m{i}"),)) for i in range(groups)),
        format_version=1,
    )
    return canonical_json(unstructure(snap))


async def test_migrated_snapshot_is_written_at_the_current_format_with_its_digest() -> None:
    store = InMemorySessionStore()
    store.put_raw(KEY, 1, _legacy_row(1))
    report = await build(store=store).migrate_legacy_session(ALICE, "s1", attest_legacy_memory_scope=True)
    assert report.changed
    stored = await store.load(KEY, CTX)
    assert stored is not None and stored.snapshot.format_version == SNAPSHOT_FORMAT_VERSION
    assert stored.snapshot.digest is not None
    verify_snapshot(KEY, stored.snapshot)


async def test_legacy_session_over_its_bound_is_not_reported_clean() -> None:
    store = InMemorySessionStore()
    store.put_raw(KEY, 1, _legacy_row(3))
    report = await build(store=store).resources.close_session(ALICE, "s1")
    assert report.status is CleanupStatus.INCOMPLETE
    assert any(d.code == "legacy_not_flushed" for d in report.diagnostics)


async def test_a_reported_zero_input_tokens_is_kept_and_estimates_are_marked() -> None:
    exact = SlowProvider(delay=0, usage=Usage(input_tokens=0, output_tokens=3))
    result = await build(provider=exact).run(ALICE, "s1", "q")
    assert result.usage == Usage(input_tokens=0, output_tokens=3, estimated=False)
    assert not result.has("usage_estimated")
    unknown = SlowProvider(delay=0, usage=Usage())
    result = await build(provider=unknown).run(ALICE, "s2", "q")
    assert result.usage.estimated and result.usage.input_tokens and result.has("usage_estimated")


async def test_a_bit_flip_in_a_stored_snapshot_fails_closed() -> None:
    store = InMemorySessionStore()
    provider = SlowProvider(delay=0)
    # No deadline is under test: the seeding run must not fail on a stalled machine.
    rt = build(store=store, provider=provider, limits=attrs.evolve(ROOMY, resident=ResidentLimits()))
    await rt.run(ALICE, "s1", "secret plan")
    revision, data = store._rows[KEY]
    flipped = data.replace(b"secret plan", b"secret plot")
    store.put_raw(KEY, revision, flipped)
    with pytest.raises(SnapshotCorruptError):
        await rt.run(ALICE, "s1", "again")
    assert store._rows[KEY] == (revision, flipped)
    assert len(provider.requests) == 1  # the damaged history never reached the model


async def test_groups_archived_hook_runs_off_the_event_loop() -> None:
    threads: list[str] = []

    class Hooks:
        def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
            threads.append(threading.current_thread().name)
            return ()

    loop_thread = threading.current_thread().name
    rt = build(hooks=Hooks())
    await rt.run(ALICE, "s1", "q0")
    result = await rt.run(ALICE, "s1", "q1")
    assert result.eviction is EvictionStatus.ARCHIVED
    assert threads and threads[0] != loop_thread


def test_scope_of_recall_is_accepted_when_typed() -> None:
    # The typed form keeps working; only the dict form is refused.
    assert Scope.of(ALICE, "s1", RecallScope("p", None)).project == "p"


async def test_undeclared_port_operations_raise_a_typed_error_in_the_hierarchy() -> None:
    from agentium_harness import AgentiumError, UnsupportedOperationError
    from agentium_harness._ports.memory import MemoryStore
    from agentium_harness._ports.recall import RecallStore

    with pytest.raises(UnsupportedOperationError, match="forgetting") as info:
        await MemoryStore().forget(Scope.of(ALICE, "s1"), "x", CTX)
    assert isinstance(info.value, AgentiumError)
    with pytest.raises(UnsupportedOperationError, match=r"RecallStore.open\(\)"):
        await RecallStore().open(Scope.of(ALICE, "s1"), None, CTX)  # type: ignore[arg-type]
