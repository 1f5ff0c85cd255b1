"""``runtime.forget``'s refusal WARNINGs (and its errors' texts) name the fact only with content capture on.

A fact id is treated as content (as the ``memory_refused`` diagnostic's
message, logged only with capture): with capture off, the WARNING of a
truncated history or of a fact past the store's listing says what was
refused but not which fact; with capture on, it names it.
"""

from __future__ import annotations

import logging

import anyio
import attrs
import pytest

from agentium_harness import (
    MemoryFact,
    MemoryRejectedError,
    MemoryScope,
    OperatorAttestation,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import MAX_LOOKUP_LIMIT, FactStatus, MemoryCapabilities

pytestmark = pytest.mark.anyio

SCOPE = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")


class _NoHistory(InMemoryMemoryStore):
    """Lists but keeps no history: runtime.forget finds provenance in one bounded listing."""

    capabilities = MemoryCapabilities(
        acknowledged_writes=True, correction=True, forgetting=True, listing=True
    )


def _runtime(memory: InMemoryMemoryStore, capture: bool) -> object:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory,
        telemetry=Telemetry(capture_content=capture),
    )


async def _truncated_history(rt: object, memory: InMemoryMemoryStore) -> str:
    ack = await rt.memory.remember(MemoryFact(SCOPE, "pin v1"))  # type: ignore[attr-defined]
    assert ack.fact_id is not None
    [first] = memory._revisions[ack.fact_id]
    count = MAX_LOOKUP_LIMIT + 1
    memory._revisions[ack.fact_id] = [
        attrs.evolve(
            first,
            revision=n,
            status=FactStatus.CURRENT if n == count else FactStatus.SUPERSEDED,
            fact=attrs.evolve(first.fact, text=f"v{n}"),
        )
        for n in range(1, count + 1)
    ]
    return str(ack.fact_id)


async def _past_listing(rt: object, memory: InMemoryMemoryStore) -> str:
    ack = await rt.memory.remember(MemoryFact(SCOPE, "pin v1"))  # type: ignore[attr-defined]
    assert ack.fact_id is not None
    for i in range(MAX_LOOKUP_LIMIT):
        await rt.memory.remember(MemoryFact(SCOPE, f"a newer fact {i}"))  # type: ignore[attr-defined]
    return str(ack.fact_id)


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize(
    ("store", "prepare", "said"),
    [
        (InMemoryMemoryStore, _truncated_history, "may be truncated"),
        (_NoHistory, _past_listing, "past the store's listing"),
    ],
)
async def test_the_refusal_warning_names_the_fact_only_with_capture(
    caplog: pytest.LogCaptureFixture, capture: bool, store: type, prepare: object, said: str
) -> None:
    memory = store()
    rt = _runtime(memory, capture)
    fact_id = await prepare(rt, memory)  # type: ignore[operator]
    caplog.set_level(logging.WARNING, logger="agentium")
    with anyio.fail_after(30), pytest.raises(MemoryRejectedError, match="nothing was changed") as refused:
        await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)  # type: ignore[attr-defined]
    assert (fact_id in str(refused.value)) is capture, str(refused.value)  # hosts log error texts too
    [record] = [r for r in caplog.records if "runtime.forget refused" in r.getMessage()]
    assert record.levelno == logging.WARNING and said in record.getMessage()
    assert (fact_id in record.getMessage()) is capture
    assert memory._revisions[fact_id][-1].status is FactStatus.CURRENT, "the fact was forgotten anyway"
    await rt.aclose()  # type: ignore[attr-defined]


class _AlwaysCorrected(InMemoryMemoryStore):
    """Each history read first corrects the fact (a correction racing every look at its sources)."""

    async def history(self, scope: MemoryScope, fact_id: str, ctx: object) -> object:
        latest = self._revisions[fact_id][-1]
        replacement = attrs.evolve(latest.fact, text=f"pin v{latest.revision + 1}")
        await self.correct(scope, fact_id, replacement, ctx)  # type: ignore[arg-type]
        return await super().history(scope, fact_id, ctx)  # type: ignore[arg-type]


@pytest.mark.parametrize("capture", [False, True])
async def test_a_fact_corrected_throughout_forget_is_refused_naming_it_only_with_capture(
    capture: bool,
) -> None:
    # "fact 'm-...' was corrected 3 times while its sources were looked up" named it whatever the
    # capture: the engine's own text, which hosts log.
    memory = _AlwaysCorrected()
    rt = _runtime(memory, capture)
    ack = await rt.memory.remember(MemoryFact(SCOPE, "pin v1"))  # type: ignore[attr-defined]
    assert ack.fact_id is not None
    with anyio.fail_after(30), pytest.raises(MemoryRejectedError, match="corrected 3 times") as refused:
        await rt.forget(SCOPE, ack.fact_id, reason="dsr", attestation=OPERATOR)  # type: ignore[attr-defined]
    assert (ack.fact_id in str(refused.value)) is capture, str(refused.value)
    assert memory._revisions[ack.fact_id][-1].status is FactStatus.CURRENT, "the fact was forgotten anyway"
    await rt.aclose()  # type: ignore[attr-defined]
