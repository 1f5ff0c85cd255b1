"""The runtime's maintenance writes say truthfully whether they committed, whatever stops them.

As for ``run()`` and the history writes (test_commit_state.py):
``migrate_legacy_session``, ``reconcile_session`` and
``resources.close_session`` raise only errors carrying ``commit_state`` —
``not_committed`` for a refusal before any write and for a save the
compare-and-set refused (and then nothing changed), the read-back's verdict
for a save that raised, ``unknown`` when it cannot be settled — and their
blocking twins raise the same error.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentium_harness import (
    AgentiumError,
    BlockingRuntime,
    CapabilityError,
    CommitState,
    InvalidArgumentError,
    Message,
    MessageGroup,
    ResidentLimits,
    Role,
    RuntimeClosedError,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SessionState,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionSnapshot, StoredSnapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
CTX = OpContext()


class RefusingStore(InMemorySessionStore):
    """The in-memory store whose next ``refuse`` saves fail with ``error``, writing only if ``land``.

    ``reads_fail`` makes every load after a failed save raise (the read-back cannot settle it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0
        self.land = False
        self.reads_fail = False
        self.failed = False
        self.error: Exception = SessionConflictError("another writer committed first")

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected: int | None, ctx: OpContext
    ) -> int:
        if self.refuse <= 0:
            return await super().save(key, snapshot, expected, ctx)
        self.refuse -= 1
        self.failed = True
        if self.land:
            await super().save(key, snapshot, expected, ctx)
        raise self.error

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.failed and self.reads_fail:
            raise SessionStoreError("the backend is unreachable")
        return await super().load(key, ctx)


def _runtime(store: InMemorySessionStore, archive: Any = None, max_groups: int = 1) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive if archive is not None else InMemoryArchive(),
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups)),
    )


async def _stored(store: InMemorySessionStore) -> StoredSnapshot:
    stored = await InMemorySessionStore.load(store, KEY, CTX)
    assert stored is not None
    return stored


# -- migrate_legacy_session ------------------------------------------------------------------


async def _legacy() -> RefusingStore:
    store = RefusingStore()
    group = MessageGroup(0, (Message(Role.USER, "legacy q"), Message(Role.ASSISTANT, "legacy a")))
    legacy = SessionSnapshot(memory_scope=None, boundary=0, next_seq=1, resident=(group,), format_version=1)
    await store.save(KEY, legacy, None, CTX)
    return store


async def _migrate(rt: Any) -> Any:
    return await rt.migrate_legacy_session(ANA, "s1", attest_legacy_memory_scope=True)


async def test_migrate_refused_by_compare_and_set_is_not_committed_and_changes_nothing() -> None:
    store = await _legacy()
    before = await _stored(store)
    store.refuse = 1
    with pytest.raises(SessionConflictError) as caught:
        await _migrate(_runtime(store))
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    after = await _stored(store)
    assert after.revision == before.revision and after.snapshot.memory_scope is None
    # Calling it again stamps the snapshot.
    report = await _migrate(_runtime(store))
    assert report.changed and (await _stored(store)).snapshot.memory_scope is not None


async def test_migrate_over_another_writers_revision_is_not_committed() -> None:
    store = await _legacy()
    stored = await _stored(store)
    store.refuse = 1

    async def other_writer_first(*args: Any) -> int:
        # Another writer saves its own revision, then this save's compare-and-set is refused.
        bumped = SessionSnapshot(
            memory_scope=None, boundary=0, next_seq=1, resident=stored.snapshot.resident, format_version=1
        )
        await InMemorySessionStore.save(store, KEY, bumped, stored.revision, CTX)
        raise SessionConflictError("another writer committed first")

    store.save = other_writer_first  # type: ignore[method-assign]
    with pytest.raises(SessionConflictError) as caught:
        await _migrate(_runtime(store))
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert (await _stored(store)).snapshot.memory_scope is None


async def test_migrate_whose_save_landed_and_then_raised_is_a_migration() -> None:
    store = await _legacy()
    before = await _stored(store)
    store.refuse, store.land, store.error = 1, True, SessionStoreError("503 after the write")
    report = await _migrate(_runtime(store))
    after = await _stored(store)
    assert report.changed and report.revision == after.revision > before.revision
    assert "read back" in report.message and after.snapshot.memory_scope is not None


async def test_migrate_whose_save_cannot_be_settled_is_unknown() -> None:
    store = await _legacy()
    store.refuse, store.land, store.reads_fail = 1, True, True
    store.error = SessionStoreError("the connection dropped")
    with pytest.raises(SessionStoreError) as caught:
        await _migrate(_runtime(store))
    assert caught.value.commit_state is CommitState.UNKNOWN
    assert "inspect the session before calling it again" in str(caught.value)


async def test_migrate_refused_before_any_write_is_not_committed() -> None:
    store = await _legacy()
    before = await _stored(store)
    rt = _runtime(store)
    with pytest.raises(AgentiumError) as unattested:
        await rt.migrate_legacy_session(ANA, "s1")
    with pytest.raises(InvalidArgumentError) as bad_id:
        await rt.migrate_legacy_session(ANA, "", attest_legacy_memory_scope=True)
    for error in (unattested.value, bad_id.value):
        assert error.commit_state is CommitState.NOT_COMMITTED, error
    assert (await _stored(store)).revision == before.revision


def test_blocking_migrate_raises_the_same_error() -> None:
    import anyio

    store = anyio.run(_legacy)
    store.refuse = 1
    with BlockingRuntime(_runtime(store)) as blocking, pytest.raises(SessionConflictError) as caught:
        blocking.migrate_legacy_session(ANA, "s1", attest_legacy_memory_scope=True)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED


# -- reconcile_session -----------------------------------------------------------------------


async def _diverged(archive: Any = None) -> tuple[Any, RefusingStore]:
    archive = archive if archive is not None else InMemoryArchive()
    store = RefusingStore()
    await archive.append(KEY, [MessageGroup(0, (Message(Role.USER, "another writer"),))], CTX)
    rt = _runtime(store, archive)
    await rt.run(ANA, "s1", "q0")
    await rt.run(ANA, "s1", "q1")  # its eviction finds the other writer's group: diverged
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.DIVERGED
    return rt, store


async def test_reconcile_refused_by_compare_and_set_is_not_committed_and_changes_nothing() -> None:
    rt, store = await _diverged()
    before = await _stored(store)
    store.refuse = 1
    with pytest.raises(SessionConflictError) as caught:
        await rt.reconcile_session(ANA, "s1")
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert "reconcile_session" in str(caught.value) and "the session was not changed" in str(caught.value)
    assert (await _stored(store)).revision == before.revision
    assert (await rt.inspect_session(ANA, "s1")).state is SessionState.DIVERGED


class FailingReads(InMemoryArchive):
    """An archive whose reads fail: reconciliation stops before its save."""

    async def read_groups(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("the archive is unreachable")


class NoBoundedReads(InMemoryArchive):
    """An archive that does not declare ``bounded_reads``: reconciliation is refused."""

    capabilities = attrs.evolve(InMemoryArchive.capabilities, bounded_reads=False)


@pytest.mark.parametrize("archive", [FailingReads, NoBoundedReads])
async def test_reconcile_stopped_before_its_save_is_not_committed(archive: type[InMemoryArchive]) -> None:
    rt, store = await _diverged(archive())
    before = await _stored(store)
    with pytest.raises(AgentiumError) as caught:
        await rt.reconcile_session(ANA, "s1")
    if archive is NoBoundedReads:
        assert isinstance(caught.value, CapabilityError)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert (await _stored(store)).revision == before.revision


@pytest.mark.parametrize("land", [False, True])
async def test_reconcile_whose_save_cannot_be_settled_says_so_in_reconciles_words(land: bool) -> None:
    """Not the run path's "the turn may be duplicated": reconcile duplicates no turn; it says what it did."""
    rt, store = await _diverged()
    store.refuse, store.land, store.reads_fail = 1, land, True
    store.error = SessionStoreError("the connection dropped")
    with pytest.raises(SessionStoreError) as caught:
        await rt.reconcile_session(ANA, "s1")
    error = caught.value
    assert error.commit_state is CommitState.UNKNOWN
    text = str(error)
    assert "the connection dropped" in text
    assert "turn" not in text  # neither "the turn may be duplicated" nor "the turn was committed"
    assert "reconcile_session" in text and "saving the reconciled session" in text
    assert "inspect the session before reconciling it again" in text


async def test_reconcile_with_a_bad_identity_is_not_committed() -> None:
    rt, _ = await _diverged()
    with pytest.raises(AgentiumError) as caught:
        await rt.reconcile_session("not an identity", "s1")  # type: ignore[arg-type]
    assert caught.value.commit_state is CommitState.NOT_COMMITTED


# -- close_session ---------------------------------------------------------------------------


async def test_close_session_refused_once_closed_is_not_committed() -> None:
    store = RefusingStore()
    rt = _runtime(store, max_groups=10)
    await rt.run(ANA, "s1", "q0")
    before = await _stored(store)
    await rt.aclose()
    with pytest.raises(RuntimeClosedError) as caught:
        await rt.resources.close_session(ANA, "s1")
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert (await _stored(store)).revision == before.revision
