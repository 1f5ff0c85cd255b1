"""The fast turn path keeps the encodings exact (issue 7).

Groups are encoded once per object and a snapshot's bytes are joined from its
groups' bytes; both must equal the plain canonical encoding, byte for byte,
whatever the content (including text that looks like the splice marker).
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    EvictionStatus,
    Message,
    MessageGroup,
    ResidentLimits,
    RetainedRecord,
    Role,
    RuntimeLimits,
    Scope,
    SessionConflictError,
    SessionKey,
    ToolCall,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._codec import canonical_json, digest_bytes, unstructure
from agentium_harness._history import _ENCODED
from agentium_harness._ports import OpContext
from agentium_harness._ports.snapshot import (
    _SNAPSHOTS,
    MAX_ARCHIVE_MARKS,
    ArchiveDivergence,
    ArchiveMark,
    SessionSnapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_digest,
)
from agentium_harness._ports.snapshot_text import _PART_REFS
from agentium_harness._ports.snapshot_text import PART_TEXTS as _MARKS
from agentium_harness._ports.summary import SummaryState, TaskSummary
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing.sqlite_rows import archived_seqs, snapshot_row

pytestmark = pytest.mark.anyio

SCOPE = Scope("t", "u", "s")
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(['"resident":[]', '{"resident":[]}', "\\", '"']))


def _group(seq: int, text: str, arg: str) -> MessageGroup:
    return MessageGroup(
        seq,
        (
            Message(Role.USER, text),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "tool", {"resident": [arg], arg: 1}),)),
            Message(Role.TOOL, text, tool_call_id="c1"),
        ),
        RetainedRecord(SCOPE, uncertainty=(text,)),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT), max_size=5), st.one_of(st.none(), TEXT), st.booleans())
def test_snapshot_bytes_equal_the_plain_canonical_encoding(
    items: list[tuple[str, str]], detail: str | None, seal: bool
) -> None:
    groups = tuple(_group(i, t, a) for i, (t, a) in enumerate(items))
    divergence = None if detail is None else ArchiveDivergence((0,), detail)
    snap = SessionSnapshot(SCOPE, 0, len(groups), groups, divergence=divergence)
    if seal:
        snap = seal_snapshot(snap)
    plain = unstructure(snap)
    assert plain.pop("summary") is None  # an absent summary is left out, not written as null
    assert plain.pop("receipts") == []  # likewise no receipts
    assert snapshot_bytes(snap) == canonical_json(plain)
    with_summary = attrs.evolve(snap, summary=SummaryState(TaskSummary(detail or "", 0)))
    plain_summary = unstructure(with_summary)
    assert plain_summary.pop("receipts") == []
    assert snapshot_bytes(with_summary) == canonical_json(plain_summary)
    for group in groups:
        assert group.canonical_bytes() == canonical_json(unstructure(group))
        assert group.digest == digest_bytes(canonical_json(unstructure(group)))


def test_sealed_digest_matches_a_full_reencoding() -> None:
    snap = seal_snapshot(SessionSnapshot(SCOPE, 0, 2, (_group(0, "a", "b"), _group(1, "c", "d"))))
    plain = SessionSnapshot(SCOPE, 0, 2, snap.resident, format_version=snap.format_version)
    data = unstructure(plain)
    del data["summary"]  # absent, so left out of the canonical bytes
    del data["receipts"]  # empty, so left out too
    assert snap.digest == digest_bytes(canonical_json(data)) == snapshot_digest(snap)


def test_the_group_encoding_cache_forgets_dead_groups() -> None:
    before = len(_ENCODED)
    groups = [_group(i, "x", "y") for i in range(50)]
    for g in groups:
        g.canonical_bytes()
    assert len(_ENCODED) >= before + 50
    del groups, g
    gc.collect()
    assert len(_ENCODED) <= before


def test_the_snapshot_encoding_cache_forgets_dead_snapshots_and_encodes_each_once() -> None:
    before = len(_SNAPSHOTS)
    groups = (_group(0, "x", "y"), _group(1, "z", "w"))
    snaps = [seal_snapshot(SessionSnapshot(SCOPE, 0, 2, groups)) for _ in range(20)]
    for snap in snaps:
        # Sealing leaves the sealed bytes behind: the store's write and a verification reuse them.
        assert _SNAPSHOTS[id(snap)][0] is snapshot_bytes(snap) is snapshot_bytes(snap)
    assert len(_SNAPSHOTS) >= before + 20
    del snaps, snap
    gc.collect()
    assert len(_SNAPSHOTS) <= before


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=10**6), max_size=MAX_ARCHIVE_MARKS, unique=True),
    st.integers(0, 3),
)
def test_a_snapshot_with_archive_marks_is_encoded_once_when_sealed(belows: list[int], boundary: int) -> None:
    # "archived" sorts before "boundary": the seal must still fill the digest into the bytes it
    # encoded, not leave the store's write to encode the whole snapshot a second time.
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    marks = tuple(ArchiveMark(b, when + timedelta(seconds=i)) for i, b in enumerate(sorted(belows)))
    groups = (_group(boundary, "x", "y"), _group(boundary + 1, "z", "w"))
    snap = seal_snapshot(SessionSnapshot(SCOPE, boundary, boundary + 2, groups, archived=marks))
    cached = _SNAPSHOTS[id(snap)][0]
    assert cached is not None
    plain = unstructure(snap)
    del plain["summary"], plain["receipts"]
    assert cached == canonical_json(plain) == snapshot_bytes(snap)
    assert snapshot_digest(snap) == snap.digest
    unsealed = unstructure(attrs.evolve(snap, digest=None))
    del unsealed["summary"], unsealed["receipts"]
    assert snap.digest == digest_bytes(canonical_json(unsealed))


def test_the_archive_mark_cache_forgets_dead_marks() -> None:
    before, refs = len(_MARKS), len(_PART_REFS)
    when = datetime(2026, 1, 2, tzinfo=UTC)
    marks = tuple(ArchiveMark(b, when) for b in range(1, 21))
    snapshot_bytes(SessionSnapshot(SCOPE, 0, 0, (), archived=marks))
    assert len(_MARKS) >= before + 20 and len(_PART_REFS) >= refs + 20
    del marks
    gc.collect()
    assert len(_MARKS) <= before and len(_PART_REFS) <= refs


# -- one transaction for archive and snapshot on one SQLite file -------------------------


ALICE = VerifiedIdentity("tenant-a", "alice", "test")
KEY = SessionKey("tenant-a", "alice", "s1")


class CountingArchive(SQLiteArchive):
    capabilities = SQLiteArchive.capabilities

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.appends = 0

    async def append(self, key: Any, groups: Any, ctx: OpContext) -> Any:
        self.appends += 1
        return await super().append(key, groups, ctx)


def _runtime(path: Path, archive_path: Path | None = None) -> tuple[Any, CountingArchive, SQLiteSessionStore]:
    archive = CountingArchive(SQLiteConfig(path=str(archive_path or path)))
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        owned=[archive, store],
    )
    return rt, archive, store


def _commits(path: Path) -> tuple[list[int], int | None]:
    found = snapshot_row(path, KEY)
    return archived_seqs(path, KEY), None if found is None else found[0]


async def test_one_file_commits_archive_and_snapshot_in_one_transaction(tmp_path: Path) -> None:
    rt, archive, _ = _runtime(tmp_path / "a.db")
    async with rt:
        for i in range(4):
            result = await rt.run(ALICE, "s1", f"q{i}")
        assert result.eviction is EvictionStatus.ARCHIVED and result.boundary == 3
        assert archive.appends == 0  # every eviction went through the joint commit
        assert [r.seq for r in result.archived] == [2]
    assert _commits(tmp_path / "a.db") == ([0, 1, 2], 4)


async def test_separate_files_still_use_two_calls(tmp_path: Path) -> None:
    rt, archive, _ = _runtime(tmp_path / "s.db", tmp_path / "a.db")
    async with rt:
        for i in range(3):
            await rt.run(ALICE, "s1", f"q{i}")
    assert archive.appends == 2
    assert _commits(tmp_path / "a.db")[0] == [0, 1]


async def test_a_lost_compare_and_set_archives_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    rt, _, store = _runtime(path)
    async with rt:
        await rt.run(ALICE, "s1", "q0")
        stored = await store.load(KEY, OpContext())
        assert stored is not None

        class Racing(ScriptedProvider):
            async def complete(self, request: Any, ctx: OpContext) -> Any:
                # Another writer commits the session while this turn runs.
                other = SQLiteSessionStore(SQLiteConfig(path=str(path)))
                await other.save(KEY, stored.snapshot, stored.revision, OpContext())
                await other.aclose()
                return await super().complete(request, ctx)

        rt.provider = Racing(replies=["late"])
        with pytest.raises(SessionConflictError):
            await rt.run(ALICE, "s1", "q1")
    # The joint transaction rolled back whole: group 0 was not archived.
    assert _commits(path) == ([], 2)


async def test_a_conflicting_archive_in_the_joint_commit_marks_the_session_diverged(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    rt, _, _ = _runtime(path)
    async with rt:
        other = SQLiteArchive(SQLiteConfig(path=str(path)))
        await other.append(KEY, [MessageGroup(0, (Message(Role.USER, "someone else"),))], OpContext())
        await other.aclose()
        await rt.run(ALICE, "s1", "q0")
        result = await rt.run(ALICE, "s1", "q1")
        assert result.eviction is EvictionStatus.DIVERGED and result.has("archive_diverged")
        view = await rt.inspect_session(ALICE, "s1")
        assert view.state.value == "diverged" and view.resident_seqs == (0, 1)


async def test_the_decoded_snapshot_cache_is_bounded_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentium_harness.adapters import sqlite as sqlite_module

    monkeypatch.setattr(sqlite_module, "RECENT_BYTES", 4000)
    store = SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "c.db")))
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=str(tmp_path / "c.db"))),
        session_store=store,
    )
    async with rt:
        for i in range(12):
            await rt.run(ALICE, f"s{i}", "x" * 300)
    assert 0 < store._recent_bytes <= 4000
    assert store._recent_bytes == sum(len(entry[1]) for entry in store._recent.values())
    assert len(store._recent) < 12
    # A session that fell out of the cache still loads (decoded from its row).
    loaded = await SQLiteSessionStore(SQLiteConfig(path=str(tmp_path / "c.db"))).load(
        SessionKey("tenant-a", "alice", "s0"), OpContext()
    )
    assert loaded is not None and loaded.revision == 1
