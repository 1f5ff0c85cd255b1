"""SQLite recall rows holding a value far over what the store writes are refused before they are read.

A column replaced outside the store by a huge value (SQLite takes up to
1 GB) was fetched whole into Python, then refused by its decode or digest
check, or returned. Every read now bounds each variable-size column by
``length()`` and its bytes (``length()`` of a text stops at its first NUL)
in its own SELECT and refuses the row (the value never
transferred) with the store's typed error (``ArchiveCorruptError`` for an
indexed group's archived data, as its decode raises; ``SQLiteRecallError``
for the rest), changing nothing. The values are built by SQLite itself
(``zeroblob``, ``printf``), so tracemalloc's peak tells whether a read
fetched one. A text, title or group's bytes may be as long as the strict
decoder reads back (``MAX_JSON_BYTES``; ``index_document`` and
``index_groups`` refuse longer), so those values are just past that.
"""

from __future__ import annotations

import sqlite3
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _oversize_support import HUGE, NUL_TEXT, OVER_JSON, PEAK
from _oversize_support import ctx as _ctx
from _oversize_support import raw_sql as _sql
from _oversize_support import refused_unread as _refused_unread

from agentium_harness._errors import ArchiveCorruptError, InvalidArgumentError
from agentium_harness._json import MAX_JSON_BYTES
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.erasure import EraseTarget
from agentium_harness._ports.recall import RecallLimits, SourceOwner, SourceRef, group_source_id
from agentium_harness._scope import Scope
from agentium_harness.adapters import sqlite_recall
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallError, SQLiteRecallStore
from agentium_harness.plugin_api import EmbeddingModel, SourceVector, Vector
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "alice", "s1")
KEY = SCOPE.session_key
OWNER = SourceOwner("acme", "alice")
MODEL = EmbeddingModel("test-model", 3)
GROUPS = [plain_group(seq, " about the kettle") for seq in range(3)]
TEXT_TRIGGER = "recall_texts_au"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _fingerprint(path: Path) -> list[object]:
    """Every row's small columns and the size of each large one (never a huge value itself)."""
    return [
        _sql(
            path,
            "SELECT id, length(source_id), kind, tenant_id, user_id, length(revision), length(title), "
            "size_bytes, seq, length(receipt_digest), length(CAST(revision AS BLOB)) FROM recall_sources "
            "ORDER BY id",
        ),
        _sql(
            path,
            "SELECT id, length(title), length(text), length(data), length(CAST(text AS BLOB)) "
            "FROM recall_texts ORDER BY id",
        ),
        _sql(path, "SELECT id, length(vector), length(CAST(vector AS BLOB)) FROM recall_vectors ORDER BY id"),
        _sql(path, "SELECT key, length(value), length(CAST(value AS BLOB)) FROM recall_meta ORDER BY key"),
    ]


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[tuple[SQLiteRecallStore, Path, SourceRef]]:
    """A store holding GROUPS (with vectors) and one document; its path and the document's ref."""
    path = tmp_path / "recall.db"
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    receipts = [ArchiveReceipt(g.seq, g.digest, f"test/{g.seq}") for g in GROUPS]
    await store.index_groups(KEY, GROUPS, receipts, _ctx())
    doc = await store.index_document(OWNER, "d1", "the kettle is descaled monthly", _ctx(), title="kettle")
    refs = [SourceRef(group_source_id(KEY, g.seq), g.digest) for g in GROUPS] + [doc]
    vectors = [
        SourceVector(ref, Vector.normalized(MODEL, [1.0, float(i), 0.5])) for i, ref in enumerate(refs)
    ]
    assert await store.index_vectors(vectors, _ctx()) == 4
    yield store, path, doc
    await store.aclose()


def _update_text(path: Path, column: str, value_sql: str, size: int, where: str) -> None:
    """Set ``column`` of ``recall_texts`` as a tampering would: behind the index's back (no trigger)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")  # the test's own damage: no need to sync it (see raw_sql)
    try:
        with conn:
            (trigger,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (TEXT_TRIGGER,)
            ).fetchone()
            conn.execute(f"DROP TRIGGER {TEXT_TRIGGER}")
            conn.execute(f"UPDATE recall_texts SET {column} = {value_sql} WHERE {where}", (size,))
            conn.execute(trigger)
    finally:
        conn.close()


def _group_where(seq: int) -> str:
    return f"id = (SELECT id FROM recall_sources WHERE kind = 'group' AND seq = {seq})"


async def test_huge_group_data_is_refused_by_seek_and_read_before_it_is_fetched(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    _update_text(path, "data", "zeroblob(?)", OVER_JSON, _group_where(1))
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    ref = SourceRef(group_source_id(KEY, 1), GROUPS[1].digest)
    message = rf"data of length {OVER_JSON} bytes \(at most {MAX_JSON_BYTES}\)"
    await _refused_unread(lambda: store.seek_groups(KEY, 0, 10, _ctx()), ArchiveCorruptError, message, "seek")
    await _refused_unread(lambda: session.read([ref], 4096, _ctx()), ArchiveCorruptError, message, "read")
    assert [g.seq for g in await store.seek_groups(KEY, 2, 10, _ctx())] == [2]  # the rest still reads
    assert _fingerprint(path) == before


async def test_a_huge_group_text_is_refused_by_read_and_by_indexing_its_neighbour(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    _update_text(path, "text", "printf('%.*c', ?, 'x')", OVER_JSON, _group_where(1))
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    ref = SourceRef(group_source_id(KEY, 1), GROUPS[1].digest)
    message = rf"text of length {OVER_JSON}"
    await _refused_unread(lambda: session.read([ref], 4096, _ctx()), ArchiveCorruptError, message, "read")
    # Indexing group 0 again (changed) reads its neighbour's text for its context.
    changed = plain_group(0, " changed")
    receipt = [ArchiveReceipt(0, changed.digest, "test/0")]
    await _refused_unread(
        lambda: store.index_groups(KEY, [changed], receipt, _ctx()), SQLiteRecallError, message, "index"
    )
    assert _fingerprint(path) == before


async def test_a_huge_document_text_is_refused_by_read_before_it_is_fetched(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, doc = seeded
    _update_text(path, "text", "printf('%.*c', ?, 'x')", OVER_JSON, "data IS NULL")
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    await _refused_unread(
        lambda: session.read([doc], 4096, _ctx()), SQLiteRecallError, rf"text of length {OVER_JSON}", "read"
    )
    assert _fingerprint(path) == before


async def test_a_huge_title_is_refused_by_discovery_before_it_is_fetched(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    _sql(
        path, "UPDATE recall_sources SET title = printf('%.*c', ?, 'x') WHERE kind = 'document'", (OVER_JSON,)
    )
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    message = rf"title of length {OVER_JSON}"
    query = Vector.normalized(MODEL, [1.0, 3.0, 0.5])
    await _refused_unread(
        lambda: session.discover("kettle", 8, _ctx()), SQLiteRecallError, message, "discover"
    )
    await _refused_unread(
        lambda: session.discover_hybrid("kettle", query, 8, _ctx()), SQLiteRecallError, message, "hybrid"
    )
    assert _fingerprint(path) == before


async def test_huge_digests_are_refused_before_they_are_fetched(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, doc = seeded
    _sql(path, "UPDATE recall_sources SET receipt_digest = printf('%.*c', ?, 'x') WHERE seq = 1", (HUGE,))
    _sql(path, "UPDATE recall_sources SET revision = printf('%.*c', ?, 'x') WHERE kind = 'document'", (HUGE,))
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    receipt, revision = rf"receipt_digest of length {HUGE}", rf"revision of length {HUGE}"
    for name, call, error, message in [
        ("seek", lambda: store.seek_groups(KEY, 0, 10, _ctx()), ArchiveCorruptError, receipt),
        ("validate", lambda: session.validate([doc], _ctx()), SQLiteRecallError, revision),
        ("read", lambda: session.read([doc], 4096, _ctx()), SQLiteRecallError, revision),
        ("discover", lambda: session.discover("kettle descaled", 8, _ctx()), SQLiteRecallError, revision),
    ]:  # an erasure is not stopped by it (test_a_user_erasure_removes_sources_whose_revision_is_huge_unread)
        await _refused_unread(call, error, message, name)
    assert _fingerprint(path) == before


async def test_a_huge_vector_is_refused_by_hybrid_discovery_before_it_is_fetched(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    _sql(
        path,
        "UPDATE recall_vectors SET vector = zeroblob(?) WHERE id = (SELECT max(id) FROM recall_vectors)",
        (HUGE,),
    )
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    query = Vector.normalized(MODEL, [1.0, 3.0, 0.5])
    await _refused_unread(
        lambda: session.discover_hybrid("kettle", query, 8, _ctx()),
        SQLiteRecallError,
        rf"vector of length {HUGE}",
        "hybrid",
    )
    assert _fingerprint(path) == before


async def test_a_huge_schema_version_or_model_key_is_refused_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    _sql(path, "UPDATE recall_meta SET value = printf('%.*c', ?, 'x') WHERE key = 'vector_model'", (HUGE,))
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    query = Vector.normalized(MODEL, [1.0, 3.0, 0.5])
    await _refused_unread(
        lambda: session.discover_hybrid("kettle", query, 8, _ctx()),
        SQLiteRecallError,
        rf"value of length {HUGE}",
        "hybrid",
    )
    await store.aclose()
    _sql(path, "UPDATE recall_meta SET value = printf('%.*c', ?, '2') WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(path)
    reopened = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    await _refused_unread(
        lambda: reopened.seek_groups(KEY, 0, 10, _ctx()),
        SQLiteRecallError,
        rf"schema version of {HUGE} characters",
        "open",
    )
    await reopened.aclose()
    assert _fingerprint(path) == before


async def test_texts_hiding_their_size_behind_a_nul_are_refused_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    # length() was 1, within every bound: the 256 MiB text was read whole into Python.
    store, path, doc = seeded
    _update_text(path, "text", NUL_TEXT, OVER_JSON, "data IS NULL")
    _update_text(path, "text", NUL_TEXT, OVER_JSON, _group_where(1))
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    message = rf"text of length {OVER_JSON + 2} bytes \(at most {MAX_JSON_BYTES}\)"
    await _refused_unread(lambda: session.read([doc], 4096, _ctx()), SQLiteRecallError, message, "read")
    # Indexing group 0 again (changed) reads its neighbour's text for its context.
    changed = plain_group(0, " changed")
    receipt = [ArchiveReceipt(0, changed.digest, "test/0")]
    await _refused_unread(
        lambda: store.index_groups(KEY, [changed], receipt, _ctx()), SQLiteRecallError, message, "index"
    )
    assert _fingerprint(path) == before


async def test_a_revision_or_vector_hiding_its_size_behind_a_nul_is_refused_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, doc = seeded
    _sql(
        path,
        f"UPDATE recall_vectors SET vector = {NUL_TEXT} WHERE id = (SELECT min(id) FROM recall_vectors)",
        (HUGE,),
    )
    before = _fingerprint(path)
    session = await store.open(SCOPE, RecallLimits(), _ctx())
    query = Vector.normalized(MODEL, [1.0, 3.0, 0.5])
    await _refused_unread(
        lambda: session.discover_hybrid("kettle", query, 8, _ctx()),
        SQLiteRecallError,
        rf"vector of length {HUGE + 2} bytes \(at most \d+\)",
        "hybrid",
    )
    assert _fingerprint(path) == before
    _sql(path, f"UPDATE recall_sources SET revision = {NUL_TEXT} WHERE kind = 'document'", (HUGE,))
    before = _fingerprint(path)
    revision = rf"revision of length {HUGE + 2} bytes \(at most {4 * 71}\)"
    await _refused_unread(lambda: session.validate([doc], _ctx()), SQLiteRecallError, revision, "validate")
    await _refused_unread(lambda: session.read([doc], 4096, _ctx()), SQLiteRecallError, revision, "read")
    assert _fingerprint(path) == before


async def test_a_schema_version_hiding_its_size_behind_a_nul_is_refused_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    store, path, _ = seeded
    await store.aclose()
    _sql(path, f"UPDATE recall_meta SET value = {NUL_TEXT} WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(path)
    reopened = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    await _refused_unread(
        lambda: reopened.seek_groups(KEY, 0, 10, _ctx()),
        SQLiteRecallError,
        rf"schema version of 1 characters \({HUGE + 2} bytes\)",
        "open",
    )
    await reopened.aclose()
    assert _fingerprint(path) == before


async def test_indexing_refuses_what_reads_would_refuse(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound, lowered: a text, a title or a group's bytes over it is never written.
    store, path, _ = seeded
    before = _fingerprint(path)
    monkeypatch.setattr(sqlite_recall, "JSON_BYTES", 100)
    with pytest.raises(InvalidArgumentError, match="text is 101 bytes, over the 100 stored"):
        await store.index_document(OWNER, "d2", "x" * 101, _ctx())
    with pytest.raises(InvalidArgumentError, match="title is 101 bytes, over the 100 stored"):
        await store.index_document(OWNER, "d2", "x", _ctx(), title="x" * 101)
    group = plain_group(3, " about the kettle")
    with pytest.raises(InvalidArgumentError, match="group 3 is over 100 bytes"):
        await store.index_groups(KEY, [group], [ArchiveReceipt(3, group.digest, "test/3")], _ctx())
    assert _fingerprint(path) == before


async def test_a_user_erasure_removes_sources_whose_revision_is_huge_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    # The damaged revision stopped every user and tenant erasure with SQLiteRecallError for good, a
    # document's too, though no report names a document's revision. Now the sources are erased
    # unread; a group's is reported with digest "" (nothing vouches for it).
    store, path, _ = seeded
    _sql(path, "UPDATE recall_sources SET revision = printf('%.*c', ?, 'x') WHERE seq = 1", (HUGE,))
    _sql(path, "UPDATE recall_sources SET revision = printf('%.*c', ?, 'x') WHERE kind = 'document'", (HUGE,))
    user = EraseTarget.user("acme", "alice")
    tracemalloc.start()
    try:
        reports = [await store.erase(user, _ctx(), dry_run=True), await store.erase(user, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"{peak} bytes traced: the huge revision was read into Python"
    for report in reports:
        assert (report.count("group"), report.count("document")) == (3, 1)
        assert list(report.sessions[0].groups) == [(0, GROUPS[0].digest), (1, ""), (2, GROUPS[2].digest)]
    assert _sql(path, "SELECT count(*) FROM recall_sources") == [(0,)]


@pytest.mark.parametrize("column", ["session_id", "seq"])
async def test_a_huge_id_or_seq_is_refused_unread_by_the_version_1_migration(
    tmp_path: Path, column: str
) -> None:
    # The migration read every session's ids, and each group's seq, whole (a text seq passes the
    # column's CHECK): a 64 MiB id was fetched into Python, a huge seq crashed it with ValueError.
    from test_recall_ranking import write_v1_file

    path = tmp_path / "v1.db"
    write_v1_file(path, GROUPS, "a document")
    _sql(path, f"UPDATE recall_sources SET {column} = printf('%.*c', ?, 'x') WHERE seq = 1", (HUGE,))

    def state() -> list[object]:  # a version-1 file has no recall_vectors table for _fingerprint
        return [
            _sql(
                path, "SELECT id, length(session_id), length(seq), revision FROM recall_sources ORDER BY id"
            ),
            _sql(path, "SELECT id, length(text) FROM recall_texts ORDER BY id"),
            _sql(path, "SELECT key, value FROM recall_meta ORDER BY key"),
        ]

    before = state()
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    try:
        await _refused_unread(
            lambda: store.index_document(OWNER, "d2", "text", _ctx()),
            SQLiteRecallError,
            rf"{column} of length {HUGE}",
            "migration",
        )
    finally:
        await store.aclose()
    assert state() == before  # still version 1, untouched


async def test_a_tenant_erasure_removes_sources_whose_ids_or_seq_are_huge_unread(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef],
) -> None:
    # An owner id or a seq over its bound stopped every tenant (and user) erasure for good. Now the
    # source is erased unread: a group no key or seq can name counts as damaged, a document as one.
    store, path, _ = seeded
    huge = "printf('%.*c', ?, 'x')"
    _sql(path, f"UPDATE recall_sources SET session_id = {huge} WHERE seq = 1", (HUGE,))
    _sql(path, f"UPDATE recall_sources SET seq = {huge} WHERE seq = 2", (HUGE,))
    _sql(path, f"UPDATE recall_sources SET user_id = {huge} WHERE kind = 'document'", (HUGE,))
    tenant = EraseTarget.tenant("acme")
    tracemalloc.start()
    try:
        reports = [await store.erase(tenant, _ctx(), dry_run=True), await store.erase(tenant, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"{peak} bytes traced: a huge value was read into Python"
    for report in reports:
        counts = {kind: report.count(kind) for kind in ("group", "damaged", "document")}
        assert counts == {"group": 1, "damaged": 2, "document": 1}
        assert list(report.sessions[0].groups) == [(0, GROUPS[0].digest)]
    assert _sql(path, "SELECT count(*) FROM recall_sources") == [(0,)]
