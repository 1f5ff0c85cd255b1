"""Bounds hold when an adapter blocks a worker thread (issue 21, item 2).

``anyio.to_thread.run_sync`` without ``abandon_on_cancel`` cannot be
cancelled: the awaiting task sees its cancellation only when the thread
returns. The adapters here are written as a user would write them — public
ports, a blocking client called through ``to_thread.run_sync`` — and block
their thread well past the deadline. Before the engine ran each adapter call
as a task it can walk away from, a recall ``discover`` blocked like this held
a run with ``max_latency_s=0.3`` until the thread returned and its late
result was used; an archive ``append`` held every run past ``op_timeout_s``;
an owned adapter's blocked ``aclose`` held ``aclose()`` with nothing reported.

Each blocked thread waits on an event the test sets at the end (at most
``BLOCK_S``), so the test does not wait the threads out. ``BLOCK_S`` is far
past every bound asserted (deadline + ``SLACK_S``): a stalled machine gets
slack, and a bound the engine did not enforce still fails the test. Only the
call a test wants to time out runs under a short deadline; what it expects to
succeed gets a generous one (a loaded CI machine can stall for longer than
0.3 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import attrs
import pytest
from _short_deadline import short_only_for

from agentium_harness import (
    AgentiumError,
    ArchiveError,
    EvictionStatus,
    MemoryScope,
    OperationCancelledError,
    PublicationRefusedError,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RuntimeCloseError,
    RuntimeLimits,
    SessionKey,
    StoredFact,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    MessageGroup,
    OpContext,
    RecallCapabilities,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    ThreadBoundAdapter,
    Validation,
    ValidationStatus,
    document_source_id,
)
from agentium_harness.testing import record_requests

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
MINE = SourceOwner("acme", "ana", "s1")
#: How long a blocked thread blocks at most (the test releases it earlier).
BLOCK_S = 60.0
#: Scheduling slack on a loaded two-core machine; still well under BLOCK_S, so a held run fails.
SLACK_S = 20.0
#: The deadline of everything a test expects to succeed.
ROOMY_S = 30.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at the end of the test so blocked threads return (late) instead of waiting BLOCK_S."""
    event = threading.Event()
    yield event
    event.set()


def blocking(gate: threading.Event) -> None:
    """What a blocking client call looks like from its worker thread."""
    gate.wait(BLOCK_S)


# -- recall discovery ---------------------------------------------------------------------------


class BlockingRecall(RecallStore):
    """A recall store over a blocking client: ``discover`` blocks its thread, then returns a candidate."""

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True, bounded_reads=True, revision_validation=True, bounded_current_validation=True
    )

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.returned = anyio.Event()

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return BlockingSession(self)


class BlockingSession(RecallSession):
    def __init__(self, store: BlockingRecall) -> None:
        self.store = store

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        await anyio.to_thread.run_sync(blocking, self.store.gate)  # cannot be cancelled
        self.store.returned.set()
        return [Candidate(SourceRef(document_source_id(MINE, "late-doc"), "r1"), MINE, 1.0, 40)]

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        return [Excerpt(r, MINE, "LATE EVIDENCE that arrived after the budget") for r in refs]

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return await self.validate_current(refs, ctx)

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return [Validation(r, ValidationStatus.CURRENT, r.revision) for r in refs]

    async def close(self) -> None:
        return None


BlockingRecall.session_class = BlockingSession


async def test_recall_discovery_blocked_in_a_thread_keeps_the_latency_budget(gate: threading.Event) -> None:
    provider, store = ScriptedProvider(replies=["ok"], cycle=True), BlockingRecall(gate)
    requests = record_requests(provider)
    budget = 0.3
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        recall_limits=RecallLimits(max_latency_s=budget),
        recall_policy=current_session_recall_policy(on_failed="continue"),
    )
    started = time.monotonic()
    result = await rt.run(ANA, "s1", "when does the release train leave?")
    elapsed = time.monotonic() - started
    assert elapsed < budget + SLACK_S, f"the run took {elapsed:.2f}s against a {budget}s recall budget"
    assert result.recall is not None and result.recall.status is RecallStatus.FAILED
    assert result.recall.included == ()
    # The abandonment is reported, naming the call.
    abandoned = [d.message for d in result.diagnostics if d.code == "call_abandoned"]
    assert abandoned and "recall discover" in abandoned[0]
    # Let the thread return: its late result changes nothing the run reported or sent.
    gate.set()
    with anyio.fail_after(BLOCK_S + 2):
        await store.returned.wait()
    await anyio.sleep(0.05)
    assert all("LATE" not in b.content for r in requests for b in r.sources)
    assert result.recall.included == ()
    await rt.aclose()


class SlowOpenRecall(BlockingRecall):
    """Its ``open`` blocks its thread; the session it opens late must still be closed."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(gate)
        self.closed = anyio.Event()

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        await anyio.to_thread.run_sync(blocking, self.gate)
        store = self

        class Late(BlockingSession):
            async def close(self) -> None:
                store.closed.set()

        return Late(self)


async def test_a_recall_session_opened_after_the_budget_is_closed_not_leaked(gate: threading.Event) -> None:
    store = SlowOpenRecall(gate)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        recall_limits=RecallLimits(max_latency_s=0.3),
        recall_policy=current_session_recall_policy(on_failed="continue"),
    )
    result = await rt.run(ANA, "s1", "when does the release train leave?")
    assert result.recall is not None and result.recall.status is RecallStatus.FAILED
    assert any(d.code == "call_abandoned" and "recall open" in d.message for d in result.diagnostics)
    assert not store.closed.is_set()
    gate.set()
    with anyio.fail_after(BLOCK_S + 2):
        await store.closed.wait()
    await rt.aclose()


class QuickRecall(BlockingRecall):
    """Answers at once: one current document, or none when ``empty``."""

    def __init__(self, gate: threading.Event, *, empty: bool = False) -> None:
        super().__init__(gate)
        self.empty = empty

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return QuickSession(self)


class QuickSession(BlockingSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        assert isinstance(self.store, QuickRecall)
        doc = SourceRef(document_source_id(MINE, "doc-1"), "r1")
        return [] if self.store.empty else [Candidate(doc, MINE, 1.0, 40)]


async def test_a_clarifier_blocked_in_a_thread_does_not_hold_the_run(gate: threading.Event) -> None:
    limits = RuntimeLimits(op_timeout_s=0.3)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=QuickRecall(gate, empty=True),
        recall_policy=current_session_recall_policy(on_no_evidence="clarify"),
        recall_limits=RecallLimits(max_queries=2),
        limits=attrs.evolve(limits, op_timeout_s=ROOMY_S),
    )
    # The adapter calls keep the deadline the runtime was built with; the clarifier's is read from
    # ``limits`` when the run asks: only it runs under the short one.
    rt.limits = limits

    async def clarify(question: str) -> str:
        await anyio.to_thread.run_sync(blocking, gate)
        return "the Thursday train"

    started = time.monotonic()
    result = await rt.run(ANA, "s1", "when?", clarify=clarify)
    elapsed = time.monotonic() - started
    assert elapsed < limits.op_timeout_s + SLACK_S, f"the clarifier held the run {elapsed:.2f}s"
    assert result.has("clarification_failed") and not result.committed
    gate.set()


class BlockingPublication:
    """A host's conditional publication whose condition check blocks its thread, then commits."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.late: list[str] = []
        self.answered = anyio.Event()

    async def publish(self, view: Any, commit: Any) -> None:
        await anyio.to_thread.run_sync(blocking, self.gate)
        try:
            await commit()
        except PublicationRefusedError as exc:
            self.late.append(str(exc))
        finally:
            self.answered.set()


async def test_a_publication_blocked_in_a_thread_is_refused_at_its_deadline_and_cannot_commit_late(
    gate: threading.Event,
) -> None:
    sessions = InMemorySessionStore()
    publication = BlockingPublication(gate)
    limits = RuntimeLimits(op_timeout_s=0.2)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=QuickRecall(gate),
        publication=publication,
        limits=attrs.evolve(limits, op_timeout_s=ROOMY_S),
    )
    # The adapter calls keep the deadline the runtime was built with; the publication's
    # (3 x op_timeout_s) is read from ``limits`` when the run commits: only it runs under the short one.
    rt.limits = limits
    started = time.monotonic()
    with pytest.raises(PublicationRefusedError, match="did not commit"):
        await rt.run(ANA, "s1", "when does the release train leave?")
    elapsed = time.monotonic() - started
    assert elapsed < 3 * limits.op_timeout_s + SLACK_S, f"the publication held the run {elapsed:.2f}s"
    gate.set()
    with anyio.fail_after(BLOCK_S + 2):
        await publication.answered.wait()
    assert "after the publication hook's" in publication.late[0]
    assert await sessions.load(KEY, OpContext()) is None  # nothing was committed, early or late
    await rt.aclose()


# -- archive append -----------------------------------------------------------------------------


class BlockingArchive(InMemoryArchive):
    """An archive over a blocking client whose ``append`` blocks its thread while ``blocked``."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.blocked = False

    async def append(self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext) -> Any:
        if self.blocked:
            await anyio.to_thread.run_sync(blocking, self.gate)
        return await super().append(key, groups, ctx)


async def test_archive_append_blocked_in_a_thread_does_not_hold_the_run(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, store = BlockingArchive(gate), InMemorySessionStore()
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1), op_timeout_s=0.3, model_timeout_s=ROOMY_S)

    def runtime(limits: RuntimeLimits) -> Any:
        return create_harness_runtime(
            provider=ScriptedProvider(replies=["ok"], cycle=True),
            archive=archive,
            session_store=store,
            limits=limits,
        )

    # The turns before and after run with a generous deadline, over the same adapters.
    rt = runtime(attrs.evolve(limits, op_timeout_s=ROOMY_S))
    timed = runtime(limits)
    await rt.run(ANA, "s1", "q0")
    archive.blocked = True
    # Within the timed run, only the append keeps 0.3 s: its load and save are to succeed.
    kept = short_only_for(monkeypatch, "archive append")
    started = time.monotonic()
    result = await timed.run(ANA, "s1", "q1")
    elapsed = time.monotonic() - started
    assert elapsed < limits.op_timeout_s + SLACK_S, f"the run took {elapsed:.2f}s at op_timeout_s=0.3"
    assert kept.kept == [("archive append", 0.3)]
    assert result.eviction is EvictionStatus.DEFERRED and result.committed
    assert any(d.code == "call_abandoned" and "archive append" in d.message for d in result.diagnostics)
    deferred = next(d.message for d in result.diagnostics if d.code == "eviction_deferred")
    assert "abandoned" in deferred
    # The abandoned append lands late; the next eviction is still sound (the append is idempotent).
    archive.blocked = False
    gate.set()
    await anyio.sleep(0.3)
    later = await rt.run(ANA, "s1", "q2")
    assert later.eviction is EvictionStatus.ARCHIVED and later.boundary == 2
    await timed.aclose()
    await rt.aclose()


# -- closing owned adapters ---------------------------------------------------------------------


class BlockingCloseArchive(InMemoryArchive):
    """An owned adapter whose ``aclose`` blocks its thread (a client draining a pool, say)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        await anyio.to_thread.run_sync(blocking, self.gate)


async def test_owned_adapter_whose_close_blocks_a_thread_is_abandoned_and_reported(
    gate: threading.Event,
) -> None:
    blocked = BlockingCloseArchive(gate)
    limits = RuntimeLimits(op_timeout_s=0.3, settle_timeout_s=0.3, close_timeout_s=0.3)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=blocked,
        session_store=InMemorySessionStore(),
        limits=limits,
        owned=[blocked],
    )
    started = time.monotonic()
    with pytest.raises(RuntimeCloseError) as info:
        await rt.aclose()
    elapsed = time.monotonic() - started
    bound = limits.settle_timeout_s + 2 * limits.close_timeout_s
    assert elapsed < bound + SLACK_S, f"aclose() took {elapsed:.2f}s against its documented bound {bound}s"
    assert any("BlockingCloseArchive" in f and "abandoned" in f for f in info.value.failures)
    assert any("within 0.3s" in f for f in info.value.failures)  # the configured bound
    assert rt.state.value == "closing"
    # Once the thread has returned, a retry closes it for good (a retry that is to succeed: roomy).
    gate.set()
    await anyio.sleep(0.2)
    rt.limits = attrs.evolve(limits, close_timeout_s=ROOMY_S)
    await rt.aclose()
    assert rt.state.value == "closed" and blocked.closes == 2


# -- a provider and a session store, for completeness -------------------------------------------


class BlockingStore(InMemorySessionStore):
    capabilities = InMemorySessionStore.capabilities

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        # Only the run's own session blocks: the erasure fence's read of the
        # tenant's pending erasures (another key) comes first and answers.
        if key.session == "s1":
            await anyio.to_thread.run_sync(blocking, self.gate)
        return await super().load(key, ctx)


async def test_session_store_blocked_in_a_thread_fails_the_run_by_its_deadline(gate: threading.Event) -> None:
    from agentium_harness import OperationTimeoutError

    limits = RuntimeLimits(op_timeout_s=0.3)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=BlockingStore(gate),
        limits=limits,
    )
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError) as info:
        await rt.run(ANA, "s1", "q")
    assert time.monotonic() - started < limits.op_timeout_s + SLACK_S
    assert info.value.abandoned and info.value.operation == "session load"
    assert "abandoned" in str(info.value)
    gate.set()
    await rt.aclose()


# -- memory selection ---------------------------------------------------------------------------


class SlowMemory(InMemoryMemoryStore):
    """A memory store whose lookup is slow: ``mode`` "sleep" awaits, "thread" blocks its worker thread."""

    def __init__(self, gate: threading.Event, mode: str) -> None:
        super().__init__()
        self.gate = gate
        self.mode = mode

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        if self.mode == "sleep":
            await anyio.sleep(BLOCK_S)
        else:
            await anyio.to_thread.run_sync(blocking, self.gate)
        return await super().lookup(scope, query, limit, ctx, at=at)


@pytest.mark.parametrize("mode", ["sleep", "thread"])
async def test_memory_selection_runs_under_the_runs_deadline(
    gate: threading.Event, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = SlowMemory(gate, mode)
    # The run's deadline (0.2 s) is what bounds the selection; the run's own store calls and its model
    # call are to succeed, so they get 30 s (the selection does not go through them).
    short_only_for(monkeypatch)
    limits = RuntimeLimits(op_timeout_s=0.2, model_timeout_s=ROOMY_S)
    provider = ScriptedProvider(replies=["ok"], cycle=True)
    requests = record_requests(provider)
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory,
        limits=limits,
    )
    started = time.monotonic()
    result = await rt.run(ANA, "s1", "when do I deploy?")
    elapsed = time.monotonic() - started
    assert elapsed < limits.op_timeout_s + SLACK_S, f"memory selection held the run {elapsed:.2f}s"
    assert result.committed and result.has("memory_failed")
    assert all(b.kind.value != "memory" for b in requests[0].sources)
    if mode == "thread":
        assert result.has("call_abandoned")
    gate.set()
    await rt.aclose()


# -- lifecycle hooks ----------------------------------------------------------------------------


class BlockingHooks:
    """A hook broadcaster (the plugin registry's shape) whose implementations block their thread."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.calls: list[str] = []

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        self.calls.append(hook)
        blocking(self.gate)
        return ()


async def test_hook_broadcasts_follow_the_configured_close_timeout(gate: threading.Event) -> None:
    hooks = BlockingHooks(gate)
    limits = RuntimeLimits(close_timeout_s=0.3, settle_timeout_s=0.3)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        hooks=hooks,
        limits=limits,
    )
    await rt.run(ANA, "s1", "q")
    started = time.monotonic()
    report = await rt.resources.close_session(ANA, "s1")
    elapsed = time.monotonic() - started
    # Before, a broadcast was waited for a fixed 5 s whatever the configuration said.
    assert elapsed < limits.close_timeout_s + SLACK_S, f"the hook held close_session {elapsed:.2f}s"
    assert hooks.calls == ["agentium_session_closed"]
    assert any(d.code == "hook_timeout" and "0.3s" in d.message for d in report.diagnostics)
    gate.set()
    await rt.aclose()


# -- the public thread-bound base ---------------------------------------------------------------


class Stuck(Exception):
    """What the stuck client would raise."""


class StuckBlobStore(ThreadBoundAdapter[threading.Event]):
    """A ThreadBoundAdapter whose client call ignores every interrupt (no call_guard can stop it)."""

    storage_error: ClassVar[type[AgentiumError]] = ArchiveError
    adapter_name: ClassVar[str] = "stuck blob store"
    backend_errors: ClassVar[tuple[type[BaseException], ...]] = (Stuck,)
    cancel_grace_s: ClassVar[float] = 0.3

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def open_connection(self) -> threading.Event:
        return self.gate

    async def get(self, ctx: OpContext) -> str:
        return await self.run(ctx, "get", lambda gate: (blocking(gate), "value")[1])


async def test_a_thread_bound_adapter_abandons_a_thread_that_will_not_stop(gate: threading.Event) -> None:
    store = StuckBlobStore(gate)
    started = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await store.get(OpContext())
    elapsed = time.monotonic() - started
    assert scope.cancelled_caught
    # It waited its grace for the thread to stop (SQLite rolls back then), and no longer.
    assert (
        0.2 + StuckBlobStore.cancel_grace_s - 0.05 < elapsed < 0.2 + StuckBlobStore.cancel_grace_s + SLACK_S
    )
    # The connection stays locked until the thread returns: the next call is refused at its deadline.
    with pytest.raises(OperationCancelledError):
        await store.get(OpContext.with_timeout(0.2))
    gate.set()
    assert await store.get(OpContext.with_timeout(ROOMY_S)) == "value"
    await store.aclose()


# -- shutdown with background work blocked in a thread ------------------------------------------


class BlockingSummarizer(ExtractiveSummarizer):
    """A summarizer over a blocking client: every summarize blocks its worker thread."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.started = anyio.Event()

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        self.started.set()
        await anyio.to_thread.run_sync(blocking, self.gate)
        return await super().summarize(previous, groups, ctx)


async def test_aclose_keeps_its_bound_with_a_summary_update_blocked_in_a_thread(
    gate: threading.Event,
) -> None:
    summarizer = BlockingSummarizer(gate)
    limits = RuntimeLimits(
        resident=ResidentLimits(max_groups=1), op_timeout_s=60, settle_timeout_s=0.3, close_timeout_s=0.3
    )
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=True, timeout_s=60),
        memory=InMemoryMemoryStore(),  # its drain covers the summary updates too
        limits=limits,
    )
    await rt.run(ANA, "s1", "q0")
    await rt.run(ANA, "s1", "q1")
    with anyio.fail_after(ROOMY_S):
        await summarizer.started.wait()
    started = time.monotonic()
    await rt.aclose()  # the update is cancelled and, blocked, abandoned: not a failure to close
    elapsed = time.monotonic() - started
    bound = limits.settle_timeout_s + 2 * limits.close_timeout_s
    assert elapsed < bound + SLACK_S, f"aclose() took {elapsed:.2f}s against its documented bound {bound}s"
    assert rt.state.value == "closed"
    gate.set()
