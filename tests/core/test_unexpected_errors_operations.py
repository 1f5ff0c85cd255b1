"""The runtime's other writing operations, when a stage of their own raises a plain exception (an engine bug).

As for ``run()`` and the history writes (test_unexpected_errors.py): migrate,
reconcile, close_session, erase, resume_erasures, apply_retention and
forget, and the memory manager's remember, correct and forget, raise an
``AgentiumError`` caused by the exception, whose ``commit_state`` matches
what the stores hold when read back, and log one WARNING without its text.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentium_harness import (
    AgentiumError,
    CleanupStatus,
    CommitState,
    EraseTarget,
    ErasureState,
    FactStatus,
    MemoryFact,
    MemoryScope,
    Message,
    MessageGroup,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    Role,
    RuntimeLimits,
    SessionKey,
    SessionState,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import commit as commit_module
from agentium_harness._engine import erasure, erasure_api, forget, maintenance, retention
from agentium_harness._engine.memory import manager, writes
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionSnapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")
KEY = SessionKey("acme", "ana", "s1")
SCOPE = MemoryScope("acme", "ana")
#: In the injected exception's text: it may be content, so no log record may carry it.
SECRET = "the secret plan"
CTX = OpContext()


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"engine bug near {SECRET}")


def _then_boom(real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``real`` runs (its write lands), then the engine fails."""

    async def landed_then_bug(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)
        raise RuntimeError(f"engine bug near {SECRET}")

    return landed_then_bug


def _runtime(max_groups: int = 1, **kw: Any) -> Any:
    kw.setdefault("archive", InMemoryArchive())
    kw.setdefault("session_store", InMemorySessionStore())
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups)),
        **kw,
    )


async def _fails(
    call: Callable[[], Awaitable[Any]], operation: str, caplog: pytest.LogCaptureFixture
) -> AgentiumError:
    """``call()`` raises the typed error of an unexpected RuntimeError, logged once without its text."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(AgentiumError) as caught:
        await call()
    error = caught.value
    assert isinstance(error.__cause__, RuntimeError) and SECRET in str(error.__cause__)
    assert f"{operation} failed with an unexpected error" in str(error)
    warned = [
        r for r in caplog.records if f"{operation} failed with an unexpected RuntimeError" in r.getMessage()
    ]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert warned[0].agentium_commit_state == error.commit_state.value  # type: ignore[attr-defined,union-attr]
    for record in caplog.records:
        assert SECRET not in record.getMessage() + repr(vars(record))
    return error


# -- maintenance -----------------------------------------------------------------------------


async def _legacy(store: InMemorySessionStore) -> None:
    group = MessageGroup(0, (Message(Role.USER, "legacy q"), Message(Role.ASSISTANT, "legacy a")))
    legacy = SessionSnapshot(memory_scope=None, boundary=0, next_seq=1, resident=(group,), format_version=1)
    await store.save(KEY, legacy, None, CTX)


@pytest.mark.parametrize(
    ("stage", "state", "scoped"),
    [("seal_snapshot", CommitState.NOT_COMMITTED, False), ("MigrationReport", CommitState.COMMITTED, True)],
)
async def test_migrate_legacy_session_says_whether_it_stamped(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stage: str,
    state: CommitState,
    scoped: bool,
) -> None:
    store = InMemorySessionStore()
    await _legacy(store)
    rt = _runtime(session_store=store)
    monkeypatch.setattr(maintenance, stage, _boom)
    error = await _fails(
        lambda: rt.migrate_legacy_session(ANA, "s1", attest_legacy_memory_scope=True),
        "migrate_legacy_session",
        caplog,
    )
    assert error.commit_state is state
    assert ("the session was changed" in str(error)) is scoped
    stored = await store.load(KEY, CTX)
    assert stored is not None and (stored.snapshot.memory_scope is not None) is scoped


async def _diverged() -> tuple[Any, InMemorySessionStore]:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    await archive.append(KEY, [MessageGroup(0, (Message(Role.USER, "another writer"),))], CTX)
    rt = _runtime(archive=archive, session_store=store)
    await rt.run(ANA, "s1", "q0")
    await rt.run(ANA, "s1", "q1")  # its eviction finds the other writer's group: diverged
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.DIVERGED
    return rt, store


@pytest.mark.parametrize("stage", ["_read_from", "_save", "ReconcileReport"])
async def test_reconcile_session_says_whether_it_saved(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str
) -> None:
    rt, _ = await _diverged()
    if stage == "_save":  # the save lands, then the engine fails while it is being settled
        monkeypatch.setattr(commit_module, "_save", _then_boom(commit_module._save))
    else:
        monkeypatch.setattr(maintenance, stage, _boom)
    error = await _fails(lambda: rt.reconcile_session(ANA, "s1"), "reconcile_session", caplog)
    expected = {
        "_read_from": CommitState.NOT_COMMITTED,
        "_save": CommitState.UNKNOWN,
        "ReconcileReport": CommitState.COMMITTED,
    }[stage]
    assert error.commit_state is expected
    if expected is CommitState.UNKNOWN:
        assert "inspect the session before calling it again" in str(error)
    monkeypatch.undo()
    view = await rt.inspect_session(ANA, "s1")
    # Unknown, and indeed the save had landed: inspecting the session tells the operator.
    assert (view.state is SessionState.DIVERGED) is (expected is CommitState.NOT_COMMITTED)


async def _over_bound() -> tuple[Any, InMemorySessionStore]:
    """Three resident groups that a runtime bounded to one must flush on close_session."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    roomy = _runtime(max_groups=10, archive=archive, session_store=store)
    for i in range(3):
        await roomy.run(ANA, "s1", f"q{i}")
    return _runtime(max_groups=1, archive=archive, session_store=store), store


@pytest.mark.parametrize(
    ("stage", "state"),
    [("plan_eviction", CommitState.NOT_COMMITTED), ("index_archived", CommitState.COMMITTED)],
)
async def test_a_flush_that_fails_unexpectedly_is_reported_with_what_it_saved(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str, state: CommitState
) -> None:
    rt, store = await _over_bound()
    monkeypatch.setattr(maintenance, stage, _boom)
    with caplog.at_level(logging.WARNING, logger="agentium"):
        report = await rt.resources.close_session(ANA, "s1")
    assert report.status is CleanupStatus.INCOMPLETE
    [failed] = [d for d in report.diagnostics if d.code == "flush_failed"]
    assert "unexpected error" in failed.message and f"commit_state {state.value}" in failed.message
    assert any(
        "close_session failed with an unexpected RuntimeError" in r.getMessage() for r in caplog.records
    )
    stored = await store.load(KEY, CTX)
    assert stored is not None and (stored.snapshot.boundary > 0) is (state is CommitState.COMMITTED)


async def test_close_session_failing_after_its_flush_says_the_flush_saved(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agentium_harness._engine import closing

    rt, store = await _over_bound()
    monkeypatch.setattr(closing, "_logged", _boom)
    error = await _fails(lambda: rt.resources.close_session(ANA, "s1"), "close_session", caplog)
    assert error.commit_state is CommitState.COMMITTED
    stored = await store.load(KEY, CTX)
    assert stored is not None and stored.snapshot.boundary == 2


# -- erasure ---------------------------------------------------------------------------------


S1 = EraseTarget.session("acme", "ana", "s1")


async def _erase(rt: Any) -> Any:
    return await rt.erase(S1, reason="user asked", attestation=OPERATOR)


async def test_erase_failing_before_its_record_is_written_erased_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = _runtime()
    await rt.run(ANA, "s1", "q0")
    monkeypatch.setattr(erasure, "pending_for", _boom)
    error = await _fails(lambda: _erase(rt), "erase", caplog)
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "this call erased nothing" in str(error) and "Call erase again" in str(error)
    monkeypatch.undo()
    assert await rt.erasure_status(OPERATOR) == ()
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.OK


async def test_erase_failing_while_its_record_is_written_may_be_pending_and_erase_resumes_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = _runtime()
    await rt.run(ANA, "s1", "q0")
    # The join into ``pending`` (update_ledger_from: it returns the revision joined at, for the join record).
    monkeypatch.setattr(erasure, "update_ledger_from", _then_boom(erasure.update_ledger_from))
    error = await _fails(lambda: _erase(rt), "erase", caplog)
    assert error.commit_state is CommitState.UNKNOWN
    assert "may be pending" in str(error) and "calling erase again with the same target resumes it" in str(
        error
    )
    monkeypatch.undo()
    # It is pending indeed (the fence landed): the scope is refused, and erase resumes it as the error says.
    [pending] = await rt.erasure_status(OPERATOR)
    assert pending.state is ErasureState.PENDING
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.ERASING
    result = await _erase(rt)
    assert result.resumed and result.record.erasure_id == pending.erasure_id
    assert result.record.state is ErasureState.COMPLETE
    assert not (await rt.inspect_session(ANA, "s1")).exists


async def test_erase_failing_after_it_completed_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = _runtime()
    await rt.run(ANA, "s1", "q0")
    monkeypatch.setattr(erasure_api, "ErasureResult", _boom)
    error = await _fails(lambda: _erase(rt), "erase", caplog)
    assert error.commit_state is CommitState.COMMITTED and "its tombstone stands" in str(error)
    monkeypatch.undo()
    [done] = await rt.erasure_status(OPERATOR)
    assert done.state is ErasureState.COMPLETE


async def test_resume_erasures_failing_unexpectedly_leaves_the_erasure_pending(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = _runtime()
    await rt.run(ANA, "s1", "q0")
    with monkeypatch.context() as patch:
        # The join into ``pending`` lands, then the engine fails.
        patch.setattr(erasure, "update_ledger_from", _then_boom(erasure.update_ledger_from))
        await _fails(lambda: _erase(rt), "erase", caplog)
    monkeypatch.setattr(erasure_api, "load_record", _boom)
    error = await _fails(lambda: rt.resume_erasures(OPERATOR), "resume_erasures", caplog)
    assert error.commit_state is CommitState.NOT_COMMITTED and "call resume_erasures again" in str(error)
    monkeypatch.undo()
    [pending] = await rt.erasure_status(OPERATOR)
    assert pending.state is ErasureState.PENDING
    [result] = await rt.resume_erasures(OPERATOR)
    assert result.resumed and result.record.state is ErasureState.COMPLETE


@pytest.mark.parametrize(
    ("stage", "state"),
    [("retention_cutoff", CommitState.NOT_COMMITTED), ("RetentionResult", CommitState.UNKNOWN)],
)
async def test_apply_retention_says_whether_it_began_erasing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str, state: CommitState
) -> None:
    archive = InMemoryArchive()
    rt = _runtime(archive=archive, retention=RetentionPolicy(max_archived_groups=1))
    for i in range(4):  # groups 0-2 archived, 3 resident
        await rt.run(ANA, "s1", f"q{i}")
    monkeypatch.setattr(retention, stage, _boom)
    error = await _fails(lambda: rt.apply_retention(OPERATOR), "apply_retention", caplog)
    assert error.commit_state is state
    monkeypatch.undo()
    kept = [g.seq for g in await archive.read_groups(KEY, 0, 100, CTX)]
    tombstones = await rt.erasure_status(OPERATOR)
    if state is CommitState.NOT_COMMITTED:
        assert kept == [0, 1, 2] and tombstones == ()
    else:  # the session's erasure completed before the failure: its tombstone stands
        assert kept == [2] and [t.state for t in tombstones] == [ErasureState.COMPLETE]


@pytest.mark.parametrize(
    ("stage", "state"), [("_provenance", CommitState.NOT_COMMITTED), ("ForgetResult", CommitState.COMMITTED)]
)
async def test_runtime_forget_says_whether_the_fact_was_forgotten(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str, state: CommitState
) -> None:
    rt = _runtime(memory=InMemoryMemoryStore())
    ack = await rt.memory.remember(MemoryFact(SCOPE, "ana likes tea"))
    monkeypatch.setattr(forget, stage, _boom)
    error = await _fails(lambda: rt.forget(SCOPE, ack.fact_id), "forget", caplog)
    assert error.commit_state is state
    monkeypatch.undo()
    fact = (await rt.memory.history(SCOPE, ack.fact_id))[-1]
    assert (fact.status is FactStatus.FORGOTTEN) is (state is CommitState.COMMITTED)


# -- the memory manager ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "state"),
    [
        ("fence_check", CommitState.NOT_COMMITTED),
        ("fence_confirm", CommitState.UNKNOWN),
        ("_event", CommitState.COMMITTED),
    ],
)
async def test_remember_says_whether_the_fact_was_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str, state: CommitState
) -> None:
    memory = manager.MemoryManager(InMemoryMemoryStore())
    if stage == "_event":
        monkeypatch.setattr(manager.MemoryManager, stage, _boom)
    else:
        monkeypatch.setattr(writes, stage, _boom)  # the writes' own module (memory/writes.py) calls it
    error = await _fails(
        lambda: memory.remember(MemoryFact(SCOPE, "ana likes tea")), "memory remember", caplog
    )
    assert error.commit_state is state
    monkeypatch.undo()
    stored = await memory.list(SCOPE)
    assert len(stored) == (0 if state is CommitState.NOT_COMMITTED else 1)


@pytest.mark.parametrize(
    ("operation", "stage", "state"),
    [
        ("correct", "check_cap", CommitState.NOT_COMMITTED),
        ("correct", "_event", CommitState.COMMITTED),
        ("forget", "checked_scope", CommitState.NOT_COMMITTED),
        ("forget", "_event", CommitState.COMMITTED),
    ],
)
async def test_correct_and_forget_say_whether_they_wrote(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    operation: str,
    stage: str,
    state: CommitState,
) -> None:
    memory = manager.MemoryManager(InMemoryMemoryStore())
    ack = await memory.remember(MemoryFact(SCOPE, "ana likes tea"))
    if stage == "_event":
        monkeypatch.setattr(manager.MemoryManager, stage, _boom)
    else:
        monkeypatch.setattr(writes, stage, _boom)  # the writes' own module (memory/writes.py) calls it
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "correct": lambda: memory.correct(SCOPE, ack.fact_id, MemoryFact(SCOPE, "ana likes coffee")),
        "forget": lambda: memory.forget(SCOPE, ack.fact_id),
    }
    error = await _fails(calls[operation], f"memory {operation}", caplog)
    assert error.commit_state is state
    monkeypatch.undo()
    revisions = await memory.history(SCOPE, ack.fact_id)
    changed = len(revisions) > 1 or revisions[-1].status is not FactStatus.CURRENT
    assert changed is (state is CommitState.COMMITTED)
