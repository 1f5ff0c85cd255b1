"""Bad times and queries given to memory are refused with typed errors, the same way by every store.

A validity bound at the edge of the datetime range with a non-UTC offset has
no UTC time: SQLite raised a bare OverflowError converting it while the
in-memory store accepted it. ``MemoryManager.select(at=...)`` passed a naive
datetime or a string through to bare TypeErrors, and took ``at=0`` as now.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    AckStatus,
    InvalidArgumentError,
    MemoryFact,
    MemoryManager,
    MemoryRejectedError,
    MemoryScope,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import GroupRef, MemoryStore, OpContext, rejection_reason

pytestmark = pytest.mark.anyio

#: The group an extraction reads (its facts cite it): any one will do here.
SOURCES = (GroupRef("agent", 0, "sha256:" + "0" * 64),)

ALICE = MemoryScope("tenant-a", "alice")
EARLY = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
LATE = datetime.max.replace(tzinfo=timezone(timedelta(hours=-1)))


def _store(kind: str, tmp_path: Path) -> MemoryStore:
    return InMemoryMemoryStore() if kind == "memory" else sqlite_store(tmp_path)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_validity_bound_without_a_utc_time_is_rejected_by_every_store(
    tmp_path: Path, kind: str
) -> None:
    store = _store(kind, tmp_path)
    manager = MemoryManager(store)
    for fact in (MemoryFact(ALICE, "x", valid_from=EARLY), MemoryFact(ALICE, "y", valid_until=LATE)):
        ack = await manager.remember_with_result(fact)
        assert ack.status is AckStatus.REJECTED and "out of range" in ack.reason
        with pytest.raises(MemoryRejectedError):
            await store.remember(fact, OpContext.with_timeout(30.0))
    assert await store.lookup(ALICE, "", 10, OpContext.with_timeout(30.0)) == []
    await store.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_select_and_lookup_refuse_a_bad_at_or_query(tmp_path: Path, kind: str) -> None:
    store = _store(kind, tmp_path)
    manager = MemoryManager(store)
    await manager.remember(
        MemoryFact(ALICE, "tea until tomorrow", valid_until=datetime.now(UTC) + timedelta(days=1))
    )
    for at in (datetime.now(), "2020-01-01", 0, LATE):  # a naive datetime is the point
        with pytest.raises(InvalidArgumentError, match="at "):
            await manager.select(ALICE, "tea", at=at)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="at "):
            await store.lookup(ALICE, "tea", 5, OpContext.with_timeout(30.0), at=at)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="query"):
        await store.lookup(ALICE, 42, 5, OpContext.with_timeout(30.0))  # type: ignore[arg-type]
    kept, _ = await manager.select(ALICE, "tea", at=datetime.now(UTC))
    assert [f.text for f in kept] == ["tea until tomorrow"]
    await store.aclose()


class _Broken(InMemoryMemoryStore):
    """A store whose every call raises a foreign exception quoting what it was given."""

    async def remember(self, fact: Any, ctx: OpContext) -> Any:
        raise ValueError(f"cannot store {fact.text}")

    async def list_facts(self, scope: Any, limit: int, ctx: OpContext) -> Any:
        raise OSError("the disk went away")

    async def lookup(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("index corrupt")


async def test_a_stores_foreign_exception_reaches_the_host_as_memory_store_error() -> None:
    """A ValueError, OSError or RuntimeError from the store is a MemoryStoreError, the original its cause."""
    from agentium_harness import MemoryStoreError

    manager = MemoryManager(_Broken())
    with pytest.raises(MemoryStoreError, match="memory remember failed") as raised:
        await manager.remember(MemoryFact(ALICE, "likes tea"))
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(MemoryStoreError) as raised:
        await manager.list(ALICE)
    assert isinstance(raised.value.__cause__, OSError)
    with pytest.raises(MemoryStoreError) as raised:
        await manager.select(ALICE, "tea")
    assert isinstance(raised.value.__cause__, RuntimeError)


class _LyingText(str):
    """A str subclass whose own methods lie about its size and emptiness."""

    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # type: ignore[override]
        return b"x"

    def strip(self, *args: Any) -> str:  # type: ignore[override]
        return "x"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_str_subclass_lying_about_its_size_is_still_rejected(tmp_path: Path, kind: str) -> None:
    """Fact text that is a str subclass is checked as the plain text it holds: over the limit, or empty."""
    manager = MemoryManager(_store(kind, tmp_path))
    huge = await manager.remember_with_result(MemoryFact(ALICE, _LyingText("A" * 100_000)))
    assert huge.status is AckStatus.REJECTED and "over the limit" in huge.reason
    blank = await manager.remember_with_result(MemoryFact(ALICE, _LyingText("   ")))
    assert blank.status is AckStatus.REJECTED and "empty" in blank.reason
    assert await manager.list(ALICE) == ()
    assert type(MemoryFact(ALICE, _LyingText("fine")).text) is str


class _Extractor:
    async def extract(self, scope: MemoryScope, messages: Any, ctx: OpContext) -> list[MemoryFact]:
        return []


@pytest.mark.parametrize(
    "call",
    [
        "drain_grace_nan",
        "drain_grace_str",
        "extract_scope_str",
        "extract_messages_int",
        "extract_messages_str",
        "extract_name_int",
        "start_work_not_callable",
        "start_work_kind_none",
        "aclose_timeout_str",
        "aclose_timeout_nan",
    ],
)
async def test_bad_arguments_to_drain_owned_work_and_aclose_are_typed_and_start_nothing(call: str) -> None:
    """Each was a bare error (an ExceptionGroup, a TypeError) or accepted, failing later inside the work."""
    from agentium_harness.plugin_api import Message, Role

    manager = MemoryManager(InMemoryMemoryStore(), extractor=_Extractor(), owns_store=True)
    said = [Message(Role.USER, "hi")]
    calls: dict[str, Any] = {
        "drain_grace_nan": lambda: manager.drain(1.0, grace_s=float("nan")),
        "drain_grace_str": lambda: manager.drain(1.0, grace_s="2"),
        "extract_scope_str": lambda: manager.extract_in_background("tenant-a", said, "ex", sources=SOURCES),
        "extract_messages_int": lambda: manager.extract_in_background(ALICE, 5, "ex", sources=SOURCES),
        "extract_messages_str": lambda: manager.extract_in_background(ALICE, "hi", "ex", sources=SOURCES),
        "extract_name_int": lambda: manager.extract_in_background(ALICE, said, 5, sources=SOURCES),
        "start_work_not_callable": lambda: manager.start_work("w", "final-write", 5),
        "start_work_kind_none": lambda: manager.start_work("w", None, _Extractor),
        "aclose_timeout_str": lambda: manager.aclose("10"),
        "aclose_timeout_nan": lambda: manager.aclose(float("nan")),
    }
    with pytest.raises(InvalidArgumentError):
        outcome = calls[call]()
        if hasattr(outcome, "__await__"):
            await outcome
    assert manager.running() == () and not manager.closed
    assert (await manager.drain(30.0)).items == ()


_BAD_EXTRACTIONS = [
    "scope_str",
    "messages_int",
    "messages_str",
    "messages_not_message",
    "messages_too_many",
    "messages_raising",
    "messages_endless",
    "name_int",
    "name_blank",
    "sources_str",
    "sources_empty",
    "sources_not_groupref",
    "sources_too_many",
    "reading_str",
    "reading_made_by_hand",
    "reading_altered",
    "reading_of_another_manager",
    "reading_of_another_user",
    "reading_missing_a_session",
]


def _raising(items: list[Any]) -> Iterator[Any]:
    yield from items
    raise RuntimeError("the host's sequence broke")


@pytest.mark.parametrize("call", _BAD_EXTRACTIONS)
async def test_bad_arguments_to_extract_in_background_are_typed_without_an_extractor_too(call: str) -> None:
    """Without an extractor each returned None unchecked; with one, the same call was refused."""
    from agentium_harness import MAX_APPEND_MESSAGES, ErasureReading
    from agentium_harness.plugin_api import MAX_PROVENANCE, Message, Role

    store = InMemoryMemoryStore()
    await store.remember(MemoryFact(ALICE, "kept"), OpContext())
    manager, other = MemoryManager(store), MemoryManager(InMemoryMemoryStore())
    said = [Message(Role.USER, "hi")]
    reading = await manager.erasure_reading(ALICE, sessions=["agent"])
    altered = await manager.erasure_reading(ALICE, sessions=["agent"])
    object.__setattr__(altered, "sessions", ("agent", "other"))
    bad: dict[str, dict[str, Any]] = {
        "scope_str": {"scope": "tenant-a"},
        "messages_int": {"messages": 5},
        "messages_str": {"messages": "hi"},
        "messages_not_message": {"messages": ["hi"]},
        # A host's iterable is read once and bounded (one group's MAX_APPEND_MESSAGES): one too many,
        # one that raises and one that never ends are refused, the last without holding the loop.
        "messages_too_many": {"messages": said * (MAX_APPEND_MESSAGES + 1)},
        "messages_raising": {"messages": _raising(said)},
        "messages_endless": {"messages": itertools.repeat(said[0])},
        "name_int": {"name": 5},
        "name_blank": {"name": "  "},
        "sources_str": {"sources": "agent"},
        "sources_empty": {"sources": []},
        "sources_not_groupref": {"sources": [("agent", 0)]},
        "sources_too_many": {
            "sources": [GroupRef("agent", n, SOURCES[0].digest) for n in range(MAX_PROVENANCE + 1)]
        },
        "reading_str": {"reading": "reading"},
        "reading_made_by_hand": {"reading": ErasureReading(ALICE, ("agent",), (), (), datetime.now(UTC))},
        "reading_altered": {"reading": altered},
        "reading_of_another_manager": {"reading": await other.erasure_reading(ALICE, sessions=["agent"])},
        "reading_of_another_user": {
            "reading": await manager.erasure_reading(MemoryScope("tenant-a", "bob"), sessions=["agent"])
        },
        "reading_missing_a_session": {"reading": await manager.erasure_reading(ALICE, sessions=["other"])},
    }
    args: dict[str, Any] = {"scope": ALICE, "messages": said, "name": "ex", "sources": SOURCES}
    args.update(bad[call])
    with pytest.raises(InvalidArgumentError):
        manager.extract_in_background(args.pop("scope"), args.pop("messages"), args.pop("name"), **args)
    # A valid call still starts nothing without an extractor: None, with or without a reading.
    assert manager.extract_in_background(ALICE, said, "ex", sources=SOURCES) is None
    assert manager.extract_in_background(ALICE, said, "ex", sources=SOURCES, reading=reading) is None
    assert manager.running() == () and not manager.closed
    assert (await manager.drain(30.0)).items == ()
    assert [f.text for f in await manager.list(ALICE)] == ["kept"]


async def test_the_in_memory_adapters_refuse_a_dry_run_flag_that_is_not_a_bool() -> None:
    """dry_run="no" was truthy in every in-memory adapter (as in the SQLite ones before): refused, typed."""
    from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
    from agentium_harness.adapters.memory_recall import InMemoryRecallStore
    from agentium_harness.plugin_api import EraseTarget

    memory = InMemoryMemoryStore()
    await memory.remember(MemoryFact(ALICE, "kept"), OpContext())
    target = EraseTarget.user("tenant-a", "alice")
    for adapter in (memory, InMemoryArchive(), InMemorySessionStore(), InMemoryRecallStore()):
        for flag in ("no", 0, None):
            with pytest.raises(InvalidArgumentError, match="dry_run"):
                await adapter.erase(target, OpContext(), dry_run=flag)  # type: ignore[attr-defined]
            with pytest.raises(InvalidArgumentError, match="ctx"):
                await adapter.erase(target, None)  # type: ignore[attr-defined]
    assert [f.text for f in await memory.list_facts(ALICE, 10, OpContext())] == ["kept"]


@pytest.mark.parametrize("scope", ["tenant-a/alice", None, ("tenant-a", "alice")])
async def test_the_in_memory_store_refuses_a_scope_or_context_of_the_wrong_type(scope: object) -> None:
    """Each was a bare AttributeError ('str' object has no attribute 'owns'); now typed, as in SQLite."""
    store = InMemoryMemoryStore()
    ack = await store.remember(MemoryFact(ALICE, "kept"), OpContext())
    assert ack.fact_id is not None
    fid, ctx = ack.fact_id, OpContext()
    bad: Any = scope
    for call in (
        lambda: store.lookup(bad, "q", 5, ctx),
        lambda: store.list_facts(bad, 5, ctx),
        lambda: store.history(bad, fid, ctx),
        lambda: store.forget(bad, fid, ctx),
        lambda: store.correct(bad, fid, MemoryFact(ALICE, "changed"), ctx),
        lambda: store.remember(MemoryFact(ALICE, "other"), bad),
        lambda: store.lookup(ALICE, "q", 5, bad),
    ):
        with pytest.raises(InvalidArgumentError):
            await call()
    assert [(f.text, f.revision) for f in await store.list_facts(ALICE, 10, ctx)] == [("kept", 1)]


@pytest.mark.parametrize("seq", [10**5000, 2**63, -1], ids=["5000-digits", "2**63", "negative"])
async def test_a_provenance_seq_out_of_range_is_refused_before_any_store(seq: int) -> None:
    """A 5,000-digit seq was stored by the in-memory store; each block render raised ValueError."""
    from agentium_harness.plugin_api import GroupRef

    with pytest.raises(InvalidArgumentError, match="provenance seq"):
        GroupRef("s1", seq, "sha256:" + "0" * 64)
    assert GroupRef("s1", 2**63 - 1, "sha256:" + "0" * 64).label() == f"s1#{2**63 - 1}"


@pytest.mark.parametrize(
    "revision", [10**5000, 0, -3, True, "2"], ids=["5000-digits", "0", "-3", "True", "str"]
)
def test_a_stored_fact_revision_out_of_range_is_refused(revision: object) -> None:
    """A StoredFact with such a revision was injected labeled 'True' or '-3', or broke the block's render."""
    from agentium_harness.plugin_api import FactStatus, StoredFact

    with pytest.raises(InvalidArgumentError, match="revision"):
        StoredFact("m-1", revision, FactStatus.CURRENT, MemoryFact(ALICE, "t"), datetime.now(UTC))  # type: ignore[arg-type]


@pytest.mark.parametrize("provenance", [None, 5, "endless"])
def test_provenance_that_is_no_collection_or_endless_is_refused_typed(provenance: object) -> None:
    """None or 5 was a bare TypeError from the constructor; an endless iterable was read without end."""
    import itertools

    from agentium_harness.plugin_api import GroupRef

    given: Any = provenance
    ref = GroupRef("s1", 1, "sha256:" + "0" * 64)
    read = itertools.count()
    if provenance == "endless":  # endless in spirit; bounded so a regression fails, not hangs
        given = (ref for _ in range(100_000) if next(read) >= 0)
    with pytest.raises(InvalidArgumentError, match="provenance"):
        MemoryFact(ALICE, "x", provenance=given)
    assert next(read) <= 321
    many = [GroupRef("s1", i, "sha256:" + "0" * 64) for i in range(40)]
    assert "cites 40 groups" in str(rejection_reason(MemoryFact(ALICE, "x", provenance=many)))
