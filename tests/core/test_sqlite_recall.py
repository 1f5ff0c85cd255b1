"""The SQLite recall store against a real temp-file database: every rule of the recall store semantics.

Scope isolation, inert FTS5 syntax, truthful revisions, bounds, excerpts,
archive indexing and canonical reads, persistence, cancellation and closing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness._codec import digest_of
from agentium_harness._errors import (
    AgentiumError,
    ArchiveCorruptError,
    CapabilityError,
    InvalidArgumentError,
    OperationCancelledError,
    RecallUnavailableError,
)
from agentium_harness._history import Message, MessageGroup, RetainedRecord, Role
from agentium_harness._plugins.spec import path_option_names
from agentium_harness._ports import CancelSignal, OpContext, is_port_stub
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.erasure import EraseTarget, PhysicalErasure
from agentium_harness._ports.recall import (
    Completeness,
    OmittedContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    SourceOwner,
    SourceRef,
    ValidationStatus,
    document_source_id,
    group_source_id,
)
from agentium_harness._scope import Scope, SessionKey
from agentium_harness.adapters import _sqlite_sql, sqlite_recall
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import (
    FTS5UnavailableError,
    SQLiteRecallConfig,
    SQLiteRecallError,
    SQLiteRecallSession,
    SQLiteRecallStore,
)
from agentium_harness.testing import TRICKY_SESSION_KEYS, plain_group, rich_group

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "alice", "s1", "proj", "repo")
KEY = SCOPE.session_key
CTX = OpContext.unbounded


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentium.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteRecallStore]:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    yield adapter
    await adapter.aclose()


async def session_of(store: SQLiteRecallStore, scope: Scope = SCOPE) -> RecallSession:
    return await store.open(scope, RecallLimits(), CTX())


def receipts(groups: Sequence[MessageGroup]) -> list[ArchiveReceipt]:
    return [ArchiveReceipt(g.seq, g.digest, f"test/{g.seq}") for g in groups]


def rows(db: Path, sql: str = "SELECT count(*) FROM recall_sources") -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the tables do not exist: nothing was written
            return [(0,)]


def count(db: Path) -> int:
    found = rows(db)[0][0]
    assert isinstance(found, int)
    return found


def group(seq: int, user: str, assistant: str, retained: RetainedRecord | None = None) -> MessageGroup:
    return MessageGroup(seq, (Message(Role.USER, user), Message(Role.ASSISTANT, assistant)), retained)


# -- declaration, construction, configuration ------------------------------------------------------


def test_declares_every_capability_and_implements_each() -> None:
    declared = SQLiteRecallStore.capabilities.declared()
    assert declared == dict.fromkeys(declared, True)
    assert SQLiteRecallStore.session_class is SQLiteRecallSession
    for flag, method in RecallCapabilities.METHODS.items():
        owner: type = SQLiteRecallSession if method.startswith("session:") else SQLiteRecallStore
        name = method.removeprefix("session:")
        assert not is_port_stub(getattr(owner, name)), flag


def test_config_is_a_sqlite_config_with_a_path_option_and_a_checked_cap() -> None:
    config = SQLiteRecallConfig()
    assert isinstance(config, SQLiteConfig)
    assert config.path == "agentium.db"  # the same default file as the archive and session store
    assert path_option_names(SQLiteRecallConfig) == ("path",)
    for bad in (0, -1, True, "10"):
        with pytest.raises((TypeError, ValueError)):
            SQLiteRecallConfig(max_ranked_matches=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SQLiteRecallStore(SQLiteConfig())  # type: ignore[arg-type]


async def test_building_does_no_io(db: Path) -> None:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    assert not await anyio.Path(db).exists()
    await adapter.open(SCOPE, RecallLimits(), CTX())  # opening a session acquires nothing either
    assert not await anyio.Path(db).exists()
    await adapter.aclose()


def test_missing_fts5_fails_construction_with_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, db: Path
) -> None:
    monkeypatch.setattr(sqlite_recall, "_fts5_available", lambda: False)
    with pytest.raises(FTS5UnavailableError, match="FTS5") as caught:
        SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    assert isinstance(caught.value, RecallUnavailableError) and isinstance(caught.value, SQLiteRecallError)
    assert isinstance(caught.value, CapabilityError)
    assert not db.exists()


async def test_missing_fts5_module_at_first_open_is_the_same_error(
    monkeypatch: pytest.MonkeyPatch, db: Path
) -> None:
    # What a SQLite without FTS5 says when the schema names the module.
    monkeypatch.setattr(sqlite_recall, "SCHEMA", ("CREATE VIRTUAL TABLE recall_fts USING fts5_absent(x)",))
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        with pytest.raises(FTS5UnavailableError, match="no FTS5"):
            await adapter.index_document(SourceOwner("acme"), "d", "text", CTX())
    finally:
        await adapter.aclose()


def test_the_real_probe_finds_fts5() -> None:
    assert sqlite_recall._fts5_available() is True


async def test_shares_one_file_with_the_archive_and_session_store(db: Path) -> None:
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        groups = [plain_group(0, " shared file")]
        got = await archive.append(KEY, groups, CTX())
        assert await recall.index_groups(KEY, groups, got, CTX()) == 1
        assert await sessions.list_sessions("acme", "alice", 10, CTX()) == []
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, CTX())] == [0]
        found = await (await session_of(recall)).discover("shared", 8, CTX())
        assert [c.ref.source_id for c in found] == [group_source_id(KEY, 0)]
    finally:
        for adapter in (archive, sessions, recall):
            await adapter.aclose()
    tables = {str(r[0]) for r in rows(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "groups", "recall_sources", "recall_texts"} <= tables
    theirs = {"meta", "sessions", "groups", "revision_floor", "sqlite_sequence"}  # the archive's and store's
    assert all(t.startswith("recall_") for t in tables - theirs)


# -- documents, discovery and reads ----------------------------------------------------------------


async def test_document_round_trip_with_a_content_revision(store: SQLiteRecallStore) -> None:
    owner = SourceOwner("acme")
    ref = await store.index_document(owner, "handbook", "Deploys happen on Tuesdays.", CTX(), title="Ops")
    assert ref.source_id == document_source_id(owner, "handbook")
    assert ref.revision == digest_of({"title": "Ops", "text": "Deploys happen on Tuesdays."})
    session = await session_of(store)
    [candidate] = await session.discover("when do deploys happen", 8, CTX())
    assert candidate.ref == ref and candidate.owner == owner and candidate.title == "Ops"
    assert candidate.size_bytes == len(b"Deploys happen on Tuesdays.")
    assert candidate.score > 0
    [excerpt] = await session.read([ref], 2048, CTX())
    assert excerpt.text == "Deploys happen on Tuesdays."
    assert excerpt.completeness is Completeness.COMPLETE and excerpt.omitted == frozenset()


async def test_titles_are_searched(store: SQLiteRecallStore) -> None:
    await store.index_document(SourceOwner("acme"), "d", "body words only", CTX(), title="Zebra notes")
    found = await (await session_of(store)).discover("zebra", 8, CTX())
    assert len(found) == 1


async def test_rank_order_best_first(store: SQLiteRecallStore) -> None:
    owner = SourceOwner("acme")
    await store.index_document(owner, "weak", "kubernetes appears once among many other words here", CTX())
    await store.index_document(owner, "strong", "kubernetes kubernetes kubernetes cluster", CTX())
    await store.index_document(owner, "none", "nothing relevant", CTX())
    for i in range(4):  # kubernetes is rare, so matching it alone clears the relevance floor
        await store.index_document(owner, f"other{i}", f"unrelated text number {i}", CTX())
    found = await (await session_of(store)).discover("kubernetes cluster", 8, CTX())
    assert [c.ref.source_id for c in found] == [
        document_source_id(owner, "strong"),
        document_source_id(owner, "weak"),
    ]
    assert found[0].score > found[1].score


async def test_empty_and_punctuation_queries_find_nothing(store: SQLiteRecallStore) -> None:
    await store.index_document(SourceOwner("acme"), "d", "anything at all", CTX())
    session = await session_of(store)
    for query in ("", "   ", "\n\t", '"', "*", "()", "-", '""'):
        assert await session.discover(query, 8, CTX()) == []


async def test_a_one_megabyte_query_works(store: SQLiteRecallStore) -> None:
    await store.index_document(SourceOwner("acme"), "d", "the needle is here", CTX())
    query = "needle " + "x" * 1_000_000
    found = await (await session_of(store)).discover(query, 8, CTX())
    assert len(found) == 1
    found = await (await session_of(store)).discover("needle " * 150_000, 8, CTX())
    assert len(found) == 1


FTS_SYNTAX = ('"', "*", "NEAR", "OR", "-", "AND NOT", "(", ")", ":", "^", "NEAR(", '"unclosed', "a:b", "x*")


@pytest.mark.parametrize("syntax", FTS_SYNTAX)
async def test_fts5_syntax_in_queries_is_matched_as_words(store: SQLiteRecallStore, syntax: str) -> None:
    owner = SourceOwner("acme")
    await store.index_document(owner, "plain", "apple banana", CTX())
    await store.index_document(owner, "syntax", f"cherry {syntax} near or and not a b x", CTX())
    session = await session_of(store)
    # Never an error, whatever the syntax does to FTS5.
    await session.discover(f"apple {syntax} banana", 8, CTX())
    await session.discover(syntax, 8, CTX())
    await session.discover(f"({syntax}", 8, CTX())
    # "-banana" does not exclude banana and "apple NOT banana" is three words.
    found = await session.discover(f"{syntax} -banana", 8, CTX())
    assert document_source_id(owner, "plain") in {c.ref.source_id for c in found}


async def test_fts5_operator_words_are_plain_terms(store: SQLiteRecallStore) -> None:
    owner = SourceOwner("acme")
    await store.index_document(owner, "near", "we sat near the window", CTX())
    await store.index_document(owner, "other", "apple banana", CTX())
    session = await session_of(store)
    found = await session.discover("NEAR", 8, CTX())
    assert [c.ref.source_id for c in found] == [document_source_id(owner, "near")]
    # "apple AND NOT banana" would exclude "other" if it were syntax.
    found = await session.discover("apple AND NOT banana", 8, CTX())
    assert document_source_id(owner, "other") in {c.ref.source_id for c in found}
    # A column filter ("text:") is not a column filter.
    assert await session.discover("title:window", 8, CTX()) != []


async def test_fts5_syntax_in_documents_is_stored_and_read_verbatim(store: SQLiteRecallStore) -> None:
    text = 'He said "NEAR(a b)" OR -x AND NOT y* (unbalanced: ^z'
    ref = await store.index_document(SourceOwner("acme"), "d", text, CTX(), title='"quoted" *title*')
    session = await session_of(store)
    found = await session.discover("unbalanced", 8, CTX())
    assert [c.ref for c in found] == [ref]
    assert found[0].title == '"quoted" *title*'
    [excerpt] = await session.read([ref], 2048, CTX())
    assert excerpt.text == text


# -- scope isolation -------------------------------------------------------------------------------

VISIBLE_OWNERS = (
    SourceOwner("acme"),
    SourceOwner("acme", user="alice"),
    SourceOwner("acme", user="alice", session="s1"),
    SourceOwner("acme", project="proj"),
    SourceOwner("acme", repository="repo"),
    SourceOwner("acme", "alice", "s1", "proj", "repo"),
)
FOREIGN_OWNERS = (
    SourceOwner("other"),
    SourceOwner("ACME"),
    SourceOwner("acme", user="bob"),
    SourceOwner("acme", "bob", "s1"),  # the same session id under another user
    SourceOwner("acme", project="other-proj"),
    SourceOwner("acme", repository="other-repo"),
    SourceOwner("acme", "alice", "s2"),
)


async def index_owners(store: SQLiteRecallStore) -> tuple[list[SourceRef], list[SourceRef]]:
    visible = [
        await store.index_document(o, f"v{i}", "shared secret words", CTX())
        for i, o in enumerate(VISIBLE_OWNERS)
    ]
    foreign = [
        await store.index_document(o, f"f{i}", "shared secret words", CTX())
        for i, o in enumerate(FOREIGN_OWNERS)
    ]
    return visible, foreign


async def test_only_visible_sources_are_discovered_read_and_validated(store: SQLiteRecallStore) -> None:
    visible, foreign = await index_owners(store)
    session = await session_of(store)
    found = await session.discover("shared secret", 50, CTX())
    assert {c.ref for c in found} == set(visible)
    assert all(c.owner.visible_to(SCOPE) for c in found)
    excerpts = await session.read([*foreign, *visible], 2048, CTX())
    assert [e.ref for e in excerpts] == visible
    checks = await session.validate([*foreign, *visible], CTX())
    assert [v.status for v in checks] == [ValidationStatus.FORBIDDEN] * len(foreign) + [
        ValidationStatus.CURRENT
    ] * len(visible)
    assert all(v.current_revision is None for v in checks[: len(foreign)])


async def test_forbidden_is_decided_from_the_id_so_existence_never_leaks(store: SQLiteRecallStore) -> None:
    _, foreign = await index_owners(store)
    missing = SourceRef(document_source_id(SourceOwner("other"), "never-indexed"), "r")
    session = await session_of(store)
    for method in (session.validate, session.validate_current):
        checks = await method([foreign[0], missing], CTX())
        assert [v.status for v in checks] == [ValidationStatus.FORBIDDEN, ValidationStatus.FORBIDDEN]


async def test_a_narrower_scope_sees_fewer_sources(store: SQLiteRecallStore) -> None:
    visible, _ = await index_owners(store)
    bare = Scope("acme", "alice", "s1")  # no project, no repository
    found = await (await session_of(store, bare)).discover("shared", 50, CTX())
    assert {c.ref for c in found} == {visible[0], visible[1], visible[2]}


async def test_foreign_matches_never_take_a_visible_sources_place(db: Path) -> None:
    # A tiny ranking cap and many newer foreign matches: the scope filter runs before every LIMIT.
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), max_ranked_matches=3))
    try:
        mine = await adapter.index_document(SourceOwner("acme"), "mine", "needle haystack", CTX())
        for i in range(40):
            await adapter.index_document(SourceOwner("other"), f"d{i}", "needle needle haystack", CTX())
        found = await (await session_of(adapter)).discover("needle haystack", 1, CTX())
        assert [c.ref for c in found] == [mine]
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("key", TRICKY_SESSION_KEYS, ids=lambda k: repr(k.key()))
async def test_hostile_ids_are_bound_not_interpolated(store: SQLiteRecallStore, key: SessionKey) -> None:
    owner = SourceOwner(key.tenant, key.user, key.session)
    scope = Scope(key.tenant, key.user, key.session)
    ref = await store.index_document(owner, key.session, "hostile id text", CTX(), title=key.session)
    grouped = [plain_group(0, " hostile id text")]
    assert await store.index_groups(key, grouped, receipts(grouped), CTX()) == 1
    session = await session_of(store, scope)
    found = await session.discover("hostile", 8, CTX())
    assert {c.ref.source_id for c in found} == {ref.source_id, group_source_id(key, 0)}
    assert [e.ref for e in await session.read([ref], 2048, CTX())] == [ref]
    assert [g.seq for g in await store.seek_groups(key, 0, 5, CTX())] == [0]
    assert await store.delete_document(owner, key.session, CTX()) is True


async def test_lookalike_ids_stay_apart(store: SQLiteRecallStore) -> None:
    a = await store.index_document(SourceOwner("t", "u", "a/b"), "d", "lookalike one", CTX())
    b = await store.index_document(SourceOwner("t", "u", "a%2Fb"), "d", "lookalike two", CTX())
    assert a.source_id != b.source_id
    found = await (await session_of(store, Scope("t", "u", "a/b"))).discover("lookalike", 8, CTX())
    assert [c.ref for c in found] == [a]


async def test_archived_groups_are_owned_by_their_session(store: SQLiteRecallStore) -> None:
    groups = [group(0, "where is the config", "it is in settings.toml")]
    await store.index_groups(KEY, groups, receipts(groups), CTX())
    mine = await session_of(store)
    [candidate] = await mine.discover("settings", 8, CTX())
    assert candidate.owner == SourceOwner.of_session(KEY)
    [excerpt] = await mine.read([candidate.ref], 2048, CTX())
    assert excerpt.text == "user: where is the config\nassistant: it is in settings.toml"
    other_session = await session_of(store, Scope("acme", "alice", "s2"))
    assert await other_session.discover("settings", 8, CTX()) == []
    assert [v.status for v in await other_session.validate([candidate.ref], CTX())] == [
        ValidationStatus.FORBIDDEN
    ]


# -- revisions -------------------------------------------------------------------------------------


async def test_revisions_are_truthful_after_update_and_delete(store: SQLiteRecallStore, db: Path) -> None:
    owner = SourceOwner("acme")
    first = await store.index_document(owner, "d", "version one text", CTX())
    again = await store.index_document(owner, "d", "version one text", CTX())
    assert again == first  # identical content keeps the revision
    retitled = await store.index_document(owner, "d", "version one text", CTX(), title="t")
    assert retitled.revision != first.revision
    second = await store.index_document(owner, "d", "version two text", CTX(), title="t")
    assert second.revision not in {first.revision, retitled.revision}
    assert count(db) == 1
    session = await session_of(store)
    [old, new] = await session.validate_current([first, second], CTX())
    assert (old.status, old.current_revision) == (ValidationStatus.CHANGED, second.revision)
    assert (new.status, new.current_revision) == (ValidationStatus.CURRENT, second.revision)
    assert [e.ref for e in await session.read([first, second], 2048, CTX())] == [second]
    assert [c.ref for c in await session.discover("version", 8, CTX())] == [second]
    assert await session.discover("one", 8, CTX()) == []  # the old text is no longer indexed

    assert await store.delete_document(owner, "d", CTX()) is True
    assert await store.delete_document(owner, "d", CTX()) is False
    [gone] = await session.validate([second], CTX())
    assert gone.status is ValidationStatus.DELETED and gone.current_revision is None
    assert await session.read([second], 2048, CTX()) == []
    assert await session.discover("version", 8, CTX()) == []
    assert rows(db, "SELECT count(*) FROM recall_texts") == [(0,)]


async def test_identical_reindexing_writes_nothing(store: SQLiteRecallStore, db: Path) -> None:
    await store.index_document(SourceOwner("acme"), "d", "same", CTX())
    before = rows(db, "SELECT id FROM recall_sources")
    await store.index_document(SourceOwner("acme"), "d", "same", CTX())
    assert rows(db, "SELECT id FROM recall_sources") == before


@pytest.mark.parametrize(
    "source_id",
    [
        "bogus",
        "",
        "doc/acme",
        "doc/~/~/~/~/~/d",  # a document needs a tenant
        "doc/acme/~/~/~/~/%41",  # non-canonical escape
        "doc/acme/~/~/~/~/d/extra",
        "group/acme/alice/s1",
        "group/acme/alice/s1/01",
        "group/acme/alice/s1/-1",
        "group/acme/alice/s1/x",
        "group/acme/alice/s1/\uff11",
        "group/acme/%00/s1/1",  # decodes to a NUL id
    ],
)
async def test_ids_the_store_could_not_have_made_are_unknown(
    store: SQLiteRecallStore, source_id: str
) -> None:
    session = await session_of(store)
    [check] = await session.validate([SourceRef(source_id, "r")], CTX())
    assert check.status is ValidationStatus.UNKNOWN
    assert await session.read([SourceRef(source_id, "r")], 2048, CTX()) == []


async def test_one_validation_per_ref_in_order(store: SQLiteRecallStore) -> None:
    ref = await store.index_document(SourceOwner("acme"), "d", "text", CTX())
    refs = [ref, SourceRef("bogus", "r"), ref, SourceRef(ref.source_id, "stale")]
    checks = await (await session_of(store)).validate(refs, CTX())
    assert [c.ref for c in checks] == refs
    assert [c.status for c in checks] == [
        ValidationStatus.CURRENT,
        ValidationStatus.UNKNOWN,
        ValidationStatus.CURRENT,
        ValidationStatus.CHANGED,
    ]


# -- bounds ----------------------------------------------------------------------------------------


async def test_max_candidates_is_respected(store: SQLiteRecallStore) -> None:
    for i in range(20):
        await store.index_document(SourceOwner("acme"), f"d{i}", f"common word {'x ' * i}", CTX())
    session = await session_of(store)
    found = await session.discover("common", 5, CTX())
    assert len(found) == 5
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    assert len(await session.discover("common", 50, CTX())) == 20
    assert await session.discover("common", 0, CTX()) == []
    assert await session.discover("common", -3, CTX()) == []


async def test_discovery_bytes_stay_within_remaining_bytes(store: SQLiteRecallStore) -> None:
    for i in range(6):
        await store.index_document(SourceOwner("acme"), f"d{i}", "budget word", CTX(), title="t" * 10)
    session = await session_of(store)
    every = await session.discover("budget", 8, CTX())
    each = every[0].discovery_bytes
    assert all(c.discovery_bytes == each for c in every)
    for budget in (0, each - 1, each, 3 * each + 1):
        found = await session.discover("budget", 8, OpContext(remaining_bytes=budget))
        assert sum(c.discovery_bytes for c in found) <= budget
        assert len(found) == budget // each  # stops just before exceeding


async def test_reads_respect_excerpt_byte_and_token_budgets(store: SQLiteRecallStore) -> None:
    refs = [await store.index_document(SourceOwner("acme"), f"d{i}", "x" * 100, CTX()) for i in range(4)]
    session = await session_of(store)
    assert len(await session.read(refs, 2048, CTX())) == 4
    by_bytes = await session.read(refs, 2048, OpContext(remaining_bytes=250))
    assert [e.ref for e in by_bytes] == refs[:2]
    by_tokens = await session.read(refs, 2048, OpContext(remaining_tokens=75))  # 25 tokens each
    assert [e.ref for e in by_tokens] == refs[:3]
    small = await session.read(refs[:1], 40, CTX())
    assert len(small[0].text.encode()) <= 40
    assert small[0].completeness is Completeness.TRUNCATED


async def test_long_sources_give_partial_excerpts_with_omission_flags(store: SQLiteRecallStore) -> None:
    text = (
        "The release is planned for March. "
        + "Filler sentence with ordinary words. " * 20
        + "Correction: it is not March anymore, it moved to May."
    )
    ref = await store.index_document(SourceOwner("acme"), "d", text, CTX())
    session = await session_of(store)
    await session.discover("release planned", 8, CTX())  # read picks its window with these terms
    [excerpt] = await session.read([ref], 120, CTX())
    assert excerpt.completeness is Completeness.PARTIAL
    assert excerpt.text.startswith("The release is planned for March.")
    assert len(excerpt.text.encode()) <= 120
    assert excerpt.omitted == {OmittedContext.SOURCE, OmittedContext.CORRECTION, OmittedContext.NEGATION}


# -- archive indexing and canonical reads ----------------------------------------------------------


async def test_index_groups_is_idempotent_and_counts_new_groups(store: SQLiteRecallStore, db: Path) -> None:
    groups = [plain_group(i, " indexed") for i in range(5)]
    assert await store.index_groups(KEY, groups[:3], receipts(groups[:3]), CTX()) == 3
    assert await store.index_groups(KEY, groups, receipts(groups), CTX()) == 2
    assert await store.index_groups(KEY, groups, receipts(groups), CTX()) == 0
    assert await store.index_groups(KEY, [], [], CTX()) == 0
    assert count(db) == 5
    found = await (await session_of(store)).discover("indexed", 8, CTX())
    assert {c.ref.revision for c in found} == {g.digest for g in groups}


async def test_a_reconciled_group_replaces_the_indexed_one(store: SQLiteRecallStore, db: Path) -> None:
    old, new = plain_group(0, " before"), plain_group(0, " after")
    await store.index_groups(KEY, [old], receipts([old]), CTX())
    assert await store.index_groups(KEY, [new], receipts([new]), CTX()) == 1
    assert await store.seek_groups(KEY, 0, 5, CTX()) == [new]
    assert count(db) == 1


def _bad_batches() -> list[tuple[str, list[MessageGroup], list[ArchiveReceipt]]]:
    good = [plain_group(0), plain_group(1)]
    ok = receipts(good)
    other_session = rich_group(2, SessionKey("acme", "alice", "other"))
    return [
        ("fewer receipts", good, ok[:1]),
        ("more receipts", good[:1], ok),
        ("wrong seq", good, [ok[0], attrs.evolve(ok[1], seq=7)]),
        ("wrong digest", good, [ok[0], attrs.evolve(ok[1], digest="sha256:" + "0" * 64)]),
        ("another session's group", [*good, other_session], [*ok, *receipts([other_session])]),
        ("duplicate seq", [good[0], plain_group(0, "x")], [ok[0], *receipts([plain_group(0, "x")])]),
    ]


@pytest.mark.parametrize(("why", "groups", "given"), _bad_batches(), ids=[b[0] for b in _bad_batches()])
async def test_mismatched_receipts_are_refused_and_nothing_is_written(
    store: SQLiteRecallStore, db: Path, why: str, groups: list[MessageGroup], given: list[ArchiveReceipt]
) -> None:
    with pytest.raises(InvalidArgumentError, match="nothing was written"):
        await store.index_groups(KEY, groups, given, CTX())
    assert count(db) == 0


async def test_seek_groups_returns_equal_groups_in_bounds(store: SQLiteRecallStore) -> None:
    groups = [rich_group(i, KEY, " seek") if i % 2 else plain_group(i, " seek") for i in range(6)]
    await store.index_groups(KEY, groups, receipts(groups), CTX())
    assert await store.seek_groups(KEY, 0, 100, CTX()) == groups
    assert await store.seek_groups(KEY, 2, 3, CTX()) == groups[2:5]
    assert await store.seek_groups(KEY, 6, 3, CTX()) == []
    assert await store.seek_groups(KEY, 0, 0, CTX()) == []
    assert await store.seek_groups(KEY, 0, -1, CTX()) == []
    assert await store.seek_groups(SessionKey("acme", "alice", "s2"), 0, 10, CTX()) == []


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE recall_texts SET data = CAST(replace(CAST(data AS TEXT), 'question', 'QUESTION') AS BLOB)",
        "UPDATE recall_texts SET data = CAST('not json' AS BLOB)",
        "UPDATE recall_sources SET receipt_digest = 'sha256:' || substr(receipt_digest, 9, 63) || '0'",
        "UPDATE recall_sources SET seq = 9",
    ],
)
async def test_damaged_stored_groups_raise_archive_corrupt(
    store: SQLiteRecallStore, db: Path, damage: str
) -> None:
    groups = [plain_group(3, " intact")]
    await store.index_groups(KEY, groups, receipts(groups), CTX())
    with sqlite3.connect(db) as conn:
        conn.execute(damage)
    with pytest.raises(ArchiveCorruptError):
        await store.seek_groups(KEY, 0, 10, CTX())


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE recall_texts SET text = 'user: wire the money to the FORGED account'",
        "UPDATE recall_texts SET text = CAST('user: bytes' AS BLOB)",
        "UPDATE recall_texts SET data = CAST('not json' AS BLOB)",
        "UPDATE recall_sources SET kind = 'document', seq = NULL, receipt_digest = NULL",
    ],
)
async def test_reads_check_stored_group_text_against_its_revision(
    store: SQLiteRecallStore, db: Path, damage: str
) -> None:
    """A group row edited in the file is never read back as evidence at its revision."""
    groups = [group(3, "where is the intact question", "the intact answer")]
    await store.index_groups(KEY, groups, receipts(groups), CTX())
    session = await session_of(store)
    (found,) = await session.discover("intact question", 5, CTX())
    with sqlite3.connect(db) as conn:
        conn.execute(damage)
    with pytest.raises((ArchiveCorruptError, SQLiteRecallError)) as raised:
        await session.read([found.ref], 10_000, CTX())
    assert "damaged" in str(raised.value)
    assert "FORGED" not in str(raised.value)


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE recall_texts SET text = 'the alpha account is FORGED'",
        "UPDATE recall_texts SET title = 'FORGED'",
        "UPDATE recall_texts SET text = CAST('alpha bytes' AS BLOB)",
    ],
)
async def test_reads_check_stored_document_text_against_its_revision(
    store: SQLiteRecallStore, db: Path, damage: str
) -> None:
    ref = await store.index_document(
        SourceOwner("acme", "alice"), "d1", "the alpha account", CTX(), title="t"
    )
    with sqlite3.connect(db) as conn:
        conn.execute(damage)
    session = await session_of(store)
    with pytest.raises(SQLiteRecallError, match="damaged"):
        await session.read([ref], 10_000, CTX())


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE recall_sources SET size_bytes = 'many'",
        "UPDATE recall_sources SET size_bytes = x'00'",
        "UPDATE recall_sources SET size_bytes = 1e300",
        "UPDATE recall_sources SET title = x'ff00'",
        "UPDATE recall_sources SET source_id = 'doc/acme/bob/~/~/~/d1'",
    ],
)
async def test_damaged_source_rows_fail_discovery_with_a_typed_error(
    store: SQLiteRecallStore, db: Path, damage: str
) -> None:
    await store.index_document(SourceOwner("acme", "alice"), "d1", "the alpha account", CTX(), title="t")
    with sqlite3.connect(db) as conn:
        conn.execute(damage)
    session = await session_of(store)
    with pytest.raises(SQLiteRecallError, match="damaged"):
        await session.discover("alpha", 5, CTX())


async def test_an_erase_with_a_reader_holding_the_log_ends_by_its_deadline(
    store: SQLiteRecallStore, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint after an erase was retried for 2 s whatever the call's deadline. Here it would be
    # retried for 60 s, far past the deadline (1.5 s: room for the erase itself on a stalled machine):
    # the call ends by its deadline, or it fails by far more than any stall.
    deadline_s, slack_s = 1.5, 3.0
    scrubs: list[float | None] = []

    def scrub_log(conn: sqlite3.Connection, *, time_left: float | None = None) -> Any:
        scrubs.append(time_left)
        return _sqlite_sql.scrub_log(conn, budget_s=60.0, time_left=time_left)

    monkeypatch.setattr(sqlite_recall, "scrub_log", scrub_log)
    await store.index_document(SourceOwner("acme", "alice"), "d1", "the alpha account", CTX())
    reader = sqlite3.connect(db)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM recall_sources").fetchone()  # holds its snapshot of the log
        started = time.monotonic()
        report = await store.erase(EraseTarget.user("acme", "alice"), OpContext.with_timeout(deadline_s))
        assert time.monotonic() - started < deadline_s + slack_s
    finally:
        reader.close()
    assert report.count("document") == 1
    assert len(scrubs) == 1 and scrubs[0] is not None  # the retry it ran was the long one, under a deadline
    assert report.physical is PhysicalErasure.UNREFERENCED and "another connection" in report.detail


async def test_a_context_of_the_wrong_type_is_a_typed_error(store: SQLiteRecallStore, db: Path) -> None:
    # Each raised a bare AttributeError ('NoneType' object has no attribute 'raise_if_expired').
    archive = SQLiteArchive(SQLiteConfig(path=str(db)))
    owner = SourceOwner("acme", "alice")
    calls = [
        lambda: store.index_document(owner, "d1", "the alpha account", None),
        lambda: store.open(SCOPE, RecallLimits(), None),
        lambda: store.erase(EraseTarget.user("acme", "alice"), None),
        lambda: store.health(None),
        lambda: archive.erase(EraseTarget.user("acme", "alice"), None),
        lambda: archive.health(None),
    ]
    try:
        for call in calls:
            with pytest.raises(InvalidArgumentError):
                await call()
    finally:
        await archive.aclose()
    assert count(db) == 0


async def test_a_dry_run_flag_that_is_not_a_bool_is_refused(store: SQLiteRecallStore, db: Path) -> None:
    # dry_run="no" was truthy: a dry run when the caller meant to erase (and "yes"... the reverse).
    await store.index_document(SourceOwner("acme", "alice"), "d1", "the alpha account", CTX())
    memory = SQLiteMemoryStore(SQLiteConfig(path=str(db)))
    archive = SQLiteArchive(SQLiteConfig(path=str(db)))
    sessions = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    target = EraseTarget.user("acme", "alice")
    try:
        for adapter in (store, memory, archive, sessions):
            for flag in ("no", 0, None):
                with pytest.raises(InvalidArgumentError, match="dry_run"):
                    await adapter.erase(target, CTX(), dry_run=flag)  # type: ignore[arg-type]
    finally:
        for closing in (memory, archive, sessions):
            await closing.aclose()
    assert count(db) == 1


# -- persistence, cancellation, closing ------------------------------------------------------------


async def test_everything_persists_across_reopen(db: Path) -> None:
    config = SQLiteRecallConfig(path=str(db))
    first = SQLiteRecallStore(config)
    ref = await first.index_document(SourceOwner("acme"), "d", "persistent text", CTX())
    groups = [plain_group(0, " persistent")]
    await first.index_groups(KEY, groups, receipts(groups), CTX())
    await first.aclose()
    second = SQLiteRecallStore(config)
    try:
        session = await session_of(second)
        found = await session.discover("persistent", 8, CTX())
        assert {c.ref.source_id for c in found} == {ref.source_id, group_source_id(KEY, 0)}
        assert [v.status for v in await session.validate([ref], CTX())] == [ValidationStatus.CURRENT]
        assert await second.seek_groups(KEY, 0, 5, CTX()) == groups
        assert await second.index_groups(KEY, groups, receipts(groups), CTX()) == 0
    finally:
        await second.aclose()


def cancelled() -> OpContext:
    signal = CancelSignal()
    signal.cancel("test")
    return OpContext(signal=signal)


class CancelAfter(CancelSignal):
    """A signal that reads as cancelled from its ``n``-th check on: cancellation in the middle of work."""

    __slots__ = ("_left",)

    def __init__(self, n: int) -> None:
        super().__init__()
        self._left = n

    @property
    def cancelled(self) -> bool:
        self._left -= 1
        if self._left < 0:
            self.cancel("mid-way")
        return super().cancelled


async def test_cancelled_calls_write_nothing(store: SQLiteRecallStore, db: Path) -> None:
    owner = SourceOwner("acme")
    groups = [plain_group(i) for i in range(3)]
    with pytest.raises(OperationCancelledError):
        await store.index_document(owner, "d", "text", cancelled())
    with pytest.raises(OperationCancelledError):
        await store.index_groups(KEY, groups, receipts(groups), cancelled())
    assert count(db) == 0
    await store.index_document(owner, "d", "text", CTX())
    with pytest.raises(OperationCancelledError):
        await store.delete_document(owner, "d", cancelled())
    assert count(db) == 1
    with pytest.raises(OperationCancelledError):
        await store.open(SCOPE, RecallLimits(), cancelled())
    with pytest.raises(OperationCancelledError):
        await store.seek_groups(KEY, 0, 5, cancelled())


@pytest.mark.parametrize("checks", [2, 3, 4, 5])
async def test_cancellation_in_the_middle_of_a_batch_writes_nothing(
    store: SQLiteRecallStore, db: Path, checks: int
) -> None:
    groups = [plain_group(i) for i in range(600)]
    with pytest.raises(OperationCancelledError):
        await store.index_groups(KEY, groups, receipts(groups), OpContext(signal=CancelAfter(checks)))
    assert count(db) == 0
    assert await store.index_groups(KEY, groups, receipts(groups), CTX()) == 600


async def test_session_calls_honour_cancellation_and_close_after_it(store: SQLiteRecallStore) -> None:
    ref = await store.index_document(SourceOwner("acme"), "d", "some words", CTX())
    session = await session_of(store)
    for call in (
        lambda ctx: session.discover("words", 8, ctx),
        lambda ctx: session.read([ref], 100, ctx),
        lambda ctx: session.validate([ref], ctx),
        lambda ctx: session.validate_current([ref], ctx),
    ):
        with pytest.raises(OperationCancelledError):
            await call(cancelled())
        with pytest.raises(OperationCancelledError):
            await call(OpContext(signal=CancelAfter(3)))
    await session.close()
    await session.close()  # idempotent
    with pytest.raises(SQLiteRecallError, match="closed"):
        await session.discover("words", 8, CTX())
    with pytest.raises(AgentiumError):
        await session.read([ref], 100, CTX())
    # The store itself is unaffected: a new session works.
    assert len(await (await session_of(store)).discover("words", 8, CTX())) == 1


async def test_a_running_discovery_statement_is_interrupted_by_cancellation(db: Path) -> None:
    # Cancel after more and more checks: at some point the signal turns while the ranking
    # statement runs, and the progress handler aborts it (the "stopped" message comes from
    # the interrupted backend call, not from a check before it).
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), max_ranked_matches=1_000_000))
    try:
        groups = [group(i, f"alpha beta gamma {i}", "delta epsilon " * 20) for i in range(1500)]
        await adapter.index_groups(KEY, groups, receipts(groups), CTX())
        session = await session_of(adapter)
        interrupted = False
        for checks in range(0, 400):
            try:
                await session.discover(
                    "alpha beta gamma delta epsilon", 8, OpContext(signal=CancelAfter(checks))
                )
            except OperationCancelledError as exc:
                if "stopped" in str(exc):
                    interrupted = True
                    break
            else:
                break  # past every check: the call completed
        assert interrupted
        # The connection is usable afterwards.
        assert len(await session.discover("alpha", 8, CTX())) == 8
        await session.close()
    finally:
        await adapter.aclose()


async def test_a_deadline_stops_work_with_operation_cancelled(store: SQLiteRecallStore) -> None:
    session = await session_of(store)
    expired = OpContext.with_timeout(0.0)
    await anyio.sleep(0.001)
    with pytest.raises(OperationCancelledError, match="deadline"):
        await session.discover("anything", 8, expired)


async def test_closed_store_refuses_everything(store: SQLiteRecallStore) -> None:
    session = await session_of(store)
    await store.aclose()
    await store.aclose()
    with pytest.raises(SQLiteRecallError, match="closed"):
        await store.open(SCOPE, RecallLimits(), CTX())
    with pytest.raises(SQLiteRecallError, match="closed"):
        await store.index_document(SourceOwner("acme"), "d", "t", CTX())
    with pytest.raises(SQLiteRecallError, match="closed"):
        await session.discover("t", 8, CTX())
    await session.close()  # still succeeds


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc_id", "text", "title"),
    [
        ("", "text", ""),
        ("bad\x00id", "text", ""),
        ("x" * 300, "text", ""),
        ("d", b"bytes", ""),
        ("d", None, ""),
        ("d", "lone \ud800 surrogate", ""),
        ("d", "text", 42),
        ("d", "text", "\udfff"),
    ],
)
async def test_bad_documents_are_refused_and_nothing_is_written(
    store: SQLiteRecallStore, db: Path, doc_id: str, text: object, title: object
) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.index_document(SourceOwner("acme"), doc_id, text, CTX(), title=title)  # type: ignore[arg-type]
    assert count(db) == 0


async def test_bad_arguments_are_typed_errors(store: SQLiteRecallStore) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.open({"tenant": "acme"}, RecallLimits(), CTX())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.index_document(("acme",), "d", "t", CTX())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.delete_document(SourceOwner("acme"), "", CTX())
    with pytest.raises(InvalidArgumentError):
        await (await session_of(store)).discover(b"bytes", 8, CTX())  # type: ignore[arg-type]


async def test_discovery_never_reads_source_text(db: Path) -> None:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        await adapter.index_document(SourceOwner("acme"), "d", "text that stays unread", CTX())
        touched: list[tuple[str, str]] = []

        def authorizer(action: int, table: str | None, column: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ and table and column:
                touched.append((table, column))
            return sqlite3.SQLITE_OK

        def install(conn: sqlite3.Connection) -> None:
            conn.set_authorizer(authorizer)

        await adapter.run(CTX(), "test", install)
        session = await session_of(adapter)
        assert len(await session.discover("unread", 8, CTX())) == 1
        assert touched
        assert not [t for t in touched if t[0] == "recall_texts" and t[1] in {"text", "data"}]
    finally:
        await adapter.aclose()


# -- ranking under the cap -------------------------------------------------------------------------


async def test_old_evidence_with_a_rare_word_is_found_past_the_ranking_cap(db: Path) -> None:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), max_ranked_matches=5))
    try:
        owner = SourceOwner("acme")
        oldest = await adapter.index_document(owner, "old", "what about kubernetes then", CTX())
        for i in range(30):
            await adapter.index_document(owner, f"n{i}", f"what about lunch then {i}", CTX())
        found = await (await session_of(adapter)).discover("what about kubernetes", 3, CTX())
        assert found[0].ref == oldest
    finally:
        await adapter.aclose()


async def test_ranking_is_plain_bm25_when_no_term_is_common(db: Path) -> None:
    # Without the relevance floor, discovery is bm25 over the OR of the query's words.
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), min_relevance=0))
    owner = SourceOwner("acme")
    texts = ["red apple pie", "green apple", "red red wine", "blue sky", "apple apple apple red", "pie chart"]
    for i, text in enumerate(texts):
        await store.index_document(owner, f"d{i}", text, CTX(), title="apple" if i == 3 else "")
    session = await session_of(store)
    for query in ("red apple", "pie", "apple sky wine"):
        found = await session.discover(query, 10, CTX())
        phrase = " OR ".join(f'"{w}"' for w in query.split())
        expected = rows(
            db,
            "SELECT s.source_id FROM recall_fts JOIN recall_sources AS s ON s.id = recall_fts.rowid "
            f"WHERE recall_fts MATCH '{phrase}' ORDER BY bm25(recall_fts, 2.0, 1.0, 0.5), s.id DESC",
        )
        assert [c.ref.source_id for c in found] == [r[0] for r in expected], query
    await store.aclose()
