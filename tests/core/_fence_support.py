"""What the turn-fence race tests share: two processes' adapters, Ana's runtime and another's (tests only).

Ana's runtime answers with the test's model and may have a tool held mid-round
(:class:`~agentium_harness.testing.erasure_races.HeldTool`); the other
process's answers ``ok``. Over ``memory`` both share one set of adapters;
over ``sqlite`` each has its own, over the same files.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    CommitState,
    Diagnostic,
    ErasedDuringRunError,
    ResidentLimits,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing.erasure_races import HeldTool

__all__ = ["SECRET", "TWO_RESIDENT", "fence_pair", "stopped_and_said", "two_processes"]

SECRET = "the vault code is qzvaultq"
#: Two groups resident: a third turn archives the oldest.
TWO_RESIDENT = RuntimeLimits(resident=ResidentLimits(max_groups=2))


def two_processes(
    kind: str, tmp_path: Path, *, recall: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two processes' adapters (``archive``, ``session_store``; with ``recall``, ``recall``) over one store.

    ``kind`` ``memory``: one set of in-memory adapters, shared; ``sqlite``: a set each over the same files.
    """
    if kind == "memory":
        shared: dict[str, Any] = {"archive": InMemoryArchive(), "session_store": InMemorySessionStore()}
        if recall:
            shared["recall"] = InMemoryRecallStore()
        return shared, dict(shared)
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    recall_config = SQLiteRecallConfig(path=str(tmp_path / "recall.db"))

    def one() -> dict[str, Any]:
        made: dict[str, Any] = {"archive": SQLiteArchive(config), "session_store": SQLiteSessionStore(config)}
        if recall:
            made["recall"] = SQLiteRecallStore(recall_config)
        return made

    return one(), one()


def fence_pair(
    provider: Any, held: HeldTool | None, mine: Mapping[str, Any], other: Mapping[str, Any], **shared: Any
) -> tuple[Any, Any]:
    """Ana's runtime (``provider``, ``held``'s tool if any) and another process's (answers ``ok``).

    ``mine`` and ``other`` are each one's adapters and options; ``shared``
    options go to both.
    """
    tools = {} if held is None else {"tools": held.registry()}
    first = create_harness_runtime(provider=provider, **tools, **shared, **mine)
    second = create_harness_runtime(provider=ScriptedProvider(replies=["ok"], cycle=True), **shared, **other)
    return first, second


@asynccontextmanager
async def closing(pair: tuple[Any, Any]) -> AsyncIterator[tuple[Any, Any]]:
    """``pair`` (:func:`fence_pair`'s two runtimes), each closed at the end, the first one first."""
    mine, other = pair
    try:
        yield mine, other
    finally:
        await mine.aclose()
        await other.aclose()


def stopped_and_said(outcome: Any, caplog: pytest.LogCaptureFixture) -> list[Diagnostic]:
    """``outcome`` is a stop for an erasure, nothing committed, and a WARNING (no content) said so.

    Returns the run result's ``erased_during_run`` diagnostics (one at least).
    """
    assert isinstance(outcome, ErasedDuringRunError), outcome
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    assert outcome.run_result is not None and not outcome.run_result.committed
    notes = [d for d in outcome.run_result.diagnostics if d.code == "erased_during_run"]
    assert notes, outcome.run_result.diagnostics
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "erased" in r.getMessage()]
    assert warned
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log
    return notes
