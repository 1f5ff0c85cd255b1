"""The SQLite health probe's and version-1 migrations' reads refuse damage with the store's typed error.

A value changed behind a store's back to ``'x' || char(0) || <huge>`` has
``length()`` 1 (``length()`` of a text stops at its first NUL): only its
bytes (``_sqlite_bounds``) tell it is over its bound. The health probe of
the session store and archive reads the schema version; the migration of a
version-1 file (session store and archive, recall store) reads the ids and
seq of the rows it moves, and the recall store's the text of each group.
Each refuses such a value unread, with its store's typed error, and changes
nothing (a version-1 file stays at version 1). The huge values are built by
SQLite itself, so tracemalloc's peak tells whether a read fetched one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _oversize_support import HUGE, NUL_TEXT, OVER_JSON
from _oversize_support import ctx as _ctx
from _oversize_support import raw_sql as _sql
from _oversize_support import refused_unread as _refused_unread
from test_recall_ranking import write_v1_file
from test_sqlite_layout import V1_SCHEMA

from agentium_harness import ArchiveError, SessionKey
from agentium_harness._errors import AgentiumError
from agentium_harness._ports.recall import SourceOwner
from agentium_harness.adapters.sqlite import (
    SQLiteArchive,
    SQLiteConfig,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallError, SQLiteRecallStore
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
OWNER = SourceOwner("acme", "ana")
GROUPS = [plain_group(seq, " about the kettle") for seq in range(3)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- the health probe -------------------------------------------------------------------------------


def _session_state(path: Path) -> list[object]:
    """The meta rows (a value's sizes only), the sessions and the groups (never a huge value itself)."""
    return [
        _sql(path, "SELECT key, length(value), length(CAST(value AS BLOB)) FROM meta ORDER BY key"),
        _sql(path, "SELECT sid, tenant_id, user_id, session_id, revision FROM sessions ORDER BY sid"),
        _sql(path, "SELECT id, digest, length(data) FROM groups ORDER BY id"),
    ]


@pytest.mark.parametrize("adapter", ["session store", "archive"])
async def test_the_health_probe_refuses_a_schema_version_hiding_its_size_behind_a_nul(
    tmp_path: Path, adapter: str
) -> None:
    # The probe reported "ok ... schema vof 1 characters, N bytes (damaged)" for a file the next
    # open refuses: it now refuses it as that open does. The open connection's probe reads the
    # version itself; a new adapter's probe opens the file, whose schema check refuses it.
    path = tmp_path / "a.db"
    config = SQLiteConfig(path=str(path))
    store = SQLiteSessionStore(config) if adapter == "session store" else SQLiteArchive(config)
    error: type[AgentiumError] = SQLiteStorageError if adapter == "session store" else ArchiveError
    seeder = SQLiteArchive(config)
    await seeder.append(KEY, GROUPS, _ctx())
    await seeder.aclose()
    assert "schema v4" in await store.health(_ctx())  # the connection is open
    _sql(path, f"UPDATE meta SET value = {NUL_TEXT} WHERE key = 'schema_version'", (HUGE,))
    before = _session_state(path)
    message = rf"schema version of 1 characters \({HUGE + 2} bytes\).*damaged; nothing was changed"
    fresh = SQLiteSessionStore(config) if adapter == "session store" else SQLiteArchive(config)
    try:
        await _refused_unread(lambda: store.health(_ctx()), error, message, "probe")
        await _refused_unread(lambda: fresh.health(_ctx()), error, message, "probe of a new adapter")
    finally:
        await store.aclose()
        await fresh.aclose()
    assert _session_state(path) == before


# -- the session store's and archive's version-1 migration ------------------------------------------


def _v1_session_file(path: Path, column: str, seq_sql: str) -> None:
    """A version-1 file: groups 0-2 of KEY, then one more whose ``column`` is NUL-form, HUGE long."""
    _sql(path, "PRAGMA journal_mode = WAL")
    for statement in V1_SCHEMA:
        _sql(path, statement)
    for group in GROUPS:
        _sql(
            path,
            "INSERT INTO archive_groups VALUES (?, ?, ?, ?, ?, ?)",
            (*KEY.key_segments(), group.seq, group.digest, group.canonical_bytes()),
        )
    values = {"session_id": "'s2'", "seq": seq_sql} | {column: NUL_TEXT}
    _sql(
        path,
        f"INSERT INTO archive_groups VALUES ('acme', 'ana', {values['session_id']}, {values['seq']}, "
        "'sha256:', x'7b7d')",
        (HUGE,),
    )


def _v1_session_state(path: Path) -> list[object]:
    return [
        _sql(path, "SELECT key, value FROM meta ORDER BY key"),
        _sql(path, "SELECT name FROM sqlite_master ORDER BY name"),
        _sql(
            path,
            "SELECT tenant_id, user_id, length(CAST(session_id AS BLOB)), typeof(seq), "
            "length(CAST(seq AS BLOB)), digest, length(data) FROM archive_groups ORDER BY 1, 2, 3, 5",
        ),
    ]


@pytest.mark.parametrize("column", ["seq", "session_id"])
async def test_the_version_1_migration_refuses_a_seq_or_id_hiding_its_size_behind_a_nul(
    tmp_path: Path, column: str
) -> None:
    # A seq that is not an integer, or an id of a row whose seq cannot be stored, is read to name
    # the row in the refusal: bounded, the huge value is named by its size, never read.
    path = tmp_path / "v1.db"
    _v1_session_file(path, column, "4294967296")  # 2**32: over what version 2 stores
    before = _v1_session_state(path)
    config = SQLiteConfig(path=str(path))
    store, archive = SQLiteSessionStore(config), SQLiteArchive(config)
    if column == "seq":
        message = rf"cannot be migrated.*with a seq of 1 characters \({HUGE + 2} bytes\)"
    else:
        message = r"cannot be migrated.*archived group 4294967296 of session \('acme', 'ana', None\)"
    try:
        await _refused_unread(lambda: store.load(KEY, _ctx()), SQLiteStorageError, message, "store")
        await _refused_unread(
            lambda: archive.read_groups(KEY, 0, 10, _ctx()), ArchiveError, message, "archive"
        )
    finally:
        await store.aclose()
        await archive.aclose()
    assert _v1_session_state(path) == before  # still version 1, untouched


# -- the recall store's version-1 migration ---------------------------------------------------------


def _v1_recall_state(path: Path) -> list[object]:
    """A version-1 recall file's rows (a huge value's sizes only) and its tables."""
    return [
        _sql(
            path,
            "SELECT id, kind, length(CAST(session_id AS BLOB)), typeof(seq), length(CAST(seq AS BLOB)), "
            "revision FROM recall_sources ORDER BY id",
        ),
        _sql(path, "SELECT id, length(CAST(text AS BLOB)), length(data) FROM recall_texts ORDER BY id"),
        _sql(path, "SELECT key, value FROM recall_meta ORDER BY key"),
        _sql(path, "SELECT name FROM sqlite_master ORDER BY name"),
        _sql(path, "SELECT rowid, title FROM recall_fts WHERE recall_fts MATCH 'kettle' ORDER BY rowid"),
    ]


async def _migration_refused(path: Path, message: str) -> None:
    """Opening the version-1 file at ``path`` is refused (SQLiteRecallError ``message``), nothing changed."""
    before = _v1_recall_state(path)
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    try:
        await _refused_unread(
            lambda: store.index_document(OWNER, "d2", "text", _ctx()), SQLiteRecallError, message, "migration"
        )
        await _refused_unread(
            lambda: store.seek_groups(KEY, 0, 10, _ctx()), SQLiteRecallError, message, "seek"
        )
    finally:
        await store.aclose()
    assert _v1_recall_state(path) == before  # still version 1, readable as before


@pytest.mark.parametrize("column", ["session_id", "seq", "text"])
async def test_the_recall_version_1_migration_refuses_a_value_hiding_its_size_behind_a_nul(
    tmp_path: Path, column: str
) -> None:
    path = tmp_path / "v1.db"
    write_v1_file(path, GROUPS, "a document")
    size = OVER_JSON if column == "text" else HUGE
    table = "recall_texts" if column == "text" else "recall_sources"
    where = "id = (SELECT id FROM recall_sources WHERE seq = 1)" if column == "text" else "seq = 1"
    if column == "text":  # behind the index's back, as a tampering would (the old triggers index it)
        _sql(path, "DROP TRIGGER recall_texts_au")
    _sql(path, f"UPDATE {table} SET {column} = {NUL_TEXT} WHERE {where}", (size,))
    await _migration_refused(path, rf"{column} of length {size + 2} bytes")


async def test_the_recall_version_1_migration_refuses_a_seq_that_is_not_a_number(tmp_path: Path) -> None:
    # A short text seq passes the column's CHECK (text sorts above every number) and every bound:
    # the migration crashed with a bare ValueError from int(). It is damage, refused as such.
    path = tmp_path / "v1.db"
    write_v1_file(path, GROUPS, "a document")
    _sql(path, "UPDATE recall_sources SET seq = 'abc' WHERE seq = 1")
    assert _sql(path, "SELECT typeof(seq) FROM recall_sources WHERE seq = 'abc'") == [("text",)]
    await _migration_refused(path, r"indexed group's row is damaged: its seq 'abc' is not an integer")
