"""Deep or odd JSON is a typed error, never a raw one (issue 21, item 4).

Stored rows are rewritten directly (with :mod:`agentium_harness.testing.sqlite_rows`,
or the in-memory adapters' ``put_raw``), as damage or a hostile writer would;
everything else goes through the public API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    ArchiveCorruptError,
    InvalidJSONError,
    RecordDecodeError,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    SnapshotCorruptError,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    MAX_JSON_DEPTH,
    MessageGroup,
    OpContext,
    decode_json,
    digest_bytes,
    from_json,
)
from agentium_harness.testing.sqlite_rows import group_row, set_group_row, set_snapshot_row, snapshot_row

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
#: ~1,100 levels in 2 KB: deep enough that Python's own parser raised RecursionError.
DEEP = b"[" * 1100 + b"]" * 1100


class Counting(ExtractiveProvider):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def complete(self, request: Any, ctx: OpContext) -> Any:
        self.calls += 1
        return await super().complete(request, ctx)


# -- the decoder itself -------------------------------------------------------------------------

REFUSED = {
    "1,100 levels deep": (DEEP, "deeper than"),
    "objects nested deep": (b'{"a":' * 200 + b"1" + b"}" * 200, "deeper than"),
    "a duplicate key": (b'{"a":1,"a":2}', "appears twice"),
    "NaN": (b"[NaN]", "NaN"),
    "-Infinity": (b'{"x":-Infinity}', "Infinity"),
    "a number too large to be finite": (b"[1e999]", "finite"),
    "an integer of 5,000 digits": (b"1" * 5000, "not valid JSON"),
    "invalid UTF-8": (b'"\xff\xfe"', "UTF-8"),
    "a lone surrogate escape": (b'{"t":"a\\ud800b"}', "lone surrogate"),
    "a lone surrogate in a key": (b'{"\\udc00":1}', "lone surrogate"),
    "a lone surrogate in str input": ('"\ud800"', "lone surrogate"),
    "truncated": (b'{"a":[1,2', "not valid JSON"),
    "not text at all": (12, "expected JSON text"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_decode_json_refuses_with_a_typed_error(case: str) -> None:
    data, words = REFUSED[case]
    with pytest.raises(InvalidJSONError, match=words) as caught:
        decode_json(data)
    # One family: adapters that map RecordDecodeError to their corruption error handle it too.
    assert isinstance(caught.value, RecordDecodeError) and isinstance(caught.value, ValueError)


def test_decode_json_accepts_what_canonical_json_holds() -> None:
    text = '{"a":[1,2.5,{"b":"[[[{{{ \\"quoted\\" \\\\"}],"c":"\\ud83d\\ude00 caf\\u00e9","d":null}'
    assert decode_json(text) == json.loads(text)
    assert decode_json(text.encode()) == json.loads(text)
    at_cap = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert decode_json(at_cap) is not None
    with pytest.raises(InvalidJSONError, match="deeper than 4") as deep:
        decode_json(b"[[[[[1]]]]]", max_depth=4)
    assert deep.value.limit == "max_depth"
    assert decode_json(b"[[[[1]]]]", max_depth=4) == [[[[1]]]]
    with pytest.raises(InvalidJSONError, match="larger than 8") as large:
        decode_json(b'"123456789"', max_bytes=8)
    assert large.value.limit == "max_bytes"
    with pytest.raises(InvalidJSONError) as other:
        decode_json(b'{"a":1,"a":2}')
    assert other.value.limit is None  # refused for what it holds, not for a cap


def test_from_json_reports_deep_text_as_a_record_decode_error() -> None:
    with pytest.raises(RecordDecodeError, match=r"MessageGroup.*deeper than"):
        from_json(DEEP, MessageGroup)


# -- stored snapshots ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    ["deep", "deep inside a real snapshot", "duplicate key", "spaced", "missing field"],
)
async def test_a_damaged_snapshot_row_is_a_typed_error_through_the_runtime_and_changes_nothing(
    tmp_path: Path, damage: str
) -> None:
    db = tmp_path / "agentium.db"
    provider = Counting()
    runtime = create_harness_runtime(
        provider=provider,
        archive=SQLiteArchive(SQLiteConfig(path=str(db))),
        session_store=SQLiteSessionStore(SQLiteConfig(path=str(db))),
    )
    async with runtime:
        await runtime.run(ANA, "s1", "first turn")
        found = snapshot_row(db, KEY)
        assert found is not None
        revision, data = found
        plain = json.loads(data)
        if damage == "deep":
            damaged = DEEP
        elif damage == "deep inside a real snapshot":
            damaged = data.replace(b'"boundary":0', b'"boundary":0,"x":' + DEEP, 1)
        elif damage == "duplicate key":
            # The same snapshot with "boundary" written twice (the first copy wins nowhere: refused).
            damaged = data.replace(b'"boundary":0', b'"boundary":7,"boundary":0', 1)
        elif damage == "spaced":
            # Same content, digest still matching the canonical form: other bytes are still damage.
            damaged = json.dumps(plain, indent=1, sort_keys=True, ensure_ascii=False).encode()
        else:
            del plain["next_seq"]  # a field with a default, left out
            damaged = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert damaged != data
        set_snapshot_row(db, KEY, damaged)
        for _ in range(2):
            with pytest.raises(SnapshotCorruptError):
                await runtime.run(ANA, "s1", "second turn")
        assert provider.calls == 1, "the damaged history never reached the model"
        assert snapshot_row(db, KEY) == (revision, damaged), "the damaged row is left exactly as it was"


async def test_the_in_memory_store_refuses_a_deep_snapshot_too() -> None:
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(), archive=InMemoryArchive(), session_store=store
    )
    async with runtime:
        await runtime.run(ANA, "s1", "first turn")
        row = store.raw(KEY)
        assert row is not None
        store.put_raw(KEY, row[0], DEEP)
        with pytest.raises(SnapshotCorruptError, match="deeper than"):
            await runtime.run(ANA, "s1", "again")
        assert store.raw(KEY) == (row[0], DEEP)


# -- archived groups ----------------------------------------------------------------------------


async def test_a_deep_archive_row_is_a_typed_corruption_error(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    sqlite_archive = SQLiteArchive(SQLiteConfig(path=str(db)))
    memory_archive = InMemoryArchive()
    try:
        for archive in (sqlite_archive, memory_archive):
            runtime = create_harness_runtime(
                provider=ExtractiveProvider(),
                archive=archive,
                session_store=InMemorySessionStore(),
                limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
            )
            for i in range(3):
                await runtime.run(ANA, "s1", f"turn {i}")
            # A row whose digest matches its (deep) bytes: only decoding can tell.
            if archive is sqlite_archive:
                set_group_row(db, KEY, 0, DEEP, digest_bytes(DEEP))
            else:
                memory_archive.put_raw(KEY, 0, DEEP, digest_bytes(DEEP))
            with pytest.raises(ArchiveCorruptError, match="deeper than"):
                await archive.read_groups(KEY, 0, 10, OpContext())
            # The intact group after it still reads.
            assert [g.seq for g in await archive.read_groups(KEY, 1, 10, OpContext())] == [1]
    finally:
        await sqlite_archive.aclose()


class Flaky(ExtractiveSummarizer):
    """The real extractive summarizer, failing while ``fail`` is set (so the summary falls behind)."""

    fail = True

    async def summarize(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            raise RuntimeError("summarizer down")
        return await super().summarize(*args, **kwargs)


async def test_a_deep_archive_row_met_by_the_summary_is_reported_as_changed_not_unavailable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agentium.db"
    summarizer = Flaky()
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=SQLiteArchive(SQLiteConfig(path=str(db))),
        session_store=SQLiteSessionStore(SQLiteConfig(path=str(db))),
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    async with runtime:
        for i in range(3):
            await runtime.run(ANA, "s1", f"turn {i}")
        set_group_row(db, KEY, 0, DEEP, digest_bytes(DEEP))
        summarizer.fail = False
        result = await runtime.run(ANA, "s1", "again")
    assert result.committed
    gaps = [d.message for d in result.diagnostics if d.code == "summary_gap"]
    # Damage, typed as such: before, a RecursionError made it look like an outage.
    assert gaps and "(changed)" in gaps[0] and "RecursionError" not in gaps[0], gaps
    assert group_row(db, KEY, 0)[1] == DEEP
