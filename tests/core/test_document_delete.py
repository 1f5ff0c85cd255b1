"""``HarnessRuntime.delete_document``: unfenced on purpose, and truthful about what it deleted.

A delete only removes, so it needs no erasure fence: whichever of a delete
and an erasure of the document's owner lands first, the erasure completes
with nothing of the owner left, and the delete says truthfully whether it
found the document. Those races are run in a fixed order here: the store's
own call runs the other operation before (or instead of) its own work.

Every error a delete raises once admitted says in ``commit_state`` whether
the document was deleted, as ``index_document``'s errors do: a store that
refused the call as its port allows (nothing written) is ``not_committed``;
a failure, a timeout, a cancellation by ``aclose()``, a foreign exception or
an answer that is not a bool part way is ``unknown``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    CommitState,
    ContractViolationError,
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    HarnessRuntime,
    InvalidArgumentError,
    OperationTimeoutError,
    OperatorAttestation,
    RecallUnavailableError,
    RuntimeClosedError,
    RuntimeLimits,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import EraseReport, OpContext, RecallStore

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
ANA_DOC = SourceOwner("acme", "ana")
TEXT = "The VPN certificate expires on March 3rd."
Hook = Callable[[], Awaitable[None]]


class _Hooks:
    """What the hooked stores run inside their next call (before its own work), and how they fail."""

    def __init__(self) -> None:
        self.before_delete: Hook | None = None
        self.before_erase: Hook | None = None
        self.delete_error: BaseException | None = None
        self.delete_answer: object = None
        self.fail_erase = False


class HookedMemoryRecall(InMemoryRecallStore):
    """The public in-memory recall store, whose ``delete_document`` and ``erase`` run ``hooks`` first."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks = _Hooks()

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        hooks = self.hooks
        hook, hooks.before_delete = hooks.before_delete, None
        if hook is not None:
            await hook()
        if hooks.delete_error is not None:
            raise hooks.delete_error
        if hooks.delete_answer is not None:
            return hooks.delete_answer  # type: ignore[return-value]  # a store that breaks its port
        return await super().delete_document(owner, doc_id, ctx)

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        hooks = self.hooks
        if not options.get("dry_run"):
            if hooks.fail_erase:
                raise OSError("disk gone")
            hook, hooks.before_erase = hooks.before_erase, None
            if hook is not None:
                await hook()
        report: EraseReport = await super().erase(target, ctx, **options)
        return report


class HookedSQLiteRecall(SQLiteRecallStore):
    """The SQLite recall store (a real temp file), hooked as :class:`HookedMemoryRecall`."""

    def __init__(self, path: Path) -> None:
        super().__init__(SQLiteRecallConfig(path=str(path)))
        self.hooks = _Hooks()

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        hook, self.hooks.before_delete = self.hooks.before_delete, None
        if hook is not None:
            await hook()
        return await super().delete_document(owner, doc_id, ctx)

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        if not options.get("dry_run"):
            hook, self.hooks.before_erase = self.hooks.before_erase, None
            if hook is not None:
                await hook()
        report: EraseReport = await super().erase(target, ctx, **options)
        return report


Hooked = HookedMemoryRecall | HookedSQLiteRecall


@pytest.fixture(params=["memory", "sqlite"])
async def recall(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Hooked]:
    store: Hooked = (
        HookedMemoryRecall() if request.param == "memory" else HookedSQLiteRecall(tmp_path / "r.db")
    )
    yield store
    await store.aclose()


def make_runtime(recall: RecallStore, **kw: Any) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        **kw,
    )


async def held(store: Hooked, owner: SourceOwner, doc_id: str) -> bool:
    """True if the document is in the store (a bounded dry-run erasure of the owner counts it)."""
    target = EraseTarget.user(owner.tenant, owner.user or "")
    report = await store.erase(target, OpContext.with_timeout(30.0), dry_run=True)
    return report.removed > 0


async def erase_ana(runtime: HarnessRuntime) -> ErasureState:
    done = await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
    assert done.tombstone is not None
    return done.tombstone.state


# -- a delete racing an erasure of its owner ------------------------------------------------------


async def test_an_erasure_that_lands_before_the_delete_completes_and_the_delete_finds_nothing(
    recall: Hooked,
) -> None:
    """The erasure runs to complete inside the store's delete call, before the delete's own work."""
    async with make_runtime(recall) as runtime:
        await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        states: list[ErasureState] = []

        async def erase_meanwhile() -> None:
            states.append(await erase_ana(runtime))

        recall.hooks.before_delete = erase_meanwhile
        assert await runtime.delete_document(ANA_DOC, "vpn.md") is False  # the erasure took it first
        assert states == [ErasureState.COMPLETE]
        assert not await held(recall, ANA_DOC, "vpn.md")


async def test_a_delete_that_lands_while_the_erasure_is_under_way_leaves_it_complete(
    recall: Hooked,
) -> None:
    """The delete runs to its end inside the store's erase call, before the erasure removes anything."""
    async with make_runtime(recall) as runtime:
        await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        await runtime.index_document(ANA_DOC, "notes.md", "Lunch is at noon.")
        answers: list[bool] = []

        async def delete_meanwhile() -> None:
            answers.append(await runtime.delete_document(ANA_DOC, "vpn.md"))

        recall.hooks.before_erase = delete_meanwhile
        assert await erase_ana(runtime) is ErasureState.COMPLETE
        assert answers == [True]
        assert not await held(recall, ANA_DOC, "vpn.md")
        assert await runtime.delete_document(ANA_DOC, "notes.md") is False  # the erasure took it


async def test_a_pending_erasure_does_not_hold_back_a_delete() -> None:
    """Unlike an index, a delete is not refused while an erasure of its owner is pending."""
    recall = HookedMemoryRecall()
    async with make_runtime(recall) as runtime:
        await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        recall.hooks.fail_erase = True
        with pytest.raises(ErasureIncompleteError, match="stays pending"):
            await erase_ana(runtime)
        recall.hooks.fail_erase = False
        assert await runtime.delete_document(ANA_DOC, "vpn.md") is True
        [resumed] = await runtime.resume_erasures(OPERATOR)
        assert resumed.record.state is ErasureState.COMPLETE
        assert not await held(recall, ANA_DOC, "vpn.md")


# -- commit_state on every error once admitted ----------------------------------------------------


@pytest.mark.parametrize(
    ("error", "raised", "state"),
    [
        (InvalidArgumentError("refused by the store; nothing was written"), InvalidArgumentError, "not"),
        (RecallUnavailableError("backend gone"), RecallUnavailableError, "unknown"),
        (OSError("disk gone"), ContractViolationError, "unknown"),
    ],
)
async def test_a_store_failure_says_whether_the_document_was_deleted(
    error: Exception, raised: type[Exception], state: str
) -> None:
    recall = HookedMemoryRecall()
    async with make_runtime(recall) as runtime:
        await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        recall.hooks.delete_error = error
        with pytest.raises(raised) as info:
            await runtime.delete_document(ANA_DOC, "vpn.md")
        assert isinstance(info.value, raised)
        expected = CommitState.NOT_COMMITTED if state == "not" else CommitState.UNKNOWN
        assert getattr(info.value, "commit_state", None) is expected
        if raised is ContractViolationError:
            assert "OSError" in str(info.value) and "delete it again" in str(info.value)


async def test_an_answer_that_is_not_a_bool_is_a_contract_violation_of_unknown_state() -> None:
    recall = HookedMemoryRecall()
    async with make_runtime(recall) as runtime:
        recall.hooks.delete_answer = "yes"
        with pytest.raises(ContractViolationError, match="not True or False") as info:
            await runtime.delete_document(ANA_DOC, "vpn.md")
        assert info.value.commit_state is CommitState.UNKNOWN


async def test_a_delete_past_its_deadline_is_of_unknown_state() -> None:
    recall = HookedMemoryRecall()

    async def hang() -> None:
        await anyio.sleep_forever()

    async with make_runtime(recall) as runtime:
        recall.hooks.before_delete = hang
        # Only this call is meant to time out; its hang stops at once when it is cancelled.
        with pytest.raises(OperationTimeoutError) as info:
            await runtime.delete_document(ANA_DOC, "vpn.md", timeout_s=0.2)
        assert info.value.commit_state is CommitState.UNKNOWN


async def test_aclose_cancelling_a_delete_part_way_says_its_commit_state_is_unknown() -> None:
    recall = HookedMemoryRecall()
    # The settle wait runs out (the delete hangs); the cancelled delete then stops at once, so the
    # close wait that follows is generous: a stalled machine must not cut the clean-up short.
    runtime = make_runtime(recall, limits=RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=30.0))
    started = anyio.Event()

    async def hang() -> None:
        started.set()
        await anyio.sleep_forever()

    recall.hooks.before_delete = hang
    errors: list[BaseException] = []

    async def delete() -> None:
        try:
            await runtime.delete_document(ANA_DOC, "vpn.md", timeout_s=60.0)
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete)
        await started.wait()
        await runtime.aclose()
    [error] = errors
    assert isinstance(error, RuntimeClosedError), repr(error)
    assert error.commit_state is CommitState.UNKNOWN
