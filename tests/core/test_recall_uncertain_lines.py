r"""The ``recall_uncertain`` diagnostic lists a run's uncertainty one note per line, each read back whole.

Its message joined the notes with ``"; "``, so a note holding ``"; "`` read
as two: the engine's own notes do (``discover returned …; dropped``), and a
store's error text may. Now each note is on one line, its own line breaks
and backslashes escaped (``\n``, ``\r``, ``\u2028``…, ``\\``, as the
recall-status notice and a summary's uncertainty write them), the lines
joined with a line break: split on line breaks and unescaped, the message
gives back ``RunResult.recall.uncertainty`` note for note.

The uncertainty is committed with the turn, so it is in the engine's words:
a store's error by its class, never its text (which may name another
tenant's ids), its contract violations counted in one note. The store's
error text stays the host's, whole, in the ``recall_failed`` diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from agentium_harness import (
    RecallStatus,
    RunResult,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallSession, InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, RecallLimits, SourceOwner

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")

_ESCAPE = re.compile(r"\\(\\|n|r|u[0-9a-f]{4})")


def _one_note(line: str) -> str:
    """A note as written on its line: ``\\n``, ``\\r``, ``\\uXXXX`` and ``\\\\`` read back."""

    def back(match: re.Match[str]) -> str:
        code = match[1]
        return {"\\": "\\", "n": "\n", "r": "\r"}.get(code) or chr(int(code[1:], 16))

    return _ESCAPE.sub(back, line)


def _notes(message: str) -> list[str]:
    return [_one_note(line) for line in message.split("\n")]


async def _run(store: InMemoryRecallStore, **kw: Any) -> RunResult:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        recall_policy=current_session_recall_policy(on_failed="continue", on_partial="continue"),
        **kw,
    )
    async with runtime:
        with anyio.fail_after(30):
            return await runtime.run(ANA, "s1", "when does the release train leave")


def _diagnostic(result: RunResult) -> str:
    (message,) = [d.message for d in result.diagnostics if d.code == "recall_uncertain"]
    return message


class _Malformed(InMemoryRecallSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Any]:
        # Each dropped, and counted in one note: "… out of contract 3 time(s); what it returned …".
        return [object(), 42, "x", *await super().discover(query, max_candidates - 3, ctx)]


class MalformedStore(InMemoryRecallStore):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _Malformed:
        return _Malformed(self, scope)


async def test_notes_holding_a_semicolon_read_back_one_by_one() -> None:
    store = MalformedStore()
    for name in ("a", "b", "c"):  # read one; the validation budget leaves the others out, a note each
        await store.index_document(SourceOwner("acme", "ana"), name, f"the release train {name}", OpContext())
    result = await _run(store, recall_limits=RecallLimits(max_validations=2))
    assert result.recall is not None and result.recall.status is RecallStatus.PARTIAL
    notes = list(result.recall.uncertainty)
    assert len(notes) >= 3 and "; " in notes[0], notes
    assert _notes(_diagnostic(result)) == notes


ERROR_TEXTS = [
    pytest.param("disk gone; the index is stale", id="semicolon"),
    pytest.param("line one\nline two", id="line-feed"),
    pytest.param("line one\r\nline two\rthree", id="carriage-returns"),
    pytest.param("one\u2028two\u2029three\x85four\x0bfive\x0csix\x1cseven", id="unicode-breaks"),
    pytest.param(r"a written-out \n and a backslash \\ and \u2028", id="escapes-as-text"),
]


@pytest.mark.parametrize("text", ERROR_TEXTS)
async def test_a_store_error_with_line_breaks_or_semicolons_stays_one_note(text: str) -> None:
    class Failing(InMemoryRecallStore):
        async def open(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(text)

    result = await _run(Failing())
    assert result.recall is not None and result.recall.status is RecallStatus.FAILED
    (note,) = result.recall.uncertainty
    assert note == "recall failed: recall open failed: RuntimeError"  # committed: the class, not the text
    assert any(text in d.message for d in result.diagnostics if d.code == "recall_failed")
    message = _diagnostic(result)
    assert _notes(message) == [note]
    # One line: no character a reader could take for a line break is left in it.
    assert message.splitlines() == [message]
