"""The SQLite recall store's lexical ranking: stemming, stop words, neighbouring context, the relevance floor.

Written as a host would use the store (public adapters and ports only), apart
from the migration test, which writes a version-1 file by hand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from agentium_harness import (
    InvalidArgumentError,
    OpContext,
    RecallStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite_recall import (
    RECALL_SCHEMA_VERSION,
    SQLiteRecallConfig,
    SQLiteRecallError,
    SQLiteRecallStore,
)
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    Message,
    MessageGroup,
    RecallLimits,
    RecallSession,
    Role,
    Scope,
    SessionKey,
    SourceOwner,
    document_source_id,
    group_source_id,
)

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "ana", "s1")
KEY = SCOPE.session_key
OWNER = SourceOwner("acme")


def CTX() -> OpContext:
    return OpContext.with_timeout(30.0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "recall.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteRecallStore]:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    yield adapter
    await adapter.aclose()


async def session_of(store: SQLiteRecallStore, scope: Scope = SCOPE) -> RecallSession:
    return await store.open(scope, RecallLimits(), CTX())


async def ids(store: SQLiteRecallStore, query: str, k: int = 8) -> list[str]:
    return [c.ref.source_id for c in await (await session_of(store)).discover(query, k, CTX())]


def turn(seq: int, user: str, assistant: str = "", key: SessionKey = KEY) -> MessageGroup:
    messages = [Message(Role.USER, user), Message(Role.ASSISTANT, assistant)]
    return MessageGroup(seq=seq, messages=tuple(messages))


def receipts(groups: Sequence[MessageGroup]) -> list[ArchiveReceipt]:
    return [ArchiveReceipt(g.seq, g.digest, f"test/{g.seq}") for g in groups]


async def index(store: SQLiteRecallStore, groups: Sequence[MessageGroup]) -> None:
    await store.index_groups(KEY, groups, receipts(groups), CTX())


FILLER = [
    "The weather was mild all week.",
    "We talked about the new office layout.",
    "Lunch was a simple salad.",
    "The train was late again this morning.",
    "Someone left an umbrella in the hall.",
    "The printer on the third floor is fixed.",
]


async def index_filler(store: SQLiteRecallStore) -> None:
    for i, text in enumerate(FILLER):
        await store.index_document(OWNER, f"filler-{i}", text, CTX())


# -- stemming and stop words ----------------------------------------------------------------------


async def test_inflected_forms_find_each_other(store: SQLiteRecallStore) -> None:
    await index_filler(store)
    await store.index_document(OWNER, "lisbon", "My sister lives in Lisbon and paints murals.", CTX())
    assert (await ids(store, "Where is the sister living?"))[:1] == [document_source_id(OWNER, "lisbon")]
    assert (await ids(store, "who painted a mural"))[:1] == [document_source_id(OWNER, "lisbon")]


async def test_stop_words_neither_rank_nor_find(store: SQLiteRecallStore) -> None:
    await index_filler(store)
    await store.index_document(OWNER, "what", "What a day it was, and what a week.", CTX())
    await store.index_document(OWNER, "pixel", "Pixel chewed my hiking boots yesterday.", CTX())
    found = await ids(store, "What did Pixel chew?")
    assert found == [document_source_id(OWNER, "pixel")]
    # A query of stop words only names no topic: nothing, and no store error.
    assert await ids(store, "What is it that you were doing?") == []


async def test_stop_words_can_be_kept(db: Path) -> None:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), stopwords="none", min_relevance=0))
    try:
        await adapter.index_document(OWNER, "what", "What a day it was.", CTX())
        assert await ids(adapter, "what") == [document_source_id(OWNER, "what")]
    finally:
        await adapter.aclose()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"stopwords": "french"}, "stopwords"),
        ({"min_relevance": 1.5}, "min_relevance"),
        ({"min_relevance": -0.1}, "min_relevance"),
        ({"min_relevance": True}, "min_relevance"),
    ],
)
def test_ranking_options_are_checked(db: Path, options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        SQLiteRecallConfig(path=str(db), **options)  # type: ignore[arg-type]
    assert not db.exists()


# -- the relevance floor --------------------------------------------------------------------------


async def test_weak_matches_are_not_evidence(store: SQLiteRecallStore) -> None:
    # Every group says "user:"; none is about drinks. Before the floor, all of them came back.
    await index(store, [turn(i, text, "Noted.") for i, text in enumerate(FILLER)])
    assert await ids(store, "What does the user prefer to drink?") == []
    # A source that does match the topic clears it (first; its neighbour follows through its context).
    await index(store, [turn(len(FILLER), "I prefer green tea to coffee, to drink in the morning.")])
    found = await ids(store, "What does the user prefer to drink?")
    assert found == [group_source_id(KEY, len(FILLER)), group_source_id(KEY, len(FILLER) - 1)]


async def test_the_floor_can_be_lowered_to_nothing(db: Path) -> None:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db), min_relevance=0))
    try:
        await index(adapter, [turn(i, text, "Noted.") for i, text in enumerate(FILLER)])
        assert len(await ids(adapter, "What does the user prefer to drink?")) == len(FILLER)
    finally:
        await adapter.aclose()


async def test_the_floor_makes_no_accessible_evidence_through_the_runtime(store: SQLiteRecallStore) -> None:
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
    )
    ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
    await index(store, [turn(i, text, "Noted.") for i, text in enumerate(FILLER)])
    result = await runtime.run(ana, "s1", "What does the user prefer to drink?")
    assert result.recall is not None
    assert result.recall.status is RecallStatus.NO_ACCESSIBLE_EVIDENCE
    assert result.recall.included == ()
    # The floor leaves real evidence alone.
    found = await runtime.run(ana, "s1", "Is the umbrella still in the hall?")
    assert found.recall is not None and found.recall.status is RecallStatus.COMPLETE
    assert group_source_id(KEY, 4) in {ref.source_id for ref in found.recall.included}


# -- neighbouring context -------------------------------------------------------------------------


PREVIOUS = "Have you been to the pottery workshop downtown?"
ANSWER = "Yes! Last Saturday, and I loved it."


async def test_a_turn_is_found_by_the_question_before_it(store: SQLiteRecallStore) -> None:
    await index(store, [turn(i, text) for i, text in enumerate(FILLER)])
    n = len(FILLER)
    await index(store, [turn(n, PREVIOUS)])
    await index(store, [turn(n + 1, ANSWER)])
    found = await ids(store, "When did they go to the pottery workshop?")
    # The question's own group first, the answer right after it, found through its context.
    assert found[:2] == [group_source_id(KEY, n), group_source_id(KEY, n + 1)]
    # The context is indexed, never read: the excerpt is the group's own text.
    session = await session_of(store)
    candidates = await session.discover("pottery workshop", 8, CTX())
    excerpts = await session.read([c.ref for c in candidates], 4096, CTX())
    answer = next(e for e in excerpts if e.ref.source_id == group_source_id(KEY, n + 1))
    assert answer.text == f"user: {ANSWER}\nassistant: "


async def test_context_follows_groups_indexed_out_of_order(store: SQLiteRecallStore) -> None:
    await index(store, [turn(i, text) for i, text in enumerate(FILLER)])
    n = len(FILLER)
    # The answer first (as a rebuild in pages may do), then the question before it.
    await index(store, [turn(n + 1, ANSWER)])
    assert group_source_id(KEY, n + 1) not in await ids(store, "pottery workshop")
    await index(store, [turn(n, PREVIOUS)])
    # The question's group, then both its neighbours through their context.
    expected = [group_source_id(KEY, n), *sorted({group_source_id(KEY, n + 1), group_source_id(KEY, n - 1)})]
    found = await ids(store, "pottery workshop")
    assert [found[0], *sorted(found[1:])] == expected
    # Indexing the same groups again writes nothing and keeps the context.
    assert await store.index_groups(KEY, [turn(n, PREVIOUS)], receipts([turn(n, PREVIOUS)]), CTX()) == 0
    assert await ids(store, "pottery workshop") == found


async def test_context_stays_inside_its_session(store: SQLiteRecallStore) -> None:
    other = SessionKey("acme", "ana", "s2")
    await index(store, [turn(i, text) for i, text in enumerate(FILLER)])
    group = turn(len(FILLER), PREVIOUS)
    await store.index_groups(other, [group], receipts([group]), CTX())
    await index(store, [turn(len(FILLER) + 1, ANSWER)])
    # Session s2's question is not context for s1's answer.
    assert await ids(store, "pottery workshop") == []


# -- schema version 2: migration of version-1 files -----------------------------------------------

V1_SCHEMA = (
    "CREATE TABLE recall_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    """CREATE TABLE recall_sources (
        id INTEGER PRIMARY KEY, source_id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('document', 'group')),
        tenant_id TEXT NOT NULL, user_id TEXT, session_id TEXT, project_id TEXT, repository_id TEXT,
        revision TEXT NOT NULL, title TEXT NOT NULL, size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
        seq INTEGER CHECK (seq >= 0), receipt_digest TEXT,
        CHECK ((kind = 'group') = (seq IS NOT NULL AND receipt_digest IS NOT NULL)))""",
    "CREATE INDEX recall_sources_groups ON recall_sources (tenant_id, user_id, session_id, seq) "
    "WHERE kind = 'group'",
    """CREATE TABLE recall_texts (
        id INTEGER PRIMARY KEY REFERENCES recall_sources (id) ON DELETE CASCADE,
        title TEXT NOT NULL, text TEXT NOT NULL, data BLOB)""",
    """CREATE VIRTUAL TABLE recall_fts USING fts5(title, text, content = 'recall_texts',
        content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER recall_texts_ai AFTER INSERT ON recall_texts BEGIN
        INSERT INTO recall_fts (rowid, title, text) VALUES (new.id, new.title, new.text); END""",
    """CREATE TRIGGER recall_texts_ad AFTER DELETE ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
        END""",
    """CREATE TRIGGER recall_texts_au AFTER UPDATE OF title, text ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
        INSERT INTO recall_fts (rowid, title, text) VALUES (new.id, new.title, new.text); END""",
    """CREATE TRIGGER recall_sources_ad AFTER DELETE ON recall_sources BEGIN
        DELETE FROM recall_texts WHERE id = old.id; END""",
    "INSERT INTO recall_meta VALUES ('schema_version', '1')",
)


def write_v1_file(db: Path, groups: Sequence[MessageGroup], document: str) -> None:
    """A version-1 file as the previous release wrote it: one document and ``groups`` of session s1."""
    conn = sqlite3.connect(db)
    try:
        for statement in V1_SCHEMA:
            conn.execute(statement)
        rows = [
            (
                document_source_id(OWNER, "doc"),
                "document",
                "acme",
                None,
                None,
                "rev-doc",
                document,
                None,
                None,
                None,
            ),
            *(
                (
                    group_source_id(KEY, g.seq),
                    "group",
                    "acme",
                    "ana",
                    "s1",
                    g.digest,
                    "\n".join(f"{m.role.value}: {m.content}" for m in g.messages),
                    g.seq,
                    g.digest,
                    g.canonical_bytes(),
                )
                for g in groups
            ),
        ]
        for source_id, kind, tenant, user, session, revision, text, seq, receipt, data in rows:
            cursor = conn.execute(
                "INSERT INTO recall_sources (source_id, kind, tenant_id, user_id, session_id, revision, "
                "title, size_bytes, seq, receipt_digest) VALUES (?, ?, ?, ?, ?, ?, '', ?, ?, ?)",
                (source_id, kind, tenant, user, session, revision, len(text.encode()), seq, receipt),
            )
            conn.execute(
                "INSERT INTO recall_texts (id, title, text, data) VALUES (?, '', ?, ?)",
                (cursor.lastrowid, text, data),
            )
        conn.commit()
    finally:
        conn.close()


async def test_a_version_1_file_is_migrated_in_place(db: Path) -> None:
    n = len(FILLER)
    groups = [*(turn(i, text) for i, text in enumerate(FILLER)), turn(n, PREVIOUS), turn(n + 1, ANSWER)]
    write_v1_file(db, groups, "My sister lives in Lisbon.")
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        # Stemming works on the old rows, and the answer is found through its rebuilt context.
        assert (await ids(adapter, "Where is the sister living?"))[:1] == [document_source_id(OWNER, "doc")]
        found = await ids(adapter, "When did they go to the pottery workshop?")
        assert found[:2] == [group_source_id(KEY, n), group_source_id(KEY, n + 1)]
        # Sources, revisions and canonical bytes are untouched.
        session = await session_of(adapter)
        validations = await session.validate(
            [c.ref for c in await session.discover("pottery workshop", 8, CTX())], CTX()
        )
        assert {v.status.value for v in validations} == {"current"}
        assert [g.digest for g in await adapter.seek_groups(KEY, 0, 100, CTX())] == [g.digest for g in groups]
    finally:
        await adapter.aclose()
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("SELECT value FROM recall_meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(RECALL_SCHEMA_VERSION),) == ("2",)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


async def test_a_newer_version_is_refused_and_left_alone(db: Path) -> None:
    write_v1_file(db, [], "a document")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE recall_meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        with pytest.raises(SQLiteRecallError, match="schema version 99"):
            await adapter.index_document(OWNER, "d", "text", CTX())
    finally:
        await adapter.aclose()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM recall_sources").fetchone() == (1,)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(recall_texts)")]
        assert "context" not in columns
    finally:
        conn.close()
