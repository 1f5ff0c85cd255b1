"""The SQLite recall store's damage errors name no source id: the id is the error's ``source_id``.

Source ids are content (they encode a tenant, a user, a session and a
document's id); error texts reach ``Evidence.problems`` and the host's logs
whatever the capture setting. Every damaged or oversized row used to be
named by its id (``source 'doc/...' in <path> is damaged``); now the text
says which kind of source and what is wrong, and the id is an attribute.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agentium_harness._errors import ArchiveCorruptError
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.recall import RecallLimits, SourceOwner, SourceRef, group_source_id
from agentium_harness._scope import Scope
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallError, SQLiteRecallStore

pytestmark = pytest.mark.anyio

#: Ids no message may hold: each shows up in the source ids this test's rows get.
TENANT, USER, SESSION, DOC = "tenantQ7", "userQ7", "sessionQ7", "docQ7"
SCOPE = Scope(TENANT, USER, SESSION)
CTX = OpContext.unbounded


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[tuple[SQLiteRecallStore, Path, SourceRef, SourceRef]]:
    """A store holding one document and one group of SCOPE's session; its path and both refs."""
    path = tmp_path / "recall.db"
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    doc = await store.index_document(
        SourceOwner(TENANT, USER), DOC, "the kettle is descaled", CTX(), title="t"
    )
    group = MessageGroup(
        0, (Message(Role.USER, "where is the kettle"), Message(Role.ASSISTANT, "in the kitchen"))
    )
    await store.index_groups(SCOPE.session_key, [group], [ArchiveReceipt(0, group.digest, "test/0")], CTX())
    yield store, path, doc, SourceRef(group_source_id(SCOPE.session_key, 0), group.digest)
    await store.aclose()


def _damage(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql)


def _names_no_id(error: SQLiteRecallError, ref: SourceRef, kind: str) -> None:
    text = str(error)
    assert "damaged" in text
    assert kind in text
    assert ref.source_id not in text
    for name in (TENANT, USER, SESSION, DOC):
        assert name not in text, text
    assert error.source_id == ref.source_id


@pytest.mark.parametrize(
    ("damage", "call"),
    [
        ("UPDATE recall_texts SET title = 'forged'", "read"),  # title and text do not match the revision
        ("UPDATE recall_texts SET text = CAST('bytes' AS BLOB)", "read"),  # text is not text
        # a document row filed as a group: its kind does not match its id
        ("UPDATE recall_sources SET kind = 'group', seq = 9, receipt_digest = 'x' WHERE seq IS NULL", "read"),
        ("UPDATE recall_sources SET revision = printf('%.*c', 500, 'x') WHERE kind = 'document'", "read"),
        ("UPDATE recall_sources SET revision = printf('%.*c', 500, 'x') WHERE kind = 'document'", "validate"),
        ("UPDATE recall_sources SET size_bytes = 'many' WHERE kind = 'document'", "discover"),
        ("UPDATE recall_sources SET title = x'ff00' WHERE kind = 'document'", "discover"),
    ],
)
async def test_a_damaged_document_row_is_refused_without_its_id_in_the_text(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef, SourceRef], damage: str, call: str
) -> None:
    store, path, doc, _ = seeded
    _damage(path, damage)
    session = await store.open(SCOPE, RecallLimits(), CTX())
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "read": lambda: session.read([doc], 4096, CTX()),
        "validate": lambda: session.validate([doc], CTX()),
        "discover": lambda: session.discover("kettle descaled", 8, CTX()),
    }
    with pytest.raises(SQLiteRecallError) as raised:
        await calls[call]()
    _names_no_id(raised.value, doc, "a document source")


async def test_a_group_row_of_another_kind_is_refused_without_its_id_in_the_text(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef, SourceRef],
) -> None:
    store, path, _, group = seeded
    _damage(path, "UPDATE recall_sources SET kind = 'document', seq = NULL WHERE kind = 'group'")
    session = await store.open(SCOPE, RecallLimits(), CTX())
    with pytest.raises(SQLiteRecallError) as raised:
        await session.read([group], 4096, CTX())
    _names_no_id(raised.value, group, "a group source")


async def test_an_error_not_about_a_source_has_an_empty_source_id(tmp_path: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await store.aclose()
    with pytest.raises(SQLiteRecallError) as raised:
        await store.open(SCOPE, RecallLimits(), CTX())
    assert raised.value.source_id == ""


@pytest.mark.parametrize(
    "damage",
    [
        # the group's indexed text (its row is the second), no longer its archived bytes
        "UPDATE recall_texts SET text = 'forged' WHERE rowid IN "
        "(SELECT rowid FROM recall_texts LIMIT 1 OFFSET 1)",
        "UPDATE recall_sources SET receipt_digest = 'forged' WHERE kind = 'group'",
    ],
)
async def test_a_damaged_group_row_read_names_no_session(
    seeded: tuple[SQLiteRecallStore, Path, SourceRef, SourceRef], damage: str
) -> None:
    store, path, _, group = seeded
    _damage(path, damage)
    session = await store.open(SCOPE, RecallLimits(), CTX())
    with pytest.raises(ArchiveCorruptError) as raised:
        await session.read([group], 4096, CTX())
    text = str(raised.value)
    assert "an indexed group source" in text
    for name in (TENANT, USER, SESSION):
        assert name not in text, text


def test_source_kind_phrase_names_the_kind_of_every_source_id_and_never_the_id() -> None:
    # The one wording the three recall stores' damage errors share (plugin_api.source_kind_phrase).
    from agentium_harness.plugin_api import (
        SessionKey,
        SourceOwner,
        document_source_id,
        group_source_id,
        source_kind_phrase,
    )

    doc = document_source_id(SourceOwner(tenant="acme"), "secret-doc")
    group = group_source_id(SessionKey("acme", "ana", "s1"), 7)
    assert source_kind_phrase(doc) == "a document source"
    assert source_kind_phrase(group) == "a group source"
    for other in ("docs/x", "", None, 7, b"doc/x"):
        assert source_kind_phrase(other) == "a source"
