"""A store's error reaches committed history by its class alone, whatever its class, and is never marked.

A turn whose tools ran and whose commit then failed is committed on the
retry without its answer (``step_failed``), the failure said in
``retained.interruption.detail``. A session store or an archive may be
shared by tenants: its error text may name another tenant's rows. So every
typed error a store call raised is committed by its class and the call
(``InvalidArgumentError (the session save's error; its text is not
committed)``), not only the store error classes; a ``committed_detail`` the
store set on its exception is not the engine's and is not committed; and
the object the store raised is never what the engine marks (a store may
raise it again, in another tenant's run): the engine raises a fresh copy.
The host's error keeps the store's text whole.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from _committed_words_support import committed_detail, failed_runs, noting_runtime

from agentium_harness import (
    AgentiumError,
    CommitState,
    InterruptionCause,
    InvalidArgumentError,
    SessionStoreError,
    VerifiedIdentity,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.turn_commit import committed_text
from agentium_harness._errors import ArchiveCorruptError, ArchiveError
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

#: Another tenant's row, which the store's error names.
FOREIGN = "row-globex-salaries-77"
SAID = f"{FOREIGN} of tenant globex is locked"
ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
TOOL_TURN = [{"content": "", "tool_calls": [{"id": "t1", "name": "note"}]}, "Noted."]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SaveFails(InMemorySessionStore):
    """The next save (while ``error`` is set) raises ``error``, then saves again as usual."""

    error: BaseException | None = None

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: Any) -> int:
        error, self.error = self.error, None
        if error is not None:
            raise error
        return await super().save(key, snapshot, expected_revision, ctx)


class ReadFails(InMemoryArchive):
    """Every read raises ``error``, one object kept for every call."""

    def __init__(self, error: ArchiveError) -> None:
        super().__init__()
        self.error = error

    async def read_groups(self, key: Any, start_seq: int, max_groups: int, ctx: Any) -> Any:
        raise self.error


def _committed(sessions: InMemorySessionStore, archive: InMemoryArchive) -> bytes:
    """Every byte committed: the session's snapshot rows and the archived groups."""
    stored = [row for _, row in sessions._rows.values()]
    stored += [data for groups in archive._groups.values() for data, _ in groups.values()]
    assert stored, "nothing was committed"
    return b"".join(stored)


async def _tool_runs(
    sessions: SaveFails, archive: InMemoryArchive, errors: list[BaseException]
) -> list[AgentiumError]:
    """One turn per error, its one tool run, its commit's first save raising the error; their errors."""

    def arm(i: int) -> None:
        sessions.error = errors[i]

    rt = noting_runtime(ScriptedProvider(replies=list(TOOL_TURN), cycle=True), archive, sessions)
    return await failed_runs(rt, [ANA] * len(errors), before=arm)


def _interruption_detail(error: AgentiumError) -> str:
    """The committed ``step_failed`` detail of the turn ``error`` stopped (its tool run committed)."""
    return committed_detail(error, InterruptionCause.STEP_FAILED)


async def test_a_session_stores_error_of_another_class_is_committed_by_its_class_alone() -> None:
    # Only the store error classes were committed by class: an InvalidArgumentError (or any other
    # typed error) a save raised had its text, the other tenant's row, committed whole.
    sessions, archive = SaveFails(), InMemoryArchive()
    (error,) = await _tool_runs(sessions, archive, [InvalidArgumentError(f"expected_revision: {SAID}")])
    assert isinstance(error, InvalidArgumentError) and FOREIGN in str(error)  # the host's, whole
    detail = _interruption_detail(error)
    assert detail == "InvalidArgumentError (the session save's error; its text is not committed)", detail
    assert FOREIGN.encode() not in _committed(sessions, archive)


def test_an_error_the_engine_raised_keeps_its_words() -> None:
    # Only a store call's error is said by its class: the engine's own validation error is committed whole.
    error = InvalidArgumentError("grants must be a collection of tool names")
    assert committed_text(error) == "InvalidArgumentError: grants must be a collection of tool names"


async def test_a_committed_detail_the_store_set_is_not_what_is_committed() -> None:
    # The engine committed error.committed_detail as it found it: the store decided what was committed.
    error = SessionStoreError(SAID)
    error.committed_detail = f"SessionStoreError: {SAID}"
    sessions, archive = SaveFails(), InMemoryArchive()
    (caught,) = await _tool_runs(sessions, archive, [error])
    detail = _interruption_detail(caught)
    assert detail == "SessionStoreError (the session save's error; its text is not committed)", detail
    assert FOREIGN.encode() not in _committed(sessions, archive)


async def test_a_stores_reused_error_object_is_never_marked_so_the_next_run_still_commits_what_ran() -> None:
    # The engine marked the object the store raised (its commit state, run result, message "…committed
    # as group N"): the next run the same object stopped took those marks for its own and committed
    # nothing of what ran.
    shared = SessionStoreError(SAID)
    sessions, archive = SaveFails(), InMemoryArchive()
    first, second = await _tool_runs(sessions, archive, [shared, shared])
    for error in (first, second):
        assert error is not shared and type(error) is SessionStoreError, repr(error)
        assert FOREIGN in str(error) and str(error).count("committed as group") == 1, str(error)
        assert _interruption_detail(error).startswith("SessionStoreError (the session save's error")
    assert first.run_result is not None and second.run_result is not None
    assert first.run_result.retained.write_id != second.run_result.retained.write_id
    assert len(sessions._rows) == 2  # each run's session holds what ran
    assert str(shared) == SAID and shared.args == (SAID,)
    assert shared.commit_state is None and shared.run_result is None and shared.committed_detail is None
    assert FOREIGN.encode() not in _committed(sessions, archive)


async def test_an_archive_calls_error_is_raised_as_a_fresh_copy_with_the_engines_words() -> None:
    # Every store call goes through Ticket.call: an archive's error, whatever its class, comes out a
    # fresh copy (class, message, fields; caused by the store's) carrying none of the marks the store's
    # object has, its committed words the engine's.
    shared = ArchiveCorruptError(SAID)
    shared.commit_state = CommitState.COMMITTED
    shared.committed_detail = f"ArchiveCorruptError: {SAID}"
    shared.reason = "kept"  # type: ignore[attr-defined]  # a field of the store's, copied
    archive = ReadFails(shared)
    ticket = Ticket(KEY, "history read", 5.0)
    caught = []
    for _ in range(2):
        with pytest.raises(ArchiveCorruptError) as raised:
            await ticket.call("archive read", lambda ctx: archive.read_groups(KEY, 0, 1, ctx))
        caught.append(raised.value)
    first, second = caught
    assert first is not shared and second is not shared and first is not second
    for error in caught:
        assert type(error) is ArchiveCorruptError and error.args == (SAID,) and error.__cause__ is shared
        assert error.commit_state is None and error.run_result is None
        assert getattr(error, "reason") == "kept"  # noqa: B009 - a field the class does not declare
        assert (
            committed_text(error)
            == "ArchiveCorruptError (the archive read's error; its text is not committed)"
        )
    assert (
        shared.commit_state is CommitState.COMMITTED
        and shared.committed_detail == f"ArchiveCorruptError: {SAID}"
    )


@attrs.define(auto_exc=True)
class RowLocked(SessionStoreError):
    """A store's attrs error: its fields are kept in slots, not in its ``__dict__``."""

    row: str
    holder: str


class Unreachable(SessionStoreError, ConnectionError):
    """A store's error that is a ConnectionError too: ``errno``, ``strerror``, ``filename`` are OSError's."""


@pytest.mark.parametrize(
    ("error", "fields"),
    [
        (RowLocked(FOREIGN, "globex"), {"row": FOREIGN, "holder": "globex"}),
        (Unreachable(111, "refused", "db.internal:5432"), {"errno": 111, "filename": "db.internal:5432"}),
    ],
    ids=["attrs-slots", "oserror-fields"],
)
async def test_the_copy_keeps_the_fields_a_stores_error_keeps_outside_its_dict(
    error: SessionStoreError, fields: dict[str, object]
) -> None:
    # The copy took the store's __dict__ only: an attrs error's fields (slots) were missing (the host's
    # read an AttributeError, its repr raised), a ConnectionError's filename None (its message changed).
    async def fails(ctx: Any) -> None:
        raise error

    with pytest.raises(type(error)) as raised:
        await Ticket(KEY, "run", 5.0).call("session load", fails)
    copy = raised.value
    assert copy is not error and type(copy) is type(error) and copy.__cause__ is error
    assert {name: getattr(copy, name, "missing") for name in fields} == fields
    assert str(copy) == str(error) and repr(copy) == repr(error)
    said = f"{type(error).__name__} (the session load's error; its text is not committed)"
    assert committed_text(copy) == said


async def test_a_note_a_host_adds_to_its_copy_is_neither_on_the_stores_object_nor_on_the_next_copy() -> None:
    # The copy shared the store's __notes__ list: one host's add_note() appended to the store's object,
    # and the next run's copy (another tenant's) carried that host's note.
    shared = SessionStoreError(SAID)
    shared.add_note("the store's note")

    async def fails(ctx: Any) -> None:
        raise shared

    notes: list[list[str]] = []
    for tenant in ("acme", "globex"):
        with pytest.raises(SessionStoreError) as raised:
            await Ticket(SessionKey(tenant, "ana", "s1"), "run", 5.0).call("session load", fails)
        notes.append(list(raised.value.__notes__))
        raised.value.add_note(f"{tenant}'s host: saving its session")
    assert notes == [["the store's note"], ["the store's note"]]
    assert shared.__notes__ == ["the store's note"]
