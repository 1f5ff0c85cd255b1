"""A host's own extraction is fenced from its turn's start: ``manager.erasure_reading`` (ErasureReading).

A host running its own agent loop reads history at its turn start, and after
the turn hands the turn's messages to ``manager.extract_in_background``. An
erasure covering them that began *and finished* in between (another process
on the same SQLite file, here a runtime on a thread and loop of its own while
the test's loop is held) was not seen: only erasures under way at the call
were, so the extractor (whose model may keep it) was handed erased text and
the facts derived from it written again. With the reading the host took as
its turn started, the extraction is skipped: nothing sent, nothing written.
So is one reading groups a forget (``erase_sources=True``) erased, which
even a call during the erasure did not see (a groups erasure takes no fact).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness import (
    AgentLifecycleError,
    EraseTarget,
    ErasureReading,
    ErasureState,
    GroupRef,
    HarnessRuntime,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import EraseReport, Message, OpContext
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
IDENTITY = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
SECRET = "my badge number is qz7731"
DIGEST = "sha256:" + "a" * 64
KEY = SessionKey("acme", "ana", "s1")
TARGETS = {
    "session": EraseTarget.session("acme", "ana", "s1"),
    "user": EraseTarget.user("acme", "ana"),
    "tenant": EraseTarget.tenant("acme"),
}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Recording:
    """An extractor that records what it was handed and proposes one fact of the scope it is given."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        self.handed.extend(m.content for m in messages)
        return [MemoryFact(scope, "badge on file")]


def _runtime(db: Path, memory: Any, **options: Any) -> HarnessRuntime:
    """A runtime on ``db`` (its own store objects: another process shares nothing in memory with it)."""
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=memory,
        owned=(archive, sessions),
        **options,
    )


def _host(db: Path, recorder: SpanRecorder | None = None) -> tuple[HarnessRuntime, MemoryManager, Recording]:
    """The host's runtime (its history store) and memory manager with an extractor (fenced by the runtime)."""
    extractor = Recording()
    telemetry = Telemetry(tracer_provider=recorder.provider) if recorder is not None else None
    manager = MemoryManager(
        SQLiteMemoryStore(SQLiteConfig(path=str(db))),
        extractor=extractor,
        owns_store=True,
        telemetry=telemetry,
    )
    runtime = _runtime(db, manager, limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    return runtime, manager, extractor


def _in_other_process(db: Path, call: Callable[[HarnessRuntime], Awaitable[Any]]) -> Any:
    """``call`` on another process's runtime, to completion, on a thread and loop of its own.

    The caller's loop is held meanwhile (``join``): nothing of the host's runs in between.
    """
    results: list[Any] = []

    async def other() -> None:
        async with _runtime_owning(db, SQLiteMemoryStore(SQLiteConfig(path=str(db)))) as runtime:
            results.append(await call(runtime))

    thread = threading.Thread(target=anyio.run, args=(other,))
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return results[0]


def _runtime_owning(db: Path, store: SQLiteMemoryStore) -> HarnessRuntime:
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=store,
        owned=(archive, sessions, store),
    )


def _erase(target: EraseTarget) -> Callable[[HarnessRuntime], Awaitable[ErasureState]]:
    async def erase(runtime: HarnessRuntime) -> ErasureState:
        return (await runtime.erase(target, reason="DSR", attestation=OPERATOR)).state

    return erase


async def _drained(manager: MemoryManager) -> Any:
    try:
        return await manager.drain(20)
    except MemoryDrainError as exc:
        return exc.result


TURN = [Message(Role.USER, SECRET), Message(Role.ASSISTANT, "noted")]


@pytest.mark.parametrize("target", sorted(TARGETS))
async def test_an_erasure_begun_and_finished_since_the_hosts_reading_skips_its_extraction(
    target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db, recorder = tmp_path / "agentium.db", SpanRecorder()
    runtime, manager, extractor = _host(db, recorder)
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])  # the host's turn starts
        assert _in_other_process(db, _erase(TARGETS[target])) is ErasureState.COMPLETE
        name = manager.extract_in_background(
            ANA, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)], reading=reading
        )
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            drained = await _drained(manager)
        assert extractor.handed == []  # the erased turn never reached the extractor's model
        [item] = drained.items
        assert item.name == name and item.status == "failed"
        assert "the extraction was skipped before its extractor call" in item.detail
        assert await manager.list(ANA) == ()  # nothing written
        await runtime.aclose()
        await manager.aclose()
    assert any("memory extraction skipped" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if SECRET in r.getMessage()]
    events = [(s.name, e.name, dict(e.attributes or {})) for s in recorder.finished for e in s.events]
    assert (
        "agentium.memory.extraction",
        "agentium.memory.extraction_skipped",
        {"agentium.memory.reason": "erasure"},
    ) in events
    assert not [text for text in recorder.carried() if SECRET in text]


async def test_without_a_reading_an_erasure_finished_before_the_call_is_not_seen(tmp_path: Path) -> None:
    """The gap a reading closes, as it stays for a host that takes none (docs/memory.md says so)."""
    runtime, manager, extractor = _host(tmp_path / "agentium.db")
    with anyio.fail_after(30):
        assert _in_other_process(tmp_path / "agentium.db", _erase(TARGETS["user"])) is ErasureState.COMPLETE
        manager.extract_in_background(ANA, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)])
        assert (await manager.drain(20)).ok
        assert extractor.handed == [SECRET, "noted"]
        await runtime.aclose()
        await manager.aclose()


async def test_an_erasure_of_another_user_or_session_since_the_reading_skips_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    runtime, manager, extractor = _host(db)
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1", "s2"])
        assert _in_other_process(db, _erase(EraseTarget.user("acme", "bob"))) is ErasureState.COMPLETE
        assert (
            _in_other_process(db, _erase(EraseTarget.session("acme", "ana", "s2"))) is ErasureState.COMPLETE
        )
        manager.extract_in_background(
            ANA, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)], reading=reading
        )
        assert (await manager.drain(20)).ok
        assert extractor.handed == [SECRET, "noted"]
        assert [f.text for f in await manager.list(ANA)] == ["badge on file"]
        await runtime.aclose()
        await manager.aclose()


class _HeldErase(SQLiteMemoryStore):
    """A memory store whose erase waits for the test: the erasure stays under way meanwhile."""

    entered: anyio.Event
    gate: anyio.Event

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.entered.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


async def test_an_erasure_under_way_at_the_reading_and_finished_before_the_call_skips_it(
    tmp_path: Path,
) -> None:
    """Under way as the turn starts, complete by the call: its join record is older than the reading."""
    db = tmp_path / "agentium.db"
    held = _HeldErase(SQLiteConfig(path=str(db)))
    held.entered, held.gate = anyio.Event(), anyio.Event()
    runtime, manager, extractor = _host(db)
    with anyio.fail_after(30):
        async with _runtime_owning(db, held) as eraser:
            states: list[ErasureState] = []

            async def erase() -> None:
                states.append(await _erase(TARGETS["session"])(eraser))

            async with anyio.create_task_group() as tg:
                tg.start_soon(erase)
                await held.entered.wait()  # recorded, pending
                reading = await manager.erasure_reading(ANA, sessions=["s1"])
                held.gate.set()
            assert states == [ErasureState.COMPLETE]
        manager.extract_in_background(
            ANA, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)], reading=reading
        )
        with pytest.raises(MemoryDrainError):
            await manager.drain(20)
        assert extractor.handed == []
        assert await manager.list(ANA) == ()
        await runtime.aclose()
        await manager.aclose()


async def _archived_fact(db: Path, runtime: HarnessRuntime, manager: MemoryManager) -> tuple[str, list[Any]]:
    """Three turns of ``s1`` (groups 0 and 1 archived) and a fact citing group 0: its id and the groups."""
    await runtime.run(IDENTITY, "s1", "My vault code is 4471. Remember the vault code.")
    await runtime.run(IDENTITY, "s1", "The weather is fine today.")
    await runtime.run(IDENTITY, "s1", "Tell me about the weather again.")
    archive = SQLiteArchive(SQLiteConfig(path=str(db)))
    groups = list(await archive.read_groups(KEY, 0, 2, OpContext()))
    await archive.aclose()
    ack = await manager.remember(
        MemoryFact(ANA, "ana's vault code is 4471", provenance=[GroupRef("s1", 0, groups[0].digest)])
    )
    assert ack.fact_id is not None
    return ack.fact_id, groups


async def test_groups_a_forget_erased_since_the_reading_skip_the_extraction_reading_them(
    tmp_path: Path,
) -> None:
    """``forget(erase_sources=True)`` in another process erases group 0 between the reading and the call.

    A groups erasure takes no fact (its fact is forgotten by the forget), so
    the extraction's write fence never saw it: the host's extraction of group
    0 handed the extractor the forgotten text and wrote the fact again.
    Group 1, not erased, is extracted with the same reading.
    """
    db = tmp_path / "agentium.db"
    runtime, manager, extractor = _host(db)
    with anyio.fail_after(30):
        fact_id, groups = await _archived_fact(db, runtime, manager)
        reading = await manager.erasure_reading(ANA, sessions=["s1"])  # the host's turn starts

        async def forget(other: HarnessRuntime) -> Any:
            return await other.forget(ANA, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)

        assert [e.record.state for e in (_in_other_process(db, forget)).erasures] == [ErasureState.COMPLETE]
        erased, kept = groups
        manager.extract_in_background(
            ANA, erased.messages, "group 0", sources=[GroupRef("s1", 0, erased.digest)], reading=reading
        )
        with pytest.raises(MemoryDrainError) as raised:
            await manager.drain(20)
        assert "groups 0..0 of session 's1'" in raised.value.result.items[0].detail
        assert extractor.handed == []
        assert [f.text for f in await manager.list(ANA)] == []
        manager.extract_in_background(
            ANA, kept.messages, "group 1", sources=[GroupRef("s1", 1, kept.digest)], reading=reading
        )
        assert (await manager.drain(20)).ok
        assert extractor.handed == [m.content for m in kept.messages]
        await runtime.aclose()
        await manager.aclose()


async def test_a_reading_of_no_fence_is_judged_through_a_fence_gained_since(tmp_path: Path) -> None:
    """No session store fenced the manager at the reading; a runtime given it since reads the erasure.

    Nothing to compare a ledger revision with: the finished erasure counts by the clocks, as a
    write's fence gained after its first read judges one (``ErasureFence.covering_after``).
    """
    db = tmp_path / "agentium.db"
    extractor = Recording()
    manager = MemoryManager(
        SQLiteMemoryStore(SQLiteConfig(path=str(db))), extractor=extractor, owns_store=True
    )
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])  # no fence: nothing read
        runtime = _runtime(db, manager)
        assert _in_other_process(db, _erase(TARGETS["user"])) is ErasureState.COMPLETE
        manager.extract_in_background(
            ANA, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)], reading=reading
        )
        with pytest.raises(MemoryDrainError):
            await manager.drain(20)
        assert extractor.handed == []
        await runtime.aclose()
        await manager.aclose()


class _HeldArchive(SQLiteArchive):
    """An archive whose erase waits for the test: the groups erasure stays under way meanwhile."""

    entered: anyio.Event
    gate: anyio.Event

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.entered.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


async def test_without_a_reading_groups_being_erased_at_the_call_skip_the_extraction_reading_them(
    tmp_path: Path,
) -> None:
    """A forget's groups erasure under way at the call (a groups target takes no fact: it went unseen)."""
    db = tmp_path / "agentium.db"
    runtime, manager, extractor = _host(db)
    config = SQLiteConfig(path=str(db))
    held = _HeldArchive(config)
    held.entered, held.gate = anyio.Event(), anyio.Event()
    store, sessions = SQLiteMemoryStore(config), SQLiteSessionStore(config)
    with anyio.fail_after(30):
        fact_id, (erased, kept) = await _archived_fact(db, runtime, manager)
        eraser = create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=held,
            session_store=sessions,
            memory=store,
            owned=(held, sessions, store),
        )
        async with eraser:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: eraser.forget(
                        ANA, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR
                    )
                )
                await held.entered.wait()  # recorded, pending
                manager.extract_in_background(
                    ANA, erased.messages, "group 0", sources=[GroupRef("s1", 0, erased.digest)]
                )
                with pytest.raises(MemoryDrainError):
                    await manager.drain(20)
                manager.extract_in_background(
                    ANA, kept.messages, "group 1", sources=[GroupRef("s1", 1, kept.digest)]
                )
                assert (await manager.drain(20)).ok
                held.gate.set()
        assert extractor.handed == [m.content for m in kept.messages]
        await runtime.aclose()
        await manager.aclose()


class _ForgettingMeanwhile:
    """An extractor during whose call another process forgets ``fact_id`` with its sources, to completion.

    Then it proposes the forgotten fact again, derived from the text (of group 0) it was handed.
    """

    def __init__(self, db: Path, fact_id: str) -> None:
        self.db, self.fact_id, self.handed, self.forgot = db, fact_id, list[str](), 0

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        self.handed.extend(m.content for m in messages)
        if not self.forgot:

            async def forget(other: HarnessRuntime) -> Any:
                return await other.forget(
                    ANA, self.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR
                )

            forgotten = _in_other_process(self.db, forget)
            assert [e.record.state for e in forgotten.erasures] == [ErasureState.COMPLETE]
            self.forgot += 1
        return [MemoryFact(scope, "ana's vault code is 4471")]


@pytest.mark.parametrize("with_reading", [True, False])
async def test_groups_erased_during_the_extractor_call_take_back_the_facts_derived_from_them(
    with_reading: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A forget (``erase_sources=True``) of the fact and group 0 finishes while the extractor runs.

    A groups erasure takes no fact, so the write fence let the re-derived fact
    stand: the forgotten fact was back, citing the erased group. Now the
    extraction's facts are checked again after its writes and forgotten.
    The same extraction of group 1 afterwards keeps its fact.
    """
    db = tmp_path / "agentium.db"
    runtime, manager, _ = _host(db)
    with anyio.fail_after(30):
        fact_id, (erased, kept) = await _archived_fact(db, runtime, manager)
        reading = await manager.erasure_reading(ANA, sessions=["s1"]) if with_reading else None
        extractor = _ForgettingMeanwhile(db, fact_id)
        manager.extractor = extractor
        manager.extract_in_background(
            ANA, erased.messages, "group 0", sources=[GroupRef("s1", 0, erased.digest)], reading=reading
        )
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            drained = await _drained(manager)
        [item] = drained.items
        assert item.status == "failed" and "ErasureInProgressError" in item.detail
        assert "groups 0..0 of session 's1'" in item.detail
        assert "the 1 fact(s) it wrote meanwhile were forgotten: none was kept" in item.detail
        assert await manager.list(ANA) == ()  # the forgotten fact did not come back
        assert any("memory extraction taken back" in r.getMessage() for r in caplog.records)
        assert not [r for r in caplog.records if "4471" in r.getMessage()]
        manager.extract_in_background(
            ANA, kept.messages, "group 1", sources=[GroupRef("s1", 1, kept.digest)], reading=reading
        )
        assert (await manager.drain(20)).ok
        assert [f.text for f in await manager.list(ANA)] == ["ana's vault code is 4471"]
        await runtime.aclose()
        await manager.aclose()


class _SecondWriteHeld(SQLiteMemoryStore):
    """A memory store whose second remember waits until cancelled: a drain cuts the writes short."""

    writes = 0
    held: anyio.Event

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
        self.writes += 1
        if self.writes == 2:
            self.held.set()
            await anyio.sleep_forever()
        return await super().remember(fact, ctx)


class _TwoFactsForgettingMeanwhile(_ForgettingMeanwhile):
    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        first = await super().extract(scope, messages, ctx)
        return [*first, MemoryFact(scope, "ana keeps the vault code in her diary")]


async def test_groups_erased_during_the_extractor_call_take_back_its_facts_when_a_drain_cuts_its_writes_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first fact stored, the drain's deadline cancels the second write: the first is still taken back.

    Said in a WARNING and the span event of a taken-back extraction (no ids, no content).
    """
    db, recorder = tmp_path / "agentium.db", SpanRecorder()
    store = _SecondWriteHeld(SQLiteConfig(path=str(db)))
    manager = MemoryManager(store, owns_store=True, telemetry=Telemetry(tracer_provider=recorder.provider))
    runtime = _runtime(db, manager, limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    with anyio.fail_after(30):
        fact_id, (erased, _) = await _archived_fact(db, runtime, manager)
        store.writes, store.held = 0, anyio.Event()
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        manager.extractor = _TwoFactsForgettingMeanwhile(db, fact_id)
        manager.extract_in_background(
            ANA, erased.messages, "group 0", sources=[GroupRef("s1", 0, erased.digest)], reading=reading
        )
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            await store.held.wait()  # the first fact stored; the drain then cancels the second write
            drained = await _drained_within(manager, 0.1)
        [item] = drained.items
        assert item.status == "cancelled"
        assert store.writes == 2  # the first fact was stored, the second write cut short
        assert await manager.list(ANA) == ()  # the first did not stay, citing the erased group
        assert any("taken back after its writes were cancelled" in r.getMessage() for r in caplog.records)
        await runtime.aclose()
        await manager.aclose()
    events = [(s.name, e.name, dict(e.attributes or {})) for s in recorder.finished for e in s.events]
    assert (
        events.count(
            (
                "agentium.memory.extraction",
                "agentium.memory.extraction_skipped",
                {"agentium.memory.reason": "erasure"},
            )
        )
        == 1
    )
    assert not [text for text in recorder.carried() if "4471" in text]
    extraction = [s for s in recorder.finished if s.name == "agentium.memory.extraction"]
    assert not [e for s in extraction for e in s.events if fact_id in str(dict(e.attributes or {}))]


async def _drained_within(manager: MemoryManager, timeout_s: float) -> Any:
    try:
        return await manager.drain(timeout_s, grace_s=0.5)
    except MemoryDrainError as exc:
        return exc.result


# ----------------------------------------------------------------------------- bad input


async def test_a_reading_the_manager_did_not_take_for_this_extraction_is_refused_and_nothing_starts(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agentium.db"
    runtime, manager, extractor = _host(db)
    other = MemoryManager(
        SQLiteMemoryStore(SQLiteConfig(path=str(db))), extractor=Recording(), owns_store=True
    )
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        globex = await manager.erasure_reading(MemoryScope("globex", "ana"), sessions=["s1"])
        bob = await manager.erasure_reading(MemoryScope("acme", "bob"), sessions=["s1"])
        others = await other.erasure_reading(ANA, sessions=["s1"])
        forged: list[object] = [
            others,  # another manager's
            globex,  # another tenant's
            bob,  # another user's
            copy.copy(reading),  # copied by hand
            attrs.evolve(reading, sessions=("s1", "s9")),
            ErasureReading(ANA, ("s1",), (), (), datetime.now(UTC)),  # made by hand
            "reading",
            ("s1",),
        ]
        for bad in forged:
            with pytest.raises(InvalidArgumentError, match="nothing was started"):
                manager.extract_in_background(
                    ANA,
                    TURN,
                    "host turn",
                    sources=[GroupRef("s1", 0, DIGEST)],
                    reading=bad,  # type: ignore[arg-type]
                )
        # Sources naming a session the reading was not taken for.
        with pytest.raises(InvalidArgumentError, match="nothing was started"):
            manager.extract_in_background(
                ANA, TURN, "host turn", sources=[GroupRef("s2", 0, DIGEST)], reading=reading
            )
        assert manager.running() == ()
        assert (await manager.drain(20)).items == ()
        assert extractor.handed == [] and await manager.list(ANA) == ()
        await other.aclose()
        await runtime.aclose()
        await manager.aclose()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scope", MemoryScope("acme", "bob")),
        ("sessions", ("s1", "s2")),
        ("_pending", ("a record dropped or added",)),
        ("_checks", ()),
        ("_at", datetime(2999, 1, 1, tzinfo=UTC)),
    ],
)
async def test_a_reading_altered_after_it_was_taken_is_refused_and_nothing_starts(
    field: str, value: object, tmp_path: Path
) -> None:
    """Frozen is no seal: ``object.__setattr__`` rewrites a slot. What the manager took is what it accepts.

    Rewritten to bob's scope (or more sessions), ana's reading passed for bob's extraction, its
    erasures under way at the reading (kept for ana's turn only) never judged for bob's.
    """
    runtime, manager, extractor = _host(tmp_path / "agentium.db")
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1"])
        object.__setattr__(reading, field, value)
        scope = value if isinstance(value, MemoryScope) else ANA
        with pytest.raises(
            InvalidArgumentError,
            match=r"altered after it was taken \(a field rewritten\); nothing was started",
        ):
            manager.extract_in_background(
                scope, TURN, "host turn", sources=[GroupRef("s1", 0, DIGEST)], reading=reading
            )
        assert manager.running() == ()
        assert extractor.handed == [] and await manager.list(ANA) == ()
        await runtime.aclose()
        await manager.aclose()


@pytest.mark.parametrize("sessions", ["s1", [], [f"s{i}" for i in range(33)], [""], [5], None])
async def test_a_reading_of_bad_sessions_is_refused(sessions: Any, tmp_path: Path) -> None:
    runtime, manager, _ = _host(tmp_path / "agentium.db")
    with anyio.fail_after(30):
        with pytest.raises(InvalidArgumentError):
            await manager.erasure_reading(ANA, sessions=sessions)
        with pytest.raises(InvalidArgumentError):
            await manager.erasure_reading("acme/ana", sessions=["s1"])  # type: ignore[arg-type]
        await runtime.aclose()
        await manager.aclose()
        with pytest.raises(AgentLifecycleError):
            await manager.erasure_reading(ANA, sessions=["s1"])


async def test_a_reading_holds_no_content_and_says_whose_it_is(tmp_path: Path) -> None:
    runtime, manager, _ = _host(tmp_path / "agentium.db")
    with anyio.fail_after(30):
        reading = await manager.erasure_reading(ANA, sessions=["s1", "s1", "s2"])
        assert reading.sessions == ("s1", "s2")
        assert repr(reading) == "ErasureReading(tenant='acme', user='ana', sessions=('s1', 's2'))"
        await runtime.aclose()
        await manager.aclose()
