"""Tests of a turn racing an erasure: a model held mid-turn, erasure-index reads counted.

Nothing here imports pytest. Two runtimes over one store stand for two
processes: one runs a turn whose model call is held (:class:`HeldProvider`)
while the other erases, then the turn is let go and its commit fence has
its say. A store class wrapped by :func:`counting_index_loads` counts the
loads of the erasure index's chains (heads and pages) the fence makes, so
a test can show their number does not grow with the erasures before it:

.. code-block:: python

    def build(provider):
        archive, store = SQLiteArchive(config), counting_index_loads(SQLiteSessionStore)(config)
        runtime = create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store)
        )
        return runtime, store

    loads, error = await first_turn_during_erasure(build, identity, "s1", target, attestation)

:func:`fact_forgotten_mid_run` does the same for a memory fact another
process forgets while a run carries it, over a backend's memory store, and
:func:`document_deleted_mid_run` for a host document another process
deletes while a run carries its excerpt, over a backend's recall store.
A turn can also be held in a tool (:class:`HeldTool`, :func:`tool_turn_while`)
while :class:`RecordingProvider` keeps the text of every request, so a test can
show what the model was (or was not) sent after an erasure. A backend's tests
run :func:`resident_history_erased_mid_run` over their own server with a
:class:`RuntimeBuilder` that makes a runtime over it:

.. code-block:: python

    def build(provider, **options):
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
        return create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store), **options
        )

    await resident_history_erased_mid_run(build, stops=True)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import anyio

from .._engine.erasure import OperatorAttestation
from .._engine.limits import ResidentLimits, RuntimeLimits
from .._engine.results import CommitState
from .._engine.retention import RetentionPolicy
from .._engine.runtime import HarnessRuntime
from .._engine.tools import EffectLevel, Tool, ToolRegistry
from .._errors_run import DocumentDeletedDuringRunError, ErasedDuringRunError, FactForgottenDuringRunError
from .._ports import OpContext
from .._ports.erasure_target import EraseTarget
from .._ports.memory import MemoryFact, MemoryScope, MemoryStore
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse
from .._ports.recall import RecallStore
from .._ports.recall_sources import SourceOwner
from .._ports.sessions import SessionStore
from .._scope import ERASURE_RECORDS_TENANT, SessionKey, VerifiedIdentity
from ..adapters.providers import ScriptedProvider

__all__ = [
    "CountsIndexLoads",
    "HeldProvider",
    "HeldTool",
    "RecordingProvider",
    "RuntimeBuilder",
    "counting_index_loads",
    "document_deleted_mid_run",
    "fact_forgotten_mid_run",
    "first_turn_during_erasure",
    "resident_history_erased_mid_run",
    "tool_turn_while",
]

#: How long a helper here waits for the held call to start before the test fails.
_WAIT_S = 30.0


class HeldProvider(ScriptedProvider):
    """Answers ``replies`` at once, except the armed call, which waits for ``release`` once ``started``.

    Set ``armed`` before the turn; the next call sets ``started`` and waits
    until the test sets ``release``. Later calls answer at once again.
    """

    def __init__(self, replies: tuple[str, ...] = ("noted",)) -> None:
        super().__init__(replies=list(replies), cycle=True)
        self.armed = False
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """The scripted answer; the armed call first says it started and waits for ``release``."""
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


class RecordingProvider(ScriptedProvider):
    """Answers ``replies`` in order, keeping in ``sent`` the text of each request: history, turn, sources.

    Each entry joins, one a line, the contents of the request's history and
    turn messages and the rendered source blocks (recalled excerpts, a
    summary), so a test can ask whether a text reached the model.
    """

    def __init__(self, replies: Sequence[object]) -> None:
        super().__init__(replies=replies)
        self.sent: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """The scripted answer, after the request's text is added to ``sent``."""
        parts = [m.content for m in (*request.history, *request.turn)]
        parts += [b.render() for b in request.sources]
        self.sent.append("\n".join(parts))
        return await super().complete(request, ctx)


class HeldTool:
    """A write tool, ``name``, whose call says ``entered`` and then waits (30 s at most) for ``release``.

    Give a runtime ``tools=held.registry()``; the turn stays in the tool
    round until the test sets ``release``, and the call then returns ``result``.
    """

    def __init__(self, name: str = "deploy", result: str = "deployed") -> None:
        self.name, self.result = name, result
        self.entered, self.release = anyio.Event(), anyio.Event()

    def registry(self) -> ToolRegistry:
        """A registry holding this tool only (effect level ``WRITE``)."""
        return ToolRegistry([Tool(self.name, self._call, EffectLevel.WRITE)])

    async def _call(self, args: Mapping[str, Any]) -> str:
        self.entered.set()
        with anyio.fail_after(_WAIT_S):
            await self.release.wait()
        return self.result


async def tool_turn_while(
    runtime: HarnessRuntime,
    identity: VerifiedIdentity,
    session: str,
    text: str,
    held: HeldTool,
    meanwhile: Callable[[], Awaitable[object]],
) -> Any:
    """``session``'s turn ``text`` (``held``'s tool granted) waits in the tool while ``meanwhile()`` runs.

    ``meanwhile()`` runs while the turn waits in the tool (it may raise: the
    test fails); ``held.release`` is then set. Returns the turn's outcome:
    its result, or the exception it raised.
    """
    outcome: list[Any] = []

    async def turn() -> None:
        try:
            outcome.append(await runtime.run(identity, session, text, grants=[held.name]))
        except Exception as exc:  # handed to the test
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(_WAIT_S):
            await held.entered.wait()
        await meanwhile()
        held.release.set()
    (result,) = outcome
    return result


class RuntimeBuilder(Protocol):
    """Makes a runtime (one process) over the stores under test, with adapters of its own that it owns.

    ``options`` are :func:`~agentium_harness.create_harness_runtime`'s
    (``tools``, ``limits``, ``retention``), passed on as given.
    """

    def __call__(self, provider: ModelProvider, **options: Any) -> HarnessRuntime:
        """A new runtime answering with ``provider``, built with ``options``."""
        ...


async def resident_history_erased_mid_run(build: RuntimeBuilder, *, stops: bool) -> None:
    """A run's resident history another process archived and retention then erased: no next model call.

    Two runtimes made by ``build`` stand for two processes. Ana's run (two
    groups resident) waits in a tool round while the other process's two
    turns archive the run's resident groups, one stating a secret, and
    retention then erases archived groups. With ``stops``, retention keeps one
    archived group: the secret's goes, and the run must stop before its next
    call (:class:`~agentium_harness.ErasedDuringRunError`, nothing
    committed). Otherwise it keeps three (only the oldest group goes) and the
    run must go on. Raises ``AssertionError`` when the runtime does otherwise;
    both runtimes are closed.
    """
    identity = VerifiedIdentity("acme", "ana", "test-auth")
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
    deploy = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}
    provider, held = RecordingProvider(["ok"] * 4 + [deploy, "Deployed."]), HeldTool()
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=2))
    mine = build(provider, tools=held.registry(), limits=limits)
    other = build(
        ScriptedProvider(replies=["ok"], cycle=True),
        limits=limits,
        retention=RetentionPolicy(max_archived_groups=1 if stops else 3),
    )
    try:
        for i in range(4):
            await mine.run(
                identity, "s1", "Remember this: the vault code is qzvaultq." if i == 2 else f"Chatter {i}."
            )

        async def evict_and_trim() -> None:
            # Two turns of another process archive groups 2 and 3 (the run's resident history);
            # retention then keeps one archived group (groups 0 to 2 go) or three (group 0 goes).
            await other.run(identity, "s1", "Chatter four.")
            await other.run(identity, "s1", "Chatter five.")
            result = await other.apply_retention(operator, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        got = await tool_turn_while(mine, identity, "s1", "Deploy it.", held, evict_and_trim)
        assert "qzvaultq" in provider.sent[4], "the premise: the call asking for the tool had the secret"
        if stops:
            assert isinstance(got, ErasedDuringRunError), repr(got)
            assert got.commit_state is CommitState.NOT_COMMITTED, got.commit_state
            assert len(provider.sent) == 5, provider.sent[5:]
        else:
            assert not isinstance(got, ErasedDuringRunError), repr(got)
            assert len(provider.sent) == 6, provider.sent[4:]
    finally:
        await mine.aclose()
        await other.aclose()


async def fact_forgotten_mid_run(
    build: RuntimeBuilder, memory: Callable[[], MemoryStore], *, forgets: bool
) -> None:
    """A memory fact a run's request carries, forgotten by another process between two model calls.

    Two runtimes made by ``build`` stand for two processes, each given a
    memory store of its own made by ``memory`` (over the same backend). The
    other process remembers a fact of Ana's that her run injects, and, while
    the run waits in a tool round, forgets it (``forgets``) — the run must
    stop before its next call
    (:class:`~agentium_harness.FactForgottenDuringRunError`, nothing
    committed) — or forgets another user's fact: the run must go on, sending
    Ana's fact again. Raises ``AssertionError`` when the runtime does
    otherwise; both runtimes and both memory stores are closed.
    """
    identity = VerifiedIdentity("acme", "ana", "test-auth")
    ana, bob = MemoryScope("acme", "ana"), MemoryScope("acme", "bob")
    deploy = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}
    provider, held = RecordingProvider(["noted", deploy, "Deployed."]), HeldTool()
    stores = (memory(), memory())
    mine = build(provider, tools=held.registry(), memory=stores[0])
    other = build(ScriptedProvider(replies=["ok"], cycle=True), memory=stores[1])
    try:
        await mine.run(identity, "s1", "hello")
        assert other.memory is not None, "build must pass memory= on to the runtime"
        fact = await other.memory.remember(MemoryFact(ana, "the vault code is qzfactq"))
        bobs = await other.memory.remember(MemoryFact(bob, "bob likes green tea"))
        assert fact.fact_id is not None and bobs.fact_id is not None, (fact, bobs)
        scope, fact_id = (ana, fact.fact_id) if forgets else (bob, bobs.fact_id)

        async def forget() -> None:
            assert other.memory is not None
            await other.memory.forget(scope, fact_id)

        got = await tool_turn_while(mine, identity, "s1", "Deploy it.", held, forget)
        assert "qzfactq" in provider.sent[1], "the premise: the call asking for the tool had the fact"
        if forgets:
            assert isinstance(got, FactForgottenDuringRunError), repr(got)
            assert got.commit_state is CommitState.NOT_COMMITTED, got.commit_state
            assert got.fact_id == fact_id, got.fact_id
            assert len(provider.sent) == 2, provider.sent[2:]
        else:
            assert not isinstance(got, Exception), repr(got)
            assert len(provider.sent) == 3 and "qzfactq" in provider.sent[2], provider.sent[2:]
    finally:
        await mine.aclose()
        await other.aclose()
        for store in stores:
            await store.aclose()


async def document_deleted_mid_run(
    build: RuntimeBuilder, recall: Callable[[], RecallStore], *, deletes: bool
) -> None:
    """A host document whose excerpt a run's request carries, deleted by another process between calls.

    Two runtimes made by ``build`` stand for two processes, each given a
    recall store of its own made by ``recall`` (over the same backend). The
    other process indexes a tenant-wide document Ana's run recalls, and,
    while the run waits in a tool round, deletes it (``deletes``) — the run
    must stop before its next call
    (:class:`~agentium_harness.DocumentDeletedDuringRunError`, nothing
    committed) — or deletes another user's document: the run must go on,
    sending the excerpt again. Raises ``AssertionError`` when the runtime
    does otherwise; both runtimes and both recall stores are closed.
    """
    identity = VerifiedIdentity("acme", "ana", "test-auth")
    tenant, bob = SourceOwner("acme"), SourceOwner("acme", "bob")
    deploy = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}
    provider, held = RecordingProvider([deploy, "Deployed."]), HeldTool()
    stores = (recall(), recall())
    mine = build(provider, tools=held.registry(), recall=stores[0])
    other = build(ScriptedProvider(replies=["ok"], cycle=True), recall=stores[1])
    try:
        await other.index_document(tenant, "oncall", "The on-call rota qzrotaq changes every Monday.")
        await other.index_document(bob, "garden", "Bob's garden notes: tulips in April.")
        owner, doc_id = (tenant, "oncall") if deletes else (bob, "garden")

        async def delete() -> None:
            assert await other.delete_document(owner, doc_id) is True

        question = "When does the on-call rota change? Deploy it."
        got = await tool_turn_while(mine, identity, "s1", question, held, delete)
        assert "qzrotaq" in provider.sent[0], "the premise: the call asking for the tool had the excerpt"
        if deletes:
            assert isinstance(got, DocumentDeletedDuringRunError), repr(got)
            assert got.commit_state is CommitState.NOT_COMMITTED, got.commit_state
            assert len(provider.sent) == 1, provider.sent[1:]
        else:
            assert not isinstance(got, Exception), repr(got)
            assert len(provider.sent) == 2 and "qzrotaq" in provider.sent[1], provider.sent[1:]
    finally:
        await mine.aclose()
        await other.aclose()
        for store in stores:
            await store.aclose()


class CountsIndexLoads(Protocol):
    """A store made by :func:`counting_index_loads`: its ``index_loads`` so far (a test may reset it)."""

    index_loads: int


StoreT = TypeVar("StoreT", bound=SessionStore)


def counting_index_loads(store_class: type[StoreT]) -> type[StoreT]:
    """A subclass of ``store_class`` counting in ``index_loads`` each load of an erasure-index chain."""

    class Counting(store_class):  # type: ignore[valid-type,misc]
        index_loads = 0

        async def load(self, key: SessionKey, ctx: OpContext) -> Any:
            if key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith(("by-", "index")):
                self.index_loads += 1
            return await super().load(key, ctx)

    Counting.__name__ = Counting.__qualname__ = f"Counting{store_class.__name__}"
    return Counting


async def first_turn_during_erasure(
    build: Callable[[ModelProvider], tuple[Any, CountsIndexLoads]],
    identity: VerifiedIdentity,
    session: str,
    during: EraseTarget,
    attestation: OperatorAttestation,
) -> tuple[int, BaseException | None]:
    """``session``'s turn, held at its model call while another runtime erases ``during``.

    ``build(provider)`` makes a runtime over the store under test and its
    counting store (:func:`counting_index_loads`). Returns the index loads
    from the erasure's end to the turn's end (its commit fence's) and what
    the turn raised (``None`` if it committed). Both runtimes are closed.
    """
    provider = HeldProvider()
    slow, store = build(provider)
    other, _ = build(ScriptedProvider(replies=["ok"], cycle=True))
    caught: list[BaseException] = []

    async def turn() -> None:
        try:
            await slow.run(identity, session, "a new session's first turn")
        except Exception as exc:  # handed to the test
            caught.append(exc)

    try:
        provider.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(_WAIT_S):
                await provider.started.wait()
            await other.erase(during, reason="dsr", attestation=attestation)  # the ledger moves
            store.index_loads = 0
            provider.release.set()
        return store.index_loads, (caught[0] if caught else None)
    finally:
        await slow.aclose()
        await other.aclose()
