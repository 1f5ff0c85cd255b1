"""A host document indexed for recall while its owner is being erased is refused, or deleted again.

Two runtimes sharing one session store and one recall store stand for two
worker processes of one host: one erases, the other indexes a document (as
``agentium recall add`` does). Without the fence, a document that passed
every check and landed after the erasure's recall step and verification
outlived an erasure that said ``complete``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _cli_support import SQLITE_RECALL_CONFIG

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureState,
    HarnessRuntime,
    OperatorAttestation,
    SessionStoreError,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._cli import main
from agentium_harness._config.runtime import load_runtime
from agentium_harness._engine.document_fence import index_document_fenced
from agentium_harness._engine.erasure_fence import ErasureFence
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import EraseReport, OpContext, RecallStore, SourceRef

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
ANA_DOC = SourceOwner("acme", "ana")
BOB_DOC = SourceOwner("acme", "bob")


class _Hooks:
    """What the test runs inside the writer's next ``index_document`` and the eraser's recall verification."""

    def __init__(self) -> None:
        self.before_index: Callable[[], Awaitable[None]] | None = None
        self.at_verification: Callable[[], Awaitable[None]] | None = None


def _hooked(base: type[Any]) -> type[Any]:
    class Hooked(base):  # type: ignore[misc,valid-type]
        hooks: _Hooks

        async def index_document(
            self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
        ) -> SourceRef:
            hook, self.hooks.before_index = self.hooks.before_index, None
            if hook is not None:
                await hook()  # past the fence's first read, before the write lands
            ref: SourceRef = await super().index_document(owner, doc_id, text, ctx, title=title)
            return ref

        async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
            report: EraseReport = await super().erase(target, ctx, **options)
            if options.get("dry_run") and options.get("max_items") == 1 and self.hooks.at_verification:
                # The erasure's verification of the recall store is done (nothing left): hold it there.
                hook, self.hooks.at_verification = self.hooks.at_verification, None
                await hook()
            return report

    return Hooked


def _pair(kind: str, tmp_path: Path, hooks: _Hooks) -> tuple[HarnessRuntime, HarnessRuntime]:
    """An eraser and a writer sharing one session store, archive and recall store (two processes' view)."""
    provider = ScriptedProvider(replies=["noted"], cycle=True)
    if kind == "sqlite":
        db = str(tmp_path / "agentium.db")
        runtimes = []
        for _ in range(2):
            recall = _hooked(SQLiteRecallStore)(SQLiteRecallConfig(path=db))
            recall.hooks = hooks
            runtimes.append(
                create_harness_runtime(
                    provider=provider,
                    archive=SQLiteArchive(SQLiteConfig(path=db)),
                    session_store=SQLiteSessionStore(SQLiteConfig(path=db)),
                    recall=recall,
                    owned=(recall,),
                )
            )
        return runtimes[0], runtimes[1]
    shared = _hooked(InMemoryRecallStore)()
    shared.hooks = hooks
    archive, sessions = InMemoryArchive(), InMemorySessionStore()
    eraser, writer = (
        create_harness_runtime(provider=provider, archive=archive, session_store=sessions, recall=shared)
        for _ in range(2)
    )
    return eraser, writer


def _store(runtime: HarnessRuntime) -> RecallStore:
    assert runtime.recall is not None
    return runtime.recall


async def _index(
    runtime: HarnessRuntime, owner: SourceOwner, doc_id: str
) -> tuple[SourceRef, tuple[str, ...]]:
    """What ``agentium recall add`` does for one file, in the writer's process."""
    fence = ErasureFence(runtime.session_store, 30.0)
    text = f"{doc_id}: the VPN certificate expires on March 3rd."
    ticket = Ticket(None, "test", 30.0)
    return await index_document_fenced(fence, ticket, _store(runtime), owner, doc_id, text)


async def _held(runtime: HarnessRuntime, owner: SourceOwner, doc_id: str) -> bool:
    """True if document ``doc_id`` of ``owner`` is indexed (it is deleted to find out)."""
    return bool(await _store(runtime).delete_document(owner, doc_id, OpContext.with_timeout(30.0)))


async def _erase(runtime: HarnessRuntime, user: str) -> ErasureState:
    result = await runtime.erase(EraseTarget.user("acme", user), reason="DSR", attestation=OPERATOR)
    assert result.tombstone is not None
    return result.tombstone.state


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_document_landing_after_a_whole_erasure_is_deleted_again(kind: str, tmp_path: Path) -> None:
    """The write passed the first read, then an erasure of its user ran to complete before it landed."""
    hooks = _Hooks()
    eraser, writer = _pair(kind, tmp_path, hooks)
    states: list[ErasureState] = []
    async with eraser, writer:

        async def erase_meanwhile() -> None:
            states.append(await _erase(eraser, "ana"))

        hooks.before_index = erase_meanwhile
        with pytest.raises(ErasureInProgressError, match="was deleted: it was not kept") as info:
            await _index(writer, ANA_DOC, "vpn.md")
        assert states == [ErasureState.COMPLETE]
        # Hosts log error texts, and an id is content: named only with content capture.
        assert "were erased while the document was indexed" in str(info.value), str(info.value)
        assert "vpn.md" not in str(info.value)
        assert info.value.erasure_id
        assert not await _held(writer, ANA_DOC, "vpn.md")
        # Once the erasure completed, the user's documents are taken again.
        ref, notes = await _index(writer, ANA_DOC, "vpn.md")
        assert notes == () and await _held(writer, ANA_DOC, "vpn.md")
        assert ref.source_id


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_document_landing_after_the_recall_verification_is_deleted_again(
    kind: str, tmp_path: Path
) -> None:
    """The write lands while the erasure is pending, after its recall step and its verification."""
    hooks = _Hooks()
    eraser, writer = _pair(kind, tmp_path, hooks)
    states: list[ErasureState] = []
    refused: list[ErasureInProgressError] = []
    async with eraser, writer:
        verified, written = anyio.Event(), anyio.Event()

        async def hold_verification() -> None:
            verified.set()
            await written.wait()

        async def erase() -> None:
            states.append(await _erase(eraser, "ana"))

        async with anyio.create_task_group() as tg:

            async def land_while_pending() -> None:
                hooks.at_verification = hold_verification
                tg.start_soon(erase)
                await verified.wait()  # recall erased and verified empty; the erasure is still pending

            hooks.before_index = land_while_pending
            try:
                with pytest.raises(ErasureInProgressError, match="was deleted: it was not kept") as info:
                    await _index(writer, ANA_DOC, "vpn.md")
                refused.append(info.value)
            finally:
                written.set()
        assert states == [ErasureState.COMPLETE]
        assert "are being erased" in str(refused[0])
        assert not await _held(writer, ANA_DOC, "vpn.md")


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_a_pending_erasure_refuses_the_document_before_anything_is_written(
    kind: str, tmp_path: Path
) -> None:
    hooks = _Hooks()
    eraser, writer = _pair(kind, tmp_path, hooks)
    async with eraser, writer:
        released = anyio.Event()

        async def attempts() -> None:
            with pytest.raises(ErasureInProgressError, match="nothing was written"):
                await _index(writer, ANA_DOC, "vpn.md")
            # Bob's documents and the tenant-wide ones are not the erasure's: indexed.
            assert (await _index(writer, BOB_DOC, "vpn.md"))[1] == ()
            assert (await _index(writer, SourceOwner("acme"), "vpn.md"))[1] == ()
            released.set()

        hooks.at_verification = attempts  # the erasure is pending, its recall store verified
        assert await _erase(eraser, "ana") is ErasureState.COMPLETE
        assert released.is_set()
        assert not await _held(writer, ANA_DOC, "vpn.md")
        assert await _held(writer, BOB_DOC, "vpn.md")
        assert await _held(writer, SourceOwner("acme"), "vpn.md")


@pytest.mark.parametrize("kind", ["sqlite", "in-memory"])
async def test_an_erasure_of_another_user_during_the_write_keeps_the_document(
    kind: str, tmp_path: Path
) -> None:
    """The ledger moving during a write takes it back only for a covering erasure that joined since.

    Ana's erasure finished just before the write: her join record says it
    joined before the write's first check, so it does not take the document back.
    """
    hooks = _Hooks()
    eraser, writer = _pair(kind, tmp_path, hooks)
    async with eraser, writer:
        # Ana was erased before the write began: her documents are taken again.
        assert await _erase(eraser, "ana") is ErasureState.COMPLETE

        async def erase_bob() -> None:
            assert await _erase(eraser, "bob") is ErasureState.COMPLETE

        hooks.before_index = erase_bob
        _, notes = await _index(writer, ANA_DOC, "vpn.md")
        assert notes == () and await _held(writer, ANA_DOC, "vpn.md")


async def test_a_failed_second_read_keeps_the_document_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """The write committed: a session store failing afterwards is a note and a WARNING, never a bare error."""

    class Failing(InMemorySessionStore):
        fail = False

        async def load(self, key: Any, ctx: OpContext) -> Any:
            if self.fail:
                raise OSError("disk gone")
            return await super().load(key, ctx)

    sessions = Failing()
    hooks = _Hooks()
    recall = _hooked(InMemoryRecallStore)()
    recall.hooks = hooks
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=recall,
    )

    async def fail_now() -> None:
        sessions.fail = True

    hooks.before_index = fail_now
    with caplog.at_level(logging.WARNING):
        _, notes = await _index(runtime, ANA_DOC, "vpn.md")
    assert any("not checked again" in n and "SessionStoreError" in n for n in notes)
    assert "not confirmed against erasures: SessionStoreError" in caplog.text
    assert await _held(runtime, ANA_DOC, "vpn.md")
    # Before a write, the same failure refuses it, typed, and nothing is written.
    with pytest.raises(SessionStoreError, match="nothing was written"):
        await _index(runtime, ANA_DOC, "lunch.md")
    sessions.fail = False
    assert not await _held(runtime, ANA_DOC, "lunch.md")


# -- agentium recall add ------------------------------------------------------------------------

CONFIG = SQLITE_RECALL_CONFIG


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(db=(tmp_path / "a.db").as_posix()))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "vpn.md").write_text("The VPN certificate expires on March 3rd.")
    return path


def _cli_held(config: Path, owner: SourceOwner) -> bool:
    async def go() -> bool:
        async with load_runtime(config) as runtime:
            return await _held(runtime, owner, "vpn.md")

    return anyio.run(go)


def _cli_erase(config: Path) -> ErasureState:
    async def go() -> ErasureState:
        async with load_runtime(config) as runtime:
            return await _erase(runtime, "ana")

    return anyio.run(go)


def test_recall_add_deletes_a_document_an_erasure_took_while_it_was_indexed(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process erases the user between the command's first read and its write."""
    original = SQLiteRecallStore.index_document
    states: list[ErasureState] = []

    async def erase_first(self: SQLiteRecallStore, *args: Any, **kwargs: Any) -> SourceRef:
        if not states:
            async with load_runtime(config) as other:
                states.append(await _erase(other, "ana"))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SQLiteRecallStore, "index_document", erase_first)
    docs = str(config.parent / "docs")
    assert main(["recall", "add", str(config), "--tenant", "acme", "--user", "ana", docs]) == 2
    _, err = capsys.readouterr()
    # The CLI names the file it stopped at (the operator's own); the error's text no id without capture.
    assert "document id 'vpn.md'" in err and "was deleted: it was not kept" in err
    assert states == [ErasureState.COMPLETE]
    monkeypatch.setattr(SQLiteRecallStore, "index_document", original)
    assert not _cli_held(config, ANA_DOC)


def test_recall_add_is_refused_while_an_erasure_of_the_owner_is_pending(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = SQLiteRecallStore.erase

    async def broken(self: SQLiteRecallStore, *args: Any, **kwargs: Any) -> EraseReport:
        raise OSError("disk gone")

    monkeypatch.setattr(SQLiteRecallStore, "erase", broken)
    with pytest.raises(ErasureIncompleteError, match="stays pending"):
        _cli_erase(config)
    monkeypatch.setattr(SQLiteRecallStore, "erase", original)
    docs = str(config.parent / "docs")
    assert main(["recall", "add", str(config), "--tenant", "acme", "--user", "ana", docs]) == 2
    _, err = capsys.readouterr()
    assert "are being erased" in err and "nothing was written" in err
    assert not _cli_held(config, ANA_DOC)
    # A tenant-wide document is not the user's erasure's: indexed.
    assert main(["recall", "add", str(config), "--tenant", "acme", docs]) == 0
    assert "1 indexed" in capsys.readouterr().out
    assert _cli_held(config, SourceOwner("acme"))
