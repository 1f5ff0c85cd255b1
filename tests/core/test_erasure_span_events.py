"""Every WARNING an erasure logs is also an event on its ``agentium.erasure`` span, without content.

The scenarios are those of the tests that drive each warning, run with a
recording tracer: a step failing once another call completed the erasure
(tests/core/test_erasure_stopped_completed.py, which reaches it through
``_stopped_or_again``; tests/core/test_erasure_scrub_overtaken.py, through
the file clean-up), and a file the one clean-up could not fully rebuild
(tests/core/test_sqlite_erasure_bytes.py). Each event carries error types,
step and store names and outcomes only: no text, no raw id.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import _erasure_harness
import pytest
import test_erasure_scrub_overtaken as scrub_overtaken
import test_erasure_stopped_completed as stopped_completed
from _telemetry_support import Telemetered
from opentelemetry.sdk.trace import ReadableSpan

from agentium_harness import (
    EraseTarget,
    Message,
    OperatorAttestation,
    Role,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters import _sqlite_sql
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore

pytestmark = pytest.mark.anyio

#: What no event may carry: the scenarios' raw ids, texts and error messages.
CONTENT = ("acme", "ana", "s1", "turn ", "secret-text", "unreachable", "database", "MAX_REBUILD_BYTES")


def _events(t: Telemetered, name: str) -> list[dict[str, Any]]:
    """The attributes of every ``name`` event on the ``agentium.erasure`` spans, checked for content."""
    spans: list[ReadableSpan] = t.named("agentium.erasure")
    found = [dict(e.attributes or {}) for s in spans for e in s.events if e.name == name]
    for attributes in found:
        for value in attributes.values():
            assert not any(c in str(value) for c in CONTENT), attributes
    return found


def _recorded(module: Any, monkeypatch: pytest.MonkeyPatch) -> Telemetered:
    """The runtimes ``module`` builds record to a fresh in-memory exporter."""
    t = Telemetered()
    recording = partial(create_harness_runtime, telemetry=t.telemetry())
    # The scenario's own module, or the shared harness that builds its runtimes (sqlite_pairs).
    monkeypatch.setattr(module, "create_harness_runtime", recording, raising=False)
    monkeypatch.setattr(_erasure_harness, "create_harness_runtime", recording)
    return t


async def test_a_step_failing_once_another_call_completed_the_erasure_is_an_overtaken_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inventory fails once the other call completed the erasure: the call goes on from its tombstone.
    t = _recorded(stopped_completed, monkeypatch)
    scenario = stopped_completed.test_an_inventory_failing_once_another_call_completed_the_erasure_returns_its_tombstone  # noqa: E501
    await scenario(tmp_path)
    assert _events(t, "agentium.erasure.overtaken") == [
        {"error.type": "OSError", "agentium.erasure.step": "other"}
    ]
    assert not _events(t, "agentium.erasure.incomplete")


async def test_a_clean_up_failing_once_another_call_completed_the_erasure_is_an_overtaken_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _recorded(scrub_overtaken, monkeypatch)
    first, other, result, _ = await scrub_overtaken._overtaken("session", tmp_path, monkeypatch, failing=True)
    try:
        assert not isinstance(result, Exception), result
        # Its clean-up of the file its store calls removed rows from failed: they may keep copies.
        assert _events(t, "agentium.erasure.overtaken") == [
            {
                "error.type": "OSError",
                "agentium.erasure.step": "file_clean_up",
                "agentium.erasure.cleaned_up": False,
            }
        ]
    finally:
        await first.runtime.aclose()
        await other.runtime.aclose()


async def test_a_file_not_fully_cleaned_up_is_a_file_not_cleaned_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Telemetered()
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=SQLiteMemoryStore(config),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
    async with runtime:
        for n in range(3):
            await runtime.append(
                VerifiedIdentity("acme", "ana", "sso"), "s1", [Message(Role.USER, f"secret-text {n}")]
            )
        # The file is too large for the one rebuild: it is left as it is (unreferenced).
        monkeypatch.setattr(_sqlite_sql, "MAX_REBUILD_BYTES", 1024)
        await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=operator)
    assert _events(t, "agentium.erasure.file_not_cleaned") == [
        {
            "agentium.erasure.stores": "memory/archive/session_store",
            "agentium.erasure.physical": "unreferenced",
        }
    ]
