"""The round after a clarification does not note again a kind the first round noted.

A note is the same when its kind is (``recall_findings.said_as``): a recall
session's close failing is said once in the run, however many looks (and the
commit fence) fail theirs too. The round after a clarification opened and
closed a session of its own, and its notes were added whole: a store whose
close failed at both dispatch rounds carried two close notes, and a query
truncated at both two identical notes.
"""

from __future__ import annotations

from typing import Any

import pytest
from _recall_support import Scripted
from _recall_violation_support import CloseFails, clarified_run

from agentium_harness import (
    RecallLimits,
)

pytestmark = pytest.mark.anyio

DOCS = [("rota", "The release train leaves on Thursday.")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(store: Scripted, user_input: str, limits: RecallLimits) -> Any:
    return await clarified_run(store, user_input, limits)


async def test_a_close_failing_at_both_dispatch_rounds_is_one_note() -> None:
    store = CloseFails(DOCS)
    result = await _run(store, "when?", RecallLimits(max_queries=2))
    assert store.closes == 3  # both dispatch rounds', the commit fence's
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall session close failed: RuntimeError: close number 1 refused"], notes


async def test_a_query_truncated_at_both_dispatch_rounds_is_one_note() -> None:
    result = await _run(Scripted(DOCS), "train " * 40, RecallLimits(max_queries=2, max_query_bytes=64))
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert notes == ["recall query truncated to 64 bytes"], notes
