"""The runtime's other writing operations, when a stage of their own raises a plain exception (an engine bug).

As for ``run()`` and the history writes (test_unexpected_errors.py): migrate
and reconcile raise an ``AgentiumError`` caused by the exception, whose
``commit_state`` matches what the session holds when read back, and log one
WARNING without its text; close_session reports a flush failing so with the
flush's state, and raises so outside it.
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
    MemoryScope,
    Message,
    MessageGroup,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    SessionState,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import commit as commit_module
from agentium_harness._engine import maintenance
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
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
