"""``HarnessRuntime.index_document`` / ``delete_document``: the host's fenced way to index documents.

A host that called the recall store's own ``index_document`` was not fenced
against operator erasures: a document landing while its owner was being
erased survived an erasure that said ``complete``. The runtime's methods
check and bound their arguments (nothing written on bad input), are admitted
like other calls (refused once closed), index through the erasure fence
(refused, or deleted again), and say truthfully whether the document is
indexed (``commit_state``) and when it could not be checked again (a
WARNING and an ``erasure_fence_unchecked`` diagnostic).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import attrs
import pytest

from agentium_harness import (
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_TITLE_BYTES,
    BlockingRuntime,
    CapabilityError,
    CommitState,
    ContractViolationError,
    DocumentResult,
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    HarnessRuntime,
    InvalidArgumentError,
    InvalidIdError,
    OperatorAttestation,
    RecallStatus,
    RuntimeClosedError,
    RuntimeLimits,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import EraseReport, OpContext, RecallCapabilities, RecallStore, SourceRef

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
ANA_DOC = SourceOwner("acme", "ana")
TEXT = "The VPN certificate expires on March 3rd."


class HookedRecall(InMemoryRecallStore):
    """An in-memory recall store that runs ``before_index`` inside its next ``index_document`` (past the
    fence's first read, before the write lands), and whose ``erase`` can be made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.before_index: Callable[[], Awaitable[None]] | None = None
        self.fail_erase = False
        self.index_error: BaseException | None = None
        self.indexed = 0

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        hook, self.before_index = self.before_index, None
        if hook is not None:
            await hook()
        if self.index_error is not None:
            raise self.index_error
        self.indexed += 1
        return await super().index_document(owner, doc_id, text, ctx, title=title)

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        if self.fail_erase and not options.get("dry_run"):
            raise OSError("disk gone")
        report: EraseReport = await super().erase(target, ctx, **options)
        return report


def make_runtime(
    recall: RecallStore | None = None, sessions: InMemorySessionStore | None = None, **kw: Any
) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=sessions or InMemorySessionStore(),
        recall=recall,
        **kw,
    )


async def held(store: InMemoryRecallStore, owner: SourceOwner, doc_id: str) -> bool:
    """True if the document is in the store (deleted through the store to find out)."""
    return await store.delete_document(owner, doc_id, OpContext.with_timeout(30.0))


async def test_an_indexed_document_is_recalled_and_deleted_through_the_runtime() -> None:
    recall = HookedRecall()
    async with make_runtime(recall) as runtime:
        result = await runtime.index_document(
            SourceOwner("acme"), "oncall", "The on-call rota changes every Monday at 09:00.", title="Rota"
        )
        assert isinstance(result, DocumentResult)
        assert result.commit_state is CommitState.COMMITTED and result.diagnostics == ()
        assert result.ref.source_id.startswith("doc/")
        run = await runtime.run(ANA, "s1", "When does the on-call rota change?")
        assert run.recall is not None and run.recall.status is RecallStatus.COMPLETE
        assert "Monday" in run.output
        assert await runtime.delete_document(SourceOwner("acme"), "oncall") is True
        assert await runtime.delete_document(SourceOwner("acme"), "oncall") is False
        again = await runtime.run(ANA, "s2", "When does the on-call rota change?")
        assert again.recall is not None and again.recall.status is RecallStatus.NO_ACCESSIBLE_EVIDENCE


async def test_a_pending_erasure_of_the_owner_refuses_the_document_and_nothing_is_written() -> None:
    recall = HookedRecall()
    async with make_runtime(recall) as runtime:
        recall.fail_erase = True
        with pytest.raises(ErasureIncompleteError, match="stays pending"):
            await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        recall.fail_erase = False
        with pytest.raises(ErasureInProgressError, match="nothing was written") as info:
            await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        assert info.value.commit_state is CommitState.NOT_COMMITTED and info.value.erasure_id
        assert recall.indexed == 0 and not await held(recall, ANA_DOC, "vpn.md")
        # Another user's and the tenant's documents are not the erasure's.
        assert (await runtime.index_document(SourceOwner("acme", "bob"), "vpn.md", TEXT)).diagnostics == ()
        assert (await runtime.index_document(SourceOwner("acme"), "vpn.md", TEXT)).diagnostics == ()
        [resumed] = await runtime.resume_erasures(OPERATOR)
        assert resumed.record.state is ErasureState.COMPLETE
        # Once the erasure completed, the user's documents are taken again.
        assert (await runtime.index_document(ANA_DOC, "vpn.md", TEXT)).diagnostics == ()
        assert await held(recall, ANA_DOC, "vpn.md")


async def test_a_document_an_erasure_took_while_it_was_written_is_deleted_again() -> None:
    """The erasure runs to complete between the fence's first read and the write landing."""
    recall = HookedRecall()
    async with make_runtime(recall) as runtime:
        states: list[ErasureState] = []

        async def erase_meanwhile() -> None:
            done = await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
            assert done.tombstone is not None
            states.append(done.tombstone.state)

        recall.before_index = erase_meanwhile
        with pytest.raises(ErasureInProgressError, match="was deleted: it was not kept") as info:
            await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        assert states == [ErasureState.COMPLETE]
        assert info.value.commit_state is CommitState.NOT_COMMITTED
        assert recall.indexed == 1 and not await held(recall, ANA_DOC, "vpn.md")


async def test_a_failed_second_read_keeps_the_document_with_a_warning_and_a_diagnostic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(InMemorySessionStore):
        fail = False

        async def load(self, key: Any, ctx: OpContext) -> Any:
            if self.fail:
                raise OSError("disk gone")
            return await super().load(key, ctx)

    sessions, recall = Failing(), HookedRecall()

    async def fail_now() -> None:
        sessions.fail = True

    async with make_runtime(recall, sessions) as runtime:
        recall.before_index = fail_now
        with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
            result = await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        sessions.fail = False
        assert result.commit_state is CommitState.COMMITTED
        assert result.has("erasure_fence_unchecked")
        [note] = result.diagnostics
        assert note.severity.value == "warning" and "not checked again" in note.message
        assert "not confirmed against erasures" in caplog.text and TEXT not in caplog.text
        assert await held(recall, ANA_DOC, "vpn.md")


def bad_calls() -> list[tuple[tuple[Any, ...], dict[str, Any], type[Exception]]]:
    """(args, kwargs, error) of ``index_document`` calls refused before anything is written."""
    return [
        ((ANA_DOC, "", TEXT), {}, InvalidIdError),
        ((ANA_DOC, "a\x00b", TEXT), {}, InvalidIdError),
        ((ANA_DOC, 7, TEXT), {}, InvalidIdError),
        ((ANA, "vpn.md", TEXT), {}, InvalidArgumentError),
        (("acme", "vpn.md", TEXT), {}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", b"bytes"), {}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", "x" * (MAX_DOCUMENT_BYTES + 1)), {}, InvalidArgumentError),
        # Within the bound in characters, over it in UTF-8 bytes.
        ((ANA_DOC, "vpn.md", "é" * (MAX_DOCUMENT_BYTES // 2 + 1)), {}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", "half a pair \ud800"), {}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", TEXT), {"title": "t" * (MAX_DOCUMENT_TITLE_BYTES + 1)}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", TEXT), {"title": None}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", TEXT), {"timeout_s": 0}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", TEXT), {"timeout_s": math.nan}, InvalidArgumentError),
        ((ANA_DOC, "vpn.md", TEXT), {"timeout_s": True}, InvalidArgumentError),
    ]


async def test_bad_input_is_refused_typed_and_nothing_is_written() -> None:
    recall = HookedRecall()
    async with make_runtime(recall) as runtime:
        for args, kwargs, error in bad_calls():
            with pytest.raises(error) as info:
                await runtime.index_document(*args, **kwargs)
            assert isinstance(info.value, InvalidArgumentError), (args[:2], kwargs)
        with pytest.raises(InvalidIdError):
            await runtime.delete_document(ANA_DOC, "")
        with pytest.raises(InvalidArgumentError):
            await runtime.delete_document(ANA, "vpn.md")  # type: ignore[arg-type]
        assert recall.indexed == 0 and not await held(recall, ANA_DOC, "vpn.md")
        # The bound itself is taken.
        exact = await runtime.index_document(ANA_DOC, "big.md", "x" * MAX_DOCUMENT_BYTES)
        assert exact.commit_state is CommitState.COMMITTED


async def test_a_runtime_without_a_document_store_and_a_closed_runtime_refuse_typed() -> None:
    class NoDocuments(InMemoryRecallStore):
        capabilities: ClassVar[RecallCapabilities] = attrs.evolve(
            InMemoryRecallStore.capabilities, document_indexing=False
        )

    async with make_runtime() as bare:
        with pytest.raises(CapabilityError, match="no recall store"):
            await bare.index_document(ANA_DOC, "vpn.md", TEXT)
        with pytest.raises(CapabilityError, match="no recall store"):
            await bare.delete_document(ANA_DOC, "vpn.md")
    async with make_runtime(NoDocuments()) as plain:
        with pytest.raises(CapabilityError, match="document_indexing"):
            await plain.index_document(ANA_DOC, "vpn.md", TEXT)
    recall = HookedRecall()
    runtime = make_runtime(recall)
    await runtime.aclose()
    with pytest.raises(RuntimeClosedError):
        await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
    with pytest.raises(RuntimeClosedError):
        await runtime.delete_document(ANA_DOC, "vpn.md")
    assert recall.indexed == 0 and not await held(recall, ANA_DOC, "vpn.md")


async def test_a_store_failure_says_whether_the_document_is_indexed() -> None:
    recall = HookedRecall()
    async with make_runtime(recall) as runtime:
        recall.index_error = OSError("disk gone")
        with pytest.raises(ContractViolationError, match="OSError") as foreign:
            await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        assert foreign.value.commit_state is CommitState.UNKNOWN
        assert "indexing it again is safe" in str(foreign.value)
        recall.index_error = InvalidArgumentError("refused by the store; nothing was written")
        with pytest.raises(InvalidArgumentError) as refused:
            await runtime.index_document(ANA_DOC, "vpn.md", TEXT)
        assert refused.value.commit_state is CommitState.NOT_COMMITTED


async def test_aclose_cancelling_a_write_part_way_says_its_commit_state_is_unknown() -> None:
    recall = HookedRecall()
    # The settle wait runs out (the write hangs); the cancelled write then stops at once, so the
    # close wait that follows is generous: a stalled machine must not cut the clean-up short.
    runtime = make_runtime(recall, limits=RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=30.0))
    started = anyio.Event()

    async def hang() -> None:
        started.set()
        await anyio.sleep_forever()

    recall.before_index = hang
    errors: list[BaseException] = []

    async def index() -> None:
        try:
            await runtime.index_document(ANA_DOC, "vpn.md", TEXT, timeout_s=60.0)
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(index)
        await started.wait()
        await runtime.aclose()
    [error] = errors
    assert isinstance(error, RuntimeClosedError), repr(error)
    assert error.commit_state is CommitState.UNKNOWN


def test_the_blocking_twins_index_delete_and_refuse_as_the_coroutines_do() -> None:
    for name in ("index_document", "delete_document"):
        twin, coroutine = getattr(BlockingRuntime, name), getattr(HarnessRuntime, name)
        assert inspect.signature(twin) == inspect.signature(coroutine), name
        assert (inspect.getdoc(coroutine) or "") in (inspect.getdoc(twin) or ""), name
    recall = HookedRecall()
    with BlockingRuntime(make_runtime(recall)) as blocking:
        result = blocking.index_document(SourceOwner("acme"), "oncall", "The rota changes every Monday.")
        assert result.commit_state is CommitState.COMMITTED
        assert blocking.run(ANA, "s1", "When does the rota change?").output
        for args, kwargs, error in bad_calls()[:4]:
            with pytest.raises(error):
                blocking.index_document(*args, **kwargs)
        assert blocking.delete_document(SourceOwner("acme"), "oncall") is True
        assert blocking.delete_document(SourceOwner("acme"), "oncall") is False
    assert recall.indexed == 1
    with pytest.raises(RuntimeClosedError):
        blocking.index_document(SourceOwner("acme"), "oncall", TEXT)


class _Embedder(HashingEmbedder):
    """The hashing embedder, recording what it embeds; ``fail`` makes it raise."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.fail = False

    async def embed(self, texts: Sequence[str], ctx: OpContext) -> Sequence[Sequence[float]]:
        if self.fail:
            raise OSError("model server gone")
        self.seen.extend(texts)
        return await super().embed(texts, ctx)


async def test_with_hybrid_recall_the_vector_is_stored_and_a_failure_is_a_warning(tmp_path: Path) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    embedder = _Embedder()
    async with make_runtime(recall, embedder=embedder, owned=(recall,)) as runtime:
        assert (await runtime.index_document(ANA_DOC, "vpn.md", TEXT)).diagnostics == ()
        assert embedder.seen == [TEXT]
        embedder.fail = True
        result = await runtime.index_document(ANA_DOC, "lunch.md", "Lunch is at noon.")
        assert result.commit_state is CommitState.COMMITTED and result.has("recall_embed_failed")
        assert "found by its words only" in result.diagnostics[0].message
        assert await runtime.delete_document(ANA_DOC, "lunch.md") is True
