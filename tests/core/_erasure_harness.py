"""What the concurrent-erasure tests share: identities, a model held mid-turn, a turn raced (tests only).

Several runtimes over the same stores stand for several processes; a
:class:`HeldOnce` model keeps one turn open while another runtime erases.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, ModelRequest, ModelResponse, OpContext
from agentium_harness.testing.erasure_races import RecordingProvider

__all__ = [
    "ANA",
    "OPERATOR",
    "PENDING",
    "TARGET",
    "Recording",
    "EraseHook",
    "HeldOnce",
    "HookedArchive",
    "HookedSQLiteArchive",
    "OneItemSteps",
    "archive_groups",
    "closed_after",
    "completed_meanwhile",
    "gate_after",
    "five_turns",
    "history_texts",
    "only_erasure_complete",
    "hooked_runtimes",
    "sqlite_pairs",
    "stored_record",
    "tool_turn_while",
    "turn_while_held",
]

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
TARGET = EraseTarget.session("acme", "ana", "s1")
PENDING = SessionKey(ERASURE_RECORDS_TENANT, "acme", "pending")


#: The scripted model keeping the text of every request it is handed (history, turn, sources).
Recording = RecordingProvider


class HeldOnce(ScriptedProvider):
    """Answers ``noted``; the first call once ``armed`` waits for ``release`` after saying it started."""

    def __init__(self, *, armed: bool = False) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.armed = armed
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if self.armed and not self.started.is_set():
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


async def turn_while_held(
    slow: Any, provider: HeldOnce, session: str, text: str, meanwhile: Callable[[], Awaitable[Any]]
) -> BaseException | None:
    """``session``'s turn ``text`` (no tool) on ``slow``; ``meanwhile()`` runs while the model answers.

    Returns what the turn raised (``None``: it committed).
    """
    caught: list[BaseException] = []
    provider.armed = True

    async def turn() -> None:
        try:
            await slow.run(ANA, session, text)
        except Exception as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(30):
            await provider.started.wait()
        await meanwhile()
        provider.release.set()
    return caught[0] if caught else None


async def tool_turn_while(
    mine: Any, entered: anyio.Event, release: anyio.Event, meanwhile: Any, text: str = "deploy it"
) -> Any:
    """Ana's tool turn on s1 (``text``, deploy granted) until ``entered``; ``meanwhile()``; then ``release``.

    Returns the turn's outcome: its result, or the exception it raised.
    """
    outcome: list[Any] = []

    async def turn() -> None:
        try:
            outcome.append(await mine.run(ANA, "s1", text, grants=["deploy"]))
        except Exception as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(30):
            await entered.wait()
        await meanwhile()
        release.set()
    (result,) = outcome
    return result


async def five_turns(runtime: Any, session: str = "s1") -> None:
    """Five turns (``turn 0`` to ``turn 4``) in ``session``: what an erasure of it has to remove."""
    for i in range(5):
        await runtime.run(ANA, session, f"turn {i}")


def gate_after(module: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[anyio.Event, anyio.Event]:
    """The first call of ``module.name`` to return waits for ``release`` (after saying it ``entered``)."""
    entered, release = anyio.Event(), anyio.Event()
    real = getattr(module, name)

    async def gated(*args: Any, **kwargs: Any) -> Any:
        got = await real(*args, **kwargs)
        if not entered.is_set():
            entered.set()
            with anyio.fail_after(30):
                await release.wait()
        return got

    monkeypatch.setattr(module, name, gated)
    return entered, release


async def completed_meanwhile(
    call: Callable[[], Awaitable[Any]],
    entered: anyio.Event,
    release: anyio.Event,
    other: Any,
    *,
    before: Callable[[], Any] | None = None,
    meanwhile: Callable[[], Awaitable[Any]] | None = None,
) -> tuple[Any, Any]:
    """``call()`` runs until it sets ``entered``; ``other`` (a runtime) then completes its erasure.

    ``before()`` runs just before ``other`` resumes, ``meanwhile()`` just
    after; then ``release`` is set. Returns what ``call()`` returned (or
    raised) and ``other``'s resume result (a tombstone: checked here).
    """
    outcome: list[Any] = []

    async def run_first() -> None:
        try:
            outcome.append(await call())
        except Exception as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_first)
        with anyio.fail_after(30):
            await entered.wait()
        if before is not None:
            before()
        (done,) = await other.resume_erasures(OPERATOR)
        assert done.tombstone is not None
        if meanwhile is not None:
            await meanwhile()
        release.set()
    (result,) = outcome
    return result, done


async def history_texts(runtime: Any, session: str = "s1") -> list[str]:
    """Every message of ``session``'s canonical history (view or not), as read back."""
    page = await runtime.read_history(ANA, session, max_groups=100, view=False)
    return [m.content for g in page.groups for m in g.messages]


class EraseHook(Protocol):
    """What a hooked archive awaits before each erase call: it may wait, raise or change ``kwargs``."""

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None: ...


class HookedArchive(InMemoryArchive):
    """The shared in-memory archive: every erase call (dry run or not) awaits ``hook.before`` first."""

    def __init__(self, hook: EraseHook) -> None:
        super().__init__()
        self.hook = hook

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        await self.hook.before(target, kwargs)
        return await super().erase(target, ctx, **kwargs)


class HookedSQLiteArchive(SQLiteArchive):
    """The same on SQLite."""

    def __init__(self, config: SQLiteConfig, hook: EraseHook) -> None:
        super().__init__(config)
        self.hook = hook

    async def erase(self, target: EraseTarget, ctx: OpContext, **kwargs: Any) -> Any:
        await self.hook.before(target, kwargs)
        return await super().erase(target, ctx, **kwargs)


def hooked_runtimes(
    stores: str, tmp_path: Path, hook: EraseHook, count: int, limits: RuntimeLimits | None = None
) -> tuple[Any, Any, list[Any]]:
    """``count`` runtimes (processes) over one hooked archive and session store (``stores``: memory, sqlite).

    Returns the archive, the session store and the runtimes; each answers ``noted``.
    """
    if stores == "memory":
        archive: Any = HookedArchive(hook)
        sessions: Any = InMemorySessionStore()
    else:
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        archive, sessions = HookedSQLiteArchive(config, hook), SQLiteSessionStore(config)
    extra: dict[str, Any] = {} if limits is None else {"limits": limits}
    made = [
        create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            **extra,
        )
        for _ in range(count)
    ]
    return archive, sessions, made


class OneItemSteps:
    """Real erase calls remove one item each (the next raises ``fail_next``, if set); the ``hold``-th waits.

    The first inventory waits for ``inventory_release`` when ``hold_inventory``.
    """

    def __init__(self) -> None:
        self.hold_inventory = False
        self.fail_next: Exception | None = None
        self.calls = self.hold = 0
        self.held, self.release = anyio.Event(), anyio.Event()
        self.in_inventory, self.inventory_release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if kwargs.get("dry_run", False):
            if self.hold_inventory and kwargs.get("max_items", 0) > 1:  # an inventory, not a check
                self.hold_inventory = False
                self.in_inventory.set()
                with anyio.fail_after(30):
                    await self.inventory_release.wait()
            return
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        kwargs["max_items"] = 1
        self.calls += 1
        if self.calls == self.hold:
            self.held.set()
            with anyio.fail_after(30):
                await self.release.wait()


@asynccontextmanager
async def sqlite_pairs(tmp_path: Path, hook: EraseHook | None = None) -> AsyncIterator[list[tuple[Any, Any]]]:
    """Two (runtime, session store) pairs, each with adapters of its own, over one SQLite file; closed after.

    Each keeps one group resident; with ``hook``, their archives await it before each erase call.
    """
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    pairs = []
    for _ in range(2):
        sessions = SQLiteSessionStore(config)
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=SQLiteArchive(config) if hook is None else HookedSQLiteArchive(config, hook),
            session_store=sessions,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
        pairs.append((runtime, sessions))
    try:
        yield pairs
    finally:
        for runtime, _ in pairs:
            await runtime.aclose()


async def stored_record(sessions: Any, erasure_id: str) -> Any:
    """The erasure record (of tenant acme) ``sessions`` holds for ``erasure_id``; there must be one."""
    key = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"e-{erasure_id}")
    loaded = await sessions.load(key, OpContext())
    assert loaded is not None
    (record,) = loaded.snapshot.ledger.records
    return record


def archive_groups(record: Any) -> int:
    """How many groups ``record`` counts as erased from the archive."""
    entry = record.store("archive")
    return 0 if entry is None else sum(c.count for c in entry.counts if c.kind == "group")


@asynccontextmanager
async def closed_after(*runtimes: Any) -> AsyncIterator[None]:
    """Closes ``runtimes``, in order, on the way out (whatever the block raised)."""
    try:
        yield
    finally:
        for runtime in runtimes:
            await runtime.aclose()


async def only_erasure_complete(runtime: Any, done: Any) -> None:
    """``runtime`` sees one erasure, ``done``'s, and it is complete."""
    statuses = await runtime.erasure_status(OPERATOR)
    assert [(s.erasure_id, s.state) for s in statuses] == [(done.record.erasure_id, ErasureState.COMPLETE)]
