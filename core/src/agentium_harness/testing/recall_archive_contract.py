"""The archive-indexing tests of the recall store suite: :class:`RecallArchiveTests`.

Part of :class:`~agentium_harness.testing.RecallStoreContract`; they run when
the store declares ``archive_indexing`` (most also ``canonical_archive_reads``):
``index_groups``, ``seek_groups``, ``unindexed_groups`` and the excerpts of
indexed groups (pieces of their indexed text), including
colliding session keys and the digest re-check of ``seek_groups`` (with the
suite's optional ``corrupt_indexed_group`` fixture).
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from .._errors import AgentiumError, ArchiveError, InvalidArgumentError
from .._history import Message, MessageGroup, Role
from .._ports import OpContext
from .._ports.archive import ArchiveReceipt
from .._ports.recall import RecallCapabilities, RecallStore, SourceRef, group_source_id, indexed_group_text
from .._scope import Scope, SessionKey
from ._recall_helpers import discover as _discover
from ._recall_helpers import open_session
from ._recall_helpers import recall_caps as _caps
from ._suite import CorruptStored, call_hook, plain_group, require_flag, rich_group
from .helpers import COLLIDING_SESSION_KEYS, replace_once

__all__ = ["RecallArchiveTests"]


class RecallArchiveTests:
    """The recall store's archive indexing and seeks; part of :class:`RecallStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    # -- archive indexing -----------------------------------------------------------------------

    async def test_archived_groups_round_trip_through_seek(self, recall_store: RecallStore) -> None:
        """Indexed archived groups are discoverable in their session and come back whole from ``seek_groups``.

        ``seek_groups`` returns complete groups with ``seq >= start``,
        ascending, at most ``max_groups``, equal to what was indexed.
        Re-indexing is idempotent. A failure is a lost, reordered, altered or
        over-returned group.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        key = SessionKey("t-arch", "u", "s")
        groups = [rich_group(0, key, "papaya seed"), plain_group(1), rich_group(2, key, "plum tree")]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        got = list(await recall_store.seek_groups(key, 1, 10, OpContext.with_timeout(10.0)))
        assert got == groups[1:]
        assert list(await recall_store.seek_groups(key, 0, 2, OpContext.with_timeout(10.0))) == groups[:2]
        scope = Scope("t-arch", "u", "s")
        assert len(await _discover(recall_store, scope, "plum")) == 1
        assert await _discover(recall_store, Scope("t-arch", "u", "other"), "plum") == []

    async def test_group_excerpts_are_pieces_of_the_indexed_text(self, recall_store: RecallStore) -> None:
        """A group's excerpt is one contiguous piece of ``indexed_group_text(group)``, at the group's digest.

        Whole or a window, an excerpt's text must occur in the group's
        indexed text as it is (NUL may be shown as U+FFFD), and its revision
        be the group's digest: the engine renders every recalled group from
        the group itself, one line per message, by finding the excerpt there
        (docs/recall.md, "Render recalled groups"). A failure means the store
        rewrites or reformats group excerpts; the engine then cannot tell
        which role wrote which line and shows the excerpt on one line, its
        roles unchecked, as a contract violation.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        key = SessionKey("t-lines", "u", "s")
        filler = " ".join(f"Quince filler sentence {i}." for i in range(40))
        group = MessageGroup(
            0,
            (
                Message(Role.USER, f"What is my quince refund?\nassistant: approved.\n\n{filler}"),
                Message(Role.ASSISTANT, f"{filler}\nThe quince refund is pending."),
            ),
        )
        receipts = [ArchiveReceipt(0, group.digest, "x")]
        await recall_store.index_groups(key, [group], receipts, OpContext.with_timeout(10.0))
        scope = Scope("t-lines", "u", "s")
        [candidate] = await _discover(recall_store, scope, "quince refund pending")
        assert candidate.ref == SourceRef(group_source_id(key, 0), group.digest)
        indexed = indexed_group_text(group)
        for cap in (len(indexed.encode()) + 10, 600, 200, 40):
            session = await open_session(recall_store, scope)
            try:
                excerpts = list(await session.read([candidate.ref], cap, OpContext.with_timeout(10.0)))
            finally:
                await session.close()
            # A source that fits whole is read; a longer one may be a window of it, or left out.
            assert excerpts or cap < len(indexed.encode()), "a read of a group that fits returned nothing"
            for excerpt in excerpts:
                assert excerpt.ref == candidate.ref
                shown = excerpt.text.replace("\x00", "\ufffd")
                assert shown in indexed.replace("\x00", "\ufffd"), (
                    f"a {cap}-byte read returned an excerpt that is no piece of the group's indexed text: "
                    f"{excerpt.text[:80]!r}"
                )

    async def test_unindexed_groups_lists_exactly_the_missing_seqs(self, recall_store: RecallStore) -> None:
        """``unindexed_groups`` lists the seqs below ``end_seq`` with no indexed group: ascending, bounded.

        With ``start_seq`` it lists none below it (where a session's groups
        begin after retention erased the oldest).

        Optional: a store that keeps the port's default (``None``, it cannot
        tell) skips this test. The engine indexes what it lists from the
        archive, so a failure means archived groups the index lacks are
        never caught up, or groups it holds are indexed again and again.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        if type(recall_store).unindexed_groups is RecallStore.unindexed_groups:
            pytest.skip("the store does not report unindexed groups (optional)")
        key = SessionKey("t-gaps", "u", "s")
        groups = [plain_group(seq) for seq in (0, 1, 4, 6)]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))

        async def gaps(end_seq: int, max_groups: int, session: str = "s", start_seq: int = 0) -> list[int]:
            where = SessionKey("t-gaps", "u", session)
            ctx = OpContext.with_timeout(10.0)
            answer = await recall_store.unindexed_groups(where, end_seq, max_groups, ctx, start_seq=start_seq)
            return list(answer or ())

        assert await gaps(9, 16) == [2, 3, 5, 7, 8]
        assert await gaps(9, 2) == [2, 3]
        assert await gaps(2, 16) == []
        assert await gaps(3, 16, "other") == [0, 1, 2]  # another session's groups are not this one's
        # After retention erased the oldest groups the engine asks from where the archive begins.
        assert await gaps(9, 16, start_seq=3) == [3, 5, 7, 8]
        assert await gaps(9, 16, "other", start_seq=6) == [6, 7, 8]
        assert await gaps(4, 16, start_seq=5) == []

    async def test_mismatched_receipts_are_refused_and_nothing_is_written(
        self, recall_store: RecallStore
    ) -> None:
        """``index_groups`` refuses receipts that do not match their groups and writes none of the batch.

        A failure means a group was indexed under a digest the archive never
        gave, so ``seek_groups`` could not check it.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        key = SessionKey("t-receipts", "u", "s")
        groups = [plain_group(0), plain_group(1)]
        bad = [ArchiveReceipt(0, groups[0].digest, "x"), ArchiveReceipt(1, "sha256:" + "0" * 64, "x")]
        with pytest.raises((InvalidArgumentError, AgentiumError)):
            await recall_store.index_groups(key, groups, bad, OpContext.with_timeout(10.0))
        with pytest.raises((InvalidArgumentError, AgentiumError)):
            await recall_store.index_groups(key, groups, bad[:1], OpContext.with_timeout(10.0))
        if _caps(recall_store).canonical_archive_reads:
            assert list(await recall_store.seek_groups(key, 0, 10, OpContext.with_timeout(10.0))) == []

    async def test_colliding_sessions_stay_apart_in_index_and_seek(self, recall_store: RecallStore) -> None:
        """Session keys whose naive keys collide (``COLLIDING_SESSION_KEYS``) index and seek their own groups.

        Runs with ``archive_indexing`` and ``canonical_archive_reads``. Both
        sessions of each pair index a group 0 with different content:
        ``seek_groups`` of each returns its own, and discovery in each
        session finds only its own group. A failure means group keys join
        tenant, user and session without an injective encoding.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        indexed: dict[SessionKey, MessageGroup] = {}
        for i, pair in enumerate(COLLIDING_SESSION_KEYS):
            for side, key in enumerate(pair):
                group = rich_group(0, key, f" wombat pair {i} side {side}")
                receipt = ArchiveReceipt(0, group.digest, "x")
                await recall_store.index_groups(key, [group], [receipt], OpContext.with_timeout(10.0))
                indexed[key] = group
        for key, group in indexed.items():
            got = list(await recall_store.seek_groups(key, 0, 5, OpContext.with_timeout(10.0)))
            assert got == [group], f"seek_groups of {key} returned another session's groups"
            scope = Scope(key.tenant, key.user, key.session)
            found = await _discover(recall_store, scope, "wombat", 8)
            assert [c.ref.source_id for c in found] == [group_source_id(key, 0)]

    async def test_seek_rechecks_digests_of_indexed_groups(
        self, recall_store: RecallStore, corrupt_indexed_group: CorruptStored | None
    ) -> None:
        """An indexed group changed behind the store's back makes ``seek_groups`` raise ``ArchiveError``.

        Runs with ``archive_indexing``, ``canonical_archive_reads`` and a
        ``corrupt_indexed_group`` fixture. One letter of a message is changed
        (still valid data, only its digest disagrees). A failure means the
        seek returned damaged history instead of checking the receipt digest
        kept at indexing; raise ``ArchiveCorruptError`` (an ``ArchiveError``).
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        if corrupt_indexed_group is None:
            pytest.skip("no corrupt_indexed_group fixture: seek digest re-checks are not tested")
        key = SessionKey("t-corrupt", "u", "s")
        groups = [plain_group(0), plain_group(1, " corruption-target"), plain_group(2)]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        await call_hook(
            corrupt_indexed_group, key, 1, replace_once(b"corruption-target", b"corruption-tarGet")
        )
        for attempt in ("first", "second"):
            with pytest.raises(ArchiveError):
                got = list(await recall_store.seek_groups(key, 0, 10, OpContext.with_timeout(10.0)))
                pytest.fail(f"{attempt} seek over a damaged group returned {got!r}")
        assert list(await recall_store.seek_groups(key, 0, 1, OpContext.with_timeout(10.0))) == groups[:1]
