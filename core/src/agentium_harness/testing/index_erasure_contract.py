"""The erasure tests of the recall store and memory store suites (docs/erasure.md).

:class:`RecallErasureTests` and :class:`MemoryErasureTests` are part of
:class:`~agentium_harness.testing.RecallStoreContract` and
:class:`~agentium_harness.testing.MemoryStoreContract`; they run when the
store declares ``erasure``. Like the archive's, the byte-level test needs the
optional ``raw_storage`` fixture (:data:`~agentium_harness.testing.helpers.RawStorage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from .._errors import OperationCancelledError, UnsupportedOperationError
from .._errors_memory import MemoryFactNotFoundError
from .._ports import OpContext
from .._ports.archive import ArchiveReceipt
from .._ports.erasure import EraseStatus, EraseTarget, SeqRange
from .._ports.memory import GroupRef, MemoryCapabilities, MemoryFact, MemoryScope, MemoryStore, StoredFact
from .._ports.recall import RecallCapabilities, RecallLimits, RecallStore, SourceOwner
from .._scope import Scope, SessionKey
from ._suite import declared_capabilities, expired_context, plain_group, require_flag, require_not_flag
from .erasure_contract import (
    ERASED,
    NEIGHBOURS,
    OTHER_USER,
    SIBLING,
    erase_colliding_keys,
    erase_fully,
    marker,
    raw_bytes,
    reported_groups,
    tail,
    total,
)
from .helpers import RawStorage

__all__ = ["MemoryErasureTests", "RecallErasureTests"]

_SESSION = EraseTarget.session("tenant-1", "user-1", "session-1")


def _ctx() -> OpContext:
    return OpContext.with_timeout(10.0)


# -- recall stores --------------------------------------------------------------------------------


def _recall_caps(store: RecallStore) -> RecallCapabilities:
    return declared_capabilities(store, RecallCapabilities, "recall store")


def _need_recall(store: RecallStore) -> RecallCapabilities:
    require_flag(store, RecallCapabilities, "recall store", "erasure")
    caps = _recall_caps(store)
    if not (caps.archive_indexing or caps.document_indexing):
        pytest.skip("recall store declares neither archive_indexing nor document_indexing: nothing to erase")
    return caps


async def _index(store: RecallStore, key: SessionKey, texts: Sequence[str]) -> None:
    """Index one archived group per text (seq 0, 1, …) of ``key``, when the store follows the archive."""
    if not _recall_caps(store).archive_indexing:
        return
    groups = [plain_group(seq, f" {text}") for seq, text in enumerate(texts)]
    receipts = [ArchiveReceipt(g.seq, g.digest, f"test://{g.seq}") for g in groups]
    await store.index_groups(key, groups, receipts, _ctx())


async def _document(store: RecallStore, owner: SourceOwner, doc_id: str, text: str) -> None:
    if _recall_caps(store).document_indexing:
        await store.index_document(owner, doc_id, text, _ctx())


async def _found(store: RecallStore, key: SessionKey, word: str) -> list[str]:
    """Source ids a run of session ``key`` discovers for ``word``."""
    session = await store.open(Scope(key.tenant, key.user, key.session), RecallLimits(), _ctx())
    try:
        return [c.ref.source_id for c in await session.discover(word, 8, _ctx())]
    finally:
        await session.close()


class _RecallWorld:
    """Groups and documents in and around the erased session, each with its own marker."""

    def __init__(self) -> None:
        self.group = {key: marker("g") for key in (ERASED, SIBLING, OTHER_USER, *NEIGHBOURS)}
        self.doc = {
            "session": marker("ds"),  # owned by the erased session
            "user": marker("du"),  # owned by its user, any session
            "tenant": marker("dt"),  # owned by its tenant, any user
            "other": marker("do"),  # owned by another tenant's same-named session
        }

    async def seed(self, store: RecallStore) -> None:
        for key, text in self.group.items():
            await _index(store, key, [text, text])
        await _document(store, SourceOwner("tenant-1", "user-1", "session-1"), "d", self.doc["session"])
        await _document(store, SourceOwner("tenant-1", "user-1"), "d", self.doc["user"])
        await _document(store, SourceOwner("tenant-1"), "d", self.doc["tenant"])
        await _document(store, SourceOwner("tenant-2", "user-1", "session-1"), "d", self.doc["other"])

    async def visible(self, store: RecallStore, key: SessionKey, text: str) -> bool:
        return bool(await _found(store, key, text))


class RecallErasureTests:
    """The recall store's ``erase`` (declared by ``erasure``); part of :class:`RecallStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    @pytest.fixture
    def raw_storage(self) -> RawStorage | None:
        """Override to return a callable giving every byte the store's backend holds (byte-level test)."""
        return None

    async def test_erase_refused_when_undeclared(self, recall_store: RecallStore) -> None:
        """Without ``erasure`` declared, ``erase`` raises ``UnsupportedOperationError``.

        A failure means the store erases without declaring it.
        """
        require_not_flag(recall_store, RecallCapabilities, "recall store", "erasure")
        with pytest.raises(UnsupportedOperationError):
            await recall_store.erase(_SESSION, _ctx())

    async def test_erase_removes_a_session_and_nothing_else(self, recall_store: RecallStore) -> None:
        """A session erase removes its group entries and the documents it owns; all else is still found.

        Documents owned by the session's user or tenant (not by the session)
        stay, and so does every neighbouring session's entry. A failure
        usually means owners are matched by prefix, or a document owned more
        widely than the session was taken.
        """
        caps = _need_recall(recall_store)
        world = _RecallWorld()
        await world.seed(recall_store)
        reports = await erase_fully(recall_store, _SESSION)
        assert not await world.visible(recall_store, ERASED, world.group[ERASED])
        assert not await world.visible(recall_store, ERASED, world.doc["session"])
        for key in (SIBLING, OTHER_USER, *NEIGHBOURS) if caps.archive_indexing else ():
            assert await world.visible(recall_store, key, world.group[key]), f"{key}'s groups went too"
        if caps.document_indexing:
            assert await world.visible(recall_store, ERASED, world.doc["user"]), "the user's document went"
            assert await world.visible(recall_store, ERASED, world.doc["tenant"]), (
                "the tenant's document went"
            )
            assert await world.visible(recall_store, NEIGHBOURS[-1], world.doc["other"])
        assert total(reports, "document") == (1 if caps.document_indexing else 0)
        if caps.archive_indexing:
            digests = [plain_group(seq, f" {world.group[ERASED]}").digest for seq in (0, 1)]
            assert reported_groups(reports) == {ERASED: list(enumerate(digests))}

    async def test_erase_user_and_tenant_take_every_source_below_them(
        self, recall_store: RecallStore
    ) -> None:
        """A user target takes every entry and document of that user; a tenant target all of the tenant's.

        The tenant-wide document survives a user erasure; another tenant's
        sources survive both. A failure usually means the level is ignored.
        """
        caps = _need_recall(recall_store)
        world = _RecallWorld()
        await world.seed(recall_store)
        await erase_fully(recall_store, EraseTarget.user("tenant-1", "user-1"))
        for key in (ERASED, SIBLING) if caps.archive_indexing else ():
            assert not await world.visible(recall_store, key, world.group[key])
        if caps.document_indexing:
            assert not await world.visible(recall_store, SIBLING, world.doc["user"])
            assert await world.visible(recall_store, SIBLING, world.doc["tenant"])
        if caps.archive_indexing:
            assert await world.visible(recall_store, OTHER_USER, world.group[OTHER_USER])
        await erase_fully(recall_store, EraseTarget.tenant("tenant-1"))
        if caps.document_indexing:
            assert not await world.visible(recall_store, OTHER_USER, world.doc["tenant"])
            assert await world.visible(recall_store, NEIGHBOURS[-1], world.doc["other"])
        for key in (OTHER_USER, *NEIGHBOURS) if caps.archive_indexing else ():
            assert await world.visible(recall_store, key, world.group[key]) is (key.tenant != "tenant-1")

    async def test_erase_groups_takes_only_those_seqs_and_their_text(self, recall_store: RecallStore) -> None:
        """A groups target removes those entries, and no remaining entry is found by an erased group's words.

        A store that indexes a group with words of its neighbours (context)
        must drop the erased group's words from the neighbours too. Needs
        ``archive_indexing``. A failure means the ranges were ignored, or a
        neighbour still answers for the erased text.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "erasure")
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        texts = [marker(f"s{seq}") for seq in range(5)]
        await _index(recall_store, ERASED, texts)
        target = EraseTarget.groups_of(ERASED, [SeqRange(1, 2), SeqRange(3, 4)])
        reports = await erase_fully(recall_store, target)
        for seq, text in enumerate(texts):
            assert await world_visible(recall_store, ERASED, text) is (seq not in (1, 3)), f"group {seq}"
        assert [seq for seq, _ in reported_groups(reports)[ERASED]] == [1, 3]
        if _recall_caps(recall_store).canonical_archive_reads:
            left = await recall_store.seek_groups(ERASED, 0, 10, _ctx())
            assert [g.seq for g in left] == [0, 2, 4]

    async def test_erase_keeps_colliding_session_keys_apart(self, recall_store: RecallStore) -> None:
        """Erasing a session, user or tenant leaves the entries of the other key of each colliding pair.

        The pairs are ``COLLIDING_SESSION_KEYS``. Needs ``archive_indexing``.
        A failure means erase builds or matches keys by joining ids (or by
        prefix), so it takes a neighbour's entries or misses its own.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "erasure")
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        texts: dict[SessionKey, str] = {}

        async def seed(key: SessionKey, text: str) -> None:
            texts[key] = text
            await _index(recall_store, key, [text])

        async def state(key: SessionKey) -> bool:
            return bool(await _found(recall_store, key, texts[key]))

        await erase_colliding_keys(recall_store, seed, state, False)

    async def test_erase_dry_run_changes_nothing(self, recall_store: RecallStore) -> None:
        """``dry_run=True`` removes nothing and reports what a real erase then removes.

        A failure means the dry run wrote, or its counts differ from the erase's.
        """
        _need_recall(recall_store)
        world = _RecallWorld()
        await world.seed(recall_store)
        target = EraseTarget.user("tenant-1", "user-1")
        dry = await erase_fully(recall_store, target, dry_run=True)
        assert (
            await world.visible(recall_store, SIBLING, world.doc["user"])
            or not _recall_caps(recall_store).document_indexing
        )
        if _recall_caps(recall_store).archive_indexing:
            assert await world.visible(recall_store, ERASED, world.group[ERASED])
        real = await erase_fully(recall_store, target)
        assert [total(dry, k) for k in ("group", "document")] == [
            total(real, k) for k in ("group", "document")
        ]
        assert reported_groups(dry) == reported_groups(real)

    async def test_erase_is_bounded_and_resumable(self, recall_store: RecallStore) -> None:
        """Each call removes at most ``max_items`` sources and says ``partial`` until none is left.

        Once done, another call (and an erase of a scope that never existed)
        reports nothing and ``complete``. A failure means the bound was
        ignored or a status lied.
        """
        _need_recall(recall_store)
        world = _RecallWorld()
        await world.seed(recall_store)
        target = EraseTarget.user("tenant-1", "user-1")
        expected = sum(r.removed for r in await erase_fully(recall_store, target, dry_run=True))
        reports = await erase_fully(recall_store, target, max_items=1)
        assert all(r.removed <= 1 for r in reports)
        assert reports[-1].status is EraseStatus.COMPLETE
        assert all(r.status is EraseStatus.PARTIAL for r in reports[:-1])
        assert sum(r.removed for r in reports) == expected > 0
        for report in (
            await recall_store.erase(target, _ctx()),
            await recall_store.erase(EraseTarget.tenant("tenant-9"), _ctx()),
        ):
            assert report.removed == 0 and report.status is EraseStatus.COMPLETE

    async def test_cancelled_erase_removes_nothing(self, recall_store: RecallStore) -> None:
        """An ``erase`` with a cancelled context raises ``OperationCancelledError`` and removes nothing.

        A failure means the store does not check ``ctx`` before it starts.
        """
        _need_recall(recall_store)
        world = _RecallWorld()
        await world.seed(recall_store)
        before = sum(r.removed for r in await erase_fully(recall_store, _SESSION, dry_run=True))
        with pytest.raises(OperationCancelledError):
            await recall_store.erase(_SESSION, expired_context())
        after = sum(r.removed for r in await erase_fully(recall_store, _SESSION, dry_run=True))
        assert after == before > 0

    async def test_erased_bytes_leave_the_storage(
        self, recall_store: RecallStore, raw_storage: RawStorage | None
    ) -> None:
        """After an erase none of the erased text is anywhere in the backend's bytes (postings included).

        Needs the ``raw_storage`` fixture. A failure means an index still
        holds the erased words (postings, a neighbour's context, a term
        dictionary, a log) or a document's text was kept.
        """
        caps = _need_recall(recall_store)
        if raw_storage is None:
            pytest.skip("no raw_storage fixture: the byte-level check is not run")
        world = _RecallWorld()
        await world.seed(recall_store)
        await erase_fully(recall_store, _SESSION)
        raw = await raw_bytes(raw_storage)
        gone = [world.group[ERASED]] if caps.archive_indexing else []
        gone += [world.doc["session"]] if caps.document_indexing else []
        for text in gone:
            assert tail(text) not in raw, "erased text is still in the backend's bytes"
        kept = world.group[SIBLING] if caps.archive_indexing else world.doc["user"]
        assert tail(kept) in raw, "a neighbour's text is gone from the backend's bytes"


async def world_visible(store: RecallStore, key: SessionKey, text: str) -> bool:
    """True if a run of ``key`` discovers anything for ``text``."""
    return bool(await _found(store, key, text))


# -- memory stores --------------------------------------------------------------------------------

_USER = MemoryScope("tenant-1", "user-1")


def _ref(session: str, seq: int = 0) -> GroupRef:
    return GroupRef(session, seq, "sha256:" + f"{seq:x}".rjust(64, "0"))


def _need_memory(store: MemoryStore) -> MemoryCapabilities:
    require_flag(store, MemoryCapabilities, "memory store", "erasure")
    return declared_capabilities(store, MemoryCapabilities, "memory store")


async def _facts(store: MemoryStore, scope: MemoryScope) -> list[tuple[str, str]]:
    found: Sequence[StoredFact] = await store.lookup(scope, "", 200, _ctx())
    return sorted((f.fact_id, f.text) for f in found)


async def _remember(store: MemoryStore, scope: MemoryScope, text: str, *sessions: str) -> str:
    ack = await store.remember(MemoryFact(scope, text, provenance=[_ref(s) for s in sessions]), _ctx())
    assert ack.fact_id is not None
    return ack.fact_id


class MemoryErasureTests:
    """The memory store's ``erase`` (declared by ``erasure``); part of :class:`MemoryStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    @pytest.fixture
    def raw_storage(self) -> RawStorage | None:
        """Override to return a callable giving every byte the store's backend holds (byte-level test)."""
        return None

    async def test_erase_refused_when_undeclared(self, memory_store: MemoryStore) -> None:
        """Without ``erasure`` declared, ``erase`` raises ``UnsupportedOperationError`` and removes nothing.

        A failure means the store erases without declaring it.
        """
        require_not_flag(memory_store, MemoryCapabilities, "memory store", "erasure")
        await _remember(memory_store, _USER, "kept fact", "session-1")
        with pytest.raises(UnsupportedOperationError):
            await memory_store.erase(_SESSION, _ctx())
        assert len(await _facts(memory_store, _USER)) == 1

    async def test_erase_removes_a_sessions_facts_and_nothing_else(self, memory_store: MemoryStore) -> None:
        """A session erase removes the facts of its user that cite the session, in any project; nothing else.

        Facts of the same user citing another session, another user's or
        tenant's facts citing a session of the same id stay. A failure
        usually means provenance or owners are matched loosely.
        """
        _need_memory(memory_store)
        project = MemoryScope("tenant-1", "user-1", "project-1")
        gone = [
            await _remember(memory_store, _USER, "erased one", "session-1"),
            await _remember(memory_store, project, "erased two", "session-2", "session-1"),
        ]
        keep = {
            _USER: [await _remember(memory_store, _USER, "kept sibling", "session-2", "session-10")],
            MemoryScope("tenant-1", "user-10"): [],
            MemoryScope("tenant-2", "user-1"): [],
        }
        for scope in list(keep)[1:]:
            keep[scope].append(await _remember(memory_store, scope, "kept neighbour", "session-1"))
        before = {scope: await _facts(memory_store, scope) for scope in keep}
        reports = await erase_fully(memory_store, _SESSION)
        assert total(reports, "fact") == 2 and total(reports, "revision") >= 2
        assert [fid for fid, _ in await _facts(memory_store, project)] == keep[_USER]
        for scope, facts in before.items():
            left = await _facts(memory_store, scope)
            assert left == [f for f in facts if f[0] not in gone], f"{scope} lost the wrong facts"

    async def test_erase_user_and_tenant_take_every_fact_below_them(self, memory_store: MemoryStore) -> None:
        """User and tenant targets take every revision of every fact below them, forgotten ones included.

        A groups target takes none. A failure usually means the level is
        ignored, or tombstones and superseded revisions were left.
        """
        caps = _need_memory(memory_store)
        other_user, other_tenant = MemoryScope("tenant-1", "user-3"), MemoryScope("tenant-2", "user-1")
        fact = await _remember(memory_store, _USER, "first version", "session-1")
        forgotten = await _remember(memory_store, _USER, "forgotten one")
        if caps.correction:
            await memory_store.correct(_USER, fact, MemoryFact(_USER, "second version"), _ctx())
        if caps.forgetting:
            await memory_store.forget(_USER, forgotten, _ctx())
        await _remember(memory_store, other_user, "other user")
        kept = await _remember(memory_store, other_tenant, "other tenant")
        groups = await erase_fully(memory_store, EraseTarget.groups_of(ERASED, [SeqRange(0, 10)]))
        assert sum(r.removed for r in groups) == 0
        await erase_fully(memory_store, EraseTarget.user("tenant-1", "user-1"))
        assert await _facts(memory_store, _USER) == []
        if caps.history:
            for fact_id in (fact, forgotten):
                with pytest.raises(MemoryFactNotFoundError):
                    await memory_store.history(_USER, fact_id, _ctx())
        assert len(await _facts(memory_store, other_user)) == 1
        await erase_fully(memory_store, EraseTarget.tenant("tenant-1"))
        assert await _facts(memory_store, other_user) == []
        assert [fid for fid, _ in await _facts(memory_store, other_tenant)] == [kept]

    async def test_erase_keeps_colliding_session_keys_apart(self, memory_store: MemoryStore) -> None:
        """Erasing a session, user or tenant leaves the facts of the other key of each colliding pair.

        Each key of ``COLLIDING_SESSION_KEYS`` gets a fact in its user's
        scope citing its session. A failure means erase builds or matches
        scopes by joining ids (or by prefix).
        """
        _need_memory(memory_store)

        async def seed(key: SessionKey, text: str) -> None:
            await _remember(memory_store, MemoryScope(key.tenant, key.user), text, key.session)

        async def state(key: SessionKey) -> list[tuple[str, str]]:
            return await _facts(memory_store, MemoryScope(key.tenant, key.user))

        await erase_colliding_keys(memory_store, seed, state, [])

    async def test_erase_dry_run_changes_nothing(self, memory_store: MemoryStore) -> None:
        """``dry_run=True`` removes nothing and reports what a real erase then removes.

        A failure means the dry run wrote, or its counts differ from the erase's.
        """
        _need_memory(memory_store)
        await _remember(memory_store, _USER, "one", "session-1")
        await _remember(memory_store, _USER, "two")
        target = EraseTarget.user("tenant-1", "user-1")
        dry = await erase_fully(memory_store, target, dry_run=True)
        assert len(await _facts(memory_store, _USER)) == 2
        real = await erase_fully(memory_store, target)
        assert total(dry, "fact") == total(real, "fact") == 2
        assert total(dry, "revision") == total(real, "revision")

    async def test_erase_is_bounded_and_resumable(self, memory_store: MemoryStore) -> None:
        """Each call removes at most ``max_items`` facts and says ``partial`` until none is left.

        Once done, another call (and an erase of a scope that never existed)
        reports nothing and ``complete``. A failure means the bound was
        ignored or a status lied.
        """
        _need_memory(memory_store)
        for i in range(5):
            await _remember(memory_store, _USER, f"fact number {i}")
        target = EraseTarget.user("tenant-1", "user-1")
        reports = await erase_fully(memory_store, target, max_items=2)
        assert all(r.count("fact") <= 2 for r in reports)
        assert reports[-1].status is EraseStatus.COMPLETE
        assert all(r.status is EraseStatus.PARTIAL for r in reports[:-1])
        assert total(reports, "fact") == 5
        for report in (
            await memory_store.erase(target, _ctx()),
            await memory_store.erase(EraseTarget.tenant("tenant-9"), _ctx()),
        ):
            assert report.removed == 0 and report.status is EraseStatus.COMPLETE

    async def test_cancelled_erase_removes_nothing(self, memory_store: MemoryStore) -> None:
        """An ``erase`` with a cancelled context raises ``OperationCancelledError`` and removes nothing.

        A failure means the store does not check ``ctx`` before it starts.
        """
        _need_memory(memory_store)
        await _remember(memory_store, _USER, "kept", "session-1")
        with pytest.raises(OperationCancelledError):
            await memory_store.erase(_SESSION, expired_context())
        assert len(await _facts(memory_store, _USER)) == 1

    async def test_erased_bytes_leave_the_storage(
        self, memory_store: MemoryStore, raw_storage: RawStorage | None
    ) -> None:
        """After an erase no revision of an erased fact is anywhere in the backend's bytes.

        A corrected fact's earlier text counts. Needs the ``raw_storage``
        fixture. A failure means rows were kept (as tombstones, superseded
        revisions, free pages or a log).
        """
        caps = _need_memory(memory_store)
        if raw_storage is None:
            pytest.skip("no raw_storage fixture: the byte-level check is not run")
        old, gone, kept = marker("old"), marker("erased"), marker("kept")
        fact = await _remember(memory_store, _USER, old, "session-1")
        if caps.correction:
            await memory_store.correct(
                _USER, fact, MemoryFact(_USER, gone, provenance=[_ref("session-1")]), _ctx()
            )
        await _remember(memory_store, MemoryScope("tenant-1", "user-3"), kept, "session-1")
        await erase_fully(memory_store, EraseTarget.user("tenant-1", "user-1"))
        raw = await raw_bytes(raw_storage)
        assert tail(old) not in raw and tail(gone) not in raw, (
            "erased fact text is still in the backend's bytes"
        )
        assert tail(kept) in raw, "the neighbour's fact is gone from the backend's bytes"
