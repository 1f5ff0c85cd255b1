"""A take-back's refusal names its facts' ids only with content capture; ``fact_ids`` always holds them.

A memory write (or a host's extraction) that an erasure overtook is taken
back: its facts are forgotten and the write is refused with
:class:`ErasureInProgressError`. Hosts log that error's text, and a fact id
is content (the engine's diagnostics, logs and spans name one only with
content capture), but the ids of facts whose take-back failed used to be in
the text whatever the setting. They are named there only with capture now;
the error's ``fact_ids`` (and a drained extraction item's ``fact_ids``)
hold them either way, so a caller can still forget them.

Scenarios from tests/core/test_memory_fence_span_events.py (a host's
``remember``) and tests/core/test_host_erasure_reading.py (a host's
extraction whose groups a forget erased during its extractor call).
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from test_host_erasure_reading import (
    ANA,
    Recording,
    _archived_fact,
    _drained,
    _ForgettingMeanwhile,
)
from test_host_erasure_reading import _runtime as _sqlite_runtime
from test_memory_fence_span_events import FailsToForget
from test_memory_fence_take_back import GENEROUS, OPERATOR, SCOPE, SESSION_B, Store, _ref

from agentium_harness import (
    ErasureInProgressError,
    GroupRef,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    ResidentLimits,
    RuntimeLimits,
    Telemetry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import MemoryAck, OpContext

pytestmark = pytest.mark.anyio


def _runtime(facts: Store, sessions: InMemorySessionStore, capture: bool) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=facts,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
        telemetry=Telemetry(capture_content=capture),
    )


async def _refused_write(store: Store, capture: bool, match: str) -> ErasureInProgressError:
    """A host's ``remember`` citing session sB, erased before ``store`` answers: its refusal."""
    sessions = InMemorySessionStore()
    async with _runtime(store, sessions, capture) as writer, _runtime(Store(), sessions, False) as operator:
        memory = writer.memory
        assert memory is not None

        async def erase_b() -> None:
            assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone

        store.before_write = erase_b
        with anyio.fail_after(30), pytest.raises(ErasureInProgressError, match=match) as caught:
            await memory.remember(MemoryFact(SCOPE, "pin is 4321", provenance=[_ref("sB")]))
    return caught.value


@pytest.mark.parametrize("capture", [False, True])
async def test_a_write_whose_take_back_failed_names_its_fact_only_with_capture(capture: bool) -> None:
    store = FailsToForget()
    error = await _refused_write(store, capture, "taking it back failed")
    [fact_id] = set(store.forgot)
    assert error.fact_ids == (fact_id,)  # still stored: the caller forgets it
    assert (fact_id in str(error)) is capture
    assert error.erasure_id and error.erasure_id in str(error)


@pytest.mark.parametrize("capture", [False, True])
async def test_a_write_taken_back_names_its_fact_only_with_capture(capture: bool) -> None:
    store = Store()
    error = await _refused_write(store, capture, "was not kept")
    [fact_id] = set(store.forgot)
    assert error.fact_ids == ()  # forgotten: nothing is left to do
    assert (fact_id in str(error)) is capture


class _ForgetFails(SQLiteMemoryStore):
    """The host's memory store: its ``forget`` fails, so the extraction's take-back cannot forget."""

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        raise OSError("disk gone")


@pytest.mark.parametrize("capture", [False, True])
async def test_facts_an_extraction_could_not_take_back_are_named_only_with_capture(
    capture: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A forget (``erase_sources=True``) in another process finishes during the extractor call.

    Its WARNING said "the facts it wrote were forgotten" when one could not be: it says how many were not.
    """
    db = tmp_path / "agentium.db"
    manager = MemoryManager(
        _ForgetFails(SQLiteConfig(path=str(db))),
        extractor=Recording(),
        owns_store=True,
        telemetry=Telemetry(capture_content=capture),
    )
    runtime = _sqlite_runtime(db, manager, limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    with anyio.fail_after(30):
        fact_id, (erased, _) = await _archived_fact(db, runtime, manager)
        manager.extractor = _ForgettingMeanwhile(db, fact_id)
        manager.extract_in_background(
            ANA, erased.messages, "group 0", sources=[GroupRef("s1", 0, erased.digest)]
        )
        with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
            [item] = (await _drained(manager)).items
        left = tuple(f.fact_id for f in await manager.list(ANA))
        await runtime.aclose()
        await manager.aclose()
    assert item.status == "failed" and "forgetting 1 of them failed" in item.detail
    assert len(left) == 1 and left[0] != fact_id  # the re-derived fact, left standing
    assert item.fact_ids == left
    assert (left[0] in item.detail) is capture
    [warning] = [r.getMessage() for r in caplog.records if "memory extraction taken back" in r.getMessage()]
    assert "1 of the 1 fact(s) it wrote could not be forgotten" in warning, warning
    assert left[0] not in warning  # a log names no fact
